"""A local wheelhouse for install tests, so they need no package index (nothing may contact another address).

The distributions the project needs are already installed in the test venv; each is packed back into a wheel from its
installed files (the RECORD list) and its own tag (the WHEEL file). pip then installs them with ``--no-index
--find-links`` exactly as it would from PyPI: metadata, dependency resolution, console scripts from entry points.
"""

from __future__ import annotations

import importlib.metadata as md
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirement_closure(root: str, extra_names: tuple[str, ...] = ()) -> list[md.Distribution]:
    """The installed distributions ``root`` needs at run time, with the extras its requirements ask for (``pyjwt[crypto]``),
    plus ``extra_names``; without ``root`` itself."""
    seen: dict[str, md.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(root, ""), *((name, "") for name in extra_names)]
    while todo:
        raw, extra = todo.pop()
        name = canonicalize_name(raw)
        if (name, extra) in done:
            continue
        done.add((name, extra))
        dist = seen.setdefault(name, md.distribution(name))
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo.extend((req.name, wanted) for wanted in ("", *req.extras))
    seen.pop(canonicalize_name(root))
    return list(seen.values())


def _tag(dist: md.Distribution) -> str:
    wheel_file = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_file.splitlines() if line.startswith("Tag:")]
    if not tags:
        return "py3-none-any"
    parts = [tag.split("-") for tag in tags]
    if len({tuple(p[1:]) for p in parts}) == 1:  # e.g. py2 + py3 for none-any (tzdata): one compressed tag
        return ".".join(dict.fromkeys(p[0] for p in parts)) + "-" + "-".join(parts[0][1:])
    return next((t for t in tags if not t.startswith("py2")), tags[0])


def repack(dist: md.Distribution, out_dir: Path) -> Path:
    """One installed distribution as a wheel in ``out_dir``."""
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    target = out_dir / f"{name}-{dist.version}-{_tag(dist)}.whl"
    base = Path(str(dist.locate_file("")))
    info_dir = f"{name}-{dist.version}.dist-info"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for file in dist.files or []:
            parts = file.parts
            if parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc":
                continue  # scripts outside site-packages are regenerated from entry points; bytecode is rebuilt
            if parts[0].endswith(".dist-info"):
                if parts[-1] in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
                arcname = "/".join((info_dir, *parts[1:]))
            else:
                arcname = file.as_posix()
            source = base / file
            if source.is_file():
                zf.write(source, arcname)
        zf.writestr(f"{info_dir}/RECORD", "")  # pip writes the real RECORD at install time
    return target


def build_wheelhouse(out_dir: Path, root: str = "verl-async-dapo", extra_names: tuple[str, ...] = ("pip",)) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    for dist in requirement_closure(root, extra_names):
        repack(dist, out_dir)
    return out_dir
