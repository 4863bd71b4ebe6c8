"""Lines glued together on one physical line (issue 26 item 4): tqdm's redraw ends without a newline, so the next
line printed — a Ray-prefixed ``step:N - …`` metrics line, another process's output — lands on the bar's line:
``… 6/10 [00:06<00:01, 2.50it/s](TaskRunner pid=196) step:7 - …``. Each glued line is read as a line of its own,
so a run that finished 10/10 is reported at 10/10, not at the last step whose line happened to start a line."""

from __future__ import annotations

import re
from pathlib import Path

from verl_async_dapo.logs.classify import classify
from verl_async_dapo.logs.progress import ProgressParser, parse_progress
from verl_async_dapo.logs.series import parse_series
from verl_async_dapo.logs.text import clean_log_lines, split_glued

REAL = Path(__file__).parent / "real"
TR = "\x1b[36m(TaskRunner pid=196)\x1b[0m "


def _bar(n: int, total: int) -> str:
    return f"\rTraining Progress: {100 * n // total:3d}%|█         | {n}/{total} [00:0{n}<00:01,  2.50it/s]"


def _glued_run(total: int, glued_from: int) -> str:
    """The shape seen end to end over MCP on a container: steps before ``glued_from`` start a line of their own,
    from it on each metrics line is glued after the bar's newline-less redraw."""
    out = [f"{TR}Total training steps: {total}\n", f"{TR}{_bar(0, total)}\n"]
    for step in range(1, total + 1):
        line = f"{TR}step:{step} - actor/pg_loss:np.float64({-step / 100}) - timing_s/step:0.4\n"
        out.append(line)
        out.append(f"{TR}{_bar(step, total)}" + ("" if step + 1 >= glued_from else "\n"))
    out.append(f"{TR}('Final validation metrics: None')\n")
    return "".join(out)


def test_a_finished_run_whose_step_lines_are_glued_after_the_bar_ends_at_its_last_step() -> None:
    text = _glued_run(10, glued_from=7)
    assert "2.50it/s]\x1b[36m(TaskRunner pid=196)\x1b[0m step:7 - " in text  # the glue, as printed
    snap = parse_progress(text)
    assert (snap.step, snap.total_steps, snap.percent, snap.eta_seconds) == (10, 10, 100.0, 0.0)
    assert snap.metrics_step == 10 and snap.metrics["actor/pg_loss"] == -0.1


def test_glued_lines_are_read_the_same_fed_in_pieces() -> None:
    text = _glued_run(10, glued_from=3)
    parser = ProgressParser()
    for start in range(0, len(text), 7):  # cut anywhere, even inside a prefix or an escape sequence
        parser.feed(text[start : start + 7])
    assert parser.snapshot().step == 10 and parser.snapshot().total_steps == 10


def test_the_chart_series_reads_glued_metrics_lines() -> None:
    series = parse_series(_glued_run(10, glued_from=7))
    assert sorted(series.points) == list(range(1, 11))


def test_split_glued_cuts_before_each_mid_line_prefix_only() -> None:
    glued = "Training Progress:  60%|██████    | 6/10 [00:06<00:01,  2.50it/s](TaskRunner pid=196) step:7 - a:1"
    assert split_glued(glued) == [
        "Training Progress:  60%|██████    | 6/10 [00:06<00:01,  2.50it/s]",
        "(TaskRunner pid=196) step:7 - a:1",
    ]
    # Ray's error text names a task's process as content: no class inside the parentheses, no cut.
    content = "ray::WorkerDict.update_actor() (pid=2705, ip=172.17.0.2, actor_id=ab12, repr=<WorkerDict>)"
    assert split_glued(content) == [content]
    assert split_glued("(WorkerDict pid=12) plain line") == ["(WorkerDict pid=12) plain line"]


def test_the_classifier_sees_a_glued_line_as_its_own_with_its_source() -> None:
    text = (f"{TR}{_bar(3, 10)}\x1b[36m(WorkerDict pid=2705, ip=10.0.0.2)\x1b[0m "
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")  # fmt: skip
    lines = clean_log_lines(text)
    assert [(line.text, line.source) for line in lines if line.text][-1] == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "WorkerDict",
    )
    assert classify(text).primary is not None


def test_the_real_h200_log_with_tqdm_newlines_gone_still_ends_at_step_6() -> None:
    # The real H200 run (6 steps) as Ray shows it when tqdm's redraw gets no newline: every line after a bar is
    # glued onto it. Before: the glued step lines were skipped.
    raw = (REAL / "dapo-fsdp-healthy-6-steps.log").read_text(encoding="utf-8")
    glued = re.sub(r"(Training Progress:[^\n]*)\n", r"\1", raw)
    assert glued.count("it]\x1b[36m(DAPOTaskRunner pid=3000)\x1b[0m step:") >= 2
    assert parse_progress(raw).step == 6
    snap = parse_progress(glued)
    assert (snap.step, snap.total_steps, snap.percent) == (6, 6, 100.0)
    assert sorted(parse_series(glued).points) == sorted(parse_series(raw).points) == [1, 2, 3, 4, 5, 6]
    seen = set()  # as the supervisor follows it: every step is seen, the glued ones too
    parser = ProgressParser()
    for line in glued.splitlines(keepends=True):
        parser.feed(line)
        seen.add(parser.snapshot().metrics_step)
    assert {1, 2, 3, 4, 5, 6} <= seen


def test_a_real_verl_sft_log_with_glued_step_lines_reads_to_its_last_step_of_its_total() -> None:
    # verl's SFT trainer shares its stream with tqdm: every metrics line is glued after the bar (`…it/s]step:1 - `).
    text = (REAL / "verl-sft-char-count-glued-tqdm.log").read_text(encoding="utf-8")
    assert text.startswith("source: https://github.com/")
    assert "?it/s]step:1 - train/loss:" in text
    snap = parse_progress(text)
    assert (snap.step, snap.total_steps, snap.percent) == (105, 105, 100.0)


def test_a_launcher_timestamp_before_the_ray_prefix_no_longer_hides_the_step_line() -> None:
    # Some launchers stamp every line (logs/line_context.py): the prefix is then mid-line, like a glued one.
    text = "[2025-05-10 00:18:27] (TaskRunner pid=1) step:3 - actor/pg_loss:-0.5\n"
    snap = parse_progress(text)
    assert (snap.step, snap.metrics) == (3, {"actor/pg_loss": -0.5})
