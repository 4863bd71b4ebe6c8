"""The evidence bundle of a stalled attempt, read from its target: the log's last lines, GPU utilisation and
memory (nvidia-smi), the job's processes, and ``py-spy dump`` of its Python processes when py-spy is there.

"The job's processes" are its process group *and every descendant*: Ray gives its workers (``ray::WorkerDict``, the
trainer) process groups of their own under the raylet, and a descendant may even start a session of its own. Stopped
processes (state T) are named on their own line. py-spy dumps go to the processes that explain a hang, most telling
first (``dump_order``): stopped ones, the driver (``main_dapo`` / ``main_ppo``), ``ray::…TaskRunner``, ``ray::WorkerDict``,
then Ray's other actors; never Ray's own background processes (raylet, gcs_server, the autoscaler monitor, the
dashboard and its agents, log_monitor, idle workers), which are in every job's tree and idle in every hang. (On the
H200 hang, bench/gpu/results/hang, the SIGSTOPped worker was one row of 40, and the three py-spy dumps went to the
driver, ``gcs_server`` and Ray's autoscaler monitor.) A stopped process is dumped with ``--nonblocking``: py-spy
otherwise ptrace-suspends its target, which fails for a process already in state T (there, exit 1 and no stack).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.logs.text import clean_line, split_lines, strip_ansi
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import Target

LOG_TAIL_BYTES = 8 << 10
LOG_LINES = 30
MAX_DUMPS = 3
PY_SPY_HINT = ("py-spy is not installed in the target: `pip install py-spy` there, then "
               "`py-spy dump --pid <trainer pid>` shows where each thread is stuck")  # fmt: skip
PS_ARGV = ["ps", "-eo", "pid=,ppid=,pgid=,stat=,etime=,pcpu=,rss=,args="]
MAX_PROCESSES = 40
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader"]


async def _run(target: Target, argv: list[str], timeout: float = 20.0) -> tuple[int, str]:
    try:
        result = await target.run(argv, timeout=timeout)
    except TargetError as exc:
        return 127, f"could not run {argv[0]}: {exc}"
    return result.exit_code, (result.stdout + result.stderr).strip()


def gpu_summary(nvidia_smi_csv: str) -> str | None:
    """'0: 0 %, 61000/81559 MiB; 1: …' from nvidia-smi's CSV; None if it is not that CSV."""
    parts = []
    for line in nvidia_smi_csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4 and cells[0].isdigit():
            parts.append(f"GPU{cells[0]} {cells[1]}, {cells[2]}/{cells[3]}")
    return "; ".join(parts) or None


def log_lines(tail: str) -> list[str]:
    """The log's last lines as a person reads them: no terminal colours, no lines that are only a Ray prefix.

    Ray's prefix itself stays: in a hang, which process printed last is evidence.
    """
    lines = [strip_ansi(line).rstrip() for line in split_lines(tail)]
    return [line for line in lines if clean_line(line).strip()][-LOG_LINES:]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    stat: str
    line: str  # "pid stat etime pcpu rss args", as the evidence shows it

    @property
    def args(self) -> str:
        return self.line.split(None, 5)[5] if len(self.line.split(None, 5)) == 6 else ""

    @property
    def stopped(self) -> bool:
        return self.stat.startswith("T")  # T: stopped by a signal (SIGSTOP, a debugger), t: by tracing

    @property
    def is_python(self) -> bool:
        program = self.args.split(" ", 1)[0].rsplit("/", 1)[-1]  # not the path: Ray's raylet lives in …/python3.12/…
        return program.startswith("python") or self.args.startswith("ray::")  # Ray workers retitle as ray::Class


def parse_ps(text: str) -> list[Proc]:
    """Rows of ``ps -eo pid=,ppid=,pgid=,stat=,etime=,pcpu=,rss=,args=`` (malformed rows are skipped)."""
    procs = []
    for row in text.splitlines():
        cells = row.split(None, 7)
        if len(cells) == 8 and all(c.isdigit() for c in cells[:3]):
            pid, ppid, pgid = (int(c) for c in cells[:3])
            procs.append(Proc(pid, ppid, pgid, cells[3], " ".join([cells[0], *cells[3:]])))
    return procs


def job_tree(procs: list[Proc], pgid: int) -> list[Proc]:
    """The group's processes and all their descendants, in ps order (Ray workers leave the group, not the tree)."""
    children: dict[int, list[int]] = {}
    for proc in procs:
        children.setdefault(proc.ppid, []).append(proc.pid)
    members = {proc.pid for proc in procs if proc.pgid == pgid}
    todo = list(members)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in members:
                members.add(child)
                todo.append(child)
    return [proc for proc in procs if proc.pid in members]


# Ray's own processes: in every job's tree, idle in every hang (the H200 hang's ps rows, bench/gpu/results/hang).
_RAY_BACKGROUND = ("/ray/autoscaler/", "/ray/dashboard/", "ray-dashboard-", "/ray/_private/log_monitor.py",
                   "/ray/_private/runtime_env/", "ray::IDLE", "ray::DashboardAgent", "ray::RuntimeEnvAgent",
                   "ray::_StatsActor", "multiprocessing.resource_tracker", "multiprocessing.forkserver")  # fmt: skip
_DRIVERS = ("main_dapo", "main_ppo", "main_grpo", "verl.trainer.main")


def is_ray_background(proc: Proc) -> bool:
    args = proc.args
    program = args.split(" ", 1)[0].rsplit("/", 1)[-1]
    return program in ("raylet", "gcs_server") or any(marker in args for marker in _RAY_BACKGROUND)


def dump_rank(proc: Proc) -> int:
    """0 most telling: stopped; then the driver, the TaskRunner, a WorkerDict, another Ray actor, any other Python."""
    title = proc.args.split(" ", 1)[0]
    if proc.stopped:
        return 0
    if any(name in proc.args for name in _DRIVERS) and not title.startswith("ray::"):
        return 1
    if title.startswith("ray::") and "TaskRunner" in title:
        return 2
    if title.startswith("ray::WorkerDict"):
        return 3
    return 4 if title.startswith("ray::") else 5


def dump_order(tree: list[Proc]) -> list[int]:
    """Python processes worth a py-spy dump, most telling first (``dump_rank``); Ray's background processes never."""
    python = [proc for proc in tree if proc.is_python and not is_ray_background(proc)]
    return [p.pid for p in sorted(python, key=dump_rank)]  # sorted is stable: ps order within a rank


def py_spy_argv(proc: Proc) -> list[str]:
    """``--nonblocking`` for a stopped process: py-spy cannot ptrace-suspend what is already stopped."""
    return ["py-spy", "dump", *(["--nonblocking"] if proc.stopped else []), "--pid", str(proc.pid)]


async def collect(target: Target, handle: JobHandle, pgid: int | None) -> dict[str, Any]:
    bundle: dict[str, Any] = {}
    try:
        tail = (await target.read_tail(handle.log_path, LOG_TAIL_BYTES)).decode("utf-8", errors="replace")
        bundle["last_log_lines"] = log_lines(tail)
    except TargetError as exc:
        bundle["last_log_lines"] = [f"could not read the log: {exc}"]
    code, out = await _run(target, GPU_QUERY)
    bundle["nvidia_smi"] = out[-2000:] if code == 0 else f"nvidia-smi unavailable (exit {code}): {out[-300:]}"
    bundle["gpu_util"] = gpu_summary(out) if code == 0 else None
    to_dump: list[Proc] = []
    if pgid is not None:
        code, out = await _run(target, PS_ARGV)
        if code == 0:
            tree = job_tree(parse_ps(out), pgid)
            bundle["processes"] = [proc.line for proc in tree][:MAX_PROCESSES]
            stopped = [proc.line for proc in tree if proc.stopped]
            if stopped:
                bundle["stopped_processes"] = stopped[:10]
            by_pid = {proc.pid: proc for proc in tree}
            to_dump = [by_pid[pid] for pid in dump_order(tree)]
        else:
            bundle["processes"] = [f"ps failed (exit {code}): {out[-300:]}"]
    else:
        bundle["processes"] = ["the job's process group is unknown"]
    code, _ = await _run(target, ["py-spy", "--version"], timeout=10)
    if code != 0:
        bundle["py_spy"] = PY_SPY_HINT
    else:
        dumps = []
        for proc in to_dump[:MAX_DUMPS]:
            argv = py_spy_argv(proc)
            code, out = await _run(target, argv, timeout=30)
            dumps.append(f"--- {' '.join(argv)} (exit {code}) ---\n{out[-4000:]}")
        bundle["py_spy"] = "\n".join(dumps) or "no Python process found in the job's processes"
    return bundle
