"""Checks against a target before a launch (the Hydra dry-run of the overrides is ``prelaunch``).

Probing beats version arithmetic: we look at what is really inside the target (files, python,
hydra, GPUs, disk) and never import verl there (that needs torch/CUDA and takes a minute).
Each check yields one line with a fix, so the agent can relay it without interpretation.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from verl_async_dapo.settings import Mode, TrainingSettings
from verl_async_dapo.targets.base import COMMAND_NOT_FOUND, Target, TargetError
from verl_async_dapo.targets.ray import RayTarget
from verl_async_dapo.targets.ray_api import RayAuthError
from verl_async_dapo.targets.ray_auth import RayTokenError
from verl_async_dapo.targets.ray_resources import assess
from verl_async_dapo.verl.profiles import profile_for_version
from verl_async_dapo.verl.versions import VerlVersion, VersionError

GIB = 1 << 30
DISK_WARN_BYTES = 50 * GIB
DISK_ERROR_BYTES = 5 * GIB
GPU_BUSY_FRACTION = 0.10  # memory already used on a GPU before we start: someone else is there
# Ray CPUs verl's driver-side runner actor requests (verl.md §4): OneStepTaskRunner num_cpus=10.
RAY_RUNNER_CPUS = {Mode.DAPO: 1, Mode.ONE_STEP_OFF: 10}

_VERSION_SCRIPT = "import importlib.metadata as m; print(m.version('verl'))"
_HYDRA_SCRIPT = "import hydra; print(hydra.__version__)"


class CheckStatus(str, Enum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"


_TAGS = {CheckStatus.OK: "[ok]", CheckStatus.WARNING: "[warn]", CheckStatus.ERROR: "[error]"}


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    fix: str | None = None

    def line(self) -> str:
        text = f"{_TAGS[self.status]} {self.name}: {self.detail}"
        return f"{text} → {self.fix}" if self.fix and self.status is not CheckStatus.OK else text


@dataclass
class PreflightReport:
    target: str
    checks: list[Check] = field(default_factory=list)
    verl_version: str | None = None  # as detected inside the target

    @property
    def ok(self) -> bool:
        return not any(c.status is CheckStatus.ERROR for c in self.checks)

    @property
    def errors(self) -> list[Check]:
        return [c for c in self.checks if c.status is CheckStatus.ERROR]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status is CheckStatus.WARNING]

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "verl_version": self.verl_version,
            "checks": [{**asdict(c), "status": c.status.value} for c in self.checks],
        }


def _release(text: str | None) -> tuple[int, int, int] | None:
    try:
        return VerlVersion.parse(text or "").release
    except VersionError:
        return None


def entry_files(verl_home: str, mode: Mode, version: str | None) -> tuple[list[str], str | None]:
    """The entry module file(s) for the detected version's profile, plus why none was chosen.

    Unknown or unsupported versions fall back to both layouts (recipe/ and verl/experimental/).
    """
    try:
        modules = [profile_for_version(version or "").entry(mode).module]
        problem = None
    except VersionError as exc:
        problem = str(exc) if version else None
        modules = sorted(
            {profile_for_version(v).entry(mode).module for v in ("0.7.0", "0.9.0")},
            reverse=True,
        )
    return [posixpath.join(verl_home, m.replace(".", "/") + ".py") for m in modules], problem


class _Preflight:
    """One run: holds the target, the settings and what earlier checks found out."""

    def __init__(self, target: Target, settings: TrainingSettings) -> None:
        self.target = target
        self.s = settings
        self.checks: list[Check] = []
        self.has_python = False
        self.verl_version: str | None = None

    def add(self, name: str, status: CheckStatus, detail: str, fix: str | None = None) -> None:
        self.checks.append(Check(name, status, detail, fix))

    async def guarded(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """One failing probe (a timeout, a vanished container) must not hide the other checks."""
        try:
            await fn()
        except TargetError as exc:
            self.add(name, CheckStatus.ERROR, f"could not check: {exc}", "make sure the target is running")

    async def python(self) -> None:
        res = await self.target.run(["python3", "-c", "import sys; print(sys.version.split()[0])"], timeout=30)
        if res.exit_code == 0:
            self.has_python = True
            self.add("python3", CheckStatus.OK, f"Python {res.stdout.strip()}")
        elif res.exit_code == COMMAND_NOT_FOUND:
            self.add(
                "python3", CheckStatus.ERROR, "python3 not found", "use an image with Python 3 (verl images ship it)"
            )
        else:
            self.add("python3", CheckStatus.ERROR, f"python3 failed: {_first(res.stderr)}", "repair the Python install")

    async def gpus(self) -> None:
        query = ["nvidia-smi", "--query-gpu=index,memory.total,memory.used", "--format=csv,noheader"]
        res = await self.target.run(query, timeout=30)
        need = self.s.required_gpus()
        if res.exit_code == COMMAND_NOT_FOUND:
            self.add(
                "gpus",
                CheckStatus.WARNING,
                f"cannot count GPUs: nvidia-smi is not available in {self.target.name} ({need} needed)",
                "on a GPU machine give the container GPU access (--gpus all, NVIDIA Container Toolkit)",
            )
            return
        if res.exit_code != 0:
            self.add(
                "gpus",
                CheckStatus.ERROR,
                f"nvidia-smi failed: {_first(res.stdout + res.stderr)}",
                "check the NVIDIA driver and the container's GPU access",
            )
            return
        rows = [[p.strip() for p in line.split(",")] for line in res.stdout.splitlines() if line.strip()]
        count = len(rows)
        busy = [r[0] for r in rows if len(r) == 3 and _busy(r[1], r[2])]
        if count < need:
            self.add(
                "gpus",
                CheckStatus.ERROR,
                f"{count} GPU(s) visible, {need} required ({self.s.mode.value})",
                "lower TRAINER_GPUS/ROLLOUT_GPUS/N_GPUS or pick a target with more GPUs",
            )
        else:
            self.add("gpus", CheckStatus.OK, f"{count} GPU(s) visible, {need} required")
        if busy:
            self.add(
                "gpu memory",
                CheckStatus.WARNING,
                f"GPU(s) {', '.join(busy)} already have memory in use",
                "another job may be running there; stop it or expect out-of-memory errors",
            )

    async def ray_gpus(self) -> None:
        """A Ray cluster: GPUs from Ray's own resource table (nvidia-smi on the head says nothing of workers)."""
        assert isinstance(self.target, RayTarget)
        if self.s.mode is Mode.DAPO:
            pools = [("trainer+rollout colocated", self.s.colocated_gpus)]
        else:
            pools = [("trainer", self.s.trainer_gpus), ("rollout", self.s.rollout_gpus)]
        for name, status, detail, fix in assess(await self.target.resources(), pools, RAY_RUNNER_CPUS[self.s.mode]):
            self.add(name, CheckStatus(status), detail, fix)

    async def verl(self) -> None:
        home = self.s.verl_home
        if not (await self.target.paths_exist([home]))[home]:
            self.add(
                "verl",
                CheckStatus.ERROR,
                f"VERL_HOME {home} does not exist in {self.target.name}",
                f"mount a verl checkout at {home} or set VERL_HOME",
            )
            return
        version_file = posixpath.join(home, "verl/version/version")
        source = ""
        if (await self.target.paths_exist([version_file]))[version_file]:
            self.verl_version = (await self.target.read_tail(version_file, 64)).decode("utf-8", "replace").strip()
            source = version_file
        elif self.has_python:
            res = await self.target.run(["python3", "-c", _VERSION_SCRIPT], cwd=home, timeout=30)
            self.verl_version = res.stdout.strip() if res.exit_code == 0 and res.stdout.strip() else None
            source = "installed package"
        if not self.verl_version:
            self.add(
                "verl",
                CheckStatus.ERROR,
                f"no verl found at {home} (no verl/version/version, no installed package)",
                f"mount a verl source checkout at {home}, then `pip install --no-deps -e .` there",
            )
            return
        self.add("verl", CheckStatus.OK, f"verl {self.verl_version} ({source})")
        wanted = self.s.verl_version
        if wanted and _release(wanted) != _release(self.verl_version):
            self.add(
                "verl version",
                CheckStatus.WARNING,
                f"VERL_VERSION says {wanted} but the target has {self.verl_version}",
                "unset VERL_VERSION (the detected version is used) or mount the matching checkout",
            )

    async def entry(self) -> None:
        home = self.s.verl_home
        files, problem = entry_files(home, self.s.mode, self.verl_version)
        if problem:
            self.add("verl version", CheckStatus.ERROR, problem, "use a supported verl release")
        found = await self.target.paths_exist(files)
        present = [p for p in files if found[p]]
        name = "dapo recipe" if self.s.mode is Mode.DAPO else "one-step-off module"
        if present:
            self.add(name, CheckStatus.OK, present[0])
            return
        release = _release(self.verl_version)
        if self.s.mode is Mode.DAPO and (release is None or release >= (0, 7, 1)):
            fix = f"recipe/ is a git submodule since verl v0.7.1: run `git submodule update --init --recursive recipe` in {home}"
        elif self.s.mode is Mode.DAPO:
            fix = "use a verl source checkout: `pip install verl` never ships recipe/"
        else:
            fix = "use a verl source checkout whose release matches (one-step-off moved to verl/experimental in 0.7.1)"
        detail = f"{' or '.join(files)} missing (verl {self.verl_version or 'unknown'})"
        self.add(name, CheckStatus.ERROR, detail, fix)

    async def hydra(self) -> None:
        res = await self.target.run(["python3", "-c", _HYDRA_SCRIPT], timeout=30)
        if res.exit_code == 0:
            self.add("hydra", CheckStatus.OK, f"hydra-core {res.stdout.strip()}")
        else:
            self.add(
                "hydra",
                CheckStatus.ERROR,
                f"hydra is not importable: {_first(res.stderr) or _first(res.stdout)}",
                "pip install 'hydra-core>=1.3,<1.4' (a verl dependency)",
            )

    async def data(self) -> None:
        items = [
            ("MODEL_PATH", self.s.resolved_model_path(), "download the model there or set MODEL_PATH"),
            ("TRAIN_FILE", self.s.resolved_train_file(), "put the training parquet there or set TRAIN_FILE"),
            ("VAL_FILE", self.s.resolved_val_file(), "put the validation parquet there or set VAL_FILE"),
        ]
        reward_fn = self.s.resolved_reward_fn_path()
        if reward_fn:  # verl imports it only when the reward manager starts: minutes into the run
            items.append(("REWARD_FN_PATH", reward_fn, "copy the reward function file there or fix REWARD_FN_PATH"))
        found = await self.target.paths_exist([p for _, p, _ in items])
        for name, path, fix in items:
            if found[path]:
                self.add(name, CheckStatus.OK, path)
            else:
                self.add(name, CheckStatus.ERROR, f"{path} does not exist in {self.target.name}", fix)

    async def disk(self) -> None:
        home = self.s.verl_home
        ckpt = self.s.ckpt_dir or "checkpoints"
        ckpt = ckpt if ckpt.startswith("/") else posixpath.join(home, ckpt)
        ancestors = [ckpt]
        while ancestors[-1] != "/":
            ancestors.append(posixpath.dirname(ancestors[-1]))
        found = await self.target.paths_exist(ancestors)
        where = next(p for p in ancestors if found[p] or p == "/")
        res = await self.target.run(["df", "-Pk", "--", where], timeout=30)
        lines = res.stdout.strip().splitlines()
        fields = lines[-1].split() if res.exit_code == 0 and len(lines) >= 2 else []
        if len(fields) < 4 or not fields[3].isdigit():
            self.add("disk", CheckStatus.WARNING, f"cannot read free space at {where}: {_first(res.stderr)}")
            return
        free = int(fields[3]) * 1024
        detail = f"{free / GIB:.1f} GiB free at {where} (checkpoints: {ckpt})"
        fix = "free space or point CKPT_DIR at a larger disk"
        if free < DISK_ERROR_BYTES:
            self.add("disk", CheckStatus.ERROR, detail, fix)
        elif free < DISK_WARN_BYTES:
            self.add("disk", CheckStatus.WARNING, detail, fix + " (checkpoints of 8B+ models take tens of GiB)")
        else:
            self.add("disk", CheckStatus.OK, detail)


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]


def _busy(total: str, used: str) -> bool:
    """'81920 MiB', '1 MiB' (nvidia-smi csv with units)."""
    try:
        return float(used.split()[0]) > GPU_BUSY_FRACTION * float(total.split()[0])
    except ValueError:
        return False


async def run_preflight(target: Target, settings: TrainingSettings) -> PreflightReport:
    """Every check, one line each; stops early only when the target itself is unreachable."""
    pf = _Preflight(target, settings)
    report = PreflightReport(target=target.name, checks=pf.checks)
    try:
        await target.ensure_running()
    except (RayAuthError, RayTokenError) as exc:  # the message says which token to set where
        pf.add("target", CheckStatus.ERROR, str(exc), "give this tool the cluster's token, then retry")
        return report
    except TargetError as exc:
        pf.add("target", CheckStatus.ERROR, str(exc), "start the container or choose another target")
        return report
    pf.add("target", CheckStatus.OK, f"{target.name} is reachable and running")
    await pf.guarded("python3", pf.python)
    await pf.guarded("gpus", pf.ray_gpus if isinstance(target, RayTarget) else pf.gpus)
    await pf.guarded("verl", pf.verl)
    if any(c.name == "verl" and c.status is CheckStatus.OK for c in pf.checks):
        await pf.guarded("entry", pf.entry)
    if pf.has_python:
        await pf.guarded("hydra", pf.hydra)
    await pf.guarded("data", pf.data)
    await pf.guarded("disk", pf.disk)
    report.verl_version = pf.verl_version
    return report
