"""Every run parameter per call: start_training and plan_training take one argument per TrainingSettings
field (the CLI one flag per field), plan_training shows the launch without storing anything, and a refused
value names the argument that changes it. Nothing refused is stored."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from mcp_helpers import answer_first_three, ok, refused

from verl_async_dapo.cli import params as cli_params
from verl_async_dapo.server import params as server_params
from verl_async_dapo.server import training as server_training
from verl_async_dapo.settings import TrainingSettings

SETTINGS_FIELDS = set(TrainingSettings.model_fields)


def _stored_runs() -> list[Any]:
    from verl_async_dapo.context import AppContext

    return AppContext.from_environment().store.runs(10)


def test_every_settings_field_is_an_argument_and_a_flag() -> None:
    arguments = set(server_params.ARGUMENT_FIELDS.values())
    assert arguments | server_params.NOT_ARGUMENTS == SETTINGS_FIELDS
    assert not arguments & server_params.NOT_ARGUMENTS
    flags = {field for field, _, _ in cli_params.FLAGS} | set(cli_params.OTHER_FIELDS)
    assert flags | server_params.NOT_ARGUMENTS == SETTINGS_FIELDS


def test_start_and_plan_take_the_same_arguments() -> None:
    start = list(inspect.signature(server_training.start_training).parameters)
    plan = list(inspect.signature(server_training.plan_training).parameters)
    # start alone applies preflight's memory fix (preflight runs only there) and asks the user's approval (a form,
    # not an argument: issue 27); plan alone previews an OOM step.
    only_start = ("apply_memory_fix", "approval")
    assert plan == [*[a for a in start if a not in only_start], "oom_step"]
    assert start[-1] == "apply_memory_fix" and start[1] == "approval"
    assert set(start) - {"ctx", *only_start} == set(server_params.ARGUMENT_FIELDS)


async def test_plan_training_shows_the_launch_and_stores_nothing(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        plan = await ok(c, "plan_training", {
            "mode": "one_step_off_policy", "framework": "fsdp", "trainer_gpus": 1, "rollout_gpus": 1,
            "rollout_tp": 1, "train_batch_size": 8, "ppo_mini_batch_size": 4, "n_resp_per_prompt": 4,
            "max_response_length": 1024, "gpu_memory_utilization": 0.5, "save_freq": 2,
            "experiment_name": "exp-1", "verl_home": "/work/verl", "overrides": ["actor_rollout_ref.actor.optim.lr=3e-6"],
        })  # fmt: skip
        assert plan["argv"][:3] == ["python3", "-m", "verl.experimental.one_step_off_policy.main_ppo"]
        for item in ("actor_rollout_ref.rollout.tensor_model_parallel_size=1", "data.train_batch_size=8",
                     "actor_rollout_ref.rollout.n=4", "data.max_response_length=1024", "trainer.save_freq=2",
                     "actor_rollout_ref.rollout.gpu_memory_utilization=0.5", "trainer.experiment_name=exp-1",
                     "actor_rollout_ref.actor.optim.lr=3e-6"):  # fmt: skip
            assert item in plan["overrides"], item
        assert plan["entry"]["cwd"] == "/work/verl"
        assert plan["sources"]["actor_rollout_ref.actor.optim.lr"] == "user"
        assert plan["settings_sources"]["rollout_tp"] == "argument"
        assert plan["settings_sources"]["project_name"] == "default"
        assert any("no container chosen yet" in a for a in plan["assumed"])
        assert any("start_training detects the version" in a for a in plan["assumed"])
        later = await ok(c, "plan_training", {"framework": "fsdp", "oom_step": 1, "n_gpus": 2, "rollout_tp": 1})
        assert later["features"]["oom_appended"] == ["offload"]
        assert later["sources"]["actor_rollout_ref.actor.fsdp_config.param_offload"] == "oom_ladder"
        session = await ok(c, "get_session")
        assert session["session_id"] is None  # nothing stored: no session, no run
    assert _stored_runs() == []


async def test_plan_training_uses_the_answers_given_so_far(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        await answer_first_three(c)
        await ok(c, "choose_features", {"names": ["offload"]})
        plan = await ok(c, "plan_training", {"framework": "fsdp", "n_gpus": 2, "rollout_tp": 1})
        assert "actor_rollout_ref.actor.fsdp_config.param_offload=True" in plan["overrides"]
        assert plan["features"]["explicit"] == ["offload"]
        assert not any("container" in a or "features" in a or "proxy" in a for a in plan["assumed"])


@pytest.mark.parametrize("tool", ["plan_training", "start_training"])
async def test_a_refused_value_names_the_argument(
    connect: Callable[..., Any], tool: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWANLAB_MODE", "disabled")  # preconfigured: start_training is allowed after question 3
    async with connect() as c:
        await answer_first_three(c)
        before = await ok(c, "get_session")
        # The case a user met: one-step-off on 1+1 GPUs. The default now fits (rollout TP 1); an explicit 2 is refused.
        if tool == "plan_training":
            fits = await ok(c, tool, {"mode": "one_step_off_policy", "trainer_gpus": 1, "rollout_gpus": 1})
            assert "actor_rollout_ref.rollout.tensor_model_parallel_size=1" in fits["overrides"]
        message = await refused(c, tool, {"mode": "one_step_off_policy", "trainer_gpus": 1, "rollout_gpus": 1,
                                          "rollout_tp": 2, "verl_version": "0.9.1"})  # fmt: skip
        assert "ROLLOUT_TP=2 must divide the 1 rollout GPUs" in message
        assert "start_training argument rollout_tp" in message
        message = await refused(c, tool, {"ppo_mini_batch_size": 64, "train_batch_size": 32, "verl_version": "0.9.1"})
        assert "ppo_mini_batch_size" in message and "train_batch_size" in message
        message = await refused(c, tool, {"overrides": ["trainer.wandb_api_key=0123456789abcdef"]})
        assert "argument overrides" in message and "secret" in message and "0123456789abcdef" not in message
        message = await refused(c, tool, {"overrides": ["data.train_files=${oc.env:SWANLAB_API_KEY}"]})
        assert "'$'" in message
        message = await refused(c, tool, {"reward_fn_path": "/verl/../etc/x.py"})
        assert "reward_fn_path" in message
        after = await ok(c, "get_session")
        assert after["answers"] == before["answers"] and after["run_id"] is None
    assert _stored_runs() == []


async def test_resume_without_a_run_says_what_to_do(connect: Callable[..., Any]) -> None:
    async with connect() as c:
        message = await refused(c, "resume_training", {})
        assert "no run yet" in message
        message = await refused(c, "resume_training", {"run_id": "run_doesnotexist"})
        assert "unknown run" in message
