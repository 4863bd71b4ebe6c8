"""The CLI's text rendering of ``status`` and ``errors`` (cli.status_view; pure functions of the JSON the services
return). The end-to-end tests check the same output through the real CLI; these pin the edge cases."""

from __future__ import annotations

from typing import Any

from verl_async_dapo.cli.status_view import BAR_WIDTH, render_bar, render_errors, render_status


def progress(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "run_id": "run_x", "status": "running", "attempt": 1, "step": None, "total_steps": None, "percent": None,
        "eta_seconds": None, "features": [], "metrics": {}, "resumed_from_step": None, "swanlab_url": None,
        "final_reason": None, "suggestions": [],
    }  # fmt: skip
    return {**base, **fields}


def test_bar_before_any_progress_shows_unknowns_not_zero_division() -> None:
    line = render_bar(progress(status="starting"))
    assert line == f"[starting] attempt 1 |{' ' * BAR_WIDTH}| 0/? ETA ?"


def test_bar_fills_in_proportion_and_formats_the_eta() -> None:
    line = render_bar(progress(attempt=2, step=25, total_steps=100, percent=25.0, eta_seconds=3 * 3600 + 62))
    filled = BAR_WIDTH * 25 // 100
    bar = "█" * filled + " " * (BAR_WIDTH - filled)
    assert line == f"[running] attempt 2 |{bar}| 25/100 25.0% ETA 3:01:02"
    done = render_bar(progress(step=6, total_steps=6, percent=100.0, eta_seconds=59.9))
    assert done.endswith(f"|{'█' * BAR_WIDTH}| 6/6 100.0% ETA 00:59")


def test_status_shows_recovery_metrics_and_the_outcome() -> None:
    text = render_status(progress(
        status="failed", attempt=3, step=4, total_steps=6, percent=66.7, features=["flash_attn", "offload"],
        resumed_from_step=2, metrics={"critic/score/mean": -0.3, "actor/grad_norm": 0.3, "timing_s/step": 0.1},
        swanlab_url="https://swanlab.example/run/1", final_reason="gpu_oom again; MAX_OOM_RETRIES=2 reached",
        suggestions=["lower MAX_RESPONSE_LENGTH"],
    ))  # fmt: skip
    lines = text.splitlines()
    assert lines[0] == "run run_x" and lines[1].startswith("[failed] attempt 3 |")
    assert "features: flash_attn, offload" in lines and "resumed from step 2" in lines
    assert "  critic/score/mean: -0.3" in lines and "  timing_s/step: 0.1" in lines
    assert not any("grad_norm" in line for line in lines)  # only the headline metrics
    assert lines[-3:] == ["SwanLab: https://swanlab.example/run/1",
                          "result: gpu_oom again; MAX_OOM_RETRIES=2 reached", "  - lower MAX_RESPONSE_LENGTH"]  # fmt: skip


def test_status_of_a_fresh_run_has_no_resume_line() -> None:
    text = render_status(progress(resumed_from_step=0))
    assert "resumed" not in text and "result:" not in text


def test_errors_lists_each_attempt_with_its_change_cause_and_action() -> None:
    excerpt = "\n".join(f"frame {i}" for i in range(20)) + "\ntorch.OutOfMemoryError: CUDA out of memory."
    report = {
        "run_id": "run_x", "status": "succeeded", "final_reason": "training finished (exit code 0)", "suggestions": [],
        "attempts": [
            {"attempt": 1, "status": "failed", "exit_code": 1, "features": ["flash_attn"], "override_diff": [],
             "category": "gpu_oom", "explanation": "CUDA ran out of GPU memory", "fix": "relaunch with offload",
             "excerpt": excerpt, "supervisor_action": "gpu_oom: relaunching with +offload"},
            {"attempt": 2, "status": "running", "exit_code": None, "features": ["flash_attn", "offload"],
             "override_diff": ["a.param_offload: False → True", "b.param_offload: False → True"],
             "category": None, "explanation": None, "fix": None, "excerpt": None, "supervisor_action": None},
        ],
    }  # fmt: skip
    lines = render_errors(report).splitlines()
    assert lines[0] == "run run_x: succeeded"
    assert "attempt 1: failed (exit 1)  features: flash_attn" in lines
    assert "  error: gpu_oom — CUDA ran out of GPU memory" in lines and "  fix: relaunch with offload" in lines
    quoted = [line for line in lines if line.startswith("    | ")]
    assert len(quoted) == 12 and quoted[-1] == "    | torch.OutOfMemoryError: CUDA out of memory."  # the tail only
    assert "  supervisor: gpu_oom: relaunching with +offload" in lines
    assert "attempt 2: running  features: flash_attn, offload" in lines  # no exit code yet
    assert "  changed: a.param_offload: False → True; b.param_offload: False → True" in lines
    assert lines[-1] == "result: training finished (exit code 0)"


def test_bar_before_the_first_step_says_the_phase_and_its_time() -> None:
    line = render_bar(progress(step=None, total_steps=4, phase="rollout engine start-up", phase_seconds=125.0))
    assert line.endswith("0/4 ETA ? · rollout engine start-up for 02:05")
    assert render_bar(progress(step=2, total_steps=4, phase="training", phase_seconds=3.0)).endswith("ETA ?")
    done = render_bar(progress(status="succeeded", step=4, total_steps=4, phase="finishing", phase_seconds=None))
    assert "·" not in done


def test_status_says_what_the_eta_is_based_on() -> None:
    text = render_status(progress(step=3, total_steps=6, eta_seconds=30.0, seconds_per_step=10.0,
                                  eta_basis="wall clock between step lines (includes validation and checkpoint time)"))  # fmt: skip
    assert "ETA from 10 s/step, wall clock between step lines (includes validation and checkpoint time)" in text

def test_a_stalled_run_says_so_with_its_evidence() -> None:
    text = render_status(progress(status="running", stalled=True, stalled_for_seconds=1500.0))
    assert "STALLED: no new step and no log output for 25:00" in text and "verl-async-dapo errors run_x" in text
    report = {"run_id": "run_x", "status": "running", "final_reason": None, "suggestions": [], "attempts": [],
              "stall": {"stalled": True, "step": 7, "window_seconds": 1200.0, "stalled_for_seconds": 1500.0,
                        "gpu_util": "GPU0 0 %, 61000 MiB/81559 MiB",
                        "evidence": {"processes": ["123 Sl 25:01 0.0 1024 python3 -m recipe.dapo.main_dapo"],
                                     "py_spy": "Thread 123 (idle): MainThread\n    wait (threading.py:320)",
                                     "last_log_lines": ["step:7 - actor/pg_loss:0.1"]}}}  # fmt: skip
    lines = render_errors(report).splitlines()
    assert "stalled: at step 7, window 20:00, silent for 25:00" in lines
    assert "  GPUs: GPU0 0 %, 61000 MiB/81559 MiB" in lines
    assert "    Thread 123 (idle): MainThread" in lines and "    | step:7 - actor/pg_loss:0.1" in lines

def test_a_stale_snapshot_reread_from_the_tail_keeps_the_phase_start() -> None:
    from verl_async_dapo.runs import merge_tail_progress

    stored = {
        "phase": "rollout engine start-up",
        "phase_since": 1000.0,
        "resume_check": "resumed from step 2 as expected",
    }
    same = merge_tail_progress(stored, {"phase": "rollout engine start-up", "phase_since": None, "step": None})
    assert (same["phase_since"], same["resume_check"]) == (1000.0, "resumed from step 2 as expected")
    moved = merge_tail_progress(stored, {"phase": "first step (warm-up)", "phase_since": None})
    assert moved["phase_since"] is None  # a new phase began at a time the tail does not say


def test_errors_show_the_users_and_the_ladders_overrides_and_a_kept_value() -> None:
    note = "OOM recovery would set b.param_offload=True; kept your False"
    report = {
        "run_id": "run_x", "status": "running", "final_reason": None, "suggestions": [],
        "attempts": [
            {"attempt": 2, "status": "running", "exit_code": None, "features": ["offload"], "override_diff": [],
             "overrides": ["a.lr=2e-6", "a.param_offload=True", "b.param_offload=False", "t.steps=4"],
             "override_sources": {"a.lr": "user", "a.param_offload": "oom_ladder", "b.param_offload": "user",
                                  "t.steps": "recipe"},
             "plan_notes": ["trainer.val_before_train=False: …", note],
             "category": None, "explanation": None, "fix": None, "excerpt": None, "supervisor_action": None},
        ],
    }  # fmt: skip
    lines = render_errors(report).splitlines()
    assert "  overrides yours: a.lr=2e-6; b.param_offload=False" in lines
    assert "  overrides from OOM recovery: a.param_offload=True" in lines
    assert f"  note: {note}" in lines
    assert not any("t.steps" in line or "val_before_train" in line for line in lines)  # the recipe's own: not repeated
