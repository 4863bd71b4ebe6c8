"""Fixtures for the supervisor end-to-end tests (real Docker Engine, the verl stand-in as the only double).

``cli``          the product's CLI with an isolated state dir under tmp_path (sv_helpers.Cli); at teardown every
                 run it left active is stopped and its supervisor ended (by the pid the store recorded).
``verl_docker``  a fresh test-image container with the model/data paths preflight checks; the run cleanup
                 happens *before* the container is removed (this fixture's teardown runs first), so no
                 supervisor is left following a vanished container.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from docker.models.containers import Container
from sv_helpers import Cli, prepare_verl_home


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    client = Cli.isolated(tmp_path / "vad-home")
    yield client
    try:
        client.stop_all()
    finally:
        client.store.close()


@pytest.fixture
def verl_docker(container_factory: Callable[..., Container], cli: Cli) -> Iterator[Container]:
    made = container_factory()
    prepare_verl_home(made)
    yield made
    cli.stop_all()
