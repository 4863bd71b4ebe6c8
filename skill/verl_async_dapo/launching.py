"""From a frozen run spec and an attempt config to a launch plan plus its secret environment.

The plan itself never holds a secret (it is stored, printed and diffed); the secret values are
looked up here, at launch time, and handed only to the target's process environment.
"""

from __future__ import annotations

import json

from pydantic import SecretStr

from verl_async_dapo import swanlab as swanlab_cfg
from verl_async_dapo.answers import proxy_env
from verl_async_dapo.app import AppContext
from verl_async_dapo.policy import AttemptConfig
from verl_async_dapo.runspec import RunSpec
from verl_async_dapo.verl import LaunchPlan, PlanRequest, build_plan


def swanlab_config_of(ctx: AppContext, spec: RunSpec) -> swanlab_cfg.SwanlabConfig | None:
    answer = spec.swanlab
    if answer is None:
        return None
    key = ctx.secrets.get(answer.key_ref) if answer.key_ref else None
    return swanlab_cfg.SwanlabConfig(
        mode=swanlab_cfg.SwanlabMode(answer.mode), host=answer.host, api_key=key, log_dir=answer.log_dir,
        source="session",
    )  # fmt: skip


def plan_for(
    ctx: AppContext, spec: RunSpec, config: AttemptConfig, *, with_secrets: bool
) -> tuple[LaunchPlan, dict[str, str]]:
    """The attempt's plan and, when asked, the secret env to add to its process."""
    settings = spec.training_settings()
    plain_env: dict[str, str] = {}
    secret_env: dict[str, str] = {}
    proxy_values = {"http_proxy": spec.proxy.http_proxy, "https_proxy": spec.proxy.https_proxy,
                    "no_proxy": spec.proxy.no_proxy}  # fmt: skip
    if spec.proxy.secret_ref:
        proxy_values.update(json.loads(ctx.secrets.get(spec.proxy.secret_ref)))
    plain_proxy, secret_proxy = proxy_env(proxy_values)
    plain_env.update(plain_proxy)
    secret_env.update(secret_proxy)
    swanlab = swanlab_config_of(ctx, spec)
    swanlab_on = swanlab is not None and swanlab_cfg.logger_enabled(swanlab)
    if swanlab is not None:
        sw_plain, sw_secret = swanlab_cfg.launch_env(swanlab)
        plain_env.update(sw_plain)
        secret_env.update(sw_secret)
    plan = build_plan(
        PlanRequest(
            settings=settings,
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
    return plan, (secret_env if with_secrets else {})
