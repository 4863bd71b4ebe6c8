"""Fixtures for the shell-script tests (helpers: script_helpers.py). Everything runs against the real Docker Engine and
the verl stand-in in a test container.

    prepared_container  module    one test container per test module with MODEL_PATH / TRAIN_FILE / VAL_FILE in
                                  place (what preflight and the stand-in need). Per module, not per test: a fresh
                                  container costs seconds of first-run start-up in every run; the tests in a module
                                  run one after another, each writes its own control file and ends its runs.
    make_runner         function  make(container) -> ScriptRunner with a private state home under tmp_path; on
                                  teardown every run still active in any such home is stopped
    scripts             function  make_runner(prepared_container)
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from script_helpers import ScriptRunner, prepare, script_env

from harness.fixtures import SESSION_ID


@pytest.fixture
def make_runner(
    tmp_path: Path, container_factory: Callable[..., Container]
) -> Iterator[Callable[[Container], ScriptRunner]]:
    """Depends on container_factory so its teardown (stopping runs) comes before the containers are removed."""
    made: list[ScriptRunner] = []

    def make(target: Container) -> ScriptRunner:
        home = tmp_path / f"home{len(made)}"
        home.mkdir()
        runner = ScriptRunner(home=home, container_name=str(target.name), env=script_env(home, str(target.name)))
        made.append(runner)
        return runner

    yield make
    for runner in made:  # before the container fixture removes the target: no supervisor outlives its test
        runner.stop_active_runs()


@pytest.fixture
def scripts(prepared_container: Container, make_runner: Callable[[Container], ScriptRunner]) -> ScriptRunner:
    return make_runner(prepared_container)


@pytest.fixture(scope="module")
def prepared_container(
    docker_client: docker.DockerClient, test_image: str, test_labels: dict[str, str]
) -> Iterator[Container]:
    """Made here, not by container_factory (which is per test), with the same labels and network."""
    made = docker_client.containers.run(test_image, detach=True, network_mode="none", labels=test_labels,
                                        name=f"vad-test-{SESSION_ID}-{uuid.uuid4().hex[:6]}")  # fmt: skip
    try:
        yield prepare(made)
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            made.remove(force=True, v=True)
