"""Assemble a stand-in "verl source checkout" for one verl release, from the release's wheel.

    python tests/standin/make_tree.py 0.9.1 /tmp/verl-0.9.1 [--wheel path/to/verl-0.9.1-py3-none-any.whl]

The tree holds what composing and starting a DAPO / one-step-off launch needs from the CWD:

From the wheel (``pip download --no-deps verl==X``; the wheel never contains ``recipe/``), yaml files only
(the wheel's Python modules import torch and are not needed to compose):
    verl/trainer/config/**/*.yaml                              all releases
    verl/experimental/one_step_off_policy/config/**/*.yaml     >= 0.7.1 (one-step-off ships with verl)
    verl/version/version

From tests/standin/recipe_configs/<layout>/ (copies of the upstream recipe yaml files):
    layout ``legacy``        (< 0.7.1)  recipe/dapo/config/*.yaml, recipe/one_step_off_policy/config/*.yaml  (verl v0.6.1)
    overlay ``legacy-0.7.0`` (0.7.0)    recipe/one_step_off_policy/config/*.yaml                             (verl v0.7.0)
    layout ``current``       (>= 0.7.1) recipe/dapo/config/*.yaml                     (verl-recipe submodule pin)

From tests/standin/entry/ (stand-in entry modules written elsewhere), only if that directory exists;
files missing there are skipped:
    recipe/dapo/main_dapo.py                              <- entry/main_dapo.py
    recipe/one_step_off_policy/main_ppo.py                <- entry/one_step_off_main_ppo.py   (< 0.7.1)
    verl/experimental/one_step_off_policy/main_ppo.py     <- entry/one_step_off_main_ppo.py   (>= 0.7.1)
    verl_standin/standin_*.py                             <- entry/standin_*.py (every such file)
  plus empty ``__init__.py`` files for every package on those paths and a minimal ``verl/__init__.py``
  that only defines ``__version__``, so ``python3 -m <module>`` works from the tree root.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPE_CONFIGS = HERE / "recipe_configs"
ENTRY_DIR = HERE / "entry"
CACHE_ENV = "VERL_ASYNC_DAPO_WHEEL_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "verl-async-dapo-tests" / "wheels"

CURRENT_LAYOUT_FROM = (0, 7, 1)
LEGACY_070 = (0, 7, 0)

# tree path -> file name under tests/standin/entry/, per layout.
ENTRY_MAP: dict[str, dict[str, str]] = {
    "legacy": {
        "recipe/dapo/main_dapo.py": "main_dapo.py",
        "recipe/one_step_off_policy/main_ppo.py": "one_step_off_main_ppo.py",
    },
    "current": {
        "recipe/dapo/main_dapo.py": "main_dapo.py",
        "verl/experimental/one_step_off_policy/main_ppo.py": "one_step_off_main_ppo.py",
    },
}


def release_of(version: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)", version.strip())
    if not match:
        raise ValueError(f"expected a release version like 0.9.1, got {version!r}")
    major, minor, patch = (int(g) for g in match.groups())
    return (major, minor, patch)


def layout_of(version: str) -> str:
    return "current" if release_of(version) >= CURRENT_LAYOUT_FROM else "legacy"


def wheel_cache(version: str) -> Path:
    """The verl wheel for ``version``, downloaded once into the cache directory and reused."""
    release_of(version)
    cache = Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"verl-{version}-*.whl"))
    if found:
        return found[0]
    # Download into a private temp dir and move into place, so concurrent runs never see half a file.
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
        cmd += [f"verl=={version}", "-d", tmp]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        wheels = sorted(Path(tmp).glob(f"verl-{version}-*.whl"))
        if not wheels:
            raise FileNotFoundError(f"pip download produced no wheel for verl=={version}")
        target = cache / wheels[0].name
        os.replace(wheels[0], target)
        return target


def _extract(wheel: Path, dest: Path, prefixes: tuple[str, ...]) -> int:
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.startswith(prefixes):
                continue
            if not (name.endswith(".yaml") or name == "verl/version/version"):
                continue
            target = (dest / name).resolve()
            if dest.resolve() not in target.parents:
                raise ValueError(f"refusing to extract {name!r} outside {dest}")
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            count += 1
    return count


def _copy_tree(src: Path, dest: Path) -> None:
    for path in sorted(src.rglob("*")):
        if path.is_file():
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def _install_entries(dest: Path, layout: str, version: str) -> list[str]:
    installed: list[str] = []
    for tree_path, entry_name in ENTRY_MAP[layout].items():
        source = ENTRY_DIR / entry_name
        if not source.is_file():
            continue
        target = dest / tree_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        installed.append(tree_path)
        # Make every directory on the way a regular package (recipe/, recipe/dapo/, verl/experimental/...).
        parent = Path(tree_path).parent
        while parent != Path("."):
            init = dest / parent / "__init__.py"
            if not init.exists():
                init.write_text("")
            parent = parent.parent
    for helper in sorted(ENTRY_DIR.glob("standin_*.py")):
        target = dest / "verl_standin" / helper.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(helper, target)
        installed.append(f"verl_standin/{helper.name}")
    if installed:
        # Minimal verl package: only the version (the tree is for composing and stand-in entries).
        init = dest / "verl" / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        init.write_text(f'__version__ = "{version}"\n')
    return installed


def make_tree(version: str, wheel_path: Path, dest: Path) -> Path:
    """Build the stand-in verl root for ``version`` at ``dest`` (created; must be empty or absent)."""
    release = release_of(version)
    layout = layout_of(version)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    prefixes = ["verl/trainer/config/", "verl/version/version"]
    if layout == "current":
        prefixes.append("verl/experimental/one_step_off_policy/config/")
    if _extract(Path(wheel_path), dest, tuple(prefixes)) == 0:
        raise ValueError(f"{wheel_path} holds no verl/trainer/config: not a verl wheel?")
    wheel_version = (dest / "verl" / "version" / "version").read_text().strip()
    if wheel_version != version:
        raise ValueError(f"{wheel_path} is verl {wheel_version}, expected {version}")
    _copy_tree(RECIPE_CONFIGS / layout, dest)
    if release == LEGACY_070:
        _copy_tree(RECIPE_CONFIGS / "legacy-0.7.0", dest)
    if ENTRY_DIR.is_dir():
        _install_entries(dest, layout, version)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", help="verl release, e.g. 0.6.1 or 0.9.1")
    parser.add_argument("dest", type=Path, help="directory to create (must be empty or absent)")
    parser.add_argument("--wheel", type=Path, help="use this wheel instead of the download cache")
    args = parser.parse_args(argv)
    wheel = args.wheel or wheel_cache(args.version)
    print(make_tree(args.version, wheel, args.dest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
