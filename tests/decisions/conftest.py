"""The supervisor's decisions, in-process (tests/harness/inprocess.py): the product's Supervisor drives the verl
stand-in's trainer in threads of the test process, so an OOM ladder of three attempts takes a second, not twenty.
The real end-to-end runs of each behaviour (a container, the host, the CLI and MCP faces) are in tests/supervisor,
tests/mcp and tests/scripts."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.inprocess import InProcessTarget
from harness.inprocess_runs import InProcessRuns
from verl_async_dapo.context import AppContext

# The run parameters the faces read from the environment: the user's own configuration, not arguments.
ENVIRONMENT = {"VERL_VERSION": "0.9.1", "TRAIN_STEPS": "6", "SAVE_FREQ": "2", "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1",
               "ROLLOUT_TP": "1", "FRAMEWORK": "fsdp", "MODE": "dapo"}  # fmt: skip


@pytest.fixture
def inprocess(make_host_verl_tree: Callable[[str], Path], tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessRuns]:  # fmt: skip
    tree = make_host_verl_tree("0.9.1")
    for name in list(os.environ):  # nothing of the developer's shell (SwanLab, proxies, run parameters)
        if name.upper().startswith(("SWANLAB_", "VAD_")) or name.upper() in {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                                                           "NO_PROXY", "EXTRA_OVERRIDES", "CKPT_DIR"}:
            monkeypatch.delenv(name, raising=False)
    for name, value in {**ENVIRONMENT, "VERL_HOME": str(tree)}.items():
        monkeypatch.setenv(name, value)
    # The process environment itself, as a supervisor inherits it: a test's monkeypatch.setenv reaches it.
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path / "config", env=os.environ)
    target = InProcessTarget(tree)
    runs = InProcessRuns(ctx, tree, target)
    runs.no_spawn(monkeypatch)
    try:
        yield runs
    finally:
        target.stop_all()
        ctx.store.close()
