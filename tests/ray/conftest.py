"""Fixtures for the Ray target tests: one real, private Ray head (CPU only, loopback only) for the tests in
this directory, and an isolated tool state whose ``ray_clusters.json`` names it ``ray:test``.

Ray itself comes from tests/ray/ensure_ray.sh (its own venv, outside the repo; tests/run.sh runs it):
VERL_ASYNC_DAPO_TEST_RAY names its ``ray`` CLI, else the script's default location is used. Without it
these tests skip on a developer machine and FAIL with CI=true.

    ray_binary   session   Path: Ray's ``ray`` CLI (skips / fails as above when missing)
    ray_head     session   RayHead: started at first use, stopped right after the last test of tests/ray
    ray_target   function  "ray:test", with VERL_ASYNC_DAPO_HOME / _CONFIG_DIR isolated under tmp_path
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_head import RayHead
from ray_helpers import use_cluster

from harness.fixtures import unavailable

HERE = Path(__file__).resolve().parent
RAY_BIN_ENV = "VERL_ASYNC_DAPO_TEST_RAY"
RAY_VERSION = "2.60.0"  # keep in step with ensure_ray.sh
DEFAULT_RAY_BIN = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
    f"verl-async-dapo-tests/ray-{RAY_VERSION}/bin/ray"
)
CLUSTER = "test"

_head: dict[str, RayHead | None] = {"head": None}


def ray_bin() -> Path | None:
    path = Path(os.environ.get(RAY_BIN_ENV) or DEFAULT_RAY_BIN)
    return path if path.is_file() and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def ray_binary() -> Path:
    found = ray_bin()
    if found is None:
        unavailable(f"no Ray for the tests: run `bash tests/ray/ensure_ray.sh` (or set {RAY_BIN_ENV})")
    assert found is not None
    return found


@pytest.fixture(scope="session")
def ray_head(ray_binary: Path) -> Iterator[RayHead]:
    # Jobs run on this host: the venv's bin first, so the job's python3 is ours (it has hydra).
    head = RayHead(ray_bin=ray_binary, job_path=[str(Path(sys.executable).parent)])
    head.start()
    _head["head"] = head
    try:
        yield head
    finally:
        _stop_head()


def _stop_head() -> None:
    head, _head["head"] = _head["head"], None
    if head is not None:
        head.stop()


@pytest.hookimpl(trylast=True)  # after the test's own fixtures are torn down (they may still use the head)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop the head as soon as the last test of this directory is done, not at the end of the whole suite."""
    if _head["head"] is not None and (nextitem is None or HERE not in Path(str(nextitem.path)).parents):
        _stop_head()


@pytest.fixture
def ray_target(ray_head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    return use_cluster(CLUSTER, ray_head.address, tmp_path, monkeypatch)
