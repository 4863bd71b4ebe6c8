"""Fixtures for the MCP server tests: an isolated state dir per test and in-memory clients of
both protocol eras.

The server's lifespan builds its AppContext from the environment when a client connects, so
the environment is set here before any client exists. Helpers for the tests are in
``mcp_helpers.py`` (no ``__init__.py`` here: pytest's default import mode puts this directory on
``sys.path``, so module names must be unique across tests/).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import swanlab_fixtures

from mcp import Client
from verl_async_dapo.server import mcp
from verl_async_dapo.targets.docker.containers import reset_client

MODES = ("auto", "legacy")  # 2026-07-28 (in-memory default) and the handshake era (2025-11-25)


@pytest.fixture(autouse=True)
def isolated_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Own state and config dirs; no SwanLab, proxy or training variables from the developer's shell."""
    for name in list(os.environ):
        upper = name.upper()
        if upper.startswith("SWANLAB_") or upper in {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"}:
            monkeypatch.delenv(name, raising=False)
    for name in ("VERL_HOME", "VERL_VERSION", "MODE", "FRAMEWORK", "MODEL_PATH", "TRAIN_FILE", "VAL_FILE",
                 "TRAIN_STEPS", "TRAINER_GPUS", "ROLLOUT_GPUS", "N_GPUS", "MAX_RESPONSE_LENGTH", "MAX_OOM_RETRIES",
                 "USER_FEATURES", "ENABLE_OFFLOAD", "EXP_NAME", "CKPT_DIR",
                 "VERL_ASYNC_DAPO_HTTP_TOKEN", "VERL_ASYNC_DAPO_ALLOWED_HOSTS",
                 "VERL_ASYNC_DAPO_CONTAINER_PRIVILEGES", "VERL_ASYNC_DAPO_MOUNT_ALLOW"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("VERL_ASYNC_DAPO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-root"))  # the SDK's own credential dir
    return tmp_path


@pytest.fixture(autouse=True)
def _fresh_docker_client() -> Iterator[None]:
    # The targets cache one Docker client per process; tests that change DOCKER_HOST need a new one.
    reset_client()
    yield
    reset_client()


# Most tools behave the same in both eras (the same service call behind one MCPServer); what differs is how the
# server reaches back to the client: forms (elicitation: a server request in the handshake era, MRTR's
# InputRequiredResult in 2026), pushed messages, the listed schema, the transports (test_stdio_e2e.py). Tests of
# those are marked ``both_eras`` and run in each; every other test runs once, in the era today's hosts
# (Claude Code, Claude Desktop, the Inspector) negotiate.
ONE_ERA = "legacy"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mode" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_eras") is not None
        metafunc.parametrize("mode", MODES if both else (ONE_ERA,))


@pytest.fixture
def connect(mode: str) -> Callable[..., Any]:
    """``async with connect(**client_kwargs) as c`` → an in-memory client of the test's protocol era."""

    @asynccontextmanager
    async def _connect(**kwargs: Any) -> AsyncIterator[Client]:
        async with Client(mcp, mode=mode, **kwargs) as client:
            yield client

    return _connect


# The fake SwanLab login server of tests/swanlab/conftest.py (one server double in the suite, not two).
_swanlab = swanlab_fixtures()
make_fake_swanlab = _swanlab.make_fake_swanlab
fake_swanlab = _swanlab.fake_swanlab
