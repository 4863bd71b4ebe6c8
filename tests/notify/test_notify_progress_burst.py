"""Every-N-steps progress when several steps arrive in one piece of the stream (found by the suite-speed work:
under load `tail -F` delivered steps 1-2 at once in a real container and step 2 was never announced).

The watchman announced a step only when the *latest* step of a piece was a multiple of N: steps 1-6 at once with
N=2 announced 6 alone, a piece ending on step 5 announced nothing. Driven here with the real H200 log of a healthy
6-step run, fed the way the supervisor feeds it."""

from __future__ import annotations

from pathlib import Path

from harness.records import run_spec
from verl_async_dapo.context import AppContext
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.records import JobHandle
from verl_async_dapo.watchman.hooks import Watchman

REAL = Path(__file__).resolve().parents[1] / "logs" / "real" / "dapo-fsdp-healthy-6-steps.log"


def _announced(tmp_path: Path, pieces: list[str], every: int = 2) -> list[int]:
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path / "config",
                     env={"VAD_NOTIFY_EVERY_N_STEPS": str(every)})  # fmt: skip
    try:
        run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
        watchman = Watchman(ctx, run_id, target=None, total_steps=6)  # type: ignore[arg-type]  # no stall here
        watchman.attempt_started(1, JobHandle(target="host", job_dir=str(tmp_path), log_path=str(REAL)))
        parser = ProgressParser()
        for piece in pieces:
            parser.feed(piece)
            watchman.output(parser)
        return [e.data["step"] for e in ctx.store.events(run_id) if e.kind == "progress_step"]
    finally:
        ctx.close()


def _split_at_step(text: str, step: int) -> list[str]:
    marker = f"step:{step} - "
    cut = text.index("\n", text.index(marker)) + 1
    return [text[:cut], text[cut:]]


def test_steps_arriving_all_at_once_announce_every_multiple(tmp_path: Path) -> None:
    assert sorted(_announced(tmp_path, [REAL.read_text()])) == [2, 4, 6]


def test_a_piece_ending_between_multiples_still_announces_the_one_it_passed(tmp_path: Path) -> None:
    text = REAL.read_text()
    first, rest = _split_at_step(text, 3)  # steps 1-3, then 4-6: step 2 passed inside the first piece
    assert sorted(_announced(tmp_path, [first, rest])) == [2, 4, 6]


def test_line_by_line_is_unchanged_and_nothing_is_announced_twice(tmp_path: Path) -> None:
    lines = REAL.read_text().splitlines(keepends=True)
    assert sorted(_announced(tmp_path, lines + lines)) == [2, 4, 6]
