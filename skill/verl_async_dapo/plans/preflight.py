"""Checks against a target before a launch (the Hydra dry-run of the overrides is ``prelaunch``).

Probing beats version arithmetic: we look at what is really inside the target (files, python,
hydra, GPUs, disk) and never import verl there (that needs torch/CUDA and takes a minute).
Each check yields one line with a fix, so the agent can relay it without interpretation.
"""

from __future__ import annotations

import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from verl_async_dapo.exceptions import NvidiaSmiError, TargetError, VersionError
from verl_async_dapo.features import FeatureChoice
from verl_async_dapo.memory import parse_gpu_csv
from verl_async_dapo.memory.gpus import GPU_QUERY_ARGV, GpuMemory
from verl_async_dapo.plans import preflight_files
from verl_async_dapo.plans.preflight_megatron import ENGINE_CONFIG, PROBE_SCRIPT, megatron_findings, parse_probe
from verl_async_dapo.plans.preflight_memory import MemoryResult, memory_checks
from verl_async_dapo.plans.preflight_paths import LAYOUT_VERSIONS, KnownPaths, checkpoint_ancestors, version_file
from verl_async_dapo.plans.preflight_python import PROBE_TRIES, PYTHON_SCRIPT, PythonProbe, parse_python_probe
from verl_async_dapo.settings import Framework, Mode, TrainingSettings
from verl_async_dapo.targets.base import COMMAND_NOT_FOUND, Target, TargetKind
from verl_async_dapo.targets.ray import RayTarget
from verl_async_dapo.targets.ray.api import RayAuthError
from verl_async_dapo.targets.ray.auth import RayTokenError
from verl_async_dapo.targets.ray.resources import assess
from verl_async_dapo.targets.slurm import SlurmTarget
from verl_async_dapo.verl.profiles import profile_for_version
from verl_async_dapo.verl.versions import VerlVersion
from verl_async_dapo.wording import Face, Say, Term, Text, render, setting

GIB = 1 << 30
DISK_WARN_BYTES = 50 * GIB
DISK_ERROR_BYTES = 5 * GIB
_GPU_COUNTS = Term(mcp="trainer_gpus / rollout_gpus (start_training arguments; or TRAINER_GPUS / ROLLOUT_GPUS / N_GPUS "
                        "in the server's environment)", cli="TRAINER_GPUS / ROLLOUT_GPUS / N_GPUS")  # fmt: skip
# The no-GPU allowance is question 1's answer (select_container), not a start_training argument: the advice says
# where it goes, then to start again (issue 28: "pass allow_no_gpus=true" shown by start_training made agents loop).
_ALLOW_NO_GPUS = Term(mcp="the user's explicit choice: answer select_container again with allow_no_gpus=true (an "
                          "argument of select_container), then start_training", cli="pass --allow-no-gpus")  # fmt: skip
# Ray CPUs verl's driver-side runner actor requests (verl.md §4): OneStepTaskRunner num_cpus=10.
RAY_RUNNER_CPUS = {Mode.DAPO: 1, Mode.ONE_STEP_OFF: 10}

_VERSION_SCRIPT = "import importlib.metadata as m; print(m.version('verl'))"


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
    fix: Text | None = None  # may name a tool argument / CLI flag: rendered for the face that shows it

    def line(self, face: Face = Face.MCP) -> str:
        text = f"{_TAGS[self.status]} {self.name}: {self.detail}"
        fix = render(self.fix, face)
        return f"{text} → {fix}" if fix and self.status is not CheckStatus.OK else text

    def to_dict(self, face: Face = Face.MCP) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail, "fix": render(self.fix, face)}


@dataclass
class PreflightReport:
    target: str
    checks: list[Check] = field(default_factory=list)
    verl_version: str | None = None  # as detected inside the target
    memory: MemoryResult | None = None  # the GPU-memory fit and its fix (None: no GPUs seen, or a Ray target)

    @property
    def ok(self) -> bool:
        return not any(c.status is CheckStatus.ERROR for c in self.checks)

    @property
    def errors(self) -> list[Check]:
        return [c for c in self.checks if c.status is CheckStatus.ERROR]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if c.status is CheckStatus.WARNING]

    def lines(self, face: Face = Face.MCP) -> list[str]:
        return [c.line(face) for c in self.checks]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self, face: Face = Face.MCP) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "verl_version": self.verl_version,
            "checks": [c.to_dict(face) for c in self.checks],
            "memory": self.memory.to_dict() if self.memory else None,
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
            {profile_for_version(v).entry(mode).module for v in LAYOUT_VERSIONS},
            reverse=True,
        )
    return [posixpath.join(verl_home, m.replace(".", "/") + ".py") for m in modules], problem


class _Preflight:
    """One run: holds the target, the settings and what earlier checks found out."""

    def __init__(self, target: Target, settings: TrainingSettings, allow_no_gpus: bool = False,
                 features: FeatureChoice | None = None) -> None:  # fmt: skip
        self.target = target
        self.s = settings
        self.allow_no_gpus = allow_no_gpus
        self.features = features  # the session's answer; None = USER_FEATURES / ENABLE_OFFLOAD
        self.memory: MemoryResult | None = None
        self.checks: list[Check] = []
        self.has_python = False
        self.python_path = ""  # sys.executable of the target's python3: the checks name the Python they used
        self.probe: PythonProbe | None = None  # what the python3 check's interpreter said (hydra included)
        self.verl_version: str | None = None
        self.paths = KnownPaths(target)  # paths_exist, one question for every check's paths (preflight_paths)

    def _on_host(self) -> bool:
        """Advice differs: a host needs something installed, a container needs it mounted or in its image."""
        return self.target.kind in (TargetKind.HOST, TargetKind.SLURM)  # SLURM: installed on the login node

    def add(self, name: str, status: CheckStatus, detail: str, fix: Text | None = None) -> None:
        self.checks.append(Check(name, status, detail, fix))

    async def guarded(self, name: str, fn: Callable[[], Awaitable[None]]) -> None:
        """One failing probe (a timeout, a vanished container) must not hide the other checks."""
        try:
            await fn()
        except TargetError as exc:
            self.add(name, CheckStatus.ERROR, f"could not check: {exc}", "make sure the target is running")

    async def ask_paths_first(self) -> None:
        """Every path the checks below name, in one question. The entry module and its config are asked for both
        layouts (the version that picks one is read later)."""
        home = self.s.verl_home
        entry_candidates, _ = entry_files(home, self.s.mode, None)
        configs = [c[0] for v in LAYOUT_VERSIONS if (c := preflight_files.config_file(self.s, v))]
        data = [p for _, p, _ in self._data_items()]
        engine = [posixpath.join(home, ENGINE_CONFIG)] if self.s.framework is Framework.MEGATRON else []
        await self.paths.ask_first([home, version_file(home), *entry_candidates, *configs, *data, *engine,
                                    *checkpoint_ancestors(self.s)[1]])  # fmt: skip

    async def python(self) -> None:
        for _ in range(PROBE_TRIES):  # exit 0 with nothing printed: an answer Docker lost, not a Python without hydra
            res = await self.target.run(["python3", "-c", PYTHON_SCRIPT], timeout=30)
            if res.exit_code != 0 or parse_python_probe(res.stdout).answered:
                break
        if res.exit_code == 0:
            self.has_python = True
            self.probe = parse_python_probe(res.stdout)
            self.python_path = self.probe.executable
            self.add("python3", CheckStatus.OK, f"Python {self.probe.version} ({self.python_path or 'python3'})")
        elif res.exit_code == COMMAND_NOT_FOUND:
            fix = ("install Python 3 on this machine (e.g. apt install python3)" if self._on_host() else
                   "use an image with Python 3 (verl images ship it)")  # fmt: skip
            self.add("python3", CheckStatus.ERROR, "python3 not found", fix)
        else:
            self.add("python3", CheckStatus.ERROR, f"python3 failed: {_first(res.stderr)}", "repair the Python install")

    async def gpus(self) -> None:
        res = await self.target.run(list(GPU_QUERY_ARGV), timeout=30)
        need = self.s.required_gpus()
        on_host = self._on_host()
        if res.exit_code == COMMAND_NOT_FOUND:
            where = "this machine" if on_host else self.target.name
            # Host advice for the host, container advice for a container: the fix differs.
            fix = ("install the NVIDIA driver on this machine (it brings nvidia-smi)" if on_host else
                   "give the container GPU access: recreate it with --gpus all (needs the NVIDIA Container Toolkit)")  # fmt: skip
            self._no_gpus(f"no GPU visible: nvidia-smi is not available in {where} ({need} needed)", fix)
            return
        if res.exit_code != 0:
            self.add(
                "gpus",
                CheckStatus.ERROR,
                f"nvidia-smi failed: {_first(res.stdout + res.stderr)}",
                "check the NVIDIA driver on this machine (nvidia-smi must list the GPUs)" if on_host else
                "check the NVIDIA driver on the Docker host and the container's GPU access (--gpus all)",
            )  # fmt: skip
            return
        found: list[GpuMemory] | None
        unreadable = ""
        try:
            found = parse_gpu_csv(res.stdout)
            count = len(found)
        except NvidiaSmiError as exc:  # e.g. [N/A] memory on some virtual GPUs: still count them
            found, unreadable = None, str(exc)
            count = sum(1 for line in res.stdout.splitlines() if line.strip()[:1].isdigit())
        if count == 0:
            self._no_gpus(f"0 GPU(s) visible, {need} required ({self.s.mode.value})",
                          "pick a target with GPUs (nvidia-smi lists none)")  # fmt: skip
            return
        if count < need:
            self.add("gpus", CheckStatus.ERROR, f"{count} GPU(s) visible, {need} required ({self.s.mode.value})",
                     Say("lower {gpus} or pick a target with more GPUs", gpus=_GPU_COUNTS))  # fmt: skip
            return
        self.add("gpus", CheckStatus.OK, f"{count} GPU(s) visible, {need} required")
        if found is None:
            self.add("gpu memory", CheckStatus.WARNING, f"cannot judge the fit: {unreadable}",
                     "check `nvidia-smi --query-gpu=memory.free --format=csv` in the target")  # fmt: skip
            return
        memory = await memory_checks(self.target, self.s, found, self.features)
        self.memory = memory
        for name, status, detail, fix in memory.checks:
            self.add(name, CheckStatus(status), detail, fix)

    def _no_gpus(self, detail: str, fix: str) -> None:
        """Training cannot run without GPUs: an error, unless the user explicitly allowed it (a CPU-only stand-in)."""
        if self.allow_no_gpus:
            self.add("gpus", CheckStatus.WARNING, f"{detail}; allowed (allow_no_gpus)", fix)
        else:
            self.add("gpus", CheckStatus.ERROR, detail,
                     Say("{fix}; training needs GPUs (only to run without any: {allow})", fix=fix,
                         allow=_ALLOW_NO_GPUS))  # fmt: skip

    async def ray_gpus(self) -> None:
        """A Ray cluster: GPUs from Ray's own resource table (nvidia-smi on the head says nothing of workers)."""
        assert isinstance(self.target, RayTarget)
        if self.s.mode is Mode.DAPO:
            pools = [("trainer+rollout colocated", self.s.colocated_gpus)]
        else:
            pools = [("trainer", self.s.trainer_gpus), ("rollout", self.s.rollout_gpus)]
        for name, status, detail, fix in assess(await self.target.resources(), pools, RAY_RUNNER_CPUS[self.s.mode]):
            self.add(name, CheckStatus(status), detail, fix)

    async def slurm_job(self) -> None:
        """A SLURM target: the job's options against the scheduler, GPUs as the job asks for them (preflight_slurm)."""
        from verl_async_dapo.plans.preflight_slurm import slurm_checks

        assert isinstance(self.target, SlurmTarget)
        checks, no_gpus = await slurm_checks(self.target, self.s)
        for name, status, detail, fix in checks:
            self.add(name, CheckStatus(status), detail, fix)
        if no_gpus:
            self._no_gpus(f"the job asks SLURM for no GPU ({self.s.required_gpus()} needed)",
                          "give slurm_gpus_per_node (or VAD_SLURM_GPUS_PER_NODE) and a partition with GPUs")  # fmt: skip

    async def verl(self) -> None:
        home = self.s.verl_home
        vfile = version_file(home)
        found = await self.paths.exist([home, vfile])
        if not found[home]:
            self.add(
                "verl",
                CheckStatus.ERROR,
                f"VERL_HOME {home} does not exist in {self.target.name}",
                Say("{how} or set {v}", v=setting("VERL_HOME", "verl_home"),
                    how=f"clone verl to {home} on this machine (git clone https://github.com/verl-project/verl)"
                    if self._on_host() else f"mount a verl checkout at {home} (docker run -v HOST_DIR:{home})"),
            )
            return
        source = ""
        if found[vfile]:
            self.verl_version = (await self.target.read_tail(vfile, 64)).decode("utf-8", "replace").strip()
            source = vfile
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
                Say("{unset} (the detected version is used) or mount the matching checkout",
                    unset=Term(mcp="omit the start_training argument verl_version (and VERL_VERSION in the server's "
                                   "environment)", cli="unset VERL_VERSION")),
            )

    async def entry(self) -> None:
        home = self.s.verl_home
        files, problem = entry_files(home, self.s.mode, self.verl_version)
        if problem:
            self.add("verl version", CheckStatus.ERROR, problem, "use a supported verl release")
        config = preflight_files.config_file(self.s, self.verl_version)
        found = await self.paths.exist([*files, *([config[0]] if config else [])])
        present = [p for p in files if found[p]]
        name = "dapo recipe" if self.s.mode is Mode.DAPO else "one-step-off module"
        if present:
            self.add(name, CheckStatus.OK, present[0])
            line = preflight_files.config_line(self.s, self.verl_version, found)
            if line is not None:
                self.add("recipe config", CheckStatus(line[0]), line[1], line[2])
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

    def hydra(self) -> None:
        """From the python3 check's probe (the same interpreter training runs with: the entry is `python3 -m …`)."""
        python = self.python_path or "python3"
        probe = self.probe
        if probe is not None and probe.hydra_version:
            self.add("hydra", CheckStatus.OK, f"hydra-core {probe.hydra_version} (in {python})")
        else:
            why = probe.hydra_error if probe is not None else "not probed"
            self.add("hydra", CheckStatus.ERROR, f"hydra is not importable by {python}: {why}",
                     f"{python} -m pip install 'hydra-core>=1.3,<1.4' (a verl dependency)")  # fmt: skip

    async def megatron(self) -> None:
        res = await self.target.run(["python3", "-c", PROBE_SCRIPT], timeout=60)
        found = parse_probe(res.stdout) if res.exit_code == 0 else None
        if found is None:
            self.add("megatron stack", CheckStatus.WARNING, f"could not probe: {_first(res.stderr or res.stdout)}")
            return
        path = posixpath.join(self.s.verl_home, ENGINE_CONFIG)
        yaml = (await self.target.read_tail(path, 16384)).decode("utf-8", "replace") if (
            await self.paths.exist([path]))[path] else None  # fmt: skip
        # A warning, not a refusal: the probe looks the pieces up by name, and a stack installed another way (a
        # source build of TE in its own layout) must not be blocked; a real gap fails in init_model, minutes later.
        for f in megatron_findings(found, self.s.extra_overrides, yaml):
            self.add(f.name, CheckStatus.OK if f.ok else CheckStatus.WARNING, f.detail, f.fix)

    def _data_items(self) -> list[tuple[str, str, Text]]:
        """(variable, path, fix) of each file the run reads: the model, the data, a custom reward function."""
        items: list[tuple[str, str, Text]] = [
            ("MODEL_PATH", self.s.resolved_model_path(),
             Say("download the model there or set {v}", v=setting("MODEL_PATH", "model_path"))),
            ("TRAIN_FILE", self.s.resolved_train_file(),
             Say("put the training parquet there or set {v}", v=setting("TRAIN_FILE", "train_file"))),
            ("VAL_FILE", self.s.resolved_val_file(),
             Say("put the validation parquet there or set {v}", v=setting("VAL_FILE", "val_file"))),
        ]
        reward_fn = self.s.resolved_reward_fn_path()
        if reward_fn:  # verl imports it only when the reward manager starts: minutes into the run
            items.append(("REWARD_FN_PATH", reward_fn, "copy the reward function file there or fix REWARD_FN_PATH"))
        return items

    async def data(self) -> None:
        items = self._data_items()
        found = await self.paths.exist([p for _, p, _ in items])
        inside = await preflight_files.contents(self.target, self.s, [(n, p) for n, p, _ in items if found[p]])
        for name, path, fix in items:
            if not found[path]:
                self.add(name, CheckStatus.ERROR, f"{path} does not exist in {self.target.name}", fix)
                continue
            status, detail, fix = inside.get(name, ("ok", path, None))
            self.add(name, CheckStatus(status), detail, fix)

    async def disk(self) -> None:
        ckpt, ancestors = checkpoint_ancestors(self.s)
        found = await self.paths.exist(ancestors)
        where = next(p for p in ancestors if found[p] or p == "/")
        res = await self.target.run(["df", "-Pk", "--", where], timeout=30)
        lines = res.stdout.strip().splitlines()
        fields = lines[-1].split() if res.exit_code == 0 and len(lines) >= 2 else []
        if len(fields) < 4 or not fields[3].isdigit():
            self.add("disk", CheckStatus.WARNING, f"cannot read free space at {where}: {_first(res.stderr)}")
            return
        free = int(fields[3]) * 1024
        detail = f"{free / GIB:.1f} GiB free at {where} (checkpoints: {ckpt})"
        fix = "free space or point {v} at a larger disk"
        if free < DISK_ERROR_BYTES:
            self.add("disk", CheckStatus.ERROR, detail, Say(fix, v=setting("CKPT_DIR", "ckpt_dir")))
        elif free < DISK_WARN_BYTES:
            self.add("disk", CheckStatus.WARNING, detail,
                     Say(fix + " (checkpoints of 8B+ models take tens of GiB)", v=setting("CKPT_DIR", "ckpt_dir")))  # fmt: skip
        else:
            self.add("disk", CheckStatus.OK, detail)


def _first(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]


async def detect_verl_version(target: Target, settings: TrainingSettings) -> str | None:
    """Only the version read of the verl check (what ``start --skip-preflight`` still needs): None when the target
    has no verl at VERL_HOME. Skipping the checks must not skip this, or a skipped preflight refuses to start."""
    pf = _Preflight(target, settings)
    await target.ensure_running()
    res = await target.run(["python3", "-c", "print(1)"], timeout=30)
    pf.has_python = res.exit_code == 0
    await pf.verl()
    return pf.verl_version


async def run_preflight(target: Target, settings: TrainingSettings, features: FeatureChoice | None = None, *,
                        allow_no_gpus: bool = False) -> PreflightReport:  # fmt: skip
    """Every check, one line each; stops early only when the target itself is unreachable.

    ``allow_no_gpus``: no visible GPU is a warning instead of an error (the user asked for it explicitly).
    """
    pf = _Preflight(target, settings, allow_no_gpus, features)
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
    await pf.ask_paths_first()
    await pf.guarded("python3", pf.python)
    gpu_check = pf.ray_gpus if isinstance(target, RayTarget) else pf.slurm_job if isinstance(target, SlurmTarget) else pf.gpus
    await pf.guarded("gpus", gpu_check)
    await pf.guarded("verl", pf.verl)
    if any(c.name == "verl" and c.status is CheckStatus.OK for c in pf.checks):
        await pf.guarded("entry", pf.entry)
    if pf.has_python:
        pf.hydra()
    if pf.has_python and settings.framework is Framework.MEGATRON:
        await pf.guarded("megatron stack", pf.megatron)
    await pf.guarded("data", pf.data)
    await pf.guarded("disk", pf.disk)
    report.verl_version = pf.verl_version
    report.memory = pf.memory
    return report
