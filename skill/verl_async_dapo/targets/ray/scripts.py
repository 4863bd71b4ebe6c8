"""The two fixed programs a Ray job runs for us, and the entrypoint strings that start them.

Ray runs a job's entrypoint through ``/bin/sh -c`` and also prints it verbatim into the job's log
("Running entrypoint for job …"). So an entrypoint is built only with ``shlex.join`` over an argv
whose program text is constant; every variable part (paths, the training argv) is a positional
argument quoted by ``shlex.quote``. Secrets are never part of it: they travel in runtime_env
``env_vars`` only (see RayTarget).

* LAUNCH_SCRIPT (bash) starts a training attempt: cd to verl's root, run the argv, and mirror its
  output into the attempt's log file on the driver node (so ``{VERL_HOME}/train.log`` works there as
  on the other targets) while Ray's job log — read through the REST API — stays the source of truth.
* PROBE_SCRIPT (python3, stdlib) runs one short command or file operation and prints exactly one
  result line, ``<nonce>:<base64 JSON>``: a job log also holds Ray's own lines, in no fixed order,
  so output is found by that per-call nonce instead of being parsed positionally.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

# bash, not sh: PIPESTATUS gives the training's exit code, not tee's. A failing mkdir/tee only costs
# the mirror file (their messages land in the job log); training output still reaches Ray's log.
LAUNCH_SCRIPT = (
    'job_dir=$1; log=$2; cd -- "$3" || exit 96; shift 4; mkdir -p -- "$job_dir"; '
    '"$@" 2>&1 </dev/null | tee -a -- "$log"; exit "${PIPESTATUS[0]}"'
)
LAUNCH_ARG0 = "vad-ray-launch"

PROBE_SCRIPT = r"""
import base64, json, os, subprocess, sys, tempfile
nonce, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
def emit(**result):
    data = (nonce + ":" + base64.b64encode(json.dumps(result).encode()).decode() + "\n").encode()
    while data:
        data = data[os.write(1, data):]
def b64(raw):
    return base64.b64encode(raw).decode()
def read(path, offset, length, tail):
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - length) if tail else offset)
        return f.read(length)
try:
    if op == "run":
        cwd, timeout, argv = args[0] or None, float(args[1]), args[3:]
        if cwd and not os.path.isdir(cwd):
            emit(error="the working directory %s does not exist" % cwd)
        else:
            try:
                p = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, timeout=timeout)
                emit(rc=p.returncode if p.returncode >= 0 else 128 - p.returncode, out=b64(p.stdout), err=b64(p.stderr))
            except FileNotFoundError:
                emit(rc=127, out="", err=b64((argv[0] + ": command not found").encode()))
            except PermissionError as exc:
                emit(rc=126, out="", err=b64(("%s: %s" % (argv[0], exc)).encode()))
            except subprocess.TimeoutExpired:
                emit(error="timeout")
    elif op in ("tail", "range"):
        tail = op == "tail"
        emit(data=b64(read(args[0], 0 if tail else int(args[1]), int(args[-1]), tail)))
    elif op == "size":
        emit(size=os.stat(args[0]).st_size)
    elif op == "exists":
        emit(exists=[os.path.exists(p) for p in args])
    elif op == "write":
        path, mode = args[0], int(args[1], 8)
        data = base64.b64decode(os.environ.pop("VAD_WRITE_DATA", ""))
        parent = os.path.dirname(path) or "/"
        os.makedirs(parent, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".vad-")
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        emit(ok=True)
    else:
        emit(error="unknown operation %r" % op)
except (FileNotFoundError, NotADirectoryError):
    emit(missing=True)
except OSError as exc:
    emit(error=exc.strerror or str(exc))
"""
WRITE_DATA_ENV = "VAD_WRITE_DATA"
PROBE_OPS = frozenset({"run", "tail", "range", "size", "exists", "write"})
_NONCE_RE = re.compile(r"^vad[0-9a-f]{32}$")


def launch_entrypoint(job_dir: str, log_path: str, cwd: str, argv: Sequence[str]) -> str:
    return shlex.join(["bash", "-c", LAUNCH_SCRIPT, LAUNCH_ARG0, job_dir, log_path, cwd, "--", *argv])


def probe_entrypoint(nonce: str, op: str, args: Sequence[str]) -> str:
    if not _NONCE_RE.fullmatch(nonce):
        raise ValueError("nonce must be 'vad' + 32 hex digits")
    if op not in PROBE_OPS:
        raise ValueError(f"unknown probe operation {op!r}")
    return shlex.join(["python3", "-c", PROBE_SCRIPT, nonce, op, *args])


def parse_result(log: bytes, nonce: str) -> dict[str, Any] | None:
    """The probe's one result line from a job log, or None when it never printed one."""
    marker = (nonce + ":").encode()
    for line in reversed(log.splitlines()):
        if line.startswith(marker):
            try:
                data = json.loads(base64.b64decode(line[len(marker) :], validate=True))
            except (binascii.Error, ValueError):
                return None
            return data if isinstance(data, dict) else None
    return None


def decode_b64(value: Any) -> bytes:
    return base64.b64decode(value or "")
