"""No silent variable: an environment variable that looks like one of ours but is not (issue 28).

``TRAIN_STEP=4 bash scripts/run_dapo.sh`` trained 100 steps: the misspelt variable was simply not read. Two kinds
are named, with the closest known name:

- any ``VERL_ASYNC_DAPO_*`` that is not a setting of this tool (the prefix is ours: nothing else reads it);
- a variable a single edit or two away from one of the run parameters (``TRAIN_STEP``, ``N_GPU``, ``MODEL``):
  only near-misses, since the environment holds many variables that are nobody's mistake.

Pure: takes the environment as a mapping, returns the warnings; the faces print or log them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

PREFIX = "VERL_ASYNC_DAPO_"
# Every VERL_ASYNC_DAPO_* read by the product, its test harness (TEST_RAY, RAY_VENV, WHEEL_CACHE) and the
# supervisor's own hand-off (SUPERVISOR_LOCK_FD). A new one is added here (tests/core/test_env_names.py checks
# this list against the code).
PRODUCT_VARIABLES = frozenset({
    "VERL_ASYNC_DAPO_ALLOWED_HOSTS", "VERL_ASYNC_DAPO_ALLOW_NO_GPUS", "VERL_ASYNC_DAPO_CONFIG_DIR",
    "VERL_ASYNC_DAPO_CONTAINER_PRIVILEGES",
    "VERL_ASYNC_DAPO_HOME", "VERL_ASYNC_DAPO_HOST_RAY_STOP", "VERL_ASYNC_DAPO_HTTP_TOKEN",
    "VERL_ASYNC_DAPO_MOUNT_ALLOW", "VERL_ASYNC_DAPO_RAY_ADDRESS", "VERL_ASYNC_DAPO_SUPERVISOR_LOCK_FD",
    "VERL_ASYNC_DAPO_WATCHDOG", "VERL_ASYNC_DAPO_TEST_RAY", "VERL_ASYNC_DAPO_RAY_VENV",
    "VERL_ASYNC_DAPO_WHEEL_CACHE",
})  # fmt: skip
# The scripts' own variables besides the run parameters (scripts/*.sh, cli/quickstart.py).
SCRIPT_VARIABLES = frozenset({"CONTAINER", "VAD_CLI", "SWANLAB_HOST", "SWANLAB_API_KEY", "SWANLAB_MODE",
                              "SWANLAB_LOG_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"})  # fmt: skip
NEAR_MISS_CUTOFF = 0.85


def run_parameter_variables() -> frozenset[str]:
    """The environment names of TrainingSettings (TRAIN_STEPS, MODEL_PATH, …): the upper-case aliases."""
    from pydantic import AliasChoices

    from verl_async_dapo.settings import TrainingSettings

    names: set[str] = set()
    for field in TrainingSettings.model_fields.values():
        alias = field.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias] if isinstance(alias, str) else []
        names.update(c for c in choices if isinstance(c, str) and c.isupper())
    return frozenset(names)


def unknown_variables(env: Mapping[str, str]) -> list[str]:
    """One warning per variable that is probably meant as one of ours, naming the closest known name."""
    params = run_parameter_variables()
    known = params | SCRIPT_VARIABLES | PRODUCT_VARIABLES
    warnings = []
    for name in sorted(env):
        if name in known:
            continue
        if name.startswith(PREFIX):
            close = difflib.get_close_matches(name, sorted(PRODUCT_VARIABLES), n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            warnings.append(f"{name} is not a setting of verl-async-dapo and is ignored{hint}")
            continue
        if not name.isupper() or name.startswith("SWANLAB_"):  # SwanLab's SDK reads many SWANLAB_* of its own
            continue
        close = difflib.get_close_matches(name, sorted(params | SCRIPT_VARIABLES), n=2, cutoff=NEAR_MISS_CUTOFF)
        if close:
            warnings.append(f"{name} is not read by verl-async-dapo (ignored); did you mean {' or '.join(close)}?")
    return warnings
