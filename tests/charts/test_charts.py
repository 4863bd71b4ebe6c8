"""Charts from real verl logs: the series parsed from the metrics lines, the PNG drawn from them (looked at:
docs/images/chart-real-h200.png is this test's output), the grep in the target, and the lazy matplotlib import."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from harness.records import run_spec
from verl_async_dapo import cli
from verl_async_dapo.charts import AttemptSeries, render_png
from verl_async_dapo.context import AppContext
from verl_async_dapo.logs.series import parse_series
from verl_async_dapo.records import AttemptConfigRecord
from verl_async_dapo.run_charts import progress_chart

FIXTURES = Path(__file__).parent / "fixtures"
HEALTHY = FIXTURES / "verl-0.9.1-h200-healthy-6-steps.metrics.log"
RELAUNCH = FIXTURES / "verl-0.9.1-h200-relaunch-attempt2.metrics.log"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _pixels(png: bytes):  # type: ignore[no-untyped-def]
    from matplotlib import image

    return image.imread(io.BytesIO(png), format="png")


def _has_color(pixels, rgb: tuple[int, int, int]) -> bool:  # type: ignore[no-untyped-def]
    import numpy as np

    target = np.array(rgb) / 255.0
    return bool((np.abs(pixels[..., :3] - target).max(axis=-1) < 0.02).any())


def test_series_from_a_real_log() -> None:
    assert HEALTHY.read_text().startswith("# source: ")
    series = parse_series(HEALTHY.read_text())
    assert sorted(series.points) == [1, 2, 3, 4, 5, 6]
    steps, scores = series.values("critic/score/mean")
    assert steps == [1, 2, 3, 4, 5, 6]
    assert scores == [-0.125, -0.0625, -0.125, 0.25, 0.0, 0.0]
    assert series.values("timing_s/step")[1][0] == pytest.approx(40.53488081299997)  # np.float64(...) unwrapped
    assert series.values("actor/perf/max_memory_allocated_gb")[1][-1] == pytest.approx(2.0787620544433594)
    assert "actor/ppo_kl" not in series.points[1]  # only the charted keys are kept


def test_png_from_real_logs_draws_one_colour_per_attempt() -> None:
    first, second = parse_series(HEALTHY.read_text()), parse_series(RELAUNCH.read_text())
    png = render_png([AttemptSeries(1, first), AttemptSeries(2, second, "rollout util 0.6 → 0.5")], title="t")
    assert png.startswith(PNG_MAGIC)
    pixels = _pixels(png)
    assert pixels.shape[:2] == (630, 1080)  # 12 x 7 in at 90 dpi
    assert _has_color(pixels, (31, 119, 180)) and _has_color(pixels, (255, 127, 14))  # tab:blue, tab:orange
    only_first = _pixels(render_png([AttemptSeries(1, first)], title="t"))
    assert not _has_color(only_first, (255, 127, 14))  # the orange really is attempt 2's line


def test_progress_chart_greps_each_attempts_log_in_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished two-attempt run on the host target whose logs are the real ones: grep runs there."""
    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(tmp_path / "config"))
    app = AppContext.from_environment()
    try:
        sid = app.store.create_session()
        run_id = app.store.create_run(sid, "host", run_spec("host"))
        for n, log in ((1, HEALTHY), (2, RELAUNCH)):
            app.store.add_attempt(run_id, n, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="test")
            job = {"target": "host", "job_dir": str(tmp_path / f"job{n}"), "log_path": str(log)}
            app.store.update_attempt(run_id, n, status="succeeded", job=job,
                                     decision={"changes": ["rollout util 0.6 → 0.5"]} if n == 1 else None)
        app.store.update_run(run_id, status="succeeded", progress={"step": 4, "total_steps": 4, "attempt": 2})
        png, note = anyio.run(progress_chart, app, run_id)
        assert png is not None and png.startswith(PNG_MAGIC)
        assert note == "10 step(s) over 2 attempt(s)"
        out = tmp_path / "curves.png"  # the CLI: `verl-async-dapo status RUN --plot FILE`
        assert cli.main(["status", run_id, "--plot", str(out)]) == cli.EXIT_OK
        assert out.read_bytes().startswith(PNG_MAGIC) and _pixels(out.read_bytes()).shape[:2] == (630, 1080)
        empty_log = tmp_path / "empty.log"
        empty_log.write_text("no metrics yet\n")
        sid2 = app.store.create_session()
        run2 = app.store.create_run(sid2, "host", run_spec("host"))
        app.store.add_attempt(run2, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="test")
        app.store.update_attempt(run2, 1, status="failed", job={"target": "host", "job_dir": str(tmp_path / "j"),
                                                                 "log_path": str(empty_log)})  # fmt: skip
        app.store.update_run(run2, status="failed")
        none, why = anyio.run(progress_chart, app, run2)
        assert none is None and why.startswith("no metrics line in the log yet")
        app.store.update_run(run2, progress={"total_steps": 4, "attempt": 1})
        assert cli.main(["status", run2, "--plot", str(tmp_path / "none.png")]) == cli.EXIT_FAIL
        assert not (tmp_path / "none.png").exists()
    finally:
        app.close()


def test_importing_the_server_does_not_import_matplotlib() -> None:
    code = ("import sys, verl_async_dapo.server, verl_async_dapo.cli, verl_async_dapo.runs; "
            "print('matplotlib' in sys.modules, 'verl_async_dapo.charts' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]
