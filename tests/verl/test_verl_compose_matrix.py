"""Every mode × framework × release × escalation step × SwanLab on/off, composed against real verl configs.

Escalation steps come from the real OOM policy (``policy.decide``): defaults → +offload → +recompute,
plus a rollout-OOM step (lower gpu_memory_utilization, then enforce_eager) and the token-budget
halving that follows the feature ladder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from omegaconf import DictConfig, OmegaConf
from verl_compose import MAIN_VERSIONS, compose_plan, key_exists, make_request, make_settings, select

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import Feature, FeatureSet
from verl_async_dapo.policy import AttemptConfig, decide
from verl_async_dapo.settings import Framework, Mode
from verl_async_dapo.verl import LaunchPlan, build_plan

pytestmark = pytest.mark.downloads

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
M = "actor_rollout_ref.model"
TF = f"{A}.megatron.override_transformer_config"
BASE_UTIL = 0.6


def _step(config: AttemptConfig, category: ErrorCategory, n: int, kind: str | None = None) -> AttemptConfig:
    decision = decide(config, category, relaunches_so_far=n, max_retries=10, base_gpu_memory_utilization=BASE_UTIL,
                      kind=kind)  # fmt: skip
    assert decision.relaunch and decision.next_config is not None, decision.reason
    return decision.next_config


def escalation_configs() -> dict[str, AttemptConfig]:
    step0 = AttemptConfig(features=FeatureSet())
    step1 = _step(step0, ErrorCategory.GPU_OOM, 0)
    step2 = _step(step1, ErrorCategory.GPU_OOM, 1)
    tokens = _step(step2, ErrorCategory.GPU_OOM, 2)
    rollout = _step(_step(step0, ErrorCategory.ROLLOUT_OOM, 0), ErrorCategory.ROLLOUT_OOM, 1)
    # "No available memory for the cache blocks": the share goes up to 0.9, then max_num_seqs comes down.
    raised = step0
    for n in range(4):
        raised = _step(raised, ErrorCategory.ROLLOUT_OOM, n, "vllm_kv_cache")
    return {"defaults": step0, "offload": step1, "offload+recompute": step2, "tokens/2": tokens, "rollout-oom": rollout,
            "rollout-raise": raised}  # fmt: skip


STEPS = escalation_configs()


def test_escalation_steps_are_the_ladder() -> None:
    assert STEPS["offload"].features.oom_appended == (Feature.OFFLOAD,)
    assert STEPS["offload+recompute"].features.oom_appended == (Feature.OFFLOAD, Feature.RECOMPUTE)
    assert STEPS["tokens/2"].tweaks.token_budget_scale == 0.5
    assert STEPS["rollout-oom"].tweaks.rollout_gpu_memory_utilization == 0.4
    assert STEPS["rollout-oom"].tweaks.rollout_enforce_eager is False
    assert STEPS["rollout-oom"].features.oom_appended == ()
    assert STEPS["rollout-raise"].tweaks.rollout_gpu_memory_utilization == 0.9
    assert STEPS["rollout-raise"].tweaks.rollout_max_num_seqs == 128


@dataclass(frozen=True)
class Case:
    version: str
    mode: Mode
    framework: Framework
    step: str
    swanlab: bool


CASES = [
    Case(v, mode, fw, step, sw)
    for v in MAIN_VERSIONS
    for mode in Mode
    for fw in Framework
    for step in STEPS
    for sw in (False, True)
]


def _plan(tree: Path, case: Case) -> tuple[LaunchPlan, Any]:
    settings = make_settings(tree, mode=case.mode, framework=case.framework, rollout_gpus=2, trainer_gpus=6)
    config = STEPS[case.step]
    request = make_request(
        settings, case.version, features=config.features, tweaks=config.tweaks, swanlab_enabled=case.swanlab
    )
    return build_plan(request), settings


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"{c.version}-{c.mode.value}-{c.framework.value}-{c.step}-sw{int(c.swanlab)}"
)
def test_plan_composes_with_intended_values(verl_trees: Any, case: Case) -> None:
    tree = verl_trees(case.version)
    plan, settings = _plan(tree, case)
    cfg = compose_plan(tree, plan)
    config = STEPS[case.step]
    _check_common(cfg, plan, settings, case)
    _check_reward(cfg, settings, case)
    _check_features(cfg, settings, case, config)


def _check_common(cfg: DictConfig, plan: LaunchPlan, settings: Any, case: Case) -> None:
    legacy = case.version == "0.6.1"
    assert plan.profile == ("legacy" if legacy else "current")
    ckpt = select(cfg, "trainer.default_local_dir")
    assert ckpt == plan.checkpoint_dir == f"{settings.verl_home}/checkpoints/verl-dapo/run-0001"
    assert Path(ckpt).is_absolute()
    assert select(cfg, "trainer.resume_mode") == "auto"
    assert select(cfg, "trainer.save_freq") == settings.save_freq > 0
    assert select(cfg, "trainer.test_freq") == settings.save_freq
    assert select(cfg, "trainer.val_before_train") is False
    logger = list(select(cfg, "trainer.logger"))
    assert "console" in logger
    assert ("swanlab" in logger) is case.swanlab
    assert select(cfg, "trainer.total_training_steps") == settings.train_steps
    assert select(cfg, "trainer.total_epochs") >= settings.train_steps
    assert select(cfg, "trainer.project_name") == "verl-dapo"
    assert select(cfg, "trainer.experiment_name") == "run-0001"
    assert select(cfg, "trainer.nnodes") == 1
    assert select(cfg, "data.train_files") == f"{settings.verl_home}/data/dapo-math-17k.parquet"
    assert select(cfg, "data.val_files") == f"{settings.verl_home}/data/aime-2024.parquet"
    assert select(cfg, "data.prompt_key") == "prompt"
    assert select(cfg, "data.truncation") == "left"
    assert select(cfg, "data.max_prompt_length") == settings.max_prompt_length
    assert select(cfg, "data.max_response_length") == settings.max_response_length
    assert select(cfg, "data.train_batch_size") == settings.train_batch_size
    assert select(cfg, f"{M}.path") == f"{settings.verl_home}/models/Qwen3-8B"
    assert select(cfg, "algorithm.adv_estimator") == "grpo"
    assert select(cfg, "algorithm.use_kl_in_reward") is False
    assert select(cfg, "algorithm.kl_ctrl.kl_coef") == 0.0
    assert select(cfg, f"{A}.use_kl_loss") is False
    assert select(cfg, f"{A}.clip_ratio_low") == 0.2
    assert select(cfg, f"{A}.clip_ratio_high") == 0.28
    assert select(cfg, f"{A}.clip_ratio_c") == 10.0
    assert select(cfg, f"{A}.loss_agg_mode") == "token-mean"
    assert select(cfg, f"{A}.ppo_mini_batch_size") == settings.ppo_mini_batch_size
    assert select(cfg, f"{A}.optim.lr") == 1e-6
    assert select(cfg, f"{R}.name") == "vllm"
    assert select(cfg, f"{R}.n") == settings.n_resp_per_prompt
    assert select(cfg, f"{R}.tensor_model_parallel_size") == settings.resolved_rollout_tp() == 2
    assert select(cfg, f"{R}.mode") == ("sync" if legacy else "async")
    assert select(cfg, f"{R}.val_kwargs.top_p") == 0.7
    if case.mode is Mode.DAPO:
        assert select(cfg, "algorithm.filter_groups.enable") is True
        assert select(cfg, "algorithm.filter_groups.metric") == "acc"
        assert select(cfg, "algorithm.filter_groups.max_num_gen_batches") == 10
        assert select(cfg, "data.gen_batch_size") == 3 * settings.train_batch_size
        assert select(cfg, "trainer.n_gpus_per_node") == settings.colocated_gpus == 8
        assert select(cfg, "actor_rollout_ref.hybrid_engine") is True
    else:
        assert select(cfg, "actor_rollout_ref.hybrid_engine") is False
        assert select(cfg, "trainer.n_gpus_per_node") == settings.trainer_gpus == 6
        assert select(cfg, "rollout.n_gpus_per_node") == settings.rollout_gpus == 2
        assert select(cfg, "rollout.nnodes") == 1
        # The one-step-off trainer has no dynamic sampling; the plan leaves the schema default alone.
        if key_exists(cfg, "algorithm.filter_groups"):
            assert select(cfg, "algorithm.filter_groups.enable") is False
        if key_exists(cfg, "data.gen_batch_size"):
            assert select(cfg, "data.gen_batch_size") is None
    if case.framework is Framework.FSDP:
        assert select(cfg, f"{A}.strategy") == "fsdp2"
        assert select(cfg, "critic.strategy") == "fsdp2"
        assert select(cfg, f"{REF}.strategy") == "fsdp2"
        clip_key = f"{A}.grad_clip" if legacy else f"{A}.optim.clip_grad"
        assert clip_key in plan.override_keys()
        assert select(cfg, clip_key) == 1.0
    else:
        assert select(cfg, f"{A}.strategy") == "megatron"
        assert select(cfg, f"{A}.optim.clip_grad") == 1.0
        assert f"{A}.grad_clip" not in plan.override_keys()


def _check_reward(cfg: DictConfig, settings: Any, case: Case) -> None:
    buffer_len = min(4096, settings.max_response_length // 4)
    if case.version == "0.6.1":
        assert select(cfg, "reward_model.reward_manager") == "dapo"
        root = (
            "reward_model.overlong_buffer"
            if case.mode is Mode.DAPO
            else "reward_model.reward_kwargs.overlong_buffer_cfg"
        )
        if case.mode is Mode.ONE_STEP_OFF:
            assert select(cfg, "reward_model.reward_kwargs.max_resp_len") == settings.max_response_length
        assert not key_exists(cfg, "reward")
    else:
        assert select(cfg, "reward.reward_manager.name") == "dapo"
        assert select(cfg, "reward.reward_kwargs.max_resp_len") == settings.max_response_length
        root = "reward.reward_kwargs.overlong_buffer_cfg"
        # The legacy placeholder must stay untouched (0.9.x main_ppo no longer migrates it).
        assert select(cfg, "reward_model.reward_manager") is None
    assert select(cfg, f"{root}.enable") is True
    assert select(cfg, f"{root}.len") == buffer_len == 2048
    assert select(cfg, f"{root}.penalty_factor") == 1.0


def _check_features(cfg: DictConfig, settings: Any, case: Case, config: AttemptConfig) -> None:
    offload = config.features.has(Feature.OFFLOAD)
    recompute = config.features.has(Feature.RECOMPUTE)
    scale = config.tweaks.token_budget_scale
    seq = settings.max_prompt_length + settings.max_response_length
    util = config.tweaks.rollout_gpu_memory_utilization or settings.gpu_memory_utilization
    assert select(cfg, f"{R}.gpu_memory_utilization") == pytest.approx(util)
    assert select(cfg, f"{R}.enforce_eager") is config.tweaks.rollout_enforce_eager
    if config.tweaks.rollout_max_num_seqs is not None:  # a key of verl's rollout config in every release
        assert select(cfg, f"{R}.max_num_seqs") == config.tweaks.rollout_max_num_seqs
    # The original skill's defaults: prefix caching and chunked prefill off (verl defaults both on).
    assert select(cfg, f"{R}.enable_prefix_caching") is False
    assert select(cfg, f"{R}.enable_chunked_prefill") is False
    assert select(cfg, f"{R}.max_num_batched_tokens") >= seq
    # dynamic_batch (default on): token caps >= 2x(P+R) at full budget, never below one sequence.
    assert select(cfg, f"{A}.use_dynamic_bsz") is True
    assert select(cfg, f"{REF}.log_prob_use_dynamic_bsz") is True
    assert select(cfg, f"{R}.log_prob_use_dynamic_bsz") is True
    actor_cap = select(cfg, f"{A}.ppo_max_token_len_per_gpu")
    assert actor_cap == max(seq, int(2 * seq * scale))
    if scale == 1.0:
        assert actor_cap >= 2 * seq
    assert select(cfg, f"{R}.log_prob_max_token_len_per_gpu") >= seq
    if case.framework is Framework.FSDP:
        assert select(cfg, f"{M}.override_config.attn_implementation") == "flash_attention_2"
        assert select(cfg, f"{M}.use_remove_padding") is True
        assert select(cfg, f"{M}.enable_gradient_checkpointing") is True
        assert select(cfg, f"{A}.fsdp_config.param_offload") is offload
        assert select(cfg, f"{A}.fsdp_config.optimizer_offload") is offload
        assert select(cfg, f"{A}.fsdp_config.offload_policy") is offload
        assert select(cfg, f"{REF}.fsdp_config.param_offload") is offload
        # recompute under FSDP is activation offload + entropy tricks, not gradient checkpointing again.
        assert select(cfg, f"{M}.enable_activation_offload") is recompute
        assert select(cfg, f"{A}.entropy_checkpointing") is recompute
        assert select(cfg, f"{A}.entropy_from_logits_with_chunking") is recompute
    else:
        assert select(cfg, f"{TF}.attention_backend") == "flash"
        assert select(cfg, f"{A}.megatron.param_offload") is offload
        assert select(cfg, f"{A}.megatron.optimizer_offload") is offload
        assert select(cfg, f"{REF}.megatron.param_offload") is offload
        if case.version == "0.6.1":
            assert select(cfg, f"{A}.megatron.grad_offload") is offload
            assert not key_exists(cfg, f"{A}.megatron.use_remove_padding")
        else:
            assert not key_exists(cfg, f"{A}.megatron.grad_offload")
            assert select(cfg, f"{A}.megatron.use_remove_padding") is True
        expected = ("full", "uniform", 1) if recompute else ("selective", None, None)
        got = tuple(
            select(cfg, f"{TF}.{k}") for k in ("recompute_granularity", "recompute_method", "recompute_num_layers")
        )
        assert got == expected
        # The reference model's transformer config interpolates the actor's.
        ref_tf = OmegaConf.select(cfg, f"{REF}.megatron.override_transformer_config")
        assert ref_tf["recompute_granularity"] == expected[0]
