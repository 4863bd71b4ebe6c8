"""The SLURM target's run parameters: their validation and the sbatch command line they become (pure core: no
I/O; settings.py validates with it, targets/slurm/ submits with it).

Every value here reaches sbatch as one argv element (``--partition=gpu``), never as shell text: the batch script
is a fixed file (targets/slurm/script.py). Extra ``#SBATCH`` lines are accepted only in the form
``#SBATCH --key=value`` with a conservative character set, and never for the options this target sets itself
(output, partition, time, …) or that would change how the job is run (``--export``, ``--wrap``, ``--array``).
What sbatch alone knows (a partition that does not exist, GPUs a partition lacks, an account it refuses) is asked
of sbatch itself with ``--test-only`` before submission (targets/slurm/__init__.py), so the refusal carries the
scheduler's own words.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field

from verl_async_dapo.exceptions import SlurmOptionError  # raised here; importable from here too

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# sbatch --time: "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours", "days-hours:minutes",
# "days-hours:minutes:seconds" (sbatch(1)).
_TIME_RE = re.compile(r"^(?:(?P<d>\d{1,3})-(?P<dh>\d{1,2})(?::(?P<dm>\d{1,2})(?::(?P<ds>\d{1,2}))?)?|"
                      r"(?P<a>\d{1,7})(?::(?P<b>\d{1,2})(?::(?P<c>\d{1,2}))?)?)$")  # fmt: skip
_LINE_RE = re.compile(r"^#SBATCH --(?P<key>[a-z][a-z0-9-]{0,39})(?:=(?P<value>[A-Za-z0-9_.,:/@%+=-]{1,200}))?$")
# Set by this target, or changing what the job is (its environment, its command, its output, its count).
RESERVED_KEYS = frozenset({
    "output", "error", "input", "open-mode", "job-name", "partition", "account", "nodes", "ntasks-per-node",
    "gpus-per-node", "time", "export", "export-file", "chdir", "wrap", "array", "parsable", "test-only", "requeue",
    "no-requeue", "hold", "wait", "uid", "gid", "get-user-env", "batch", "help", "usage", "version",
})  # fmt: skip
MAX_LINES = 32
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 64
# Before a job's first checkpoint: its start-up (Ray, model load, rollout engine: ~4 min on the H200, logs/phases.py)
# and save_freq steps (34-41 s a step for DAPO Qwen3-8B on 8 H200s, tests/logs/real); rounded up as defaults.
DEFAULT_STARTUP_SECONDS = 300.0
DEFAULT_STEP_SECONDS = 60.0


def check_name(value: str, what: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise SlurmOptionError(f"{what} {str(value)[:60]!r} is not a SLURM name: letters, digits, '.', '_' or '-' "
                               "(at most 64, not starting with '-')")  # fmt: skip
    return value


def time_limit_seconds(value: str) -> int:
    """sbatch's --time in seconds; SlurmOptionError for anything sbatch would not read the same way."""
    match = _TIME_RE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise SlurmOptionError(f"slurm_time_limit {str(value)[:40]!r} is not a SLURM time: minutes, MM:SS, HH:MM:SS, "
                               "D-HH, D-HH:MM or D-HH:MM:SS")  # fmt: skip
    g = {k: int(v) for k, v in match.groupdict().items() if v is not None}
    if "d" in g:
        seconds = g["d"] * 86400 + g["dh"] * 3600 + g.get("dm", 0) * 60 + g.get("ds", 0)
    elif "c" in g:
        seconds = g["a"] * 3600 + g["b"] * 60 + g["c"]
    else:
        seconds = g["a"] * 60 + g.get("b", 0)
    if seconds < 60:
        raise SlurmOptionError(f"slurm_time_limit {value!r} is under one minute, SLURM's smallest limit")
    return seconds


def sbatch_line_option(line: str) -> str:
    """``#SBATCH --key=value`` → ``--key=value`` (one argv element), or SlurmOptionError saying why not."""
    match = _LINE_RE.fullmatch(line.strip()) if isinstance(line, str) else None
    if match is None:
        raise SlurmOptionError(f"extra line {str(line)[:80]!r} is not of the form '#SBATCH --key=value' (long option, "
                               "value of letters, digits and _.,:/@%+=-)")  # fmt: skip
    if match["key"] in RESERVED_KEYS:
        raise SlurmOptionError(f"extra line {line.strip()!r}: --{match['key']} is set by this tool (use its own "
                               "parameter) or would change how the job runs")  # fmt: skip
    return line.strip().removeprefix("#SBATCH ")


@dataclass(frozen=True)
class SlurmOptions:
    """One attempt's batch-job parameters (None = the cluster's default)."""

    partition: str | None = None
    account: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    time_limit: str | None = None
    extra_lines: tuple[str, ...] = field(default=())
    startup_seconds: float = DEFAULT_STARTUP_SECONDS
    step_seconds: float = DEFAULT_STEP_SECONDS
    ray: bool | None = None  # start Ray across the allocation; None = only for several nodes

    def __post_init__(self) -> None:
        if self.partition is not None:
            check_name(self.partition, "slurm_partition")
        if self.account is not None:
            check_name(self.account, "slurm_account")
        if not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise SlurmOptionError(f"slurm_nodes must be 1..{MAX_NODES}, not {self.nodes!r}")
        if not isinstance(self.gpus_per_node, int) or not 0 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise SlurmOptionError(f"slurm_gpus_per_node must be 0..{MAX_GPUS_PER_NODE}, not {self.gpus_per_node!r}")
        if self.time_limit is not None:
            time_limit_seconds(self.time_limit)
        if self.ray is False and self.nodes > 1:
            raise SlurmOptionError("slurm_start_ray=false needs slurm_nodes=1 (arguments of start_training): several "
                                   "nodes only meet through Ray")
        if len(self.extra_lines) > MAX_LINES:
            raise SlurmOptionError(f"at most {MAX_LINES} extra #SBATCH lines")
        for line in self.extra_lines:
            sbatch_line_option(line)

    @property
    def start_ray(self) -> bool:
        """Ray is started across the allocation for several nodes; on one node, by default, verl's ray.init starts
        its own as on the host target (``ray=True``: ours, which counts the allocation's CPUs and GPUs rather than
        the machine's)."""
        return self.ray if self.ray is not None else self.nodes > 1

    def argv(self, *, job_name: str, log_path: str, cwd: str, script: str, job_dir: str,
             test_only: bool = False) -> list[str]:  # fmt: skip
        """The sbatch command (paths are checked absolute by the caller; the script's one argument is the job dir)."""
        out = ["sbatch", "--test-only" if test_only else "--parsable", f"--job-name={job_name}",
               f"--output={log_path}", "--open-mode=append", "--no-requeue", f"--chdir={cwd}",
               f"--nodes={self.nodes}", "--ntasks-per-node=1", "--export=ALL"]  # fmt: skip
        if self.partition:
            out.append(f"--partition={self.partition}")
        if self.account:
            out.append(f"--account={self.account}")
        if self.gpus_per_node:
            out.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.time_limit:
            out.append(f"--time={self.time_limit.strip()}")
        out += [sbatch_line_option(line) for line in self.extra_lines]
        return [*out, script, job_dir]

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node} GPU(s) per node" if self.gpus_per_node else "no GPUs requested"
        return (f"partition {self.partition or '(default)'}, {self.nodes} node(s), {gpus}, "
                f"time limit {self.time_limit or '(partition default)'}")  # fmt: skip


def default_gpus_per_node(required_gpus: int, nodes: int) -> int:
    """The run's GPUs spread over its nodes (verl wants the same count on each: trainer.n_gpus_per_node)."""
    return math.ceil(required_gpus / max(nodes, 1))


def checkpoint_estimate_seconds(opts: SlurmOptions, save_freq: int) -> float:
    """Seconds from the job's start to its first checkpoint, by the options' estimates."""
    return opts.startup_seconds + save_freq * opts.step_seconds


def time_limit_problem(opts: SlurmOptions, save_freq: int) -> str | None:
    """Why the time limit is too short to reach one checkpoint (a requeue from it would start at step 0 again)."""
    if opts.time_limit is None:
        return None
    limit = time_limit_seconds(opts.time_limit)
    need = checkpoint_estimate_seconds(opts, save_freq)
    if limit >= need:
        return None
    return (f"time limit {opts.time_limit} ({limit} s) is shorter than one checkpoint interval by the estimate: "
            f"start-up {opts.startup_seconds:g} s + save_freq {save_freq} x {opts.step_seconds:g} s a step = "
            f"{need:g} s; the job would end before its first checkpoint, and every requeue would start again at "
            "step 0")  # fmt: skip


def job_name_for(job_dir: str) -> str:
    """Readable and unique per attempt dir: ``vad-<run>-<attempt>-<hash>`` (found again by name after a restart)."""
    parts = [p for p in job_dir.rstrip("/").split("/") if p][-2:]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", "-".join(parts))[:60].strip("_-") or "job"
    return f"vad-{slug}-{hashlib.sha256(job_dir.encode()).hexdigest()[:10]}"


def options_from_values(**kw: object) -> SlurmOptions:
    """SlurmOptions from keyword values (None = default), raising SlurmOptionError."""
    clean = {k: v for k, v in kw.items() if v is not None}
    if "extra_lines" in clean:
        clean["extra_lines"] = tuple(clean["extra_lines"])  # type: ignore[arg-type]
    return SlurmOptions(**clean)  # type: ignore[arg-type]


def options_from_settings(settings: object) -> SlurmOptions:
    """The run's SLURM options from its TrainingSettings (``slurm_*`` fields; GPUs per node default to the run's
    GPUs spread over its nodes)."""
    s = settings
    nodes = getattr(s, "slurm_nodes", None) or 1
    gpus = getattr(s, "slurm_gpus_per_node", None)
    if gpus is None:
        gpus = default_gpus_per_node(s.required_gpus(), nodes)  # type: ignore[attr-defined]
    return options_from_values(
        partition=getattr(s, "slurm_partition", None), account=getattr(s, "slurm_account", None), nodes=nodes,
        gpus_per_node=gpus, time_limit=getattr(s, "slurm_time_limit", None),
        extra_lines=tuple(getattr(s, "slurm_sbatch_lines", ()) or ()),
        startup_seconds=getattr(s, "slurm_startup_seconds", None), step_seconds=getattr(s, "slurm_step_seconds", None),
        ray=getattr(s, "slurm_start_ray", None),
    )  # fmt: skip
