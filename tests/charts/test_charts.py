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


def _hostile_log(tmp_path: Path) -> Path:
    """The real healthy log, its values replaced by what a log may print: 400 digits, ±1e308, nan, inf."""
    import re

    lines = HEALTHY.read_text().splitlines()
    swaps = {2: "9" * 400, 3: "1e308", 4: "-1e308", 5: "nan", 6: "inf"}
    out = [lines[0]]
    for line in lines[1:]:
        step = int(re.search(r"step:(\d+)", line).group(1))  # type: ignore[union-attr]
        if step in swaps:
            line = re.sub(r"(critic/score/mean|response_length/mean|timing_s/step):[^ ]+", rf"\1:{swaps[step]}", line)
        out.append(line)
    log = tmp_path / "hostile.metrics.log"
    log.write_text("\n".join(out) + "\n")
    return log


def _host_run(app: AppContext, tmp_path: Path, log: Path) -> str:
    run_id = app.store.create_run(app.store.create_session(), "host", run_spec("host"))
    app.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="test")
    app.store.update_attempt(run_id, 1, status="succeeded",
                             job={"target": "host", "job_dir": str(tmp_path / "job"), "log_path": str(log)})  # fmt: skip
    app.store.update_run(run_id, status="succeeded")
    return run_id


def test_hostile_metric_values_are_clamped_or_left_out_and_said(tmp_path: Path) -> None:
    app = AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={})
    try:
        png, note = anyio.run(progress_chart, app, _host_run(app, tmp_path, _hostile_log(tmp_path)))
    finally:
        app.close()
    assert png is not None and png.startswith(PNG_MAGIC) and _pixels(png).shape[:2] == (630, 1080)
    assert "6 step(s) over 1 attempt(s)" in note
    assert "6 value(s) beyond ±1e+12 drawn at the edge" in note  # 1e308 and -1e308, in three keys
    assert "value(s) that are not finite numbers (nan, inf, too many digits) left out" in note
    series = parse_series(_hostile_log(tmp_path).read_text())
    assert max(abs(v) for m in series.points.values() for v in m.values()) == 1e12


def test_a_million_points_are_downsampled_and_said(tmp_path: Path) -> None:
    """A real metrics line repeated for 10^6 steps: drawn from at most MAX_LINES of them, in seconds."""
    import time

    real = HEALTHY.read_text().splitlines()
    # Its charted fields only (the real line is 2 KB: 10^6 of them would be 2 GB), the score varied per step.
    fields = [f for f in real[1].split(" - ") if f.split(":")[0] in ("timing_s/step", "response_length/mean")]
    log = tmp_path / "long.metrics.log"
    with log.open("w") as fh:
        fh.write(real[0] + "\n")
        fh.writelines(f"step:{step} - critic/score/mean:{step % 97} - {' - '.join(fields)}\n"
                      for step in range(1, 1_000_001))  # fmt: skip
    app = AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={})
    began = time.monotonic()
    try:
        png, note = anyio.run(progress_chart, app, _host_run(app, tmp_path, log))
    finally:
        app.close()
    elapsed = time.monotonic() - began
    assert png is not None and png.startswith(PNG_MAGIC)
    drawn = int(note.split(" step(s)")[0])
    assert 3980 <= drawn <= 4000 and "1000000 metrics lines: 1 in 251 drawn" in note, note  # MAX_LINES: 4000
    assert elapsed < 300, elapsed  # ~10 s on a loaded 2-core machine; it took minutes to draw before


def test_without_the_charts_extra_the_note_says_how_to_install_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Issue 28, item 8: matplotlib is the optional `charts` extra; a chart asked of a base install says how to add
    it to the Python that runs the server, instead of failing."""
    import importlib.util

    from verl_async_dapo import run_charts

    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(tmp_path / "config"))
    real = importlib.util.find_spec
    monkeypatch.setattr(run_charts.importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))  # fmt: skip
    app = AppContext.from_environment()
    try:
        run_id = app.store.create_run(app.store.create_session(), "host", run_spec("host"))
        app.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="test")
        app.store.update_attempt(run_id, 1, status="succeeded", job={"target": "host", "job_dir": str(tmp_path / "j"),
                                                                     "log_path": str(HEALTHY)})  # fmt: skip
        png, note = anyio.run(progress_chart, app, run_id)
    finally:
        app.close()
    assert png is None and "--with charts" in note and f"{sys.executable} -m pip install matplotlib" in note, note
