"""Start-up phases and the wall-clock ETA (issue #14, items 2 and 3), on the real H200 logs (verl 0.9.1 + vLLM
0.24.0; tests/logs/real/, first line names the source) replayed line by line with an arrival clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_async_dapo.logs.phases import Phase
from verl_async_dapo.logs.progress import (
    ETA_TIMING,
    ETA_TQDM,
    ETA_WALL,
    ProgressParser,
    parse_metrics_line,
    parse_progress,
)
from verl_async_dapo.logs.snapshot import ProgressSnapshot, startup_breakdown
from verl_async_dapo.logs.text import clean_line

REAL = Path(__file__).resolve().parent / "real"
HEALTHY = "dapo-fsdp-healthy-6-steps.log"
RELAUNCHED = "dapo-fsdp-after-relaunch-gpu-util-0.5-attempt2.log"
STARTUP_OOM = "dapo-fsdp-vllm-startup-memory-attempt1.log"
STARTUP = [Phase.STARTING, Phase.STARTING_RAY, Phase.LOADING_MODEL, Phase.ROLLOUT_STARTUP, Phase.WARMUP]


def _replay(name: str, seconds_per_line: float = 0.5) -> tuple[list[str], list[ProgressSnapshot]]:
    """Feed the log a line at a time, line i arriving at t = i * seconds_per_line; every phase change's snapshot."""
    lines = (REAL / name).read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines[0].startswith("source: verl-async-dapo H200 run, verl 0.9.1 + vLLM 0.24.0, 2026-12-01")
    parser, phases, shots = ProgressParser(), [Phase.STARTING.value], []
    for i, line in enumerate(lines):
        parser.feed(line, now=i * seconds_per_line)
        shot = parser.snapshot()
        if shot.phase != phases[-1]:
            phases.append(shot.phase)  # type: ignore[arg-type]
            shots.append(shot)
    return phases, shots


@pytest.mark.parametrize(("name", "total"), [(HEALTHY, 6), (RELAUNCHED, 4)])
def test_real_runs_parse_to_n_of_n_with_their_phases(name: str, total: int) -> None:
    final = parse_progress((REAL / name).read_text(encoding="utf-8"))
    assert (final.step, final.total_steps, final.percent, final.eta_seconds) == (total, total, 100.0, 0.0)
    last_line = [line for line in (REAL / name).read_text(encoding="utf-8").splitlines() if "m step:" in line][-1]
    parsed = parse_metrics_line(clean_line(last_line))
    assert parsed is not None and parsed[0] == total
    assert final.metrics_step == total and final.metrics == parsed[1] and len(final.metrics) > 100
    assert final.training_from_scratch is True
    phases, _ = _replay(name)
    assert phases[:5] == [p.value for p in STARTUP]
    assert phases[5] == Phase.TRAINING.value and phases[-1] == Phase.FINISHING.value
    # save_freq=2 / test_freq=2: each even step saves, then validates, then prints its metrics line.
    inner = phases[5:-1]
    assert inner.count(Phase.SAVING_CHECKPOINT.value) == total // 2
    assert inner.count(Phase.VALIDATION.value) == total // 2
    assert set(inner) == {Phase.TRAINING.value, Phase.SAVING_CHECKPOINT.value, Phase.VALIDATION.value}


def test_the_real_startup_failure_ends_in_rollout_engine_startup() -> None:
    phases, shots = _replay(STARTUP_OOM)
    assert phases == [p.value for p in STARTUP[:4]]
    snap = parse_progress((REAL / STARTUP_OOM).read_text(encoding="utf-8"))
    assert (snap.step, snap.total_steps, snap.phase) == (None, 4, Phase.ROLLOUT_STARTUP.value)
    assert shots[-1].phase_since is not None and shots[-1].phase_since > 0  # when the first vLLM line arrived


def test_wall_clock_eta_excludes_the_warm_up_and_includes_checkpoint_time() -> None:
    text = (REAL / HEALTHY).read_text(encoding="utf-8")
    step_lines = [i for i, line in enumerate(text.splitlines()) if "m step:" in line]
    parser = ProgressParser()
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines[: step_lines[2] + 1]):  # up to and including step 3's metrics line
        parser.feed(line, now=1000.0 + i)
    snap = parser.snapshot()
    assert snap.step == 3 and snap.eta_basis == ETA_WALL
    per_step = (step_lines[2] - step_lines[0]) / 2  # seconds between step 1's and step 3's lines
    assert snap.seconds_per_step == pytest.approx(per_step)
    assert snap.eta_seconds == pytest.approx(3 * per_step, abs=0.1)
    # The ~1000 lines of start-up before step 1 (the warm-up) are not in the rate.
    assert snap.seconds_per_step < step_lines[0] / 10


def test_text_without_arrival_times_falls_back_and_says_on_what() -> None:
    text = (REAL / HEALTHY).read_text(encoding="utf-8")
    snap = parse_progress(text[: text.index("m step:4")])  # a tail read later: no arrival times
    # tqdm's bar has caught up with step 3 ("3/6 [00:47<00:34, 11.66s/it]"): its wall-clock estimate is used.
    assert (snap.step, snap.eta_seconds, snap.eta_basis, snap.phase_since) == (3, 34.0, ETA_TQDM, None)
    lagging = parse_progress("Total training steps: 6\nstep:1 - timing_s/step:40.0\nstep:2 - timing_s/step:2.0\n")
    assert (lagging.eta_basis, lagging.seconds_per_step, lagging.eta_seconds) == (ETA_TIMING, 21.0, 84.0)


def test_a_backlog_then_live_lines_rate_only_from_live_ones() -> None:
    parser = ProgressParser()
    parser.feed("Total training steps: 10\nstep:1 - timing_s/step:5.0\nstep:2 - timing_s/step:5.0\n")  # backlog
    parser.feed("step:3 - timing_s/step:5.0\n", now=100.0)
    assert parser.snapshot().eta_basis == ETA_TIMING  # one timed line: no wall rate yet
    parser.feed("step:2 - timing_s/step:5.0\n", now=150.0)  # a re-read older line does not count twice
    parser.feed("step:4 - timing_s/step:5.0\n", now=120.0)
    snap = parser.snapshot()
    assert (snap.eta_basis, snap.seconds_per_step, snap.eta_seconds) == (ETA_WALL, 20.0, 120.0)


@pytest.mark.parametrize(("name", "primary"), [(HEALTHY, None), (RELAUNCHED, None),
                                               (STARTUP_OOM, ("rollout_oom", "vllm_startup_memory"))])  # fmt: skip
def test_real_runs_classify_as_healthy_or_the_startup_share(name: str, primary: tuple[str, str] | None) -> None:
    from verl_async_dapo.logs.classify import classify

    found = classify((REAL / name).read_text(encoding="utf-8")).primary
    assert (None if found is None else (found.category.value, found.kind)) == primary


def test_the_start_up_is_broken_down_by_phase_from_arrival_times() -> None:
    """Issue 31 item 2, on the real healthy H200 log: each start-up phase from its marker's arrival to the next's,
    the warm-up until the first step's line; nothing after that is start-up."""
    lines = (REAL / HEALTHY).read_text(encoding="utf-8").splitlines(keepends=True)
    parser = ProgressParser()
    arrivals: dict[str, float] = {}
    first_step_at = None
    for i, line in enumerate(lines):
        parser.feed(line, now=1000.0 + i)
        arrivals.setdefault(parser.snapshot().phase or "", 1000.0 + i)
        if first_step_at is None and parse_metrics_line(clean_line(line)) is not None:
            first_step_at = 1000.0 + i  # the first step's metrics line (tqdm's bar can come a little earlier)
    final = parser.snapshot()
    assert [p for p, _ in final.startup_marks] == [p.value for p in STARTUP]
    assert [since for _, since in final.startup_marks] == [arrivals[p.value] for p in STARTUP]
    assert final.training_since == first_step_at
    phases = startup_breakdown(final.startup_marks, final.training_since, now=99_999.0)  # ended: `now` is unused
    marks = [since for _, since in final.startup_marks] + [first_step_at]
    assert phases == [(p.value, marks[i + 1] - marks[i]) for i, p in enumerate(STARTUP)]
    assert sum(s for _, s in phases) == first_step_at - 1000.0  # the first line arrived at 1000: all of it


def test_an_open_start_up_phase_counts_until_now_and_a_backlog_has_none() -> None:
    parser = ProgressParser()
    parser.feed("ray init kwargs: {'num_cpus': None}\n", now=10.0)
    parser.feed("2026-12-01 10:00:00,123\tINFO worker.py:1879 -- Started a local Ray instance.\n", now=14.0)
    shot = parser.snapshot()
    assert [p for p, _ in shot.startup_marks] == ["starting Ray", "loading model"] and shot.training_since is None
    assert startup_breakdown(shot.startup_marks, None, now=20.0) == [("starting Ray", 4.0), ("loading model", 6.0)]
    backlog = parse_progress((REAL / HEALTHY).read_text(encoding="utf-8"))  # a tail read later: no arrival times
    assert backlog.startup_marks == () and backlog.training_since is None
    assert ProgressSnapshot(startup_marks=(("loading model", 1.0),), training_since=3.5).to_dict()["startup_marks"] == [
        ["loading model", 1.0]]  # fmt: skip
