"""Previews of a launch: ``verl-async-dapo plan`` and the ``plan_training`` tool, no side effects.

Both build a draft run spec and hand it to the one plan builder (``launching.plan_with``) that start and the
supervisor use, so the preview is the launch: entry, argv, overrides, environment (secret values are never part
of a plan; their names are listed under ``secret_env``), where each feature and each value came from, and what
the preview had to assume (a verl version not detected yet, a question not answered yet).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import FeaturesAnswer, ProxyAnswer
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import FeatureChoice, FeatureSet, parse_user_features
from verl_async_dapo.paths import config_dir
from verl_async_dapo.plans.launching import draft_spec, plan_with
from verl_async_dapo.policy import AttemptConfig, decide
from verl_async_dapo.settings import TrainingSettings, env_name, settings_with_values

if TYPE_CHECKING:
    from verl_async_dapo.context import AppContext

DEFAULT_PLAN_VERSION = "0.9.1"
PREVIEW_RUN_ID = "run_preview"


def features_answer(choice: FeatureChoice) -> FeaturesAnswer:
    return FeaturesAnswer(enabled=tuple(sorted(f.value for f in choice.enabled)),
                          disabled=tuple(sorted(f.value for f in choice.disabled)))  # fmt: skip


def settings_sources(params: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """Each run parameter: from the call (argument / flag), the server's environment, or the default."""
    out: dict[str, str] = {}
    for field in TrainingSettings.model_fields:
        if params.get(field) is not None:
            out[field] = "argument"
        elif env.get(env_name(field)) is not None:
            out[field] = "environment"
        else:
            out[field] = "default"
    return out


def ladder_config(settings: TrainingSettings, features: FeaturesAnswer, oom_step: int) -> AttemptConfig:
    """The attempt config after ``oom_step`` GPU-OOM escalations (0 = the first attempt)."""
    if oom_step < 0:
        raise ValueError("oom_step must be >= 0")
    config = AttemptConfig(features=FeatureSet(explicit=features.choice()))
    for step in range(oom_step):
        decision = decide(config, ErrorCategory.GPU_OOM, relaunches_so_far=step, max_retries=oom_step,
                          base_gpu_memory_utilization=settings.gpu_memory_utilization)  # fmt: skip
        if decision.next_config is None:
            raise ValueError(f"no further OOM step after {step}: {decision.reason}")
        config = decision.next_config
    return config


def preview(
    *,
    settings: TrainingSettings,
    sources: dict[str, str],
    features: FeaturesAnswer,
    proxy_values: dict[str, str | None],
    swanlab: swanlab_cfg.SwanlabConfig | None,
    target: tuple[str, str],
    verl_version: str,
    oom_step: int = 0,
    assumed: tuple[str, ...] = (),
    run_id: str = PREVIEW_RUN_ID,
) -> dict[str, Any]:
    """The launch plan of the first attempt (or after ``oom_step`` OOMs) as JSON; raises PlanError."""
    spec = draft_spec(target=target[0], target_kind=target[1], settings=settings, verl_version=verl_version,
                      features=features, proxy=ProxyAnswer(), swanlab=None, run_id=run_id)  # fmt: skip
    config = ladder_config(settings, features, oom_step)
    plan, _secret_env = plan_with(spec, config, swanlab, proxy_values)
    data = plan.to_json_dict()
    data["features"] = config.features.describe()
    data["settings"] = settings.model_dump(mode="json")
    data["settings_sources"] = sources
    data["assumed"] = list(assumed)
    return data


def plan_from_cli(
    *,
    mode: str | None,
    framework: str | None,
    verl_version: str | None,
    features: str | None,
    oom_step: int,
    env: dict[str, str] | None = None,
    params: dict[str, Any] | None = None,
    model_config: str | None = None,
    gpu_memory_gib: float | None = None,
) -> dict[str, Any]:
    """``verl-async-dapo plan``: the environment's parameters with the flags on top (no session, no store)."""
    env = dict(os.environ if env is None else env)
    explicit = {k: v for k, v in {**(params or {}), "mode": mode, "framework": framework}.items() if v is not None}
    settings = settings_with_values(explicit)
    choice = parse_user_features(features) if features is not None else settings.feature_choice()
    swanlab = swanlab_cfg.resolve_configured(env, config_dir() / "swanlab.json")
    assumed = [] if verl_version or settings.verl_version else [
        f"verl {DEFAULT_PLAN_VERSION} (start detects the version installed in the target)"]  # fmt: skip
    if swanlab is None:
        assumed.append("SwanLab not configured: logger console only")
    data = preview(
        settings=settings, sources=settings_sources(explicit, env), features=features_answer(choice),
        proxy_values={k: env.get(k) for k in ("http_proxy", "https_proxy", "no_proxy")}, swanlab=swanlab,
        target=("preview", "host"), verl_version=verl_version or settings.verl_version or DEFAULT_PLAN_VERSION,
        oom_step=oom_step, assumed=tuple(assumed),
    )  # fmt: skip
    data["memory_estimate"] = memory_estimate(settings, ladder_config(settings, features_answer(choice), oom_step),
                                              model_config, gpu_memory_gib)  # fmt: skip
    return data


def memory_estimate(
    settings: TrainingSettings, config: AttemptConfig, model_config: str | None, gpu_memory_gib: float | None
) -> dict[str, Any]:
    """The peak-memory estimate for this plan, from a config.json on this machine (``--model-config``, else
    MODEL_PATH/config.json when MODEL_PATH is readable here); without one, why there is none."""
    import json
    from pathlib import Path

    from verl_async_dapo.memory import ModelShape, estimate_from_settings, propose_features

    path = Path(model_config) if model_config else Path(settings.resolved_model_path()) / "config.json"
    try:
        shape = ModelShape.from_config(json.loads(path.read_text("utf-8")))
    except (OSError, ValueError) as exc:
        return {"note": f"no estimate: {path}: {str(exc)[:160]} (pass --model-config FILE)"}
    util = config.tweaks.rollout_gpu_memory_utilization or settings.gpu_memory_utilization
    effective = {f.value for f in config.features.effective}
    estimate = estimate_from_settings(settings, shape, effective, token_budget_scale=config.tweaks.token_budget_scale,
                                      rollout_util=util, gpu_total_gib=gpu_memory_gib)  # fmt: skip
    out: dict[str, Any] = {"model_config": str(path), **estimate.to_dict()}
    if gpu_memory_gib is not None:  # a whole, empty GPU: what memory features would the first launch need?
        added, proposed = propose_features(settings, shape, effective, {f.value for f in config.features.explicit.disabled},
                                           budget_gib=gpu_memory_gib, gpu_total_gib=gpu_memory_gib, rollout_util=util)  # fmt: skip
        out["proposed_features"] = added
        out["proposed_peak_per_gpu_gib"] = round(proposed.peak_per_gpu_gib or proposed.trainer_peak_gib, 2)
    return out


def plan_training(
    ctx: AppContext, params: dict[str, Any], *, oom_step: int = 0, session_id: str | None = None
) -> dict[str, Any]:
    """The plan ``start_training`` would launch now with these parameters: the current session's answers where
    given (read only: nothing is stored, no secret is copied), what is still open listed under ``assumed``."""
    from verl_async_dapo.answers import ContainerAnswer, SwanlabAnswer
    from verl_async_dapo.exceptions import PlanError, UserInputError
    from verl_async_dapo.flow import Question
    from verl_async_dapo.plans.launching import proxy_values_of, swanlab_config_of
    from verl_async_dapo.sessions import preconfigured_swanlab

    settings = settings_with_values(params)
    sid = session_id or ctx.store.current_session()
    answers = ctx.store.answers(sid) if sid else {}
    assumed: list[str] = []
    target = ("not chosen yet", "docker")
    if Question.CONTAINER.value in answers:
        container = ContainerAnswer.model_validate(answers[Question.CONTAINER.value])
        target = (container.name, container.kind)
    else:
        assumed.append("no container chosen yet (select_container)")
    if Question.FEATURES.value in answers:
        features = FeaturesAnswer.model_validate(answers[Question.FEATURES.value])
    else:
        features = features_answer(settings.feature_choice())
        assumed.append("features not chosen yet: the defaults / USER_FEATURES (choose_features)")
    spec = draft_spec(target=target[0], target_kind=target[1], settings=settings, verl_version="0.0.0",
                      features=features, run_id=PREVIEW_RUN_ID, swanlab=None,
                      proxy=ProxyAnswer.model_validate(answers.get(Question.PROXY.value, {})))  # fmt: skip
    proxy_values = proxy_values_of(ctx, spec)
    if Question.PROXY.value not in answers:
        assumed.append("proxy not answered yet: none (set_proxy)")
    swanlab: swanlab_cfg.SwanlabConfig | None
    if Question.SWANLAB.value in answers:
        answer = SwanlabAnswer.model_validate(answers[Question.SWANLAB.value])
        swanlab = swanlab_config_of(ctx, spec.model_copy(update={"swanlab": answer}))
    else:
        swanlab = preconfigured_swanlab(ctx)
        if swanlab is None:
            assumed.append("SwanLab not configured yet: logger console only (configure_swanlab)")
    version = settings.verl_version
    if version is None:
        version = DEFAULT_PLAN_VERSION
        assumed.append(f"verl {version}: start_training detects the version installed in the target (or pass "
                       "verl_version)")  # fmt: skip
    from verl_async_dapo.plans import approvals

    assumed += [f"start_training asks the user to approve: {line}" for line in approvals.pending(settings, params)]
    try:
        return preview(settings=settings, sources=settings_sources(params, ctx.env), features=features,
                       proxy_values=proxy_values, swanlab=swanlab, target=target, verl_version=version,
                       oom_step=oom_step, assumed=tuple(assumed))  # fmt: skip
    except PlanError as exc:
        raise UserInputError(f"cannot plan this run: {exc}", exc.params) from None
