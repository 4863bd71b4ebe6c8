"""From training settings + an attempt config + a verl release to a launch plan (pure).

``build_plan`` decides everything about one attempt's process: entry module, config, Hydra
overrides, environment (secrets by name only) and the checkpoint directory. It refuses inputs that
verl would reject later anyway (e.g. a rollout TP that does not divide the rollout GPUs), and it
checks that no secret value handed to it shows up anywhere in the plan.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

import verl_async_dapo.verl.parallel as parallel
from verl_async_dapo.exceptions import EnvError, OverrideError, PlanError, SecretLeakError, VersionError
from verl_async_dapo.policy import AttemptConfig
from verl_async_dapo.settings import Framework, Mode, TrainingSettings, check_name_text
from verl_async_dapo.verl.dapo import WorkflowInput, build_workflow_overrides
from verl_async_dapo.verl.feature_overrides import SequenceBudget, build_feature_overrides
from verl_async_dapo.verl.launch_env import MIN_SECRET_LENGTH, build_launch_env
from verl_async_dapo.verl.overrides import Override, OverrideList
from verl_async_dapo.verl.profiles import VersionProfile, profile_for_version
from verl_async_dapo.verl.user_overrides import (
    CHECKPOINT_KEY,
    SOURCE_FEATURE,
    SOURCE_LADDER,
    SOURCE_RECIPE,
    merge_overrides,
    parse_user_overrides,
    user_value,
)

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
    swanlab_enabled: bool = False  # the swanlab logger in trainer.logger
    # Plain variables (already free of secrets): the proxies without credentials and the SwanLab settings, as
    # launching.plan_with splits them (answers.proxy_env, swanlab.launch_env).
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
    # Override key → where its value came from: recipe / feature / oom_ladder / user.
    sources: dict[str, str] = Field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def override_keys(self) -> tuple[str, ...]:
        return tuple(o.lstrip("+").partition("=")[0] for o in self.overrides)

    def shell_command(self) -> str:
        """For display: ``cd <verl root> && python3 -m ...`` (environment not included)."""
        return f"cd {shlex.quote(self.entry.cwd)} && {shlex.join(self.argv)}"


def checkpoint_dir_for(settings: TrainingSettings, run_id: str) -> str:
    """The user's trainer.default_local_dir override, CKPT_DIR (made absolute under VERL_HOME) or
    ``{VERL_HOME}/checkpoints/{project}/{run_id}``: where every attempt saves and resumes."""
    home = PurePosixPath(settings.verl_home)
    mine = user_value(settings.extra_overrides, CHECKPOINT_KEY)
    if mine:
        return str(PurePosixPath(mine))
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
    par = _parallelism(s)
    _validate(s, profile, par)
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
        workflow = build_workflow_overrides(
            WorkflowInput(
                settings=s,
                profile=profile,
                checkpoint_dir=ckpt,
                experiment_name=experiment,
                swanlab_enabled=request.swanlab_enabled,
                parallelism=par,
            )
        )
        overrides.extend(workflow)
        budget = SequenceBudget(s.max_prompt_length, s.max_response_length)
        features = build_feature_overrides(request.attempt.features, request.attempt.tweaks, s.framework, profile,
                                           budget, s.gpu_memory_utilization)  # fmt: skip
        overrides.extend(features.overrides)
        # What the ladder changed: the same features without its additions and tweaks, compared key by key.
        first = AttemptConfig(features=replace(request.attempt.features, oom_appended=()))
        before = {o.key: o.render() for o in build_feature_overrides(first.features, first.tweaks, s.framework,
                                                                     profile, budget, s.gpu_memory_utilization).overrides}  # fmt: skip
        ladder = {o.key for o in features.overrides if before.get(o.key) != o.render()}
        tagged: list[tuple[Override, str]] = [(o, SOURCE_RECIPE) for o in workflow]
        tagged += [(o, SOURCE_LADDER if o.key in ladder else SOURCE_FEATURE) for o in features.overrides]
        ladder_values = {o.key: o.render().partition("=")[2] for o in features.overrides if o.key in ladder}
        merged = merge_overrides(tagged, parse_user_overrides(s.extra_overrides), ladder_values)
        rendered = merged.rendered
        launch_env = build_launch_env(extra_env=request.extra_env, secret_env_names=request.secret_env_names)
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
        sources=merged.sources,
        notes=(*_notes(s, profile), *par.notes, *features.notes, *merged.notes),
    )
    secrets = [v.get_secret_value() for v in request.secret_values]
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


def trainer_gpus_of(s: TrainingSettings) -> int:
    """The GPUs the training actor shards over: all of them colocated (DAPO), TRAINER_GPUS one-step-off."""
    return s.colocated_gpus if s.mode is Mode.DAPO else s.trainer_gpus


def _parallelism(s: TrainingSettings) -> parallel.Parallelism:
    return parallel.choose(model_path=s.model_path, trainer_gpus=trainer_gpus_of(s),
                           sequence_tokens=s.max_prompt_length + s.max_response_length, tp=s.actor_tp, pp=s.actor_pp,
                           cp=s.actor_cp, ep=s.actor_ep, ulysses_sp=s.ulysses_sp)  # fmt: skip


def _validate(s: TrainingSettings, profile: VersionProfile, par: parallel.Parallelism) -> None:
    if s.rollout_name not in SUPPORTED_ROLLOUTS:
        raise PlanError(f"ROLLOUT_NAME={s.rollout_name!r} is not supported; use one of {', '.join(SUPPORTED_ROLLOUTS)}",
                        ("rollout_name",))  # fmt: skip
    nodes = s.slurm_nodes or 1  # only a SLURM run spans nodes (launching.draft_spec drops slurm_* elsewhere)
    if nodes > 1 and s.mode is Mode.ONE_STEP_OFF:
        raise PlanError("one_step_off_policy across several SLURM nodes is not supported yet (its trainer and rollout "
                        "pools would need a node split); use slurm_nodes=1 or mode dapo", ("slurm_nodes", "mode"))  # fmt: skip
    if nodes > 1 and s.required_gpus() % nodes:
        raise PlanError(f"the {s.required_gpus()} GPUs of the run must split evenly over slurm_nodes={nodes} (verl "
                        "puts trainer.n_gpus_per_node on every node)", ("slurm_nodes", "n_gpus"))  # fmt: skip
    rollout_gpus = s.rollout_gpu_count()
    if rollout_gpus % s.resolved_rollout_tp():
        raise PlanError(
            f"ROLLOUT_TP={s.resolved_rollout_tp()} must divide the {rollout_gpus} rollout GPUs "
            f"({'ROLLOUT_GPUS' if s.mode is Mode.ONE_STEP_OFF else 'colocated GPUs'})",
            ("rollout_tp", "rollout_gpus" if s.mode is Mode.ONE_STEP_OFF else "n_gpus"),
        )
    if s.ppo_mini_batch_size > s.train_batch_size:
        raise PlanError(
            f"PPO_MINI_BATCH_SIZE={s.ppo_mini_batch_size} must not exceed TRAIN_BATCH_SIZE={s.train_batch_size}",
            ("ppo_mini_batch_size", "train_batch_size"),
        )
    megatron = s.framework is Framework.MEGATRON
    problem = parallel.check(par, trainer_gpus_of(s), megatron)
    if problem:
        fields = ("actor_tp", "actor_pp", "actor_cp", "actor_ep") if megatron else ("ulysses_sp",)
        raise PlanError(problem, (*fields, "trainer_gpus" if s.mode is Mode.ONE_STEP_OFF else "n_gpus"))
    if (
        s.mode is Mode.ONE_STEP_OFF
        and s.framework is Framework.MEGATRON
        and profile.facts.rollout_mode == "sync"
        and s.rollout_name != "vllm"
    ):
        # recipe/one_step_off_policy/megatron_workers.py asserts rollout.name == "vllm" on 0.6.x.
        raise PlanError(f"one-step-off with Megatron on verl {profile.version} supports only ROLLOUT_NAME=vllm",
                        ("rollout_name",))  # fmt: skip


def _notes(s: TrainingSettings, profile: VersionProfile) -> list[str]:
    notes = ["trainer.val_before_train=False: the first training step starts without a validation pass"]
    if s.mode is Mode.ONE_STEP_OFF:
        notes.append("one-step-off trainer has no dynamic sampling: algorithm.filter_groups is not set")
    if profile.needs_recipe_submodule and s.mode is Mode.DAPO:
        notes.append("verl >= 0.7.1: recipe/ must be the verl-recipe submodule (git submodule update --init recipe)")
    return notes
