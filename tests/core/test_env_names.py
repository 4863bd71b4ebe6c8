"""Issue 28, "no silent argument" for the environment: a misspelt run-parameter variable or an unknown
VERL_ASYNC_DAPO_* is named with the closest known name, on the CLI the scripts call."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from verl_async_dapo.env_names import PRODUCT_VARIABLES, unknown_variables

REPO = Path(__file__).resolve().parents[2]


def test_near_misses_and_unknown_prefixed_names_are_named_with_a_suggestion() -> None:
    warnings = unknown_variables({"TRAIN_STEP": "4", "N_GPU": "8", "VERL_ASYNC_DAPO_HOMEDIR": "/x",
                                  "TRAIN_STEPS": "4", "HOME": "/root", "PATH": "/bin", "SWANLAB_WEB_HOST": "h",
                                  "VERL_ASYNC_DAPO_HOME": "/s", "LANG": "C"})  # fmt: skip
    assert any("TRAIN_STEP is not read" in w and "TRAIN_STEPS" in w for w in warnings), warnings
    assert any("N_GPU " in w and "N_GPUS" in w for w in warnings), warnings
    assert any("VERL_ASYNC_DAPO_HOMEDIR" in w and "did you mean VERL_ASYNC_DAPO_HOME" in w for w in warnings)
    assert len(warnings) == 3, warnings  # HOME, PATH, LANG, SWANLAB_WEB_HOST and the known names pass


def test_the_known_prefixed_names_are_every_one_the_code_reads() -> None:
    found = set()
    for folder in ("skill", "tests", "bench", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh") and path.name != "test_env_names.py":
                found |= set(re.findall(r"VERL_ASYNC_DAPO_[A-Z][A-Z_]*[A-Z]", path.read_text("utf-8", "replace")))
    assert found - PRODUCT_VARIABLES == set()


def test_the_cli_warns_before_it_plans() -> None:
    env = {**os.environ, "TRAIN_STEP": "4"}
    env.pop("TRAIN_STEPS", None)
    done = subprocess.run([sys.executable, "-m", "verl_async_dapo", "plan", "--json"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert "warning: TRAIN_STEP is not read by verl-async-dapo (ignored); did you mean TRAIN_STEPS?" in done.stderr
