"""Progress parsing: tqdm, verl's metrics lines, ETA, SwanLab URL, resume; chunked = one-shot."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verl_async_dapo.logs.progress import (
    ProgressParser,
    parse_interval,
    parse_metrics_line,
    parse_progress,
    parse_rate,
)

CORPUS = Path(__file__).parent / "corpus"  # real logs, first line naming their source (test_logs_corpus.py)
# Hand-written in verl's log formats in round 1, before the real corpus: not real logs, kept because they pin the
# rules' edges (priorities, wrappers, traps) that no public log we found shows alone.
SYNTHETIC = Path(__file__).parent / "synthetic"


def _log(name: str) -> Path:
    return CORPUS / name if (CORPUS / name).exists() else SYNTHETIC / name


TR = "\x1b[36m(TaskRunner pid=1423)\x1b[0m "
RUN_URL = "https://swanlab.cn/@alice/verl-dapo/runs/cm9x7k2p10abc123def456"


def test_metrics_line_values_in_every_printed_form() -> None:
    line = (
        "step:12 - actor/pg_loss:np.float64(-0.0123) - actor/lr:1e-06 - train/num_gen_batches:5 - "
        "critic/score/mean:0.125 - actor/grad_norm:nan - perf/x:inf - perf/y:-inf - flag/on:True - flag/off:False - "
        "val-core/aime-2024/acc/mean@32:np.float64(0.19) - count:np.int64(7) - global_seqlen/min:484245.000"
    )
    parsed = parse_metrics_line(line)
    assert parsed is not None
    step, metrics = parsed
    assert step == 12
    assert metrics["actor/pg_loss"] == pytest.approx(-0.0123)
    assert metrics["actor/lr"] == pytest.approx(1e-6)
    assert metrics["train/num_gen_batches"] == 5 and isinstance(metrics["train/num_gen_batches"], int)
    assert metrics["critic/score/mean"] == 0.125
    assert math.isnan(metrics["actor/grad_norm"])
    assert metrics["perf/x"] == math.inf and metrics["perf/y"] == -math.inf
    assert metrics["flag/on"] is True and metrics["flag/off"] is False
    assert metrics["val-core/aime-2024/acc/mean@32"] == pytest.approx(0.19)
    assert metrics["count"] == 7
    assert metrics["global_seqlen/min"] == 484245.0
    assert "step" not in metrics


@pytest.mark.parametrize(
    "line",
    [
        "training/global_step:12 - x:1",
        "Saving checkpoint at step:3 of the run",
        "no metrics here",
        "step:abc - x:1",
    ],
)
def test_lines_that_are_not_metrics_lines(line: str) -> None:
    assert parse_metrics_line(line) is None


def test_tqdm_time_and_rate_formats() -> None:
    assert parse_interval("10:00") == 600
    assert parse_interval("1:13:20") == 4400
    assert parse_interval("26:00:01") == 93601
    assert parse_interval("2 days, 1:00:00") == 176400
    assert parse_interval("?") is None
    assert parse_rate("50.00s/it") == 50.0
    assert parse_rate("2.00it/s") == 0.5
    assert parse_rate("?it/s") is None


def test_tqdm_bar_alone_gives_step_total_percent_and_its_eta() -> None:
    snap = parse_progress(TR + "\rTraining Progress:  12%|█▏        | 12/100 [10:00<1:13:20, 50.00s/it]")
    assert (snap.step, snap.total_steps) == (12, 100)
    assert snap.percent == 12.0
    assert snap.eta_seconds == 4400
    assert snap.seconds_per_step == 50.0
    assert snap.metrics == {} and snap.metrics_step is None


def test_step_lines_are_authoritative_when_tqdm_lags() -> None:
    text = "\n".join(
        [
            TR + "Total training steps: 100",
            TR + "step:5 - timing_s/step:np.float64(40.0) - actor/pg_loss:np.float64(0.1)",
            TR + "\rTraining Progress:   5%|▌         | 5/100 [03:20<1:03:20, 40.00s/it]",
            TR + "step:6 - timing_s/step:np.float64(60.0) - actor/pg_loss:np.float64(0.2)",
        ]
    )
    snap = parse_progress(text)
    assert snap.step == 6 and snap.metrics_step == 6
    assert snap.metrics == {"timing_s/step": 60.0, "actor/pg_loss": 0.2}  # the latest line only
    assert snap.percent == 6.0
    # tqdm says 5/100: its remaining time is stale, so (100 - 6) × mean(40, 60).
    assert snap.seconds_per_step == 50.0
    assert snap.eta_seconds == 94 * 50.0


def test_tqdm_eta_is_used_when_it_agrees_with_the_step_lines() -> None:
    text = (
        TR + "step:5 - timing_s/step:np.float64(40.0)\n"
        + TR + "\rTraining Progress:   5%|▌         | 5/100 [03:20<1:00:00, 40.00s/it]\n"
    )  # fmt: skip
    assert parse_progress(text).eta_seconds == 3600


def test_unknown_tqdm_remaining_falls_back_to_step_times() -> None:
    text = (
        TR + "Total training steps: 10\n"
        + TR + "step:1 - timing_s/step:30\n"
        + TR + "\rTraining Progress:  10%|█         | 1/10 [00:30<?, ?it/s]"
    )  # fmt: skip
    snap = parse_progress(text)
    assert snap.eta_seconds == 9 * 30.0
    assert snap.seconds_per_step == 30.0


def test_finished_run_has_zero_eta_and_full_percent() -> None:
    text = TR + "Total training steps: 3\n" + TR + "step:3 - timing_s/step:10.0\n"
    snap = parse_progress(text)
    assert (snap.percent, snap.eta_seconds) == (100.0, 0.0)


def test_mean_step_time_uses_only_recent_steps() -> None:
    lines = [f"step:{n} - timing_s/step:{1000.0 if n == 1 else 10.0}" for n in range(1, 8)]
    snap = parse_progress("Total training steps: 100\n" + "\n".join(lines) + "\n")
    assert snap.seconds_per_step == 10.0
    assert snap.eta_seconds == 93 * 10.0


def test_swanlab_greeting_wrapped_by_rich_onto_the_next_line() -> None:
    text = (
        TR + "\x1b[1m\x1b[34mswanlab\x1b[0m\x1b[0m: 📁 View project at \x1b[4mhttps://swanlab.cn/@alice/verl-dapo\x1b[0m\n"
        + TR + "\x1b[1m\x1b[34mswanlab\x1b[0m\x1b[0m: 🚀 View run \x1b[33mdapo-qwen2.5-7b\x1b[0m at \n"
        + TR + f"\x1b[4m\x1b[34m{RUN_URL}\x1b[0m\n"
    )  # fmt: skip
    snap = parse_progress(text)
    assert snap.swanlab_url == RUN_URL
    assert snap.swanlab_project_url == "https://swanlab.cn/@alice/verl-dapo"
    assert snap.swanlab_run_name == "dapo-qwen2.5-7b"


def test_swanlab_greeting_on_one_line() -> None:
    url = "http://10.0.0.5:8000/@bob/proj/runs/abc123"
    snap = parse_progress(f"swanlab: 🚀 View run my run at {url}\n")
    assert snap.swanlab_url == url
    assert snap.swanlab_project_url == "http://10.0.0.5:8000/@bob/proj"
    assert snap.swanlab_run_name == "my run"


def test_a_line_that_is_not_a_url_after_the_greeting_sets_nothing() -> None:
    snap = parse_progress("swanlab: 🚀 View run x at \nsomething else\nhttps://later.example/runs/1\n")
    assert snap.swanlab_url is None


@pytest.mark.parametrize(
    "line",
    [
        "Load from checkpoint folder: /ckpts/dapo/global_step_40",
        "Setting global step to 40",
        "Resuming from /ckpts/dapo/global_step_40",
        "INFO:verl.trainer:Setting global step to 40",
    ],
)
def test_resume_lines(line: str) -> None:
    snap = parse_progress("Training from scratch\n" + TR + line + "\n")
    assert snap.resumed_from_step == 40
    assert snap.training_from_scratch is False


def test_from_scratch() -> None:
    snap = parse_progress(TR + "Checkpoint tracker file does not exist: /x\n" + TR + "Training from scratch\n")
    assert snap.training_from_scratch is True and snap.resumed_from_step is None


def test_empty_log_knows_nothing() -> None:
    assert parse_progress("").to_dict() == {
        "step": None,
        "total_steps": None,
        "percent": None,
        "eta_seconds": None,
        "seconds_per_step": None,
        "metrics": {},
        "metrics_step": None,
        "swanlab_url": None,
        "swanlab_project_url": None,
        "swanlab_run_name": None,
        "resumed_from_step": None,
        "training_from_scratch": False,
        "phase": None,
        "phase_since": None,
        "eta_basis": None,
        "tracker_skipped": False,
        "parsing_cut_short": False,
        "startup_marks": [],
        "training_since": None,
        "save_checkpoint_seconds": None,
        "steady_seconds_per_step": None,
        "steady_steps": 0,
    }


def test_to_dict_is_json_safe_for_a_diverged_loss() -> None:
    import json

    data = parse_progress("step:3 - actor/pg_loss:np.float64(nan) - a:inf - b:-inf - c:1\n").to_dict()
    assert data["metrics"] == {"actor/pg_loss": "nan", "a": "inf", "b": "-inf", "c": 1}
    json.dumps(data, allow_nan=False)


def test_corpus_run_in_progress() -> None:
    snap = parse_progress(_log("none__healthy_in_progress_tqdm_tail.log").read_text())
    assert snap.step == 6 and snap.total_steps == 279
    assert snap.seconds_per_step == 50.0  # mean of 49 and 51
    assert snap.eta_seconds == (279 - 6) * 50.0  # tqdm shows 5/279: stale
    assert snap.swanlab_url == RUN_URL
    assert snap.training_from_scratch is True
    assert snap.metrics["critic/score/mean"] == -0.53


def test_partial_last_line_is_read_by_snapshot_but_kept_for_the_next_chunk() -> None:
    parser = ProgressParser()
    parser.feed("Total training steps: 100\nstep:7 - timing_s/step:1")
    assert parser.snapshot().metrics == {"timing_s/step": 1}
    parser.feed("2.5\n")
    snap = parser.snapshot()
    assert snap.metrics == {"timing_s/step": 12.5}
    assert snap.seconds_per_step == 12.5  # the cut value 1 never counted


def _progress_texts() -> list[str]:
    names = [
        "none__healthy_in_progress_tqdm_tail.log",
        "none__healthy_dapo_bloom_room_zoom.log",
        "missing_file__file_not_found__checkpoint_errno2.log",
    ]
    texts = [_log(name).read_text() for name in names]
    texts.append(texts[0].replace("\n", "\r\n"))
    return texts


PROGRESS_TEXTS = _progress_texts()


@settings(max_examples=150, deadline=None)
@given(
    which=st.integers(min_value=0, max_value=len(PROGRESS_TEXTS) - 1),
    cuts=st.lists(st.floats(min_value=0, max_value=1, allow_nan=False), max_size=40),
)
def test_property_any_chunking_gives_the_one_shot_result(which: int, cuts: list[float]) -> None:
    text = PROGRESS_TEXTS[which]
    positions = sorted({int(cut * len(text)) for cut in cuts})
    parser = ProgressParser()
    previous = 0
    for position in [*positions, len(text)]:
        parser.feed(text[previous:position])
        parser.snapshot()  # snapshots in between must not disturb the state
        previous = position
    assert parser.snapshot().to_dict() == parse_progress(text).to_dict()


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("step:1 -\r\n0.9eTrainingProgress%|/[]<>,?itsnaf(")), max_size=300))
def test_property_arbitrary_text_never_crashes_and_chunking_agrees(text: str) -> None:
    parser = ProgressParser()
    for index in range(0, len(text), 7):
        parser.feed(text[index : index + 7])
    assert parser.snapshot().to_dict() == parse_progress(text).to_dict()
