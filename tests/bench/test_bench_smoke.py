"""Keeps bench/ from rotting: its harness functions on the smallest sizes (a 2 MiB log, 2 OOM reactions, one
validation), against the real Docker Engine and the test image. It checks that each benchmark runs and measures
what it says; it asserts no absolute time and no target (the numbers are bench/RESULTS.md's business, from
`bash bench/run.sh`). The cold-start benchmark is left out: it needs mcp-server-git from the package index.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import b1_progress, b2_oom, b4_idle, b5_prelaunch, common, report  # noqa: E402

pytestmark = pytest.mark.docker


def test_progress_and_idle_on_a_2_mib_log(test_image: str) -> None:
    def idle(state: common.State, container: object, run_id: str) -> b4_idle.IdleBench:
        return b4_idle.measure(state, container, run_id, seconds=2.0)  # type: ignore[arg-type]

    bench = b1_progress.run(test_image, {"2 MiB": 2 << 20}, reps_fast=3, reps_slow=1, after=idle)
    (size,) = bench.results
    assert size.size >= 2 << 20
    assert set(size.samples) == {
        "theirs: grep | tail -1", "ours fresh: get_progress", "ours fresh: CLI status --json",
        "ours stale: get_progress", "ours stale: CLI status --json",
    }  # fmt: skip
    assert all(s.values and all(v > 0 for v in s.values) for s in size.samples.values())
    assert size.checks["fresh"]["tail_reads"] == 0 and size.checks["stale"]["tail_reads"] == 1
    assert size.checks["agree"]["same"], size.checks
    assert isinstance(bench.after, b4_idle.IdleBench) and bench.after.supervisor_cpu_s >= 0
    text = report.render({"machine": common.machine(), "command": "smoke", "head": "smoke", "elapsed_s": 1.0,
                          "progress": bench, "idle": bench.after})  # fmt: skip
    assert "## 1. Progress on big logs" in text and "## 4. Supervisor idle cost" in text


def test_oom_reaction_two_relaunches(test_image: str) -> None:
    bench = b2_oom.measure(test_image, samples=2)
    assert len(bench.reactions) == 2
    for reaction in bench.reactions:
        assert reaction.next_started_at > reaction.oom_at  # the stamps are ordered, from one clock
        assert reaction.exited_at is not None and reaction.oom_at <= reaction.exited_at <= reaction.next_started_at


def test_prelaunch_rejection_once(test_image: str) -> None:
    bench = b5_prelaunch.run(test_image, reps=1)
    assert "ppo_micro_batch_size_per_gpus" in bench.ours_error
    assert "ppo_micro_batch_size_per_gpus" in bench.theirs_error
    assert len(bench.ours.values) == len(bench.theirs.values) == 1


def test_notify_latency_and_hang_flag_once(test_image: str) -> None:
    from bench import b6_notify

    bench = b6_notify.measure(test_image, samples=1, hang_runs=1, window_s=2.0, relaunches=1)
    assert len(bench.latencies) == 1 and bench.latencies[0] > 0  # the webhook arrived after the traceback
    (flag,) = bench.hang_flags
    assert flag >= 2.0  # never before the configured window
    assert "## 6. Notifications and hang detection" in "\n".join(b6_notify.section(bench))
