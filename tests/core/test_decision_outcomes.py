"""Decisions carry an outcome (policy.Outcome), stored with the decision: what follows a decision (the budget notice,
check_errors) reads the outcome, never the words of its reason; and a resume check's verdict is a number of lost
steps, not a word in its message."""

from __future__ import annotations

import ast
from pathlib import Path

from harness.records import run_spec
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import BUDGET_OUTCOMES, AttemptConfig, Outcome, decide
from verl_async_dapo.records import AttemptConfigRecord, SupervisorDecision
from verl_async_dapo.store import Store
from verl_async_dapo.supervisor.resume_check import verify
from verl_async_dapo.watchman.stall import stall_decision

ROOT = Path(__file__).resolve().parents[2] / "skill" / "verl_async_dapo"


def _decide(config: AttemptConfig, category: ErrorCategory | None, relaunches: int = 0, max_retries: int = 3):
    return decide(config, category, relaunches_so_far=relaunches, max_retries=max_retries,
                  base_gpu_memory_utilization=0.6)  # fmt: skip


def test_each_policy_decision_names_its_outcome() -> None:
    first = AttemptConfig(features=FeatureSet())
    assert _decide(first, ErrorCategory.GPU_OOM).outcome is Outcome.RELAUNCH
    assert _decide(first, ErrorCategory.GPU_OOM).relaunch
    assert _decide(first, ErrorCategory.GPU_OOM, relaunches=3).outcome is Outcome.BUDGET_EXHAUSTED
    assert _decide(first, ErrorCategory.NCCL_TIMEOUT).outcome is Outcome.GIVE_UP
    assert _decide(first, None).outcome is Outcome.GIVE_UP
    top = AttemptConfig(features=FeatureSet(oom_appended=(Feature.OFFLOAD, Feature.RECOMPUTE)))
    while (step := _decide(top, ErrorCategory.GPU_OOM, max_retries=99)).relaunch:
        top = step.next_config  # type: ignore[assignment]
    assert step.outcome is Outcome.LADDER_EXHAUSTED and not step.relaunch


def test_stall_decisions_name_their_outcome() -> None:
    config = AttemptConfig(features=FeatureSet())
    assert stall_decision(config, relaunches_so_far=0, max_retries=2, relaunch=False).outcome is Outcome.GIVE_UP
    assert stall_decision(config, relaunches_so_far=2, max_retries=2, relaunch=True).outcome is Outcome.BUDGET_EXHAUSTED
    assert stall_decision(config, relaunches_so_far=0, max_retries=2, relaunch=True).outcome is Outcome.RELAUNCH
    assert {Outcome.BUDGET_EXHAUSTED, Outcome.GPU_HOURS_CAP} == BUDGET_OUTCOMES


def test_the_outcome_is_stored_with_the_decision(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    run_id = store.create_run(store.create_session(), "host", run_spec())
    store.add_attempt(run_id, 1, config=AttemptConfigRecord(), overrides=[], override_diff=[], reason="first")
    store.update_attempt(run_id, 1, decision=SupervisorDecision(relaunch=False, outcome=Outcome.GPU_HOURS_CAP,
                                                                reason="GPU-hour budget reached"))  # fmt: skip
    decided = store.attempts(run_id)[0].supervisor_decision
    assert decided is not None and decided.outcome is Outcome.GPU_HOURS_CAP
    assert store.attempts(run_id)[0].decision == {"relaunch": False, "outcome": "gpu_hours_cap",
                                                  "reason": "GPU-hour budget reached"}  # fmt: skip
    # A decision stored before outcomes were: still reads, with no outcome.
    store.update_attempt(run_id, 1, decision={"relaunch": True, "reason": "gpu_oom: relaunching with +offload"})
    assert store.attempts(run_id)[0].supervisor_decision.outcome is None  # type: ignore[union-attr]
    store.close()


def test_a_resume_verdict_counts_the_lost_steps() -> None:
    expected = {"saved_steps": [2, 4], "expected_step": 4}
    assert verify(expected, {"resumed_from_step": 4}).lost_steps == 0  # type: ignore[union-attr]
    assert verify(expected, {"training_from_scratch": True}).lost_steps == 4  # type: ignore[union-attr]


def test_no_decision_reads_prose() -> None:
    # `"reached" in decision.reason`, `"lost" in message`: a membership test of a string literal against a reason,
    # message or text is a decision taken on words. Not checked: logs/ (reading log text is the classifier's job) and
    # the faces, which take no decisions (the CLI picks which plan notes to print by their words: a rendering filter,
    # left until plan notes carry a kind).
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("logs/", "cli/", "server/")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)
                    and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)):  # fmt: skip
                right = ast.unparse(node.comparators[0])
                if any(word in right for word in ("reason", "message", "excerpt", "note")):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "\n".join(found)
