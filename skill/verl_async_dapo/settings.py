"""The environment parameters of the original skill, with its defaults, plus this tool's own.

One pydantic-settings model reads them; the CLI, the MCP tools and the shell scripts all go
through it, so ``TRAIN_STEPS=-1`` is refused the same way everywhere.
"""

from __future__ import annotations

from enum import Enum
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from verl_async_dapo.exceptions import ParamError, describe_validation_error
from verl_async_dapo.features import FeatureChoice, choice_from_env


class Mode(str, Enum):
    DAPO = "dapo"
    ONE_STEP_OFF = "one_step_off_policy"


class Framework(str, Enum):
    MEGATRON = "megatron"
    FSDP = "fsdp"  # FSDP2 (actor.strategy=fsdp2); plain FSDP1 is legacy in verl


_PosInt = Annotated[int, Field(ge=1)]


class TrainingSettings(BaseSettings):
    """Launch parameters, read from the environment (names as in the original skill)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", populate_by_name=True)

    mode: Mode = Field(Mode.DAPO, validation_alias=AliasChoices("MODE", "mode"))
    framework: Framework = Field(Framework.MEGATRON, validation_alias=AliasChoices("FRAMEWORK", "framework"))
    verl_home: str = Field("/verl", validation_alias=AliasChoices("VERL_HOME", "verl_home"))
    verl_version: str | None = Field(None, validation_alias=AliasChoices("VERL_VERSION", "verl_version"))
    model_path: str = Field("Qwen3-8B", validation_alias=AliasChoices("MODEL_PATH", "model_path"))
    train_file: str = Field("dapo-math-17k.parquet", validation_alias=AliasChoices("TRAIN_FILE", "train_file"))
    val_file: str = Field("aime-2024.parquet", validation_alias=AliasChoices("VAL_FILE", "val_file"))
    train_steps: _PosInt = Field(100, validation_alias=AliasChoices("TRAIN_STEPS", "train_steps"))
    trainer_gpus: _PosInt = Field(4, validation_alias=AliasChoices("TRAINER_GPUS", "trainer_gpus"))
    rollout_gpus: _PosInt = Field(4, validation_alias=AliasChoices("ROLLOUT_GPUS", "rollout_gpus"))
    # Colocated DAPO uses every GPU for both roles; default: TRAINER_GPUS + ROLLOUT_GPUS.
    n_gpus: int | None = Field(None, ge=1, validation_alias=AliasChoices("N_GPUS", "n_gpus"))
    max_prompt_length: _PosInt = Field(2048, validation_alias=AliasChoices("MAX_PROMPT_LENGTH", "max_prompt_length"))
    max_response_length: _PosInt = Field(
        8192, validation_alias=AliasChoices("MAX_RESPONSE_LENGTH", "max_response_length")
    )
    train_batch_size: _PosInt = Field(32, validation_alias=AliasChoices("TRAIN_BATCH_SIZE", "train_batch_size"))
    ppo_mini_batch_size: _PosInt = Field(
        16, validation_alias=AliasChoices("PPO_MINI_BATCH_SIZE", "ppo_mini_batch_size")
    )
    n_resp_per_prompt: _PosInt = Field(8, validation_alias=AliasChoices("N_RESP_PER_PROMPT", "n_resp_per_prompt"))
    # None = 2, or 1 when the rollout GPUs are odd (resolved_rollout_tp): the original default where it fits.
    rollout_tp: int | None = Field(None, ge=1, validation_alias=AliasChoices("ROLLOUT_TP", "rollout_tp"))
    rollout_name: str = Field("vllm", validation_alias=AliasChoices("ROLLOUT_NAME", "rollout_name"))
    gpu_memory_utilization: float = Field(
        0.6, gt=0.05, le=0.95, validation_alias=AliasChoices("GPU_MEMORY_UTILIZATION", "gpu_memory_utilization")
    )
    save_freq: _PosInt = Field(5, validation_alias=AliasChoices("SAVE_FREQ", "save_freq"))
    ckpt_dir: str | None = Field(None, validation_alias=AliasChoices("CKPT_DIR", "ckpt_dir"))
    project_name: str = Field("verl-dapo", validation_alias=AliasChoices("PROJECT_NAME", "project_name"))
    experiment_name: str | None = Field(None, validation_alias=AliasChoices("EXP_NAME", "experiment_name"))
    max_oom_retries: int = Field(2, ge=0, le=10, validation_alias=AliasChoices("MAX_OOM_RETRIES", "max_oom_retries"))
    user_features: str = Field("", validation_alias=AliasChoices("USER_FEATURES", "user_features"))
    enable_offload: str = Field("False", validation_alias=AliasChoices("ENABLE_OFFLOAD", "enable_offload"))
    # Parallelism (references/params.md): None = chosen from the model size and the GPUs (verl/parallel.py).
    actor_tp: int | None = Field(None, ge=1, le=64, validation_alias=AliasChoices("ACTOR_TP", "actor_tp"))
    actor_pp: int | None = Field(None, ge=1, le=64, validation_alias=AliasChoices("ACTOR_PP", "actor_pp"))
    actor_cp: int | None = Field(None, ge=1, le=64, validation_alias=AliasChoices("ACTOR_CP", "actor_cp"))
    actor_ep: int | None = Field(None, ge=1, le=256, validation_alias=AliasChoices("ACTOR_EP", "actor_ep"))
    ulysses_sp: int | None = Field(None, ge=1, le=64, validation_alias=AliasChoices("ULYSSES_SP", "ulysses_sp"))
    # Custom reward function (a .py file inside the target; relative = under VERL_HOME) and data keys.
    reward_fn_path: str | None = Field(None, validation_alias=AliasChoices("REWARD_FN_PATH", "reward_fn_path"))
    reward_fn_name: str = Field("compute_score", validation_alias=AliasChoices("REWARD_FN_NAME", "reward_fn_name"))
    prompt_key: str = Field("prompt", validation_alias=AliasChoices("PROMPT_KEY", "prompt_key"))
    reward_fn_key: str | None = Field(None, validation_alias=AliasChoices("REWARD_FN_KEY", "reward_fn_key"))
    # The SLURM target's batch-job parameters (slurm_options.py checks them; the other targets ignore them).
    # VAD_ names: SLURM's own SLURM_* / SBATCH_* variables mean something else to sbatch.
    slurm_partition: str | None = Field(None, validation_alias=AliasChoices("VAD_SLURM_PARTITION", "slurm_partition"))
    slurm_account: str | None = Field(None, validation_alias=AliasChoices("VAD_SLURM_ACCOUNT", "slurm_account"))
    slurm_nodes: int | None = Field(None, ge=1, le=1024, validation_alias=AliasChoices("VAD_SLURM_NODES", "slurm_nodes"))
    slurm_gpus_per_node: int | None = Field(
        None, ge=0, le=64, validation_alias=AliasChoices("VAD_SLURM_GPUS_PER_NODE", "slurm_gpus_per_node")
    )
    slurm_time_limit: str | None = Field(None, validation_alias=AliasChoices("VAD_SLURM_TIME", "slurm_time_limit"))
    # From the environment: one line per #SBATCH line.
    slurm_sbatch_lines: Annotated[tuple[str, ...], NoDecode] = Field(
        (), validation_alias=AliasChoices("VAD_SLURM_SBATCH_LINES", "slurm_sbatch_lines")
    )
    slurm_startup_seconds: float | None = Field(
        None, gt=0, le=86400, validation_alias=AliasChoices("VAD_SLURM_STARTUP_SECONDS", "slurm_startup_seconds")
    )
    slurm_step_seconds: float | None = Field(
        None, gt=0, le=86400, validation_alias=AliasChoices("VAD_SLURM_STEP_SECONDS", "slurm_step_seconds")
    )
    slurm_start_ray: bool | None = Field(None, validation_alias=AliasChoices("VAD_SLURM_START_RAY", "slurm_start_ray"))
    # The user's own Hydra overrides, applied last (verl/user_overrides.py checks them). From the
    # environment: EXTRA_OVERRIDES, split like a shell would split it (no shell runs).
    extra_overrides: Annotated[tuple[str, ...], NoDecode] = Field(
        (), validation_alias=AliasChoices("EXTRA_OVERRIDES", "extra_overrides")
    )

    @field_validator("slurm_sbatch_lines", mode="before")
    @classmethod
    def _split_lines(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(line.strip() for line in value.splitlines() if line.strip())
        return value

    @model_validator(mode="after")
    def _slurm_options(self) -> TrainingSettings:
        from verl_async_dapo.slurm_options import options_from_settings

        options_from_settings(self)  # raises SlurmOptionError (a ValueError) naming the parameter and the rule
        return self

    @field_validator("framework", mode="before")
    @classmethod
    def _framework_alias(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in {"fsdp2", "fsdp"}:
            return Framework.FSDP
        if isinstance(value, str):
            return value.strip().lower()
        return value

    @field_validator("extra_overrides", mode="before")
    @classmethod
    def _split_overrides(cls, value: Any) -> Any:
        if isinstance(value, str):
            import shlex

            try:
                return tuple(shlex.split(value))
            except ValueError as exc:
                raise ValueError(f"EXTRA_OVERRIDES cannot be split into overrides: {exc}") from None
        return value

    @field_validator("extra_overrides")
    @classmethod
    def _checked_overrides(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from verl_async_dapo.verl.user_overrides import parse_user_overrides

        parse_user_overrides(value)  # raises ValueError naming the override and the rule
        return value

    @field_validator("verl_home", "model_path", "train_file", "val_file", "ckpt_dir", "reward_fn_path")
    @classmethod
    def _safe_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        check_path_text(value)
        return value

    @field_validator("verl_home")
    @classmethod
    def _absolute_home(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"VERL_HOME must be an absolute path inside the target, got {value!r}")
        return str(PurePosixPath(value))

    @field_validator("project_name", "experiment_name", "rollout_name", "prompt_key", "reward_fn_key")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        if value is None:
            return None
        check_name_text(value)
        return value

    @field_validator("reward_fn_name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not value.isidentifier() or len(value) > 128:
            raise ValueError(f"{value[:60]!r} is not a Python function name")
        return value

    @field_validator("reward_fn_path")
    @classmethod
    def _python_file(cls, value: str | None) -> str | None:
        if value is not None and not value.endswith(".py"):
            raise ValueError(f"the reward function file must be a .py file, got {value[:60]!r}")
        return value

    @model_validator(mode="after")
    def _features_parse(self) -> TrainingSettings:
        try:
            self.feature_choice()
        except ValueError as exc:  # name the variables: the message goes to a human reading a script's output
            raise ValueError(
                f"USER_FEATURES={self.user_features!r} ENABLE_OFFLOAD={self.enable_offload!r}: {exc}"
            ) from None
        return self

    def feature_choice(self) -> FeatureChoice:
        return choice_from_env(self.user_features, self.enable_offload)

    @property
    def colocated_gpus(self) -> int:
        return self.n_gpus or (self.trainer_gpus + self.rollout_gpus)

    def required_gpus(self) -> int:
        return self.colocated_gpus if self.mode is Mode.DAPO else self.trainer_gpus + self.rollout_gpus

    def rollout_gpu_count(self) -> int:
        return self.rollout_gpus if self.mode is Mode.ONE_STEP_OFF else self.colocated_gpus

    def resolved_rollout_tp(self) -> int:
        """ROLLOUT_TP, else the original skill's 2 where it divides the rollout GPUs, else 1 (e.g. 1+1 GPUs)."""
        if self.rollout_tp is not None:
            return self.rollout_tp
        return 2 if self.rollout_gpu_count() % 2 == 0 else 1

    def resolved_model_path(self) -> str:
        return _under(self.verl_home, "models", self.model_path)

    def resolved_train_file(self) -> str:
        return _under(self.verl_home, "data", self.train_file)

    def resolved_val_file(self) -> str:
        return _under(self.verl_home, "data", self.val_file)

    def resolved_reward_fn_path(self) -> str | None:
        return _under(self.verl_home, "", self.reward_fn_path) if self.reward_fn_path else None


def env_name(field: str) -> str:
    """The environment variable of a TrainingSettings field (``rollout_tp`` → ``ROLLOUT_TP``)."""
    alias = TrainingSettings.model_fields[field].validation_alias
    return alias.choices[0] if isinstance(alias, AliasChoices) else field.upper()  # type: ignore[return-value]


def settings_with_values(values: dict[str, Any]) -> TrainingSettings:
    """The environment's parameters with the caller's explicit values (by field name) on top, validated together."""
    from pydantic import ValidationError

    clean = {k: v for k, v in values.items() if v is not None}
    try:
        base = TrainingSettings(_env_file=None)  # type: ignore[call-arg]
        return TrainingSettings.model_validate({**base.model_dump(), **clean})
    except ValidationError as exc:
        fields = tuple(str(e["loc"][0]) for e in exc.errors() if e["loc"])
        raise ParamError(f"invalid training parameters: {describe_validation_error(exc)}", fields) from None


# Fields whose MCP argument / CLI flag is not simply the field name.
_FACE_NAMES = {"extra_overrides": ("overrides", "--override"), "slurm_sbatch_lines": ("slurm_sbatch_lines", "--slurm-sbatch-line")}


def mcp_argument(field: str) -> str:
    return _FACE_NAMES.get(field, (field, ""))[0]


def cli_flag(field: str) -> str:
    return _FACE_NAMES.get(field, ("", ""))[1] or f"--{field.replace('_', '-')}"


def param_hint(fields: tuple[str, ...], face: str) -> str:
    """How the caller changes these parameters, in the words of its face (MCP argument, CLI flag, variable)."""
    known = list(dict.fromkeys(f for f in fields if f in TrainingSettings.model_fields))
    if not known:
        return ""
    if face == "cli":
        names = [cli_flag(f) for f in known]
        return f" (change it with {' / '.join(names)}, or {' / '.join(env_name(f) for f in known)})"
    if face == "mcp":
        return f" (change it with the start_training argument {' / '.join(mcp_argument(f) for f in known)})"
    return f" (change {' / '.join(env_name(f) for f in known)})"


def _under(home: str, sub: str, value: str) -> str:
    """Relative names (the original defaults such as ``Qwen3-8B``) live under VERL_HOME/models|data."""
    if value.startswith("/"):
        return str(PurePosixPath(value))
    return str(PurePosixPath(home) / sub / value) if sub else str(PurePosixPath(home) / value)


_FORBIDDEN_CHARS = frozenset("\x00\n\r")
_MAX_PATH = 4096


def check_path_text(value: str) -> None:
    """Reject path strings that could act as an option or escape: leading '-', NUL, newlines, '..'."""
    if not value or len(value) > _MAX_PATH:
        raise ValueError("path must be 1..4096 characters")
    if value.startswith("-"):
        raise ValueError(f"path may not start with '-': {value[:60]!r}")
    if any(ch in _FORBIDDEN_CHARS for ch in value):
        raise ValueError("path may not contain NUL or newline characters")
    if ".." in PurePosixPath(value).parts:
        raise ValueError(f"path may not contain '..': {value[:60]!r}")


def check_name_text(value: str) -> None:
    """Names that end up in Hydra values and directory names: a conservative character set."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", value):
        raise ValueError(
            f"{value[:60]!r} is not a valid name: use letters, digits, '.', '_' or '-' (max 128), not starting with '-'"
        )
