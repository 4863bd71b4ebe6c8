"""Secrets (the SwanLab API key, proxy passwords) kept out of the SQLite state DB.

The DB, its events and every tool output only ever hold a reference (``sec_<token>``); the
value lives in a file of its own, readable by its owner only. Files are created with
``O_CREAT | O_EXCL`` and mode 0600 in one system call (there is no window in which a umask or a
chmod race leaves them readable), written, fsynced and renamed into place, so a crash leaves
either the whole secret or nothing. The two file helpers below are shared with the SwanLab
config file, which obeys the same rules.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
from pathlib import Path

from verl_async_dapo.exceptions import InsecureFileError, SecretNotFoundError, SecretStoreError

__all__ = [
    "InsecureFileError",
    "SecretNotFoundError",
    "SecretStore",
    "SecretStoreError",
    "ensure_private_dir",
    "read_private_file",
    "write_private_file",
]

_REF_RE = re.compile(r"sec_[A-Za-z0-9_-]{32}")
_LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_MAX_SECRET = 64 * 1024


def write_private_file(path: Path, data: bytes) -> None:
    """Atomically replace ``path`` with ``data``, owner-only (0600) from the first byte on.

    A sibling temp file is created with ``O_EXCL`` (so nothing else can have opened it) and
    mode 0600, fsynced, then renamed over ``path``; the directory is fsynced so the rename
    survives a power cut.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # the umask can only remove bits, but be explicit
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def read_private_file(path: Path, *, max_bytes: int = _MAX_SECRET, what: str = "file") -> bytes:
    """Read a file that must be a regular file, owned by us, with no group/other permission bits.

    The checks run on the opened descriptor (``fstat``), so the file can't be swapped between
    the check and the read. Raises ``FileNotFoundError`` if it doesn't exist and
    ``InsecureFileError`` (with the ``chmod 600`` fix) if other users could read or alter it.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InsecureFileError(f"{what} {path} is not a regular file")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise InsecureFileError(
                f"{what} {path} is owned by uid {st.st_uid}, not by the current user (uid {os.geteuid()}); "
                "refusing to trust it"
            )
        if st.st_mode & 0o077:
            raise InsecureFileError(
                f"{what} {path} has mode {stat.S_IMODE(st.st_mode):04o}: other users can read or change it, "
                f"so it is refused. Fix it with: chmod 600 {path}"
            )
        if st.st_size > max_bytes:
            raise SecretStoreError(f"{what} {path} is larger than {max_bytes} bytes")
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, remaining)
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise SecretStoreError(f"{what} {path} is larger than {max_bytes} bytes")
        return data
    finally:
        os.close(fd)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) with mode 0700; refuse an existing non-directory."""
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for created in missing:
        # mkdir's mode is filtered by the umask and parents=True ignores it for intermediates.
        os.chmod(created, 0o700)
    if not path.is_dir():
        raise SecretStoreError(f"{path} exists and is not a directory")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # e.g. platforms without directory fds; the rename itself is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class SecretStore:
    """One owner-only file per secret under ``root`` (a 0700 directory)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        ensure_private_dir(self.root)
        st = os.lstat(self.root)
        if stat.S_ISLNK(st.st_mode):
            raise SecretStoreError(f"secret store {self.root} is a symlink; refusing to use it")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise SecretStoreError(f"secret store {self.root} is owned by another user; refusing to use it")
        if st.st_mode & 0o077:
            # Our own directory: tighten it rather than fail (it may predate this code).
            os.chmod(self.root, 0o700)

    @staticmethod
    def is_ref(ref: object) -> bool:
        return isinstance(ref, str) and _REF_RE.fullmatch(ref) is not None

    def put(self, value: str, *, label: str) -> str:
        """Store ``value``; return a fresh unguessable reference to it (192 random bits)."""
        if not isinstance(value, str) or not value:
            raise SecretStoreError("a secret must be a non-empty string")
        if "\x00" in value:
            raise SecretStoreError("a secret may not contain NUL characters")
        if not _LABEL_RE.fullmatch(label):
            raise SecretStoreError(f"invalid secret label {label[:40]!r}: letters, digits, '.', '_', ':' or '-'")
        payload = json.dumps({"label": label, "value": value}).encode()
        if len(payload) > _MAX_SECRET:
            raise SecretStoreError(f"a secret may be at most {_MAX_SECRET} bytes")
        ref = "sec_" + secrets.token_urlsafe(24)
        write_private_file(self._path(ref), payload)
        return ref

    def get(self, ref: str) -> str:
        return self._load(ref)["value"]

    def label(self, ref: str) -> str:
        return self._load(ref)["label"]

    def delete(self, ref: str) -> None:
        """Forget a secret; deleting an unknown reference is not an error."""
        self._path(ref).unlink(missing_ok=True)

    def known_values(self) -> list[str]:
        """Every stored secret value, longest first (so redaction replaces a key before its prefix).

        Used to scrub outputs; a secret file with loose permissions is still included here (it
        would be refused by ``get``) because leaving it out would let that value leak unredacted.
        """
        values: set[str] = set()
        for entry in self.root.iterdir():
            if not _REF_RE.fullmatch(entry.name):
                continue  # temp files and anything else that isn't ours
            try:
                if not entry.is_file() or entry.is_symlink():
                    continue
                payload = json.loads(entry.read_bytes()[: _MAX_SECRET + 1])
            except (OSError, ValueError):
                continue
            value = payload.get("value") if isinstance(payload, dict) else None
            if isinstance(value, str) and value:
                values.add(value)
        return sorted(values, key=lambda v: (-len(v), v))

    def _path(self, ref: str) -> Path:
        # Strict format check: a reference is a name inside root, never a path ('/', '..', NUL).
        if not self.is_ref(ref):
            raise SecretStoreError("malformed secret reference (expected sec_ followed by 32 URL-safe characters)")
        return self.root / ref

    def _load(self, ref: str) -> dict[str, str]:
        path = self._path(ref)
        try:
            raw = read_private_file(path, what="secret file")
        except FileNotFoundError:
            raise SecretNotFoundError(f"no secret stored under {ref}") from None
        try:
            payload = json.loads(raw)
        except ValueError:
            raise SecretStoreError(f"secret file {path} is corrupt") from None
        if not (isinstance(payload, dict) and isinstance(payload.get("value"), str) and "label" in payload):
            raise SecretStoreError(f"secret file {path} is corrupt")
        return {"label": str(payload["label"]), "value": payload["value"]}
