"""Pre-launch validation: verl's own Hydra compose of a launch's overrides, inside the target.

A stale or misspelt key would otherwise fail the launch only after verl, torch and Ray were imported (tens of
seconds; on a cluster, after a queued job); composing the config alone takes about a second. One override set per
process, or several in one (Hydra imported once), and the supervisor's cache of checks made ahead of need, so an
OOM relaunch need not wait for Hydra.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.targets.base import COMMAND_NOT_FOUND, Target, check_target_path

if TYPE_CHECKING:
    from verl_async_dapo.verl import EntryPlan, LaunchPlan

log = logging.getLogger(__name__)

VALIDATE_TIMEOUT = 60.0

# Compose the config exactly like @hydra.main would, without running anything. argv: config dir,
# config name, overrides. CWD must be the verl root: DAPO / one-step-off configs carry
# `hydra.searchpath: [file://verl/trainer/config]`, resolved relative to the CWD. Prints nothing
# on success; on failure Hydra's message chain (as hydra.main shows it) and exit 1.
COMPOSE_SCRIPT = r"""
import sys
try:
    from hydra import compose, initialize_config_dir
except Exception as exc:
    print(f"hydra is not importable: {exc}")
    sys.exit(2)
config_dir, config_name, *overrides = sys.argv[1:]
try:
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        compose(config_name=config_name, overrides=overrides)
except Exception as exc:
    messages = []
    while exc is not None:
        messages.append(str(exc).strip())
        exc = exc.__cause__
    print("\n".join(m for m in messages if m))
    sys.exit(1)
"""

# Hydra caches the YAML files it parses for one compose only, and a compose reads ~30 of verl's (~0.3 s); the sets
# of one check differ in override values, not in files, so they share the parsed files: each further set costs
# ~0.1 s instead. Hydra only reads a cached file (it already reuses one within a compose), and the cache is kept
# per config name and per ``hydra.searchpath`` override (the one override that changes which file a config path
# names; a group choice names other paths). Scoped to the loader of the enclosing initialize_config_dir; a Hydra
# without this hook composes as usual.
SHARE_PARSED_FILES = r"""
def share_parsed_files():
    try:
        from hydra.core.global_hydra import GlobalHydra
        loader = GlobalHydra.instance().config_loader()
        create_repo = loader._parse_overrides_and_create_caching_repo
    except Exception:
        return
    shared = {}

    def with_shared_cache(config_name, overrides):
        parsed, repo = create_repo(config_name, overrides)
        if isinstance(getattr(repo, "cache", None), dict):
            search_path = tuple(o for o in overrides if "searchpath" in o.split("=", 1)[0])
            repo.cache = shared.setdefault((config_name, search_path), repo.cache)
        return parsed, repo

    loader._parse_overrides_and_create_caching_repo = with_shared_cache
"""

# The same composition for several override sets in one process (Hydra is imported once): argv config dir,
# config name, then the sets separated by "--" (an override never starts with "-"). Prints one JSON list: null
# for a set that composes, else its message chain.
COMPOSE_MANY_SCRIPT = (
    SHARE_PARSED_FILES
    + r"""
import json, sys
try:
    from hydra import compose, initialize_config_dir
except Exception as exc:
    print(f"hydra is not importable: {exc}")
    sys.exit(2)
config_dir, config_name, *rest = sys.argv[1:]
sets = [[]]
for arg in rest:
    if arg == "--":
        sets.append([])
    else:
        sets[-1].append(arg)
results = []
with initialize_config_dir(config_dir=config_dir, version_base=None):
    share_parsed_files()
    for overrides in sets:
        try:
            compose(config_name=config_name, overrides=overrides)
            results.append(None)
        except Exception as exc:
            messages = []
            while exc is not None:
                messages.append(str(exc).strip())
                exc = exc.__cause__
            results.append("\n".join(m for m in messages if m))
print(json.dumps(results))
"""
)

_CONFIG_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True)
class ValidationResult:
    ok: bool
    error: str | None = None


def check_overrides(overrides: Sequence[str]) -> list[str]:
    """Overrides are argv elements: refuse anything that could read as an option or split a line."""
    checked: list[str] = []
    for item in overrides:
        if not isinstance(item, str) or not item:
            raise InvalidTargetInput("overrides must be non-empty strings")
        if item.startswith("-"):
            raise InvalidTargetInput(f"override may not start with '-': {item[:80]!r}")
        if any(ch in item for ch in "\x00\n\r"):
            raise InvalidTargetInput(f"override may not contain NUL or newlines: {item[:80]!r}")
        checked.append(item)
    return checked


async def validate_overrides(
    target: Target,
    verl_home: str,
    config_path: str,
    config_name: str,
    overrides: Sequence[str],
) -> ValidationResult:
    """Compose ``config_name`` + ``overrides`` with the Hydra and verl configs inside the target.

    ``config_path`` is absolute or relative to ``verl_home`` (e.g. ``recipe/dapo/config``).
    Returns verl's own message ("Could not override '…'", "Key '…' is not in struct", "Could
    not append to config…") when composition fails. Invalid input raises InvalidTargetInput.
    """
    config_dir, name = _compose_target(verl_home, config_path, config_name)
    argv = ["python3", "-c", COMPOSE_SCRIPT, config_dir, name, *check_overrides(overrides)]
    try:
        res = await target.run(argv, cwd=verl_home, timeout=VALIDATE_TIMEOUT)
    except TargetError as exc:
        return ValidationResult(ok=False, error=f"could not validate the overrides: {exc}")
    if res.exit_code == 0:
        return ValidationResult(ok=True)
    if res.exit_code == COMMAND_NOT_FOUND:
        return ValidationResult(ok=False, error=f"python3 not found in {target.name}")
    return ValidationResult(ok=False, error=res.stdout.strip() or res.stderr.strip()[-2000:] or f"exit {res.exit_code}")


def _compose_target(verl_home: str, config_path: str, config_name: str) -> tuple[str, str]:
    check_target_path(verl_home, "verl_home")
    config_dir = config_path if config_path.startswith("/") else posixpath.join(verl_home, config_path)
    check_target_path(config_dir, "config_path")
    name = config_name.removesuffix(".yaml")
    if not _CONFIG_NAME_RE.fullmatch(name):
        raise InvalidTargetInput(f"{config_name[:80]!r} is not a valid config name")
    return config_dir, name


async def validate_override_sets(
    target: Target,
    verl_home: str,
    config_path: str,
    config_name: str,
    override_sets: Sequence[Sequence[str]],
) -> list[ValidationResult]:
    """``validate_overrides`` for several sets at once: one process, Hydra imported once and verl's files parsed
    once (each further set costs ~0.1 s instead of a ~1 s interpreter + Hydra start-up). One result per set, in
    order."""
    if not override_sets:
        return []
    config_dir, name = _compose_target(verl_home, config_path, config_name)
    argv = ["python3", "-c", COMPOSE_MANY_SCRIPT, config_dir, name]
    for i, overrides in enumerate(override_sets):
        argv += ([] if i == 0 else ["--"]) + check_overrides(overrides)
    try:
        res = await target.run(argv, cwd=verl_home, timeout=VALIDATE_TIMEOUT)
    except TargetError as exc:
        return [ValidationResult(ok=False, error=f"could not validate the overrides: {exc}")] * len(override_sets)
    error: str | None
    if res.exit_code == 0:
        try:
            found = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            found = None
        if isinstance(found, list) and len(found) == len(override_sets):
            return [ValidationResult(ok=e is None, error=None if e is None else str(e)) for e in found]
        # Exit 0 without the answer (Docker can lose a short exec's output: moby#27289): not a verdict on the
        # overrides, so "could not validate", which ValidationCache.result checks again with a check that needs no
        # output to pass, instead of rejecting the attempt as a config error.
        error = f"could not validate the overrides: the check exited 0 without its answer: {res.stdout.strip()[-500:]}"
    elif res.exit_code == COMMAND_NOT_FOUND:
        error = f"python3 not found in {target.name}"
    else:
        error = res.stdout.strip() or res.stderr.strip()[-2000:] or f"exit {res.exit_code}"
    return [ValidationResult(ok=False, error=error)] * len(override_sets)


class ValidationCache:
    """Override sets validated ahead of need (the next rung of each OOM ladder, checked while the attempt runs) so
    a relaunch does not wait ~1 s for Hydra in the target. One per supervisor, for its target."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._validated: dict[tuple[str, ...], ValidationResult | anyio.Event] = {}  # or an Event while pending

    @staticmethod
    def _key(entry: EntryPlan, overrides: Sequence[str]) -> tuple[str, ...]:
        return (entry.cwd, entry.config_dir, entry.config_name, *overrides)

    async def result(self, entry: EntryPlan, overrides: Sequence[str]) -> ValidationResult:
        """The overrides' Hydra check: from the ahead-of-time cache (waiting if it is still running), else now.

        A cached "could not validate" (the target did not answer) is transient and checked again."""
        key = self._key(entry, overrides)
        known = self._validated.get(key)
        if isinstance(known, anyio.Event):
            await known.wait()
            known = self._validated.get(key)
        if isinstance(known, ValidationResult) and (known.ok or "could not validate" not in (known.error or "")):
            return known
        return await validate_overrides(self.target, entry.cwd, entry.config_dir, entry.config_name, list(overrides))

    async def prevalidate(self, plans: Sequence[LaunchPlan]) -> None:
        """Validate the plans not known yet, in one process: those with the first one's entry (one config per
        process). Only a cache: a failure here is a miss, logged, and changes nothing until a relaunch needs it."""
        todo: list[tuple[tuple[str, ...], LaunchPlan]] = []
        for plan in plans:
            key = self._key(plan.entry, plan.overrides)
            if key not in self._validated and all(key != k for k, _ in todo):
                todo.append((key, plan))
        todo = [(key, plan) for key, plan in todo if plan.entry == todo[0][1].entry] if todo else []
        if not todo:
            return
        events = {key: anyio.Event() for key, _ in todo}
        self._validated.update(events)
        entry = todo[0][1].entry
        results: list[ValidationResult] = []
        try:
            results = await validate_override_sets(self.target, entry.cwd, entry.config_dir, entry.config_name,
                                                   [list(p.overrides) for _, p in todo])  # fmt: skip
        except Exception as exc:  # a cache miss, never a supervisor failure
            log.warning("ahead-of-time validation failed: %s", exc)
        finally:
            for (key, _), result in zip(todo, results + [None] * len(todo)):  # noqa: B905
                if result is None:
                    self._validated.pop(key, None)
                else:
                    self._validated[key] = result
            for event in events.values():
                event.set()
