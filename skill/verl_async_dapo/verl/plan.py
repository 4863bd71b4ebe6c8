"""From training settings + an attempt config + a verl release to a launch plan (pure).

``build_plan`` decides everything about one attempt's process: entry module, config, Hydra
overrides, environment (secrets by name only) and the checkpoint directory. It refuses inputs that
verl would reject later anyway (e.g. a rollout TP that does not divide the rollout GPUs), and it
checks that no secret value handed to it shows up anywhere in the plan.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from verl_async_dapo.exceptions import PlanError, SecretLeakError
from verl_async_dapo.policy import AttemptConfig
from verl_async_dapo.settings import Framework, Mode, TrainingSettings, check_name_text
from verl_async_dapo.verl.dapo import WorkflowInput, build_workflow_overrides
from verl_async_dapo.verl.feature_overrides import SequenceBudget, build_feature_overrides
from verl_async_dapo.verl.launch_env import MIN_SECRET_LENGTH, EnvError, build_launch_env
from verl_async_dapo.verl.overrides import OverrideError, OverrideList
from verl_async_dapo.verl.profiles import VersionProfile, profile_for_version
from verl_async_dapo.verl.versions import VersionError

SUPPORTED_ROLLOUTS = ("vllm", "sglang")


class PlanRequest(BaseModel):
    """Everything one attempt's plan depends on."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    settings: TrainingSettings
    attempt: AttemptConfig
    verl_version: str
    run_id: str
    # None: settings.experiment_name, else run_id.
    experiment_name: str | None = None
    swanlab_enabled: bool = False
    # Non-secret SwanLab variables (SWANLAB_MODE, SWANLAB_LOG_DIR, SWANLAB_API_HOST, SWANLAB_WEB_HOST).
    swanlab_env: dict[str, str] = Field(default_factory=dict)
    # Raw proxy settings by name (http_proxy/https_proxy/no_proxy, any case); URLs with credentials
    # become secret names automatically.
    proxy_env: dict[str, str | None] = Field(default_factory=dict)
    # Further plain variables (already free of secrets).
    extra_env: dict[str, str] = Field(default_factory=dict)
    # Names of variables whose values the supervisor injects at launch (e.g. SWANLAB_API_KEY).
    secret_env_names: tuple[str, ...] = ()
    # Secret values, used only to verify that none of them leaks into the plan; never stored.
    secret_values: tuple[SecretStr, ...] = ()

    @field_validator("run_id", "experiment_name")
    @classmethod
    def _safe_name(cls, value: str | None) -> str | None:
        if value is not None:
            check_name_text(value)
        return value


class EntryPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    module: str
    config_name: str
    config_path: str  # relative to cwd (the verl root)
    config_dir: str  # absolute: what --config-path gets (Hydra resolves a relative one next to the module)
    cwd: str  # the verl root: hydra.searchpath file://verl/trainer/config is relative to the CWD


class LaunchPlan(BaseModel):
    """One attempt's launch, JSON-serialisable and free of secret values."""

    model_config = ConfigDict(frozen=True)

    mode: Mode
    framework: Framework
    verl_version: str
    profile: str
    run_id: str
    project_name: str
    experiment_name: str
    entry: EntryPlan
    argv: tuple[str, ...]
    overrides: tuple[str, ...]
    env: dict[str, str]
    secret_env: tuple[str, ...]
    checkpoint_dir: str
    features: dict[str, list[str]]
    tweaks: dict[str, Any]
    notes: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def override_keys(self) -> tuple[str, ...]:
        return tuple(o.lstrip("+").partition("=")[0] for o in self.overrides)

    def shell_command(self) -> str:
        """For display: ``cd <verl root> && python3 -m ...`` (environment not included)."""
        return f"cd {shlex.quote(self.entry.cwd)} && {shlex.join(self.argv)}"


def checkpoint_dir_for(settings: TrainingSettings, run_id: str) -> str:
    """CKPT_DIR (made absolute under VERL_HOME) or ``{VERL_HOME}/checkpoints/{project}/{run_id}``."""
    home = PurePosixPath(settings.verl_home)
    if settings.ckpt_dir:
        path = PurePosixPath(settings.ckpt_dir)
        return str(path if path.is_absolute() else home / path)
    return str(home / "checkpoints" / settings.project_name / run_id)


def build_plan(request: PlanRequest) -> LaunchPlan:
    try:
        profile = profile_for_version(request.verl_version)
    except VersionError as exc:
        raise PlanError(str(exc)) from exc
    s = request.settings
    _validate(s, profile)
    experiment = request.experiment_name or s.experiment_name or request.run_id
    ckpt = checkpoint_dir_for(s, request.run_id)
    entry_point = profile.entry(s.mode)
    entry = EntryPlan(
        module=entry_point.module,
        config_name=entry_point.config_name(s.framework),
        config_path=entry_point.config_path,
        config_dir=str(PurePosixPath(s.verl_home) / entry_point.config_path),
        cwd=s.verl_home,
    )
    try:
        overrides = OverrideList()
        overrides.extend(
            build_workflow_overrides(
                WorkflowInput(
                    settings=s,
                    profile=profile,
                    checkpoint_dir=ckpt,
                    experiment_name=experiment,
                    swanlab_enabled=request.swanlab_enabled,
                )
            )
        )
        features = build_feature_overrides(
            request.attempt.features,
            request.attempt.tweaks,
            s.framework,
            profile,
            SequenceBudget(s.max_prompt_length, s.max_response_length),
            s.gpu_memory_utilization,
        )
        overrides.extend(features.overrides)
        rendered = overrides.rendered()
        launch_env = build_launch_env(
            swanlab_enabled=request.swanlab_enabled,
            swanlab_env=request.swanlab_env,
            proxy_env=request.proxy_env,
            extra_env=request.extra_env,
            secret_env_names=request.secret_env_names,
        )
    except (OverrideError, EnvError) as exc:
        raise PlanError(str(exc)) from exc
    argv = (
        "python3",
        "-m",
        entry.module,
        f"--config-path={entry.config_dir}",
        f"--config-name={entry.config_name}",
        *rendered,
    )
    plan = LaunchPlan(
        mode=s.mode,
        framework=s.framework,
        verl_version=str(profile.version),
        profile=profile.name,
        run_id=request.run_id,
        project_name=s.project_name,
        experiment_name=experiment,
        entry=entry,
        argv=argv,
        overrides=rendered,
        env=launch_env.env,
        secret_env=launch_env.secret_names,
        checkpoint_dir=ckpt,
        features=request.attempt.features.describe(),
        tweaks=request.attempt.tweaks.describe(),
        notes=(*_notes(s, profile), *features.notes),
    )
    secrets = [v.get_secret_value() for v in request.secret_values] + list(launch_env.secret_values)
    assert_no_secret(plan, secrets)
    return plan


def assert_no_secret(plan: LaunchPlan, secrets: list[str]) -> None:
    """Raise :class:`SecretLeakError` if any secret value occurs anywhere in the serialised plan."""
    texts = _plan_texts(plan)
    for secret in secrets:
        if len(secret) < MIN_SECRET_LENGTH:
            raise SecretLeakError(
                f"a secret value shorter than {MIN_SECRET_LENGTH} characters cannot be checked for leaks"
            )
        for where, text in texts:
            if secret in text:
                raise SecretLeakError(f"a secret value would appear in the plan ({where}); refusing to build it")


def _plan_texts(plan: LaunchPlan) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = [(f"argv[{i}]", arg) for i, arg in enumerate(plan.argv)]
    texts += [(f"env {name}", f"{name}={value}") for name, value in plan.env.items()]
    texts.append(("plan", plan.model_dump_json()))
    return texts


def _validate(s: TrainingSettings, profile: VersionProfile) -> None:
    if s.rollout_name not in SUPPORTED_ROLLOUTS:
        raise PlanError(f"ROLLOUT_NAME={s.rollout_name!r} is not supported; use one of {', '.join(SUPPORTED_ROLLOUTS)}")
    rollout_gpus = s.rollout_gpus if s.mode is Mode.ONE_STEP_OFF else s.colocated_gpus
    if rollout_gpus % s.rollout_tp:
        raise PlanError(
            f"ROLLOUT_TP={s.rollout_tp} must divide the {rollout_gpus} rollout GPUs "
            f"({'ROLLOUT_GPUS' if s.mode is Mode.ONE_STEP_OFF else 'colocated GPUs'})"
        )
    if s.ppo_mini_batch_size > s.train_batch_size:
        raise PlanError(
            f"PPO_MINI_BATCH_SIZE={s.ppo_mini_batch_size} must not exceed TRAIN_BATCH_SIZE={s.train_batch_size}"
        )
    if (
        s.mode is Mode.ONE_STEP_OFF
        and s.framework is Framework.MEGATRON
        and profile.facts.rollout_mode == "sync"
        and s.rollout_name != "vllm"
    ):
        # recipe/one_step_off_policy/megatron_workers.py asserts rollout.name == "vllm" on 0.6.x.
        raise PlanError(f"one-step-off with Megatron on verl {profile.version} supports only ROLLOUT_NAME=vllm")


def _notes(s: TrainingSettings, profile: VersionProfile) -> list[str]:
    notes = ["trainer.val_before_train=False: the first training step starts without a validation pass"]
    if s.mode is Mode.ONE_STEP_OFF:
        notes.append("one-step-off trainer has no dynamic sampling: algorithm.filter_groups is not set")
    if profile.needs_recipe_submodule and s.mode is Mode.DAPO:
        notes.append("verl >= 0.7.1: recipe/ must be the verl-recipe submodule (git submodule update --init recipe)")
    return notes
