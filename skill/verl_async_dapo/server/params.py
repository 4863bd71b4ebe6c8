"""The run parameters of start_training / plan_training as MCP arguments (JSON Schema the agent reads).

One argument per TrainingSettings field (same name; ``overrides`` is EXTRA_OVERRIDES), so every training
parameter can be set per run, not only in the server's environment. Omitted (null) = the server's
environment, else the default. The bounds here only keep junk out early; the settings model
(settings.py) is what validates, the same way for the MCP tools, the CLI flags and the scripts' variables.
tests/mcp/test_mcp_training_params.py checks that this list and the settings model agree.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_Path = Annotated[str | None, Field(max_length=4096)]


def _int(env: str, default: str, ge: int = 1, le: int = 1 << 20, what: str = "") -> Any:
    desc = f"{what} Default {env} or {default}".strip()
    return Annotated[int | None, Field(ge=ge, le=le, description=desc)]


ResumeForceArg = Annotated[bool, Field(description="Resume even though the run failed for a reason its frozen answers "
                                  "hold (the user fixed it outside them: the file is in place now, the server is back)")]
ModeArg = Annotated[Literal["dapo", "one_step_off_policy"] | None, Field(description="Default MODE or dapo")]
FrameworkArg = Annotated[Literal["megatron", "fsdp"] | None, Field(description="Default FRAMEWORK or megatron")]
VerlHomeArg = Annotated[str | None, Field(max_length=4096, description="verl checkout in the target (absolute). "
                                          "Default VERL_HOME or /verl")]  # fmt: skip
VerlVersionArg = Annotated[str | None, Field(max_length=32, description="e.g. 0.9.1; default VERL_VERSION or "
                                             "detected in the target by preflight")]  # fmt: skip
ModelPathArg = Annotated[
    str | None, Field(max_length=4096, description="Default MODEL_PATH or Qwen3-8B (relative = VERL_HOME/models/…)")
]
TrainFileArg = Annotated[
    str | None,
    Field(max_length=4096, description="Default TRAIN_FILE or dapo-math-17k.parquet (relative = VERL_HOME/data/…)"),
]
ValFileArg = Annotated[str | None, Field(max_length=4096, description="Default VAL_FILE or aime-2024.parquet")]
TrainStepsArg = Annotated[int | None, Field(ge=1, le=10_000_000, description="Default TRAIN_STEPS or 100")]
TrainerGpusArg = Annotated[int | None, Field(ge=1, le=4096, description="Default TRAINER_GPUS or 4")]
RolloutGpusArg = Annotated[int | None, Field(ge=1, le=4096, description="Default ROLLOUT_GPUS or 4")]
NGpusArg = Annotated[int | None, Field(ge=1, le=4096, description="GPUs of colocated DAPO. Default N_GPUS or "
                                       "TRAINER_GPUS + ROLLOUT_GPUS")]  # fmt: skip
MaxPromptLengthArg = _int("MAX_PROMPT_LENGTH", "2048", what="Prompt tokens.")
MaxResponseLengthArg = Annotated[int | None, Field(ge=1, le=1 << 20, description="Default MAX_RESPONSE_LENGTH or 8192")]
TrainBatchSizeArg = _int("TRAIN_BATCH_SIZE", "32", what="Prompts per step.")
PpoMiniBatchSizeArg = _int("PPO_MINI_BATCH_SIZE", "16", what="Prompts per actor update (<= train_batch_size).")
NRespPerPromptArg = _int("N_RESP_PER_PROMPT", "8", le=1024, what="Responses sampled per prompt.")
RolloutTpArg = _int("ROLLOUT_TP", "2 (1 for an odd number of rollout GPUs)", le=64,
                    what="Tensor parallel size of the rollout (divides its GPUs).")
RolloutNameArg = Annotated[Literal["vllm", "sglang"] | None, Field(description="Default ROLLOUT_NAME or vllm")]
GpuMemArg = Annotated[float | None, Field(gt=0.05, le=0.95, description="Rollout share of GPU memory. Default "
                                          "GPU_MEMORY_UTILIZATION or 0.6")]  # fmt: skip
SaveFreqArg = _int("SAVE_FREQ", "5", le=1_000_000, what="Checkpoint (and validation) every N steps.")
CkptDirArg = Annotated[str | None, Field(max_length=4096, description="Default CKPT_DIR or "
                                         "VERL_HOME/checkpoints/<project>/<run id>")]  # fmt: skip
ProjectNameArg = Annotated[str | None, Field(max_length=128, description="Default PROJECT_NAME or verl-dapo")]
ExperimentNameArg = Annotated[str | None, Field(max_length=128, description="Default EXP_NAME or dapo-<time>")]
MaxOomRetriesArg = Annotated[int | None, Field(ge=0, le=10, description="Default MAX_OOM_RETRIES or 2")]
ActorTpArg = _int("ACTOR_TP", "chosen from the model size (params.md)", le=64, what="Megatron actor tensor parallel.")
ActorPpArg = _int("ACTOR_PP", "chosen from the model size", le=64, what="Megatron actor pipeline parallel.")
ActorCpArg = _int("ACTOR_CP", "1", le=64, what="Megatron actor context parallel.")
ActorEpArg = _int("ACTOR_EP", "1", le=256, what="Megatron actor expert parallel (MoE).")
UlyssesSpArg = _int("ULYSSES_SP", "1 (2 from 32k-token sequences)", le=64, what="FSDP Ulysses sequence parallel.")
RewardFnPathArg = Annotated[str | None, Field(max_length=4096, description="Custom reward function file (.py) in "
                                              "the target (relative = under VERL_HOME); checked by preflight")]  # fmt: skip
RewardFnNameArg = Annotated[str | None, Field(max_length=128, description="Function in reward_fn_path. Default "
                                              "REWARD_FN_NAME or compute_score")]  # fmt: skip
PromptKeyArg = Annotated[str | None, Field(max_length=128, description="Dataset column of the prompt. Default "
                                           "PROMPT_KEY or prompt")]  # fmt: skip
RewardFnKeyArg = Annotated[str | None, Field(max_length=128, description="Dataset column that selects the reward "
                                             "function (verl's data.reward_fn_key). Default: verl's data_source")]  # fmt: skip
OverridesArg = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=4096)]] | None,
    Field(
        max_length=128,
        description="The user's own Hydra overrides, e.g. [\"actor_rollout_ref.actor.optim.lr=2e-6\"]: applied last, "
        "they win over this tool's values (also on every OOM relaunch) and are checked with verl's own config in "
        "the target before anything starts. No secrets, no hydra.* keys, no '$'. Default EXTRA_OVERRIDES",
    ),
]
SlurmPartitionArg = Annotated[str | None, Field(max_length=64, description="SLURM target: the partition (sinfo "
                                                "lists them). Default VAD_SLURM_PARTITION or the cluster's default")]  # fmt: skip
SlurmAccountArg = Annotated[str | None, Field(max_length=64, description="SLURM target: the account to charge. "
                                              "Default VAD_SLURM_ACCOUNT or the user's default")]  # fmt: skip
SlurmNodesArg = Annotated[int | None, Field(ge=1, le=1024, description="SLURM target: nodes of the job (Ray spans "
                                            "them). Default VAD_SLURM_NODES or 1")]  # fmt: skip
SlurmGpusPerNodeArg = Annotated[int | None, Field(ge=0, le=64, description="SLURM target: --gpus-per-node. Default "
                                                  "VAD_SLURM_GPUS_PER_NODE or the run's GPUs / nodes")]  # fmt: skip
SlurmTimeLimitArg = Annotated[str | None, Field(max_length=16, description="SLURM target: --time (minutes, HH:MM:SS "
                                                "or D-HH:MM:SS). Default VAD_SLURM_TIME or the partition's")]  # fmt: skip
SlurmSbatchLinesArg = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=256)]] | None,
    Field(max_length=32, description="SLURM target: extra lines of the form '#SBATCH --key=value' (e.g. "
          "'#SBATCH --cpus-per-task=64'); options this tool sets itself are refused. Default VAD_SLURM_SBATCH_LINES"),
]  # fmt: skip
SlurmStartupSecondsArg = Annotated[float | None, Field(gt=0, le=86400, description="SLURM target: estimated start-up "
                                                       "seconds before step 1 (default 300); with slurm_step_seconds "
                                                       "it refuses a time limit too short for one checkpoint")]  # fmt: skip
SlurmStepSecondsArg = Annotated[float | None, Field(gt=0, le=86400, description="SLURM target: estimated seconds a "
                                                    "training step (default 60)")]  # fmt: skip
SlurmStartRayArg = Annotated[bool | None, Field(description="SLURM target: start a Ray cluster across the job's nodes "
                                                "(head on the first, workers via srun). Default VAD_SLURM_START_RAY, "
                                                "else only for several nodes (one node: verl's own ray.init)")]  # fmt: skip
OomStepArg = Annotated[int, Field(ge=0, le=10, description="Show the plan after this many GPU-OOM recoveries")]

# Argument name → TrainingSettings field.
ARGUMENT_FIELDS: dict[str, str] = {
    name: name
    for name in (
        "mode", "framework", "verl_home", "verl_version", "model_path", "train_file", "val_file", "train_steps",
        "trainer_gpus", "rollout_gpus", "n_gpus", "max_prompt_length", "max_response_length", "train_batch_size",
        "ppo_mini_batch_size", "n_resp_per_prompt", "rollout_tp", "rollout_name", "gpu_memory_utilization",
        "save_freq", "ckpt_dir", "project_name", "experiment_name", "max_oom_retries", "actor_tp", "actor_pp",
        "actor_cp", "actor_ep", "ulysses_sp", "reward_fn_path", "reward_fn_name", "prompt_key", "reward_fn_key",
        "slurm_partition", "slurm_account", "slurm_nodes", "slurm_gpus_per_node", "slurm_time_limit",
        "slurm_sbatch_lines", "slurm_startup_seconds", "slurm_step_seconds", "slurm_start_ray",
    )
} | {"overrides": "extra_overrides"}  # fmt: skip
# Set by the features question (choose_features), not per call.
NOT_ARGUMENTS = frozenset({"user_features", "enable_offload"})


def training_params(arguments: dict[str, object]) -> dict[str, object]:
    """Tool arguments → TrainingSettings fields (None = not given)."""
    out = {ARGUMENT_FIELDS[k]: v for k, v in arguments.items() if k in ARGUMENT_FIELDS and v is not None}
    for name in ("extra_overrides", "slurm_sbatch_lines"):
        if name in out:
            out[name] = tuple(out[name])  # type: ignore[call-overload]
    return out


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PlanOut(_Out):
    mode: str
    framework: str
    verl_version: str
    profile: str = Field(description="legacy (verl 0.6.x-0.7.0) or current (0.7.1+) config layout")
    run_id: str = Field(description="run_preview: the real run id (and its checkpoint directory) is set at start")
    project_name: str
    experiment_name: str
    entry: dict[str, str] = Field(description="module, config name and directory, working directory")
    argv: list[str] = Field(description="The training process's command line, exactly as launched (no shell)")
    overrides: list[str] = Field(description="The Hydra overrides within argv")
    env: dict[str, str] = Field(description="Plain environment variables of the training process")
    secret_env: list[str] = Field(description="Names of the secret variables added at launch (values never shown)")
    checkpoint_dir: str
    features: dict[str, list[str]] = Field(description="Features in force and where each came from")
    sources: dict[str, str] = Field(description="Override key → recipe / feature / oom_ladder / user")
    settings: dict[str, Any] = Field(description="The run parameters in effect")
    settings_sources: dict[str, str] = Field(description="Parameter → argument / environment / default")
    notes: list[str] = Field(description="Remarks of the plan (choices made, keys this verl release lacks)")
    assumed: list[str] = Field(description="What the preview assumed because it is not known yet")


class ResumeOut(_Out):
    run_id: str
    status: str = Field(description="starting: the supervisor launches the next attempt")
    attempt: int = Field(description="The attempt number that resumes the run")
    message: str
