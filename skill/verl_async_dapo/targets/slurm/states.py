"""What SLURM says about a job, read from squeue / sacct / sinfo output (pure: no I/O).

Job states are slurm's own names (squeue(1) "JOB STATE CODES"). A job is followed while it is pending or
running; once it ended, the scheduler's reason decides whether the scheduler killed it (time limit, preemption,
node failure, a cancel that was not ours), which is its own error category (categories.SCHEDULER_KILL), or the
job ended by itself (the trainer's exit code then says how).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

QUEUED_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
ACTIVE_STATES = QUEUED_STATES | frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "STAGE_OUT", "SIGNALING",
                                           "STOPPED"})  # fmt: skip
# Ended by the scheduler, not by the program: kind (AttemptError.kind) and what it means.
SCHEDULER_KILLS: dict[str, tuple[str, str]] = {
    "TIMEOUT": ("time_limit", "SLURM ended the job at its time limit"),
    "DEADLINE": ("deadline", "SLURM ended the job at its deadline"),
    "PREEMPTED": ("preempted", "SLURM preempted the job for a higher-priority one"),
    "NODE_FAIL": ("node_fail", "a node of the job failed"),
    "BOOT_FAIL": ("boot_fail", "a node of the job failed to boot"),
    "CANCELLED": ("cancelled", "the job was cancelled outside this tool (scancel by a user or an administrator)"),
}
_JOB_ID_RE = re.compile(r"^(\d{1,12})(?:;[A-Za-z0-9_.-]+)?$")  # sbatch --parsable: "jobid" or "jobid;cluster"


@dataclass(frozen=True)
class JobState:
    state: str  # slurm's state name, e.g. RUNNING, TIMEOUT
    reason: str | None = None  # squeue's %r (why pending, or why it ended)
    exit_code: int | None = None  # sacct's ExitCode (the batch script's), when accounting is on

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def queued(self) -> bool:
        return self.state in QUEUED_STATES


def parse_job_id(stdout: str) -> str | None:
    """The job id from ``sbatch --parsable``'s output."""
    line = next((ln.strip() for ln in stdout.splitlines() if ln.strip()), "")
    match = _JOB_ID_RE.fullmatch(line)
    return match.group(1) if match else None


def check_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not job_id.isascii() or not job_id.isdigit() or len(job_id) > 12:
        raise ValueError(f"not a SLURM job id: {str(job_id)[:30]!r}")
    return job_id


def exit_code_of(text: str) -> int | None:
    """SLURM's ``ExitCode=N:S`` (exit status N, or killed by signal S) as a shell would report it: N, or 128+S."""
    code, _, signal = text.strip().partition(":")
    if signal.isdigit() and int(signal):
        return 128 + int(signal)
    return int(code) if code.isdigit() else None


def _state_word(text: str) -> str:
    # sacct prints "CANCELLED by 0"; squeue prints the bare name.
    return text.strip().split(" ", 1)[0].upper()


def parse_squeue(stdout: str) -> JobState | None:
    """``squeue -h -j ID -t all -o %T|%r`` → the job's state; None when squeue does not list it (any more)."""
    for line in stdout.splitlines():
        state, _, reason = line.strip().partition("|")
        if state:
            return JobState(_state_word(state), reason.strip() or None)
    return None


def parse_sacct(stdout: str) -> JobState | None:
    """``sacct -n -P -X -j ID -o State,ExitCode,Reason`` → the allocation's state and the batch exit code."""
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        if not fields or not fields[0]:
            continue
        code = exit_code_of(fields[1]) if len(fields) > 1 else None
        reason = fields[2].strip() if len(fields) > 2 and fields[2].strip() not in ("", "None") else None
        return JobState(_state_word(fields[0]), reason, code)
    return None


def scheduler_kill(state: JobState, *, stopped_by_us: bool) -> tuple[str, str] | None:
    """(kind, meaning) when the scheduler ended the job; None when it ended by itself or by our own stop."""
    if state.active or (state.state == "CANCELLED" and stopped_by_us):
        return None
    return SCHEDULER_KILLS.get(state.state)


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    available: bool
    nodes: int
    gpus_per_node: int  # the most any node has (0: no GPU GRES)
    time_limit: str

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node} GPU(s)/node" if self.gpus_per_node else "no GPUs"
        star = " (default)" if self.default else ""
        return f"{self.name}{star}: {self.nodes} node(s), {gpus}, limit {self.time_limit}"


_GPU_GRES_RE = re.compile(r"gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")


def gpus_in_gres(gres: str) -> int:
    """GPUs per node from sinfo's %G (``gpu:h100:8(S:0-1)``, ``gpu:4``, ``(null)``)."""
    return max((int(n) for n in _GPU_GRES_RE.findall(gres or "")), default=0)


def parse_sinfo(stdout: str) -> list[Partition]:
    """``sinfo -h -o %P|%a|%D|%G|%l`` → partitions (one line per partition and GRES; merged by name)."""
    found: dict[str, Partition] = {}
    for line in stdout.splitlines():
        fields = line.strip().split("|")
        if len(fields) < 5 or not fields[0]:
            continue
        name, default = fields[0].rstrip("*"), fields[0].endswith("*")
        nodes = int(fields[2]) if fields[2].isdigit() else 0
        gpus = gpus_in_gres(fields[3])
        old = found.get(name)
        if old is not None:
            nodes, gpus = old.nodes + nodes, max(old.gpus_per_node, gpus)
        found[name] = Partition(name, default, fields[1].strip() == "up", nodes, gpus, fields[4].strip())
    return list(found.values())


def sbatch_words(stderr: str) -> str:
    """What ``sbatch --test-only`` said, minus its "sbatch: " prefixes: the scheduler's own words."""
    lines = [ln.strip().removeprefix("sbatch: ").strip() for ln in stderr.splitlines() if ln.strip()]
    return "; ".join(lines)[:600]
