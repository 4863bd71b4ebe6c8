#!/usr/bin/env python3
"""Install verl-async-dapo into its own virtual environment and put the command on PATH.

    python3 scripts/install.py && ~/.local/bin/verl-async-dapo serve

Why not ``pip install .``: Debian 12+ and Ubuntu 23.04+ mark the system Python as externally managed (PEP 668), so
pip refuses to install into it. A venv is always allowed, and needs nothing but ``python3``:

1. ``python3 -m venv DIR`` (with pip, through ensurepip, where python3-venv is installed);
2. without ensurepip (a Debian without python3-venv): ``python3 -m venv --without-pip DIR``, then pip from the system's
   pip (``python3 -m pip --python``) or, with no pip at all, from pip's own wheel: taken from a ``PIP_FIND_LINKS``
   folder when one holds it (offline installs), otherwise downloaded from PyPI's simple index (``PIP_INDEX_URL``);
3. ``DIR/bin/pip install SOURCE`` (the checkout by default; pip's usual environment variables apply);
4. a symlink ``BIN_DIR/verl-async-dapo`` (default ``~/.local/bin``) to the venv's command.

Standard library only: it runs before anything is installed. Re-running upgrades in place.
"""

from __future__ import annotations

import argparse
import html.parser
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "verl-async-dapo"
PYPI_SIMPLE = "https://pypi.org/simple"


def default_venv() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / COMMAND / "venv"


class InstallError(RuntimeError):
    """A step failed; the message says what to do."""


def run(argv: list[str]) -> None:
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    if subprocess.run(argv, check=False).returncode != 0:
        raise InstallError(f"this step failed: {' '.join(argv)}")


def has_ensurepip() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import ensurepip"], capture_output=True, check=False)
    return probe.returncode == 0


def has_system_pip() -> bool:
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return False
    try:  # `pip --python` (install into another interpreter) needs pip >= 22.3
        major, minor = (int(x) for x in probe.stdout.split()[1].split(".")[:2])
    except (IndexError, ValueError):
        return False
    return (major, minor) >= (22, 3)


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def pip_wheel(workdir: Path) -> Path:
    """pip's wheel: from a PIP_FIND_LINKS folder if one holds it, else the newest from the simple index."""
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        found = sorted(Path(folder).glob("pip-*-py3-none-any.whl")) if Path(folder).is_dir() else []
        if found:
            return found[-1]
    if os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        raise InstallError("PIP_NO_INDEX is set and no PIP_FIND_LINKS folder holds a pip-*-py3-none-any.whl")
    index = os.environ.get("PIP_INDEX_URL", PYPI_SIMPLE).rstrip("/") + "/pip/"
    try:
        with urllib.request.urlopen(index, timeout=60) as response:  # noqa: S310 (an https or file index URL)
            page = response.read().decode("utf-8", errors="replace")
    except OSError as exc:
        raise InstallError(f"could not read {index} ({exc}); install python3-venv (apt install python3-venv) "
                           "or put pip's wheel in a folder named by PIP_FIND_LINKS") from exc  # fmt: skip
    links = _Links()
    links.feed(page)
    wheels = [h for h in links.hrefs if urllib.parse.urlsplit(h).path.rsplit("/", 1)[-1].endswith("py3-none-any.whl")]
    if not wheels:
        raise InstallError(f"no pip wheel listed at {index}")
    url = urllib.parse.urljoin(index, wheels[-1])  # the simple index lists releases oldest first
    target = workdir / urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1]
    with urllib.request.urlopen(url, timeout=300) as response, target.open("wb") as out:  # noqa: S310
        shutil.copyfileobj(response, out)
    return target


def make_venv(venv: Path, use_ensurepip: bool) -> None:
    python = venv / "bin" / "python"
    if use_ensurepip and has_ensurepip():
        run([sys.executable, "-m", "venv", str(venv)])
        return
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    if has_system_pip():
        run([sys.executable, "-m", "pip", "--python", str(python), "install", "pip"])
        return
    with tempfile.TemporaryDirectory() as tmp:
        wheel = pip_wheel(Path(tmp))
        run([str(python), str(wheel / "pip"), "install", str(wheel)])  # pip runs from its own wheel


def link_command(venv: Path, bin_dir: Path) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    link = bin_dir / COMMAND
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(venv / "bin" / COMMAND)
    return link


def path_advice(bin_dir: Path) -> str:
    """How to put ``bin_dir`` on PATH, for the user's shell (the scripts and the plugin find the command anyway)."""
    shell = os.path.basename(os.environ.get("SHELL", "bash"))
    rc = {"zsh": "~/.zshrc", "fish": "~/.config/fish/config.fish"}.get(shell, "~/.bashrc")
    shown = str(bin_dir).replace(str(Path.home()), "$HOME", 1) if str(bin_dir).startswith(str(Path.home())) else str(bin_dir)
    line = f"fish_add_path {shown}" if shell == "fish" else f'export PATH="{shown}:$PATH"'
    return (f"note: {bin_dir} is not on PATH; use the full path above, or put it on PATH for this and later "
            f"shells:\n  {line}\n  echo '{line}' >> {rc}\n"
            "(scripts/*.sh and the Claude Code plugin find the command there either way)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=default_venv(), help="where the venv goes (default %(default)s)")
    parser.add_argument("--bin-dir", type=Path, default=Path.home() / ".local" / "bin",
                        help="where the command is linked (default %(default)s)")  # fmt: skip
    parser.add_argument("--source", default=str(ROOT), help="what pip installs: the checkout (default) or a wheel")
    parser.add_argument("--with", dest="extras", action="append", choices=["charts", "swanlab"], default=[],
                        help="optional parts: charts (matplotlib, ~60 MB: get_progress chart / status --plot), "
                             "swanlab (the SwanLab SDK on this machine); repeatable")  # fmt: skip
    parser.add_argument("--no-ensurepip", action="store_true",
                        help="make the venv without ensurepip, as on a Debian without python3-venv")  # fmt: skip
    args = parser.parse_args(argv)
    if sys.version_info < (3, 10):  # noqa: UP036 (this script runs on whatever python3 the user has)
        print(f"error: verl-async-dapo needs Python >= 3.10; this is {sys.version.split()[0]}", file=sys.stderr)
        return 1
    try:
        make_venv(args.venv, use_ensurepip=not args.no_ensurepip)
        source = f"{args.source}[{','.join(sorted(set(args.extras)))}]" if args.extras else args.source
        run([str(args.venv / "bin" / "python"), "-m", "pip", "install", "--upgrade", source])
        link = link_command(args.venv, args.bin_dir)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    on_path = str(args.bin_dir) in os.environ.get("PATH", "").split(os.pathsep)
    print(f"installed: {link} -> {args.venv / 'bin' / COMMAND}")
    print("next: connect your agent (claude mcp add verl-async-dapo -- " + (COMMAND if on_path else str(link))
          + " serve), then check a target: " + (COMMAND if on_path else str(link)) + " preflight --container host")
    if not on_path:
        print(path_advice(args.bin_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
