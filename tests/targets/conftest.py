"""Fixtures for the target tests: the same suite runs against a real container and this host.

Built on the harness (tests/harness/fixtures.py): ``container`` is a fresh container of the test
image (python3, hydra, verl stand-in trees; network none); ``test_labels`` mark anything we create.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from target_helpers import Env

from verl_async_dapo.targets.base import Target
from verl_async_dapo.targets.docker import DockerTarget
from verl_async_dapo.targets.docker.containers import reset_client
from verl_async_dapo.targets.host import HostTarget


@pytest.fixture
def created(docker_client: docker.DockerClient) -> Iterator[list[str]]:
    """Names of containers a test creates through our code; all removed afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.containers.get(name).remove(force=True)


@pytest.fixture(autouse=True)
def _fresh_docker_client() -> Iterator[None]:
    # Our client is cached per process; tests that point DOCKER_HOST elsewhere must not leak it.
    yield
    reset_client()


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "host"])
async def env(request: pytest.FixtureRequest, tmp_path: Path) -> Env:
    """The parametrized target with an existing, empty scratch directory."""
    target: Target
    if request.param == "docker":
        container: Container = request.getfixturevalue("container")
        target = DockerTarget(container.name)
        work = f"/tmp/vadt-{uuid.uuid4().hex[:8]}"
    else:
        target = HostTarget()
        work = str(tmp_path / "work")
    res = await target.run(["mkdir", "-p", "--", work])
    assert res.exit_code == 0, res
    return Env(target, request.param, work, f"{work}/CANARY")
