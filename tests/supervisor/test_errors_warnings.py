"""check_errors reports what does not stop training (e.g. SwanLab rejecting metric uploads mid-run)
as warnings read from the current attempt's log, through the real host target and the real store."""

from __future__ import annotations

from pathlib import Path

import anyio

from harness.records import run_spec
from verl_async_dapo.cli.status_view import render_errors
from verl_async_dapo.context import AppContext
from verl_async_dapo.records import AttemptConfigRecord
from verl_async_dapo.runs import check_errors_live

CORPUS = Path(__file__).parents[1] / "logs" / "corpus"
SWANLAB_401 = CORPUS / "tracking__swanlab_api_error__nonfatal_midrun_401_metrics.log"
H200_HEALTHY = CORPUS / "none__h200_dapo_fsdp_healthy_6_steps.log"


def _run_with_log(tmp_path: Path, log_text: str) -> tuple[AppContext, str]:
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path, env={})
    log = tmp_path / "job" / "train.log"
    log.parent.mkdir()
    log.write_text(log_text, encoding="utf-8")
    session = ctx.store.create_session()
    run_id = ctx.store.create_run(session, "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(effective=[]), overrides=[], override_diff=[], reason="first")
    job = {"target": "host", "job_dir": str(log.parent), "log_path": str(log)}
    ctx.store.update_attempt(run_id, 1, status="succeeded", job=job, exit_code=0)
    # Not an active status: check_errors must not start a supervisor for it.
    ctx.store.update_run(run_id, status="succeeded")
    return ctx, run_id


def test_tracker_errors_mid_run_are_warnings_not_attempt_errors(tmp_path: Path) -> None:
    ctx, run_id = _run_with_log(tmp_path, H200_HEALTHY.read_text(encoding="utf-8") + SWANLAB_401.read_text())
    report = anyio.run(check_errors_live, ctx, run_id).model_dump()  # as the CLI renders it
    assert report["attempts"][0]["category"] is None  # the attempt did not fail
    (warning,) = report["warnings"]
    assert (warning["attempt"], warning["category"], warning["kind"], warning["count"]) == (
        1,
        "tracking",
        "swanlab_api_error",
        7,
    )
    assert "401 Authorization Required" in warning["message"]
    assert "not reaching the SwanLab project" in warning["explanation"]
    text = render_errors(report)
    assert "warning (attempt 1, training goes on): tracking/swanlab_api_error x7" in text


def test_a_healthy_log_has_no_warnings_and_an_unreadable_one_does_not_break_check_errors(tmp_path: Path) -> None:
    ctx, run_id = _run_with_log(tmp_path, H200_HEALTHY.read_text(encoding="utf-8"))
    assert anyio.run(check_errors_live, ctx, run_id).warnings == []
    (tmp_path / "job" / "train.log").unlink()
    report = anyio.run(check_errors_live, ctx, run_id).model_dump()  # as the CLI renders it
    assert report["warnings"] == [] and report["attempts"][0]["attempt"] == 1
