"""The DAPO algorithm, data, reward, rollout and trainer overrides per workflow and release (pure).

Values follow verl's DAPO scripts (reference verl.md §3.3): GRPO advantages, no KL, clip-higher
(0.2 / 0.28, dual-clip 10.0), token-mean loss, overlong reward shaping and (DAPO recipe only)
dynamic sampling with ``algorithm.filter_groups``. Feature-dependent keys live in
``feature_overrides``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_async_dapo.settings import Framework, Mode, TrainingSettings
from verl_async_dapo.verl.feature_overrides import ACTOR, MODEL, REF, ROLLOUT
from verl_async_dapo.verl.overrides import Override, Prefix
from verl_async_dapo.verl.parallel import Parallelism
from verl_async_dapo.verl.profiles import RewardLayout, VersionProfile

CLIP_RATIO_LOW = 0.2
CLIP_RATIO_HIGH = 0.28
CLIP_RATIO_C = 10.0
GRAD_CLIP = 1.0
LR = 1e-6
LR_WARMUP_STEPS = 10
WEIGHT_DECAY = 0.1
OVERLONG_BUFFER_MAX = 4096
OVERLONG_PENALTY = 1.0
FILTER_METRIC = "acc"
FILTER_MAX_NUM_GEN_BATCHES = 10
# DAPO generates 3x the prompts it trains on (gen_prompt_bsz 1536 / train_prompt_bsz 512) so that
# dynamic sampling rarely needs a second generation round.
GEN_BATCH_MULTIPLIER = 3
VAL_TOP_P = 0.7


@dataclass(frozen=True)
class WorkflowInput:
    settings: TrainingSettings
    profile: VersionProfile
    checkpoint_dir: str
    experiment_name: str
    swanlab_enabled: bool
    parallelism: Parallelism


def overlong_buffer_len(max_response_length: int) -> int:
    """min(4096, R/4): the last quarter of a short response budget is the soft-penalty zone."""
    return max(1, min(OVERLONG_BUFFER_MAX, max_response_length // 4))


def total_epochs(settings: TrainingSettings) -> int:
    # Only an upper bound: training stops at trainer.total_training_steps. Every epoch yields at
    # least one batch and a DAPO step consumes at most max_num_gen_batches batches.
    per_step = FILTER_MAX_NUM_GEN_BATCHES if settings.mode is Mode.DAPO else 1
    return settings.train_steps * per_step


def logger_value(swanlab_enabled: bool) -> tuple[str, ...]:
    return ("console", "swanlab") if swanlab_enabled else ("console",)


def build_workflow_overrides(inp: WorkflowInput) -> tuple[Override, ...]:
    s = inp.settings
    dapo = s.mode is Mode.DAPO
    out: list[Override] = []
    out += _data(s, dapo)
    out += _algorithm(dapo)
    out += _actor(s, inp.profile)
    out += _parallel(s, inp.parallelism)
    out += _rollout(s, inp.profile)
    out += _reward(s, inp.profile, dapo)
    out += _trainer(inp)
    return tuple(out)


def _data(s: TrainingSettings, dapo: bool) -> list[Override]:
    out = [
        Override("data.train_files", s.resolved_train_file()),
        Override("data.val_files", s.resolved_val_file()),
        Override("data.prompt_key", s.prompt_key),
        Override("data.truncation", "left"),
        Override("data.max_prompt_length", s.max_prompt_length),
        Override("data.max_response_length", s.max_response_length),
        Override("data.train_batch_size", s.train_batch_size),
    ]
    if s.reward_fn_key:  # which column picks the reward function (verl's default: data_source)
        out.append(Override("data.reward_fn_key", s.reward_fn_key))
    if dapo:
        # Only the DAPO trainer generates gen_batch_size prompts and filters down; elsewhere (0.9.x
        # RayPPOTrainer and the one-step-off trainer built on it) the key would resize the dataloader.
        out.append(Override("data.gen_batch_size", s.train_batch_size * GEN_BATCH_MULTIPLIER))
    return out


def _algorithm(dapo: bool) -> list[Override]:
    out = [
        Override("algorithm.adv_estimator", "grpo"),
        Override("algorithm.use_kl_in_reward", False),
        Override("algorithm.kl_ctrl.kl_coef", 0.0),
    ]
    if dapo:
        # One-step-off's trainer never reads filter_groups (0.6.1 recipe and 0.9.1 experimental).
        out += [
            Override("algorithm.filter_groups.enable", True),
            Override("algorithm.filter_groups.metric", FILTER_METRIC),
            Override("algorithm.filter_groups.max_num_gen_batches", FILTER_MAX_NUM_GEN_BATCHES),
        ]
    return out


def _actor(s: TrainingSettings, profile: VersionProfile) -> list[Override]:
    out: list[Override] = [Override(f"{MODEL}.path", s.resolved_model_path())]
    if s.framework is Framework.FSDP:
        # FSDP means FSDP2; the one-step-off runner asserts critic.strategy == actor.strategy.
        out += [Override(f"{ACTOR}.strategy", "fsdp2"), Override("critic.strategy", "fsdp2")]
    grad_clip_key = (
        f"{ACTOR}.optim.clip_grad" if s.framework is Framework.MEGATRON else profile.facts.fsdp_grad_clip_key
    )
    out += [
        Override(f"{ACTOR}.ppo_mini_batch_size", s.ppo_mini_batch_size),
        Override(f"{ACTOR}.use_kl_loss", False),
        Override(f"{ACTOR}.kl_loss_coef", 0.0),
        Override(f"{ACTOR}.clip_ratio_low", CLIP_RATIO_LOW),
        Override(f"{ACTOR}.clip_ratio_high", CLIP_RATIO_HIGH),
        Override(f"{ACTOR}.clip_ratio_c", CLIP_RATIO_C),
        Override(f"{ACTOR}.entropy_coeff", 0),
        Override(f"{ACTOR}.loss_agg_mode", "token-mean"),
        Override(grad_clip_key, GRAD_CLIP),
        Override(f"{ACTOR}.optim.lr", LR),
        Override(f"{ACTOR}.optim.lr_warmup_steps", lr_warmup_steps(s)),
        Override(f"{ACTOR}.optim.weight_decay", WEIGHT_DECAY),
    ]
    return out


def lr_warmup_steps(s: TrainingSettings) -> int:
    """The seed's 10 warmup steps, fewer where the run is shorter on Megatron.

    Megatron's OptimizerParamScheduler asserts ``lr_warmup_steps < lr_decay_steps``, and verl (0.9.1
    ``get_megatron_optimizer_param_scheduler``) sets lr_decay_steps to the run's total steps: a Megatron run of 10
    steps or fewer died in init_model before its first step (seen on the H200, bench/gpu/results/megatron-try2).
    FSDP's warmup scheduler has no such check, and its runs keep the seed's value.
    """
    if s.framework is Framework.MEGATRON:
        return max(0, min(LR_WARMUP_STEPS, s.train_steps - 1))
    return LR_WARMUP_STEPS


def _parallel(s: TrainingSettings, par: Parallelism) -> list[Override]:
    # The reference model is sharded like the actor. Megatron: set for the ref too, because only 0.9.x
    # interpolates ref.megatron.* from the actor (0.6.1's ref takes the engine defaults, TP=PP=1).
    # FSDP: ref.ulysses_sequence_parallel_size interpolates the actor's in every release.
    if s.framework is Framework.MEGATRON:
        sizes = {"tensor_model_parallel_size": par.tp, "pipeline_model_parallel_size": par.pp,
                 "context_parallel_size": par.cp, "expert_model_parallel_size": par.ep}  # fmt: skip
        return [Override(f"{role}.megatron.{key}", value) for role in (ACTOR, REF) for key, value in sizes.items()]
    return [Override(f"{ACTOR}.ulysses_sequence_parallel_size", par.ulysses_sp)]


def _rollout(s: TrainingSettings, profile: VersionProfile) -> list[Override]:
    out = [
        Override(f"{ROLLOUT}.name", s.rollout_name),
        Override(f"{ROLLOUT}.mode", profile.facts.rollout_mode),
        Override(f"{ROLLOUT}.n", s.n_resp_per_prompt),
        Override(f"{ROLLOUT}.tensor_model_parallel_size", s.resolved_rollout_tp()),
        Override(f"{ROLLOUT}.temperature", 1.0),
        Override(f"{ROLLOUT}.top_p", 1.0),
        Override(f"{ROLLOUT}.top_k", -1),
        Override(f"{ROLLOUT}.val_kwargs.temperature", 1.0),
        Override(f"{ROLLOUT}.val_kwargs.top_p", VAL_TOP_P),
        Override(f"{ROLLOUT}.val_kwargs.top_k", -1),
        Override(f"{ROLLOUT}.val_kwargs.do_sample", True),
        Override(f"{ROLLOUT}.val_kwargs.n", 1),
    ]
    if s.mode is Mode.ONE_STEP_OFF:
        out += [
            # Separate rollout GPUs: the trainer asserts `not hybrid_engine`.
            Override("actor_rollout_ref.hybrid_engine", False),
            Override("rollout.nnodes", 1),
            Override("rollout.n_gpus_per_node", s.rollout_gpus),
        ]
    return out


def _reward(s: TrainingSettings, profile: VersionProfile, dapo: bool) -> list[Override]:
    buffer = {
        "enable": True,
        "len": overlong_buffer_len(s.max_response_length),
        "penalty_factor": OVERLONG_PENALTY,
        "log": False,
    }
    custom: list[Override] = []
    if s.reward_fn_path:
        legacy = profile.reward_layout is RewardLayout.LEGACY
        root = "custom_reward_function" if legacy else "reward.custom_reward_function"
        custom = [Override(f"{root}.path", s.resolved_reward_fn_path()), Override(f"{root}.name", s.reward_fn_name)]
    if profile.reward_layout is RewardLayout.LEGACY:
        out = [*custom, Override("reward_model.reward_manager", "dapo")]
        if dapo:
            # main_dapo passes reward_model.overlong_buffer and data.max_response_length itself.
            return out + [Override(f"reward_model.overlong_buffer.{k}", v) for k, v in buffer.items()]
        # The one-step-off runner forwards reward_model.reward_kwargs, which its schema lacks.
        return out + _kwargs("reward_model.reward_kwargs", buffer, s.max_response_length, "+")
    out = [*custom, Override("reward.reward_manager.name", "dapo")]
    # dapo_trainer.yaml declares reward.reward_kwargs; verl's base schema (one-step-off) does not.
    return out + _kwargs("reward.reward_kwargs", buffer, s.max_response_length, "" if dapo else "+")


def _kwargs(root: str, buffer: dict[str, bool | int | float], max_resp_len: int, prefix: Prefix) -> list[Override]:
    out = [Override(f"{root}.overlong_buffer_cfg.{k}", v, prefix) for k, v in buffer.items()]
    out.append(Override(f"{root}.max_resp_len", max_resp_len, prefix))
    return out


def _trainer(inp: WorkflowInput) -> list[Override]:
    s = inp.settings
    gpus = s.colocated_gpus if s.mode is Mode.DAPO else s.trainer_gpus
    nodes = s.slurm_nodes or 1  # several only on the SLURM target (plan._validate: DAPO, GPUs split evenly)
    return [
        Override("trainer.nnodes", nodes),
        Override("trainer.n_gpus_per_node", gpus // nodes),
        Override("trainer.total_training_steps", s.train_steps),
        Override("trainer.total_epochs", total_epochs(s)),
        Override("trainer.project_name", s.project_name),
        Override("trainer.experiment_name", inp.experiment_name),
        Override("trainer.logger", logger_value(inp.swanlab_enabled)),
        # Resume after an OOM relaunch: absolute dir (relative paths resolve in Ray's actor CWD).
        Override("trainer.default_local_dir", inp.checkpoint_dir),
        Override("trainer.resume_mode", "auto"),
        Override("trainer.save_freq", s.save_freq),
        Override("trainer.test_freq", s.save_freq),
        # Skip the initial validation pass: the first training step (and its OOM, if any) shows up
        # minutes earlier; validation still runs every test_freq steps and after the last step.
        Override("trainer.val_before_train", False),
    ]
