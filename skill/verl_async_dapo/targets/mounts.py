"""Which host directories a new training container may mount (issue 20, finding 2).

A container runs as root (confined since issue 27, see privileges.py, but root over what it mounts): a read-write
bind of ``/``, ``/etc`` or a directory holding the Docker socket hands out the host. So, whoever asks (the model, a
prompt-injected text, another local user):

* **refused, always**: the system directories and everything under them (``/etc``, ``/proc``, ``/sys``, ``/run``,
  ``/var/run``, ``/boot``, ``/dev``, ``/usr``, the libraries, Docker's and containerd's state), ``/``, ``/root``,
  ``/home`` and the user's home directory itself, any directory *above* one of those (``/var``), and any directory
  that contains a Docker socket; judged on the path with every symlink resolved, so a link to ``/`` is ``/``;
* **allowed without asking**: directories under the allow-list, ``VERL_ASYNC_DAPO_MOUNT_ALLOW`` (``:``-separated
  absolute paths) or, when unset, the usual models / data / checkpoint locations (``DEFAULT_ALLOW``);
* **anything else needs the user's confirmation** (an elicitation form; a client without one is refused):
  ``review`` says which, the caller asks.

``review`` returns every source resolved: the caller hands Docker those real paths, never a link that could be
re-pointed after the check, and the Docker target checks them again before each start (issue 27, item 2).

Reads the file system (``resolve``, ``lstat``), nothing else; the decision of what to ask is the caller's.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from verl_async_dapo.exceptions import MountRefused

ALLOW_ENV = "VERL_ASYNC_DAPO_MOUNT_ALLOW"

# The path itself and everything below it.
FORBIDDEN_TREES = (
    "/etc", "/proc", "/sys", "/run", "/var/run", "/boot", "/dev", "/usr", "/bin", "/sbin", "/lib", "/lib32",
    "/lib64", "/libx32", "/var/lib/docker", "/var/lib/containerd", "/var/lib/kubelet", "/snap",
)  # fmt: skip
# Credentials under the user's home: the directory and everything below it.
HOME_SECRETS = ("~/.ssh", "~/.docker", "~/.gnupg", "~/.config", "~/.aws", "~/.kube", "~/.ray")
# Exactly these (a subdirectory such as /home/alice/models is fine).
FORBIDDEN_EXACT = ("/", "/root", "/home")
DEFAULT_ALLOW = (
    "/data", "/datasets", "/models", "/checkpoints", "/ckpt", "/mnt", "/workspace", "/scratch",
    "~/models", "~/data", "~/datasets", "~/checkpoints", "~/ckpt",
)  # fmt: skip
_DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock",
                   "~/.docker/run/docker.sock", "~/.docker/desktop/docker.sock")  # fmt: skip
_SCAN_DEPTH = 2  # a socket deeper than this in a models dir is not how Docker installs itself
_SCAN_ENTRIES = 5000  # bounded: a data dir can hold millions of files


@dataclass(frozen=True)
class MountReview:
    """What a set of mounts needs: every source resolved; those outside the allow-list need a yes."""

    resolved: dict[str, str] = field(default_factory=dict)  # host path as given → with symlinks resolved
    unlisted: list[str] = field(default_factory=list)  # resolved paths outside the allow-list


def _expand(path: str, home: Path) -> Path:
    return home / path[2:] if path.startswith("~/") else Path(path)


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _resolved(path: str, home: Path) -> Path:
    try:
        return _expand(path, home).resolve(strict=False)
    except (OSError, RuntimeError):  # a symlink loop: compare the text
        return _expand(path, home)


def _docker_sockets(env: Mapping[str, str], home: Path) -> list[Path]:
    found = [_resolved(p, home) for p in _DOCKER_SOCKETS]
    docker_host = env.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        found.append(_resolved(docker_host[len("unix://") :], home))
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime:
        found.append(_resolved(os.path.join(runtime, "docker.sock"), home))
    return found


def _holds_a_socket(root: Path) -> Path | None:
    """A socket with 'docker' or 'containerd' in its name within ``_SCAN_DEPTH`` levels (bounded walk)."""
    seen = 0
    level = [root]
    for _ in range(_SCAN_DEPTH + 1):
        below: list[Path] = []
        for directory in level:
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                seen += 1
                if seen > _SCAN_ENTRIES:
                    return None
                try:
                    mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue
                name = entry.name.lower()
                if stat.S_ISSOCK(mode) and ("docker" in name or "containerd" in name):
                    return Path(entry.path)
                if stat.S_ISDIR(mode):
                    below.append(Path(entry.path))
        level = below
    return None


def refusal(host_path: str, env: Mapping[str, str], home: Path) -> str | None:
    """Why mounting ``host_path`` would hand out the host, or None when it would not."""
    resolved = _resolved(host_path, home)
    via = "" if str(resolved) == host_path.rstrip("/") or host_path == "/" else f" (it resolves to {resolved})"
    if str(resolved) in FORBIDDEN_EXACT or resolved == home.resolve():
        return f"{host_path}{via} is a whole system or home directory"
    for tree in (*FORBIDDEN_TREES, *HOME_SECRETS):
        root = _resolved(tree, home)
        if _inside(resolved, root):
            return f"{host_path}{via} is inside {tree}, a system directory"
        if _inside(root, resolved):
            return f"{host_path}{via} contains {tree}, a system directory"
    for sock in _docker_sockets(env, home):
        if _inside(sock, resolved):
            return f"{host_path}{via} contains the Docker socket {sock} (root on this machine)"
    found = _holds_a_socket(resolved)
    if found is not None:
        return f"{host_path}{via} contains the socket {found} (a container runtime's: root on this machine)"
    return None


def allow_list(env: Mapping[str, str], home: Path) -> list[Path]:
    configured = env.get(ALLOW_ENV)
    entries: Iterable[str] = configured.split(":") if configured is not None else DEFAULT_ALLOW
    return [_resolved(e.strip(), home) for e in entries if e.strip().startswith(("/", "~/"))]


def review(host_paths: Iterable[str], env: Mapping[str, str], home: Path | None = None) -> MountReview:
    """Refuse (``MountRefused``) any mount that hands out the host; list those outside the allow-list."""
    home = home if home is not None else Path(env.get("HOME") or "/root")
    allowed = allow_list(env, home)
    result = MountReview()
    for host_path in host_paths:
        if not isinstance(host_path, str) or not host_path.startswith("/") or "\x00" in host_path:
            raise MountRefused(f"mount host path must be absolute, got {str(host_path)[:80]!r}")
        if not Path(host_path).is_dir():
            raise MountRefused(f"mount source {host_path[:200]!r} is not an existing directory on this machine")
        why = refusal(host_path, env, home)
        if why is not None:
            raise MountRefused(
                f"refusing to mount {why}: a container runs as root, so this would hand out the host. Mount only "
                "the directories training needs (models, data, checkpoints), e.g. /data/models"
            )
        resolved = _resolved(host_path, home)
        result.resolved[host_path] = str(resolved)
        if not any(_inside(resolved, root) for root in allowed):
            result.unlisted.append(str(resolved))
    return result
