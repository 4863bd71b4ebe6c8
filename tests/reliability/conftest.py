"""Fixtures for the reliability tests (crash safety, hostile input, concurrency, faults, secrets, HTTP).

Every test gets its own state and config dirs and a clean environment (no SwanLab, proxy or training variables from
the developer's shell), like tests/mcp. Sizes: CI runs a small, seeded sample; ``VAD_RELIABILITY_LARGE=1`` runs the
large figures recorded in docs/RELIABILITY.md. Helpers are in ``rel_helpers.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from rel_helpers import swanlab_fixtures

from verl_async_dapo.targets.docker.containers import reset_client

_TRAINING_VARS = (
    "VERL_HOME", "VERL_VERSION", "MODE", "FRAMEWORK", "MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "TRAIN_STEPS",
    "TRAINER_GPUS", "ROLLOUT_GPUS", "N_GPUS", "MAX_RESPONSE_LENGTH", "MAX_OOM_RETRIES", "USER_FEATURES",
    "ENABLE_OFFLOAD", "EXP_NAME", "CKPT_DIR", "SAVE_FREQ", "ROLLOUT_TP", "STANDIN_STEP_SECONDS",
    "VERL_ASYNC_DAPO_HTTP_TOKEN", "VERL_ASYNC_DAPO_ALLOWED_HOSTS",
)  # fmt: skip


@pytest.fixture(autouse=True)
def isolated_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Own state and config dirs; nothing from the developer's shell that would change what a run does."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("SWANLAB_") or upper in {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}:
            monkeypatch.delenv(name, raising=False)
    for name in _TRAINING_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-root"))
    return tmp_path


@pytest.fixture(autouse=True)
def _fresh_docker_client() -> Iterator[None]:
    # The targets cache one Docker client per process; tests that change DOCKER_HOST need a new one.
    reset_client()
    yield
    reset_client()


# The fake SwanLab login server of tests/swanlab/conftest.py (one server double in the suite, not two).
_swanlab = swanlab_fixtures()
make_fake_swanlab = _swanlab.make_fake_swanlab
fake_swanlab = _swanlab.fake_swanlab
