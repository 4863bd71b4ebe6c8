"""The session and run services called directly, without an MCP client or the CLI (as mcp-server-git tests its
plain functions): the question order, refusals that store nothing, secrets kept out of the state DB, and the run
service's answers before any run exists.

These are the functions both faces call; the MCP tests (tests/mcp) check the rendering on top of them.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.records import run_spec
from verl_async_dapo import flow, runs, sessions
from verl_async_dapo.cli.status_view import render_status
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import FlowError, UserInputError
from verl_async_dapo.records import (
    AttemptConfigRecord,
    AttemptError,
    AttemptErrors,
    ErrorReport,
    JobHandle,
    ProgressReport,
    SupervisorDecision,
)
from verl_async_dapo.settings import settings_with_values
from verl_async_dapo.supervisor import run_lock

PROXY_PASSWORD = "pw-canary-7f3e91"


@pytest.fixture
def ctx(tmp_path: Path) -> AppContext:
    # An empty environment: no SwanLab configuration, no proxies, no Ray token from the developer's shell.
    return AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={})


def _db_text(ctx: AppContext) -> str:
    """Every value in every table of the state DB, as text (WAL included: read through SQLite itself)."""
    con = sqlite3.connect(ctx.home / "state.db")
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return "\n".join(repr(row) for t in tables for row in con.execute(f'SELECT * FROM "{t}"'))  # noqa: S608
    finally:
        con.close()


@contextlib.contextmanager
def _supervised(ctx: AppContext, run_id: str) -> Iterator[None]:
    """Hold the run's supervisor lock, as its live supervisor would: the services' heal then leaves the run alone
    (an active run without one gets a detached supervisor, which for these specless runs crash-looped ~70 s)."""
    lock = run_lock.try_lock(run_lock.lock_path(ctx, run_id))
    assert lock is not None
    try:
        yield
    finally:
        lock.close()


async def test_the_questions_are_answered_in_order_and_each_answer_moves_the_session_on(ctx: AppContext) -> None:
    first = sessions.view(ctx)
    assert (first.session_id, first.next_question) == (None, "container")
    view = await sessions.select_container(ctx, name="host")
    assert (view.next_question, view.answers["container"]["kind"]) == ("proxy", "host")
    view = sessions.set_proxy(ctx)
    assert view.next_question == "features"
    view = sessions.choose_features(ctx, ["default"])
    assert view.next_question == "swanlab"
    assert view.state == "ask_swanlab"


async def test_an_answer_out_of_order_is_refused_and_stores_nothing(ctx: AppContext) -> None:
    with pytest.raises(FlowError, match="select_container"):
        sessions.set_proxy(ctx)
    assert ctx.store.current_session() is None  # no session was created by the refused call
    await sessions.select_container(ctx, name="host")
    before = sessions.view(ctx)
    with pytest.raises(FlowError):
        sessions.choose_features(ctx, ["default"])  # the proxy question comes first
    assert sessions.view(ctx) == before


async def test_a_bad_feature_list_is_refused_with_the_valid_names_and_stores_nothing(ctx: AppContext) -> None:
    await sessions.select_container(ctx, name="host")
    sessions.set_proxy(ctx)
    before = sessions.view(ctx)
    with pytest.raises(UserInputError, match="turbo_mode") as refused:
        sessions.choose_features(ctx, ["flash_attn", "turbo_mode"])
    assert "offload" in str(refused.value)  # the valid names are listed
    assert sessions.view(ctx) == before


async def test_proxy_credentials_go_to_the_secret_store_never_to_the_state_db(ctx: AppContext) -> None:
    await sessions.select_container(ctx, name="host")
    view = sessions.set_proxy(ctx, http_proxy=f"http://alice:{PROXY_PASSWORD}@proxy.example:3128")
    answer = view.answers["proxy"]
    assert PROXY_PASSWORD not in repr(answer)
    assert answer["secret_ref"]
    assert PROXY_PASSWORD not in _db_text(ctx)
    assert PROXY_PASSWORD in ctx.secrets.get(answer["secret_ref"])


async def test_swanlab_from_the_environment_skips_the_fourth_question(tmp_path: Path) -> None:
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={"SWANLAB_MODE": "local"})
    await sessions.select_container(ctx, name="host")
    sessions.set_proxy(ctx)
    view = sessions.choose_features(ctx, [])
    assert view.swanlab_preconfigured and view.swanlab_source == "env"
    assert view.next_question is None
    assert view.state == "ready"


async def test_the_swanlab_skip_rule_is_one_answer_for_the_session_the_quick_start_and_the_key_form(
    ctx: AppContext, tmp_path: Path
) -> None:
    configured = AppContext(home=tmp_path / "s2", config_home=tmp_path / "c2", env={"SWANLAB_MODE": "local"})
    assert sessions.swanlab_question_asked(ctx) and not sessions.swanlab_question_asked(configured)
    assert flow.required_questions(True) == tuple(q for q in flow.QUESTION_ORDER if q is not flow.Question.SWANLAB)
    # The key form: a cloud setting without a key, and only while question 4 may be answered.
    assert not sessions.swanlab_key_form_wanted(ctx, "cloud", None, None)  # no session yet: the question is not open
    await sessions.select_container(ctx, name="host")
    sessions.set_proxy(ctx)
    sessions.choose_features(ctx, [])
    assert sessions.swanlab_key_form_wanted(ctx, "cloud", None, None)
    assert sessions.swanlab_key_form_wanted(ctx, None, "https://swanlab.example", None)
    assert not sessions.swanlab_key_form_wanted(ctx, None, None, None)  # a call that only reports the setting
    assert not sessions.swanlab_key_form_wanted(ctx, "cloud", None, "a-key")
    assert not sessions.swanlab_key_form_wanted(ctx, "local", None, None)


async def test_select_container_needs_exactly_one_of_name_and_create(ctx: AppContext) -> None:
    with pytest.raises(UserInputError, match="either name"):
        await sessions.select_container(ctx)
    assert ctx.store.current_session() is None


def test_the_run_service_before_any_run(ctx: AppContext) -> None:
    assert runs.list_runs(ctx) == []
    with pytest.raises(UserInputError, match="no run yet"):
        runs.check_errors(ctx)
    with pytest.raises(UserInputError, match="not a run id"):
        runs.resolve_run(ctx, "../../etc/passwd")
    with pytest.raises(UserInputError, match="unknown run 'run_doesnotexist'"):
        runs.resolve_run(ctx, "run_doesnotexist")


def test_check_errors_masks_the_secrets_the_context_holds_for_both_faces(tmp_path: Path) -> None:
    # A key the user gave after the attempt's error was recorded (or that the recording could not know): the service
    # masks it, so the CLI's `errors` shows what the MCP tool shows.
    key = "swk-canary-5d1e0b77"
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env={"SWANLAB_API_KEY": key})
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    ctx.store.end_attempt(run_id, 1, "failed", exit_code=1, error={
        "category": "tracking", "kind": "swanlab_auth", "line": 3, "excerpt": f"swanlab.login(key) failed: {key} rejected"})
    ctx.store.end_run(run_id, "failed", final_reason=f"SwanLab refused the key {key}")
    report = runs.check_errors(ctx, run_id)
    assert key not in repr(report)
    assert report.attempts[0].excerpt == "swanlab.login(key) failed: *** rejected"
    assert report.final_reason == "SwanLab refused the key ***"


async def test_check_errors_returns_a_typed_report_that_the_faces_render(ctx: AppContext) -> None:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(effective=["offload"]), overrides=["a=1"], override_diff=[],
                          reason="first")  # fmt: skip
    ctx.store.end_attempt(run_id, 1, "failed", exit_code=1, decision={"reason": "relaunched", "changes": ["b=2"]},
                          error={"category": "gpu_oom", "kind": "torch_cuda_oom", "line": 9, "excerpt": "OOM"})
    ctx.store.add_attempt(run_id, 2, config=AttemptConfigRecord(), overrides=[], override_diff=["b=2"], reason="after OOM")
    with _supervised(ctx, run_id):
        report = await runs.check_errors_live(ctx, run_id)
    assert isinstance(report, ErrorReport) and all(isinstance(a, AttemptErrors) for a in report.attempts)
    first, second = report.attempts
    assert (first.category, first.kind, first.fix is not None) == ("gpu_oom", "torch_cuda_oom", True)
    assert (first.supervisor_action, first.changes_next_attempt, first.features) == ("relaunched", ["b=2"], ["offload"])
    assert (second.category, second.override_diff, second.reason_started) == (None, ["b=2"], "after OOM")
    assert report.warnings == []  # attempt 2 has no job: no live log to read
    dumped = report.model_dump()  # what the CLI prints and the MCP face validates into its wire model
    assert list(dumped) == ["run_id", "status", "attempts", "final_reason", "suggestions", "stall", "warnings"]
    assert dumped["attempts"][0]["excerpt"] == "OOM" and dumped["status"] == "starting"


async def test_the_quick_start_refuses_an_unplannable_run_through_the_run_service(ctx: AppContext) -> None:
    settings = settings_with_values({"rollout_tp": 2, "rollout_gpus": 3, "mode": "one_step_off_policy"})
    with pytest.raises(UserInputError, match=r"^invalid training parameters: ROLLOUT_TP=2 must divide") as refused:
        await runs.refuse_unplannable("host", settings, None, skip_preflight=True, allow_no_gpus=True)
    assert "rollout_tp" in refused.value.params  # the face names its argument or flag
    assert ctx.store.current_session() is None and runs.list_runs(ctx) == []
    planned = settings_with_values({"rollout_tp": 1, "rollout_gpus": 3, "mode": "one_step_off_policy"})
    await runs.refuse_unplannable("host", planned, None, skip_preflight=True, allow_no_gpus=True)  # plans: no refusal


def test_a_supervisor_decision_is_a_record_the_store_serialises_with_the_fields_set(ctx: AppContext) -> None:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    decided = SupervisorDecision(relaunch=True, reason="gpu_oom: add offload", changes=["+offload"], suggestions=[])
    ctx.store.end_attempt(run_id, 1, "failed", decision=decided)
    (attempt,) = ctx.store.attempts(run_id)
    assert attempt.decision == {"relaunch": True, "reason": "gpu_oom: add offload", "changes": ["+offload"],
                                "suggestions": []}  # no checkpoint key before the check ran  # fmt: skip
    assert attempt.supervisor_decision == decided
    with_ckpt = decided.model_copy(update={"checkpoint": {"expected_step": 4}})
    ctx.store.update_attempt(run_id, 1, decision=with_ckpt)
    (attempt,) = ctx.store.attempts(run_id)
    assert isinstance(attempt.supervisor_decision, SupervisorDecision)
    assert attempt.supervisor_decision.checkpoint == {"expected_step": 4}
    with _supervised(ctx, run_id):
        assert runs.check_errors(ctx, run_id).attempts[0].changes_next_attempt == ["+offload"]
    resumed = SupervisorDecision().model_copy(update={"checkpoint": {"expected_step": 0}})  # a stopped run resumed
    ctx.store.update_attempt(run_id, 1, decision=resumed)
    assert ctx.store.attempts(run_id)[0].decision == {"checkpoint": {"expected_step": 0}}


def test_an_attempts_error_is_a_record_the_store_serialises_with_the_fields_set(ctx: AppContext) -> None:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    # As attempt_log.attempt_error writes a classified OOM: a key the record does not name (gpu_used_share) stays.
    error = AttemptError(category="gpu_oom", kind="torch_cuda_oom", line=1041, excerpt="CUDA out of memory",
                         phase="actor_rollout_update_actor", gpu_used_share=0.88)  # fmt: skip
    ctx.store.end_attempt(run_id, 1, "failed", exit_code=1, error=error)
    (attempt,) = ctx.store.attempts(run_id)
    assert attempt.error == {"category": "gpu_oom", "kind": "torch_cuda_oom", "line": 1041,
                             "excerpt": "CUDA out of memory", "phase": "actor_rollout_update_actor",
                             "gpu_used_share": 0.88}  # the stored JSON: the fields that were set  # fmt: skip
    assert attempt.attempt_error == error and attempt.attempt_error.model_extra == {"gpu_used_share": 0.88}
    # One the supervisor words itself sets no phase: the stored JSON has none either.
    ctx.store.add_attempt(run_id, 2, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="second")
    ctx.store.end_attempt(run_id, 2, "rejected", error=AttemptError(category="config_error", kind="plan_error",
                                                                   excerpt="bad", line=None))  # fmt: skip
    assert ctx.store.attempts(run_id)[1].error == {"category": "config_error", "kind": "plan_error", "excerpt": "bad",
                                                   "line": None}  # fmt: skip
    with _supervised(ctx, run_id):
        report = runs.check_errors(ctx, run_id)
    assert [(a.category, a.kind) for a in report.attempts] == [("gpu_oom", "torch_cuda_oom"), ("config_error", "plan_error")]


async def test_get_progress_returns_a_typed_report_with_the_snapshot_numbers_as_stored(ctx: AppContext) -> None:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(effective=["flash_attn"]), overrides=[], override_diff=[], reason="1")
    ctx.store.update_attempt(run_id, 1, status="succeeded", exit_code=0)
    snapshot = {"attempt": 1, "step": 5, "total_steps": 20, "eta_seconds": 120, "seconds_per_step": 8.5,
                "metrics": {"critic/score/mean": 0.25, "training/global_step": 5}, "phase": "training"}  # fmt: skip
    ctx.store.update_run(run_id, status="succeeded", progress=snapshot, progress_at=1_700_000_000.0)
    report = await runs.get_progress(ctx, run_id)
    assert isinstance(report, ProgressReport)
    assert (report.attempt, report.step, report.total_steps, report.percent) == (1, 5, 20, 25.0)
    assert (report.features, report.phase_seconds, report.stalled) == (["flash_attn"], None, False)  # ended: no clock
    dumped = report.model_dump()  # what the CLI prints and the MCP face validates into ProgressOut
    assert dumped["eta_seconds"] == 120 and isinstance(dumped["eta_seconds"], int)  # not turned into 120.0
    assert dumped["metrics"] == snapshot["metrics"] and dumped["as_of"] == "2023-11-14T22:13:20Z"
    assert list(dumped)[:3] == ["run_id", "status", "attempt"] and list(dumped)[-1] == "suggestions"


async def test_get_progress_breaks_the_start_up_down_the_open_phase_until_now(ctx: AppContext) -> None:
    """Issue 31 item 2: while an attempt starts, each phase with its seconds, the current one growing; once the first
    step came, the start-up is closed; an attempt that failed in it counts until it ended."""
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="1")
    began = time.time() - 100.0
    marks = [["starting Ray", began], ["loading model", began + 12.0], ["rollout engine start-up", began + 52.0]]
    ctx.store.update_run(run_id, status="running", progress={"attempt": 1, "phase": "rollout engine start-up",
                                                             "startup_marks": marks}, progress_at=time.time())  # fmt: skip
    with _supervised(ctx, run_id):
        report = await runs.get_progress(ctx, run_id)
    assert [(p.phase, p.seconds) for p in report.startup[:2]] == [("starting Ray", 12.0), ("loading model", 40.0)]
    assert report.startup[2].phase == "rollout engine start-up" and 47.0 <= report.startup[2].seconds <= 60.0
    assert report.startup_seconds is not None and 99.0 <= report.startup_seconds <= 112.0
    # The first step came at +130: closed, whatever the clock says now.
    ctx.store.update_run(run_id, progress={"attempt": 1, "phase": "training", "step": 1, "startup_marks": marks,
                                           "training_since": began + 130.0}, progress_at=time.time())  # fmt: skip
    with _supervised(ctx, run_id):
        report = await runs.get_progress(ctx, run_id)
    assert [(p.phase, p.seconds) for p in report.startup] == [("starting Ray", 12.0), ("loading model", 40.0),
                                                              ("rollout engine start-up", 78.0)]  # fmt: skip
    assert report.startup_seconds == 130.0
    shown = render_status(report.model_dump())  # the CLI's `status`
    assert "start-up: starting Ray 00:12 · loading model 00:40 · rollout engine start-up 01:18 (in all 02:10)" in shown


def test_a_job_handle_is_a_record_the_store_serialises(ctx: AppContext, tmp_path: Path) -> None:
    run_id = ctx.store.create_run(ctx.store.create_session(), "host", run_spec("host"))
    ctx.store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    assert ctx.store.attempts(run_id)[0].handle is None  # not started yet
    handle = JobHandle(target="host", job_dir=str(tmp_path / "a1"), log_path=str(tmp_path / "a1" / "train.log"))
    ctx.store.update_attempt(run_id, 1, status="running", job=handle)
    (attempt,) = ctx.store.attempts(run_id)
    assert attempt.job == {"target": "host", "job_dir": handle.job_dir, "log_path": handle.log_path, "exec_id": None}
    assert isinstance(attempt.handle, JobHandle) and attempt.handle == handle


async def test_start_before_the_questions_are_answered_is_refused_and_creates_no_run(ctx: AppContext) -> None:
    with pytest.raises(UserInputError, match="select_container"):
        await runs.start_training(ctx, {})
    await sessions.select_container(ctx, name="host")
    with pytest.raises(FlowError):
        await runs.start_training(ctx, {})
    assert runs.list_runs(ctx) == []
