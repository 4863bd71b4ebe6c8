"""The one plan builder: from a run spec and an attempt config to a launch plan plus its secret environment.

Every launch and every preview goes through :func:`plan_with`: ``plan`` (CLI) and ``plan_training`` (MCP)
with a draft spec, ``start`` / quick start to refuse an unplannable run, and the supervisor for each attempt.
So what a preview shows is what a real run launches (tests/supervisor/test_plan_matches_launch.py).

The plan itself never holds a secret (it is stored, printed and diffed); the secret values are
looked up here, at launch time, and handed only to the target's process environment.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from pydantic import SecretStr

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import FeaturesAnswer, ProxyAnswer, SwanlabAnswer, proxy_env
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import PlanError
from verl_async_dapo.policy import AttemptConfig, Decision
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.verl import LaunchPlan, PlanRequest, build_plan


def default_experiment_name() -> str:
    return time.strftime("dapo-%Y%m%d-%H%M%S")


SLURM_FIELDS = tuple(name for name in TrainingSettings.model_fields if name.startswith("slurm_"))


def default_of(name: str) -> object:
    return TrainingSettings.model_fields[name].get_default()


def draft_spec(
    *,
    target: str,
    target_kind: str,
    settings: TrainingSettings,
    verl_version: str,
    features: FeaturesAnswer,
    proxy: ProxyAnswer,
    swanlab: SwanlabAnswer | None,
    run_id: str,
) -> RunSpec:
    """The spec a run is frozen to (start) or would be (preview): the same fields either way. The slurm_* parameters
    belong to the SLURM target only: on any other target they are dropped (a VAD_SLURM_NODES in the server's
    environment must not make a host run plan several nodes)."""
    if target_kind != "slurm":
        settings = settings.model_copy(update={name: default_of(name) for name in SLURM_FIELDS})
    return RunSpec(
        target=target, target_kind=target_kind, settings=settings.model_dump(mode="json"), verl_version=verl_version,
        features=features, proxy=proxy, swanlab=swanlab, run_dir=f"{settings.verl_home}/.verl-async-dapo/runs/{run_id}",
        experiment_name=settings.experiment_name or default_experiment_name(),
    )  # fmt: skip


def swanlab_config_of(ctx: AppContext, spec: RunSpec) -> swanlab_cfg.SwanlabConfig | None:
    answer = spec.swanlab
    if answer is None:
        return None
    key = ctx.secrets.get(answer.key_ref) if answer.key_ref else None
    return swanlab_cfg.SwanlabConfig(
        mode=swanlab_cfg.SwanlabMode(answer.mode), host=answer.host, api_key=key, log_dir=answer.log_dir,
        source="session",
    )  # fmt: skip


def proxy_values_of(ctx: AppContext, spec: RunSpec) -> dict[str, str | None]:
    values: dict[str, str | None] = {"http_proxy": spec.proxy.http_proxy, "https_proxy": spec.proxy.https_proxy,
                                     "no_proxy": spec.proxy.no_proxy}  # fmt: skip
    if spec.proxy.secret_ref:
        values.update(json.loads(ctx.secrets.get(spec.proxy.secret_ref)))
    return values


def plan_with(
    spec: RunSpec,
    config: AttemptConfig,
    swanlab: swanlab_cfg.SwanlabConfig | None,
    proxy_values: dict[str, str | None],
) -> tuple[LaunchPlan, dict[str, str]]:
    """The attempt's plan and the secret env its process gets (the values never enter the plan)."""
    plain_env, secret_env = proxy_env(proxy_values)
    swanlab_on = swanlab is not None and swanlab_cfg.logger_enabled(swanlab)
    if swanlab is not None:
        sw_plain, sw_secret = swanlab_cfg.launch_env(swanlab)
        plain_env.update(sw_plain)
        secret_env.update(sw_secret)
    plan = build_plan(
        PlanRequest(
            settings=spec.training_settings(),
            attempt=config,
            verl_version=spec.verl_version,
            run_id=spec.run_dir.rstrip("/").rsplit("/", 1)[-1],
            experiment_name=spec.experiment_name,
            swanlab_enabled=swanlab_on,
            extra_env=plain_env,
            secret_env_names=tuple(sorted(secret_env)),
            secret_values=tuple(SecretStr(v) for v in secret_env.values()),
        )
    )
    return plan, secret_env


def plan_for(
    ctx: AppContext, spec: RunSpec, config: AttemptConfig, *, with_secrets: bool
) -> tuple[LaunchPlan, dict[str, str]]:
    """The attempt's plan for a frozen run (secrets from the secret store) and, when asked, its secret env."""
    plan, secret_env = plan_with(spec, config, swanlab_config_of(ctx, spec), proxy_values_of(ctx, spec))
    return plan, (secret_env if with_secrets else {})


def skip_pinned_rungs(
    decision: Decision,
    previous_overrides: Sequence[str],
    overrides_of: Callable[[AttemptConfig], Sequence[str]],
    decide_from: Callable[[AttemptConfig], Decision],
) -> Decision:
    """Climb past OOM rungs that would relaunch with exactly the previous overrides because the user's own
    overrides pin every key they change: such a relaunch would only fail again and spend a retry."""
    skipped: list[str] = []
    while decision.relaunch and decision.next_config is not None:
        try:
            unchanged = list(overrides_of(decision.next_config)) == list(previous_overrides)
        except PlanError:  # the launch reports it
            break
        if not unchanged:
            break
        skipped += decision.changes
        decision = decide_from(decision.next_config)
    if not skipped:
        return decision
    note = f"skipped {', '.join(skipped)}: your overrides pin every key it changes"
    return replace(decision, reason=f"{decision.reason} ({note})")
