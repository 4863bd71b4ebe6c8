"""Benchmark 4: what supervising costs while a healthy run writes a step every few seconds.

Measured on benchmark 1's run (the stand-in writing a step every 3 s into a log that by then is 1 GiB, or whatever
the largest size was): CPU seconds (utime+stime from /proc) of the supervisor process over the window, and of the
``tail --pid -F`` it keeps running inside the container (host /proc, pid from ``docker top``). In the same window
the original skill's loop is emulated inside the container — ``kill -0`` the job and its case-insensitive OOM grep
over the whole log every 30 s — and its CPU read with the shell's ``times`` builtin (the shell and its children).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from docker.models.containers import Container

from bench import common
from bench.common import State

ORIGINAL_POLL_S = 30
# The original loop (run_dapo.sh: poll every 30 s with `kill -0` and check_oom), for $1 seconds against pgid $2.
ORIGINAL_LOOP = (
    'end=$(( $(date +%s) + $1 )); while [ "$(date +%s)" -lt "$end" ]; do kill -0 "$2" 2>/dev/null; '
    f"grep -qiE 'out of memory|OOM' {common.LOG_LINK}; "
    f'left=$(( end - $(date +%s) )); [ "$left" -gt {ORIGINAL_POLL_S} ] && left={ORIGINAL_POLL_S}; '
    '[ "$left" -gt 0 ] && sleep "$left"; done; times'
)


@dataclass
class IdleBench:
    window_s: float
    supervisor_cpu_s: float
    tail_cpu_s: float | None
    original_cpu_s: float | None
    log_bytes: int
    steps_in_window: int | None

    def per_minute(self, cpu_s: float | None) -> float | None:
        return None if cpu_s is None else cpu_s * 60.0 / self.window_s

    def percent_core(self, cpu_s: float | None) -> float | None:
        return None if cpu_s is None else 100.0 * cpu_s / self.window_s

    def summary(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "log_bytes": self.log_bytes,
            "steps_in_window": self.steps_in_window,
            "supervisor_cpu_s_per_min": self.per_minute(self.supervisor_cpu_s),
            "supervisor_pct_core": self.percent_core(self.supervisor_cpu_s),
            "follow_tail_cpu_s_per_min": self.per_minute(self.tail_cpu_s),
            "original_loop_cpu_s_per_min": self.per_minute(self.original_cpu_s),
            "original_loop_pct_core": self.percent_core(self.original_cpu_s),
        }


def _tail_host_pid(container: Container) -> int | None:
    """Host pid of the supervisor's `tail --pid=… -F` inside the container (docker top shows host pids)."""
    top = container.top(ps_args="-eo pid,args")
    for row in top.get("Processes") or []:
        if len(row) >= 2 and row[1].startswith("tail --pid=") and " -F " in row[1]:
            return int(row[0])
    return None


def _times_cpu(text: str) -> float | None:
    """Sum of the `times` builtin's two lines (shell, children): `0m0.01s 0m0.02s`."""
    values = re.findall(r"(\d+)m([\d.]+)s", text)
    if len(values) < 4:
        return None
    return sum(int(m) * 60 + float(s) for m, s in values[:4])


def _step(state: State, run_id: str) -> int | None:
    ctx = state.ctx()
    try:
        row = ctx.store.run(run_id)
        return (row.progress or {}).get("step") if row else None
    finally:
        ctx.close()


def measure(state: State, container: Container, run_id: str, seconds: float = 60.0) -> IdleBench:
    pid = common.supervisor_pid(state, run_id)
    if pid is None:
        raise RuntimeError("no live supervisor to measure")
    pgid = common.job_pgid(container, state, run_id)
    tail_pid = _tail_host_pid(container)
    log_bytes = int(common.sh_output(container, f"stat -L -c %s {common.LOG_LINK}").strip())
    original: dict[str, Any] = {}

    def original_loop() -> None:
        result = container.exec_run(["sh", "-c", ORIGINAL_LOOP, "original-loop", str(int(seconds)), str(pgid)])
        original["out"] = (result.output or b"").decode("utf-8", "replace")

    common.log(f"idle: supervisor pid {pid}, follow tail pid {tail_pid}, {seconds:g} s window, log {log_bytes} bytes")
    step0 = _step(state, run_id)
    cpu0 = common.proc_cpu_seconds(pid)
    tail0 = common.proc_cpu_seconds(tail_pid) if tail_pid else None
    began = time.monotonic()
    worker = threading.Thread(target=original_loop, daemon=True)
    worker.start()
    time.sleep(seconds)
    cpu1 = common.proc_cpu_seconds(pid)
    tail1 = common.proc_cpu_seconds(tail_pid) if tail_pid else None
    window = time.monotonic() - began
    step1 = _step(state, run_id)
    worker.join(timeout=ORIGINAL_POLL_S + 60)
    return IdleBench(
        window_s=window,
        supervisor_cpu_s=cpu1 - cpu0,
        tail_cpu_s=(tail1 - tail0) if tail0 is not None and tail1 is not None else None,
        original_cpu_s=_times_cpu(original.get("out", "")),
        log_bytes=log_bytes,
        steps_in_window=(step1 - step0) if step0 is not None and step1 is not None else None,
    )
