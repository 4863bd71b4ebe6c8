"""Benchmark 6: how fast the user hears of trouble with nobody watching, and how fast a hang is flagged.

Notification latency: real runs (`verl-async-dapo start` → detached supervisor → the stand-in in a container)
with `{"oom_at_step": 1, "oom_unless": []}` and MAX_OOM_RETRIES=3, a generic webhook configured
(`VAD_NOTIFY_WEBHOOK_URL`) pointing at a real HTTP server on 127.0.0.1 (tests/notify/notify_services.py). Each
relaunch is one `oom_recovery` notification; its latency is from the OOM traceback (the attempt log's mtime:
the traceback is the last thing the stand-in writes; the container shares this machine's clock) to the
webhook request arriving. Baseline: the original skill notices an OOM only on its 30 s poll (and tells no one):
30 s is its worst case, 15 s its expected wait.

Hang flag: the stand-in hangs (alive, printing nothing) at step 3 with `VAD_STALL_MIN_SECONDS` = W; the time
from the log's last write to the `run_stalled` webhook arriving, against W (the configured window).
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

from bench import common
from bench.common import Sample, fmt_ratio, fmt_s

sys.path.insert(0, str(common.BENCH_DIR.parent / "tests" / "notify"))
from notify_services import services

OOM_CONTROL = {"oom_at_step": 1, "oom_unless": [], "step_seconds": 0.2}
HANG_CONTROL = {"hang": True, "fail_at_step": 3, "step_seconds": 0.2}
ORIGINAL_POLL_S = 30.0
TARGET_S = 2.0


@dataclass
class NotifyBench:
    latencies: list[float] = field(default_factory=list)
    hang_window_s: float = 0.0
    hang_flags: list[float] = field(default_factory=list)  # last log write → run_stalled arrival

    @property
    def sample(self) -> Sample:
        return Sample("oom_recovery notification", self.latencies)

    def hang_ratio(self) -> float | None:
        return statistics.median(self.hang_flags) / self.hang_window_s if self.hang_flags else None


def _arrivals(hook: Any, kind: str, run_id: str) -> list[float]:
    return [r.at for r in hook.of("webhook") if r.json().get("event") == kind and r.json().get("run_id") == run_id]


def measure(image: str, samples: int = 9, hang_runs: int = 2, window_s: float = 5.0,
            relaunches: int = 3) -> NotifyBench:  # fmt: skip
    """``relaunches``: OOM relaunches per run (MAX_OOM_RETRIES), each one notification sampled."""
    bench = NotifyBench(hang_window_s=window_s)
    with services() as hook, common.bench_container(image, prefix="vad-bench-notify") as container:
        env = {"TRAIN_STEPS": "6", "MAX_OOM_RETRIES": str(relaunches), "VAD_NOTIFY_WEBHOOK_URL": hook.url("webhook")}
        with common.isolated_state(**env) as state:
            common.write_control(container, OOM_CONTROL)
            while len(bench.latencies) < samples:
                run_id = common.start_run(state, container)
                try:
                    common.wait_for(lambda rid=run_id: common.run_status(state, rid) in ("succeeded", "failed", "stopped"),
                                    180, f"run {run_id} to end", interval=0.25)  # fmt: skip
                    common.wait_for(lambda rid=run_id: len(_arrivals(hook, "oom_recovery", rid)) >= relaunches, 30,
                                    f"{relaunches} notifications")  # fmt: skip
                finally:
                    common.stop_run(state, run_id)
                spec, attempts = common.read_run(state, run_id)
                logs = [f"{spec['run_dir']}/attempt-{n}/train.log" for n, _ in attempts[:-1]]
                times = common.mtime_ns(container, logs)
                arrived = sorted(_arrivals(hook, "oom_recovery", run_id))
                for path, at in zip(logs, arrived, strict=False):
                    if times.get(path):
                        bench.latencies.append(at - times[path])  # type: ignore[operator]
                common.log(f"notify run {run_id}: " + ", ".join(f"{x:.3f}s" for x in bench.latencies[-3:]))
        bench.latencies = bench.latencies[:samples]
        hang_env = {**env, "VAD_STALL_MIN_SECONDS": f"{window_s:g}", "VAD_STALL_STARTUP_SECONDS": "120"}
        with common.isolated_state(**hang_env) as state:
            common.write_control(container, HANG_CONTROL)
            for _ in range(hang_runs):
                run_id = common.start_run(state, container)
                try:
                    common.wait_for(lambda rid=run_id: _arrivals(hook, "run_stalled", rid), 120, "the stall notification")
                    spec, attempts = common.read_run(state, run_id)
                    log_path = f"{spec['run_dir']}/attempt-{attempts[-1][0]}/train.log"
                    last_write = common.mtime_ns(container, [log_path])[log_path]
                    bench.hang_flags.append(_arrivals(hook, "run_stalled", run_id)[0] - last_write)  # type: ignore[operator]
                    common.log(f"hang run {run_id}: flagged {bench.hang_flags[-1]:.2f} s after the last output")
                finally:
                    common.stop_run(state, run_id)
    return bench


def summary_rows(bench: NotifyBench, row: Any, ok: Any) -> list[str]:
    median = bench.sample.median
    rows = [row(6, f"OOM log line → webhook request (median of {len(bench.latencies)})", "< 2 s",
                f"{fmt_s(median)}; {fmt_ratio(ORIGINAL_POLL_S / median)} faster than a 30 s poll", ok(median < TARGET_S))]  # fmt: skip
    ratio = bench.hang_ratio()
    if ratio is not None:
        rows.append(row(6, f"hang flagged, ÷ the configured window ({bench.hang_window_s:g} s)", "(reported)",
                        f"{fmt_ratio(ratio)} ({fmt_s(statistics.median(bench.hang_flags))})", "—"))  # fmt: skip
    return rows


def section(bench: NotifyBench) -> list[str]:
    s = bench.sample
    lines = [
        "## 6. Notifications and hang detection",
        "",
        (__doc__ or "").split("\n\n", 1)[1].strip().replace("\n", " "),
        "",
        "| what | median | p90 | min | n |",
        "| --- | --- | --- | --- | --- |",
        f"| OOM traceback → webhook request | {fmt_s(s.median)} | {fmt_s(s.p90)} | {fmt_s(s.minimum)} | {len(s.values)} |",
        f"| original skill: its 30 s poll (worst) / expected | {fmt_s(ORIGINAL_POLL_S)} / {fmt_s(ORIGINAL_POLL_S / 2)} | | | |",
    ]
    if bench.hang_flags:
        h = Sample("hang", bench.hang_flags)
        lines.append(f"| hang: last output → run_stalled webhook (window {bench.hang_window_s:g} s) | "
                     f"{fmt_s(h.median)} | {fmt_s(h.p90)} | {fmt_s(h.minimum)} | {len(h.values)} |")  # fmt: skip
    return [*lines, ""]
