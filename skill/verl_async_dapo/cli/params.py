"""The run parameters as CLI flags of ``plan`` and ``start`` (one per TrainingSettings field, like the MCP tools).

A flag's name is the field's with dashes (``--rollout-tp``); ``--override KEY=VALUE`` (repeatable) is
EXTRA_OVERRIDES. argparse only parses: the settings model validates, as for the MCP tools and the scripts'
variables. A static table (no pydantic import) keeps ``--help`` fast; tests/core/test_cli_params.py checks that
it matches the settings model.
"""

from __future__ import annotations

import argparse
from typing import Any

# field, type, help (the variable in parentheses is the environment default)
FLAGS: tuple[tuple[str, type, str], ...] = (
    ("verl_home", str, "verl checkout in the target (VERL_HOME, /verl)"),
    ("verl_version", str, "verl release, e.g. 0.9.1 (VERL_VERSION; start detects it)"),
    ("model_path", str, "model dir; relative = VERL_HOME/models/... (MODEL_PATH, Qwen3-8B)"),
    ("train_file", str, "training parquet; relative = VERL_HOME/data/... (TRAIN_FILE)"),
    ("val_file", str, "validation parquet (VAL_FILE)"),
    ("train_steps", int, "training steps (TRAIN_STEPS, 100)"),
    ("trainer_gpus", int, "trainer GPUs (TRAINER_GPUS, 4)"),
    ("rollout_gpus", int, "rollout GPUs (ROLLOUT_GPUS, 4)"),
    ("n_gpus", int, "GPUs of colocated DAPO (N_GPUS, trainer + rollout)"),
    ("max_prompt_length", int, "prompt tokens (MAX_PROMPT_LENGTH, 2048)"),
    ("max_response_length", int, "response tokens (MAX_RESPONSE_LENGTH, 8192)"),
    ("train_batch_size", int, "prompts per step (TRAIN_BATCH_SIZE, 32)"),
    ("ppo_mini_batch_size", int, "prompts per actor update (PPO_MINI_BATCH_SIZE, 16)"),
    ("n_resp_per_prompt", int, "responses per prompt (N_RESP_PER_PROMPT, 8)"),
    ("rollout_tp", int, "rollout tensor parallel size (ROLLOUT_TP, 2; 1 for odd rollout GPUs)"),
    ("rollout_name", str, "vllm or sglang (ROLLOUT_NAME, vllm)"),
    ("gpu_memory_utilization", float, "rollout share of GPU memory (GPU_MEMORY_UTILIZATION, 0.6)"),
    ("save_freq", int, "checkpoint every N steps (SAVE_FREQ, 5)"),
    ("ckpt_dir", str, "checkpoint directory (CKPT_DIR)"),
    ("project_name", str, "project name (PROJECT_NAME, verl-dapo)"),
    ("experiment_name", str, "experiment name (EXP_NAME, dapo-<time>)"),
    ("max_oom_retries", int, "OOM relaunches at most (MAX_OOM_RETRIES, 2)"),
    ("actor_tp", int, "Megatron actor tensor parallel (ACTOR_TP, from the model size)"),
    ("actor_pp", int, "Megatron actor pipeline parallel (ACTOR_PP, from the model size)"),
    ("actor_cp", int, "Megatron actor context parallel (ACTOR_CP, 1)"),
    ("actor_ep", int, "Megatron actor expert parallel (ACTOR_EP, 1)"),
    ("ulysses_sp", int, "FSDP Ulysses sequence parallel (ULYSSES_SP, 1)"),
    ("reward_fn_path", str, "custom reward function .py in the target (REWARD_FN_PATH)"),
    ("reward_fn_name", str, "function in that file (REWARD_FN_NAME, compute_score)"),
    ("prompt_key", str, "dataset column of the prompt (PROMPT_KEY, prompt)"),
    ("reward_fn_key", str, "dataset column selecting the reward function (REWARD_FN_KEY)"),
    ("slurm_partition", str, "SLURM target: partition (VAD_SLURM_PARTITION, the cluster's default)"),
    ("slurm_account", str, "SLURM target: account (VAD_SLURM_ACCOUNT)"),
    ("slurm_nodes", int, "SLURM target: nodes (VAD_SLURM_NODES, 1)"),
    ("slurm_gpus_per_node", int, "SLURM target: --gpus-per-node (VAD_SLURM_GPUS_PER_NODE, the run's GPUs / nodes)"),
    ("slurm_time_limit", str, "SLURM target: --time, e.g. 04:00:00 (VAD_SLURM_TIME, the partition's)"),
    ("slurm_startup_seconds", float, "SLURM target: estimated start-up seconds (VAD_SLURM_STARTUP_SECONDS, 300)"),
    ("slurm_step_seconds", float, "SLURM target: estimated seconds a step (VAD_SLURM_STEP_SECONDS, 60)"),
    ("slurm_start_ray", str, "SLURM target: true/false, start Ray across the job's nodes (VAD_SLURM_START_RAY; "
     "default only for several nodes)"),
)
# mode and framework are flags of their own (with choices); the features have --features.
OTHER_FIELDS = ("mode", "framework", "extra_overrides", "slurm_sbatch_lines")


def add_training_flags(p: argparse.ArgumentParser, *, with_version: bool = True) -> None:
    """``with_version=False`` where the command has its own --verl-version (plan)."""
    group = p.add_argument_group("run parameters (default: the environment variable, else the skill's default)")
    for field, kind, text in FLAGS:
        if field == "verl_version" and not with_version:
            continue
        group.add_argument(f"--{field.replace('_', '-')}", dest=field, type=kind, help=text)
    group.add_argument("--override", dest="extra_overrides", action="append", metavar="KEY=VALUE",
                       help="a Hydra override of your own, applied last (repeatable; EXTRA_OVERRIDES)")  # fmt: skip
    group.add_argument("--slurm-sbatch-line", dest="slurm_sbatch_lines", action="append", metavar="'#SBATCH --K=V'",
                       help="SLURM target: an extra #SBATCH line (repeatable; VAD_SLURM_SBATCH_LINES)")  # fmt: skip


def training_params(args: argparse.Namespace) -> dict[str, Any]:
    """The flags given (None = not given) as TrainingSettings fields."""
    out: dict[str, Any] = {field: getattr(args, field, None) for field, _, _ in FLAGS}
    out["mode"] = getattr(args, "mode", None)
    out["framework"] = getattr(args, "framework", None)
    overrides = getattr(args, "extra_overrides", None)
    out["extra_overrides"] = tuple(overrides) if overrides else None
    lines = getattr(args, "slurm_sbatch_lines", None)
    out["slurm_sbatch_lines"] = tuple(lines) if lines else None
    return {k: v for k, v in out.items() if v is not None}
