"""``verl-async-dapo plan --json``: the exact launch for the current environment, no side effects.

Shows what an attempt would run: entry, argv, overrides, environment (secret values are never
part of a plan; their names are listed under ``secret_env``) and where each feature came from.
"""

from __future__ import annotations

import os
from typing import Any

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import FeatureSet, parse_user_features
from verl_async_dapo.policy import AttemptConfig, decide
from verl_async_dapo.settings import TrainingSettings, config_dir
from verl_async_dapo.verl import PlanRequest, build_plan

DEFAULT_PLAN_VERSION = "0.9.1"


def plan_from_cli(
    *,
    mode: str | None,
    framework: str | None,
    verl_version: str | None,
    features: str | None,
    oom_step: int,
    env: dict[str, str] | None = None,
    model_config: str | None = None,
    gpu_memory_gib: float | None = None,
) -> dict[str, Any]:
    env = dict(os.environ if env is None else env)
    overrides = {k: v for k, v in {"mode": mode, "framework": framework}.items() if v}
    settings = TrainingSettings.model_validate({**TrainingSettings().model_dump(), **overrides})
    choice = parse_user_features(features) if features is not None else settings.feature_choice()
    config = AttemptConfig(features=FeatureSet(explicit=choice))
    if oom_step < 0:
        raise ValueError("--oom-step must be >= 0")
    for step in range(oom_step):
        decision = decide(config, ErrorCategory.GPU_OOM, relaunches_so_far=step, max_retries=oom_step,
                          base_gpu_memory_utilization=settings.gpu_memory_utilization)  # fmt: skip
        if decision.next_config is None:
            raise ValueError(f"no further OOM step after {step}: {decision.reason}")
        config = decision.next_config
    swanlab = swanlab_cfg.resolve_configured(env, config_dir() / "swanlab.json")
    plain_env: dict[str, str] = {}
    secret_names: list[str] = []
    if swanlab is not None:
        sw_plain, sw_secret = swanlab_cfg.launch_env(swanlab)
        plain_env.update(sw_plain)
        secret_names.extend(sw_secret)
    plan = build_plan(
        PlanRequest(
            settings=settings,
            attempt=config,
            verl_version=verl_version or settings.verl_version or DEFAULT_PLAN_VERSION,
            run_id="run_preview",
            experiment_name=settings.experiment_name,
            swanlab_enabled=swanlab is not None and swanlab_cfg.logger_enabled(swanlab),
            proxy_env={k: env.get(k) for k in ("http_proxy", "https_proxy", "no_proxy")},
            extra_env=plain_env,
            secret_env_names=tuple(secret_names),
        )
    )
    data = plan.to_json_dict()
    data["features"] = config.features.describe()
    data["memory_estimate"] = memory_estimate(settings, config, model_config, gpu_memory_gib)
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
