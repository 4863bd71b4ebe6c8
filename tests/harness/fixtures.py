"""Shared pytest fixtures, hooks and helpers for tests that need the Docker Engine, the test image or a verl tree.

Loaded for every test as a plugin through ``pytest_plugins`` in tests/conftest.py (which documents the fixtures).
Nothing here mocks Docker: the fixtures talk to the real engine; the only test double is the verl stand-in.
"""

from __future__ import annotations

import calendar
import collections
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest
from docker.models.containers import Container

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS_DIR.parent
ENSURE_DOCKER = TESTS_DIR / "harness" / "ensure_docker.sh"
BUILD_IMAGE = TESTS_DIR / "harness" / "build_image.sh"

TEST_LABEL = "io.verl-async-dapo.test"  # on every test container (the test image carries it too)
SESSION_LABEL = "io.verl-async-dapo.test-session"  # which pytest session made it: cleanup removes only its own
SESSION_ID = uuid.uuid4().hex[:12]
STALE_AFTER_S = 2 * 3600  # labelled containers older than this are leftovers of dead sessions
ALLOWED_NETWORKS = ("none", "host")  # test containers never get a bridge: nothing leaves 127.0.0.1
HOST_VERL_VERSION = "0.9.1"
DOCKER_FIXTURES = frozenset({"docker_engine", "docker_client", "test_image", "container", "container_factory"})

_state: dict[str, Any] = {"client": None}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def unavailable(reason: str) -> None:
    """Skip on a developer machine; in CI a missing prerequisite is a failure, never a silent skip."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def _engine_error() -> str | None:
    try:
        docker.from_env(timeout=15).ping()
    except Exception as exc:  # any client/transport error means "no engine"
        return f"{type(exc).__name__}: {exc}"
    return None


# -- exec / file helpers (argv lists only, never shell strings) ----------------------------------------------
@dataclass(frozen=True)
class ExecOutcome:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def exec_argv(
    container: Container,
    argv: list[str],
    *,
    environment: dict[str, str] | None = None,
    workdir: str | None = None,
    timeout_s: int = 180,
) -> ExecOutcome:
    """Run argv in the container and wait; coreutils ``timeout`` bounds it so a hang cannot stall the suite."""
    wrapped = ["timeout", "-k", "5", str(timeout_s), *argv]
    result = container.exec_run(wrapped, environment=environment or {}, workdir=workdir, demux=True)
    out, err = result.output or (None, None)
    return ExecOutcome(int(result.exit_code), _text(out), _text(err))


def _text(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


def put_file(container: Container, path: str, content: str | bytes, mode: int = 0o644) -> None:
    """Write one file into a container (its directory must exist)."""
    data = content.encode() if isinstance(content, str) else content
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(os.path.basename(path))
        info.size, info.mode, info.mtime = len(data), mode, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    container.put_archive(os.path.dirname(path) or "/", buf.getvalue())


# A program that exits with `code` having printed nothing on its first `fails` calls, then runs the real one: an exec
# that did not start, or one whose output Docker lost (moby#27289), reproduced on demand in a real container.
_SILENT_FIRST = """#!/bin/sh
n=$(cat /tmp/{name}-calls 2>/dev/null || echo 0)
echo $((n + 1)) > /tmp/{name}-calls
[ "$n" -lt {fails} ] && exit {code}
exec /usr/bin/{name} "$@"
"""


def silent_first(container: Container, name: str, fails: int, code: int = 0) -> None:
    """Put that stand-in for /usr/bin/``name`` first on the container's PATH; /tmp/``name``-calls counts its calls."""
    script = _SILENT_FIRST.format(name=name, fails=fails, code=code)
    put_file(container, f"/usr/local/bin/{name}", script, mode=0o755)


def read_file(container: Container, path: str) -> bytes:
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        assert member is not None and member.isfile(), f"{path} is not a file"
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


# -- Docker fixtures -----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def docker_engine() -> None:
    """Ensures a Docker Engine answers (running tests/harness/ensure_docker.sh when it does not)."""
    error = _engine_error()
    if error is None:
        return
    if os.geteuid() != 0:
        unavailable(f"no Docker Engine ({error}) and not root, so ensure_docker.sh cannot start one")
    proc = subprocess.run(["bash", str(ENSURE_DOCKER)], capture_output=True, text=True, timeout=900, check=False)
    error = _engine_error()
    if proc.returncode != 0 or error is not None:
        unavailable(f"no Docker Engine: ensure_docker.sh exited {proc.returncode}: {proc.stderr[-2000:]} ({error})")


@pytest.fixture(scope="session")
def docker_client(docker_engine: None) -> docker.DockerClient:
    client = docker.from_env(timeout=120)
    _state["client"] = client
    return client


@pytest.fixture(scope="session")
def test_image(docker_engine: None) -> str:
    """Tag of the (cached) test image from tests/harness/build_image.sh."""
    proc = subprocess.run(["bash", str(BUILD_IMAGE)], capture_output=True, text=True, timeout=1800, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        pytest.fail(f"build_image.sh exited {proc.returncode}:\n{proc.stderr[-4000:]}", pytrace=False)
    return lines[-1].strip()


@pytest.fixture(scope="session")
def test_labels() -> dict[str, str]:
    """Labels to put on any container a test creates so the session cleanup finds it."""
    return {TEST_LABEL: "1", SESSION_LABEL: SESSION_ID}


@pytest.fixture
def container_factory(
    docker_client: docker.DockerClient, test_image: str, test_labels: dict[str, str]
) -> Iterator[Callable[..., Container]]:
    """``make(**run_kwargs) -> Container``: a running, labelled container from the test image, removed afterwards.

    Defaults: image=test_image, network_mode="none", detach=True; any docker ``containers.run`` keyword can be
    passed (environment, volumes, name, ...). Only network_mode "none" or "host" is allowed.
    """
    made: list[Container] = []

    def make(**kwargs: Any) -> Container:
        kwargs.setdefault("image", test_image)
        kwargs.setdefault("network_mode", "none")
        kwargs.setdefault("name", f"vad-test-{SESSION_ID}-{uuid.uuid4().hex[:6]}")
        if kwargs["network_mode"] not in ALLOWED_NETWORKS:
            raise ValueError(f"test containers use network_mode in {ALLOWED_NETWORKS}, not {kwargs['network_mode']!r}")
        kwargs["labels"] = {**kwargs.get("labels", {}), **test_labels}
        image = kwargs.pop("image")
        created = docker_client.containers.run(image, detach=True, **kwargs)
        made.append(created)
        return created

    yield make
    for item in made:
        with contextlib.suppress(docker.errors.NotFound):
            item.remove(force=True, v=True)


@pytest.fixture
def container(container_factory: Callable[..., Container]) -> Container:
    """A fresh running container of the test image (network_mode="none", `sleep infinity`)."""
    return container_factory()


def cleanup_session_containers() -> None:
    """Remove this session's labelled containers and stale leftovers of dead sessions (called at session end)."""
    client = _state.get("client")
    if client is None:
        return
    now = time.time()
    for item in client.containers.list(all=True, filters={"label": TEST_LABEL}):
        labels = item.labels or {}
        mine = labels.get(SESSION_LABEL) == SESSION_ID
        created = item.attrs.get("Created", "")
        # Never touch another live session's containers (engineers share machines): age is the only signal.
        if mine or _age_s(created, now) > STALE_AFTER_S:
            try:
                item.remove(force=True, v=True)
            except docker.errors.APIError as exc:
                print(f"test cleanup: could not remove {item.name}: {exc}", file=sys.stderr)


def _age_s(created: str, now: float) -> float:
    try:
        return now - calendar.timegm(time.strptime(created[:19], "%Y-%m-%dT%H:%M:%S"))  # Docker stamps are UTC
    except ValueError:
        return 0.0


# -- host verl trees -----------------------------------------------------------------------------------------
def _make_tree_module() -> Any:
    standin = str(TESTS_DIR / "standin")
    if standin not in sys.path:
        sys.path.insert(0, standin)
    import make_tree  # tests/standin/make_tree.py

    return make_tree


@pytest.fixture(scope="session")
def _host_tree_templates(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def template(version: str) -> Path:
        if version not in made:
            module = _make_tree_module()
            try:
                wheel = module.wheel_cache(version)
            except Exception as exc:  # no PyPI and no cached wheel
                unavailable(f"cannot get the verl {version} wheel for make_tree: {exc}")
            made[version] = module.make_tree(version, wheel, tmp_path_factory.mktemp(f"verl-{version}-template"))
        return made[version]

    return template


@pytest.fixture
def make_host_verl_tree(_host_tree_templates: Callable[[str], Path], tmp_path: Path) -> Callable[[str], Path]:
    """``make(version) -> Path``: a private copy of a stand-in verl tree for the HOST target (run it with
    ``sys.executable -m recipe.dapo.main_dapo`` and cwd = the tree; the venv has hydra)."""

    def make(version: str = HOST_VERL_VERSION) -> Path:
        dest = tmp_path / f"verl-{version}"
        shutil.copytree(_host_tree_templates(version), dest)
        return dest

    return make


@pytest.fixture
def host_verl_tree(make_host_verl_tree: Callable[[str], Path]) -> Path:
    """A private verl 0.9.1 stand-in tree under tmp_path for the host target."""
    return make_host_verl_tree(HOST_VERL_VERSION)


# -- hooks -----------------------------------------------------------------------------------------------------
# Tests that share one machine-wide thing run in one pytest-xdist worker, one after another (tests/run.sh runs the
# suite with ``-n``): the one-node SLURM cluster, and the loopback Ray heads (each ~1 GiB and a dozen processes).
# Every other test file is a scope of its own, so its module fixtures are made once. (A scheduler rather than
# ``xdist_group`` marks: pytest 9.2 keeps the node id in ``_id``, and xdist 3.8's loadgroup still edits ``_nodeid``.)
SHARED_SCOPES = {"tests/slurm/": "slurm", "tests/ray/": "ray"}


def xdist_scope_of(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return next((scope for prefix, scope in SHARED_SCOPES.items() if path.startswith(prefix)), path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope_of(nodeid)

    return SharedScopeScheduling(config, log)


# Wall seconds per scope, measured (tests/harness/scope_seconds.py rewrites it from a run's JUnit XML). Under xdist the
# scopes start longest first: xdist's own order (most tests first) started the one-test files that run longest
# (crash safety, 86 s) last, alone, while the other workers idled. Only the order depends on it.
SCOPE_SECONDS: dict[str, float] = json.loads((TESTS_DIR / "harness" / "scope_seconds.json").read_text(encoding="utf-8"))


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # the scopes keep the collection order, which sorts them below


def _longest_scopes_first(items: list[pytest.Item]) -> None:
    tests_in = collections.Counter(xdist_scope_of(item.nodeid) for item in items)

    def weight(item: pytest.Item) -> tuple[float, int]:
        scope = xdist_scope_of(item.nodeid)
        return (-SCOPE_SECONDS.get(scope, 0.0), -tests_in[scope])

    items.sort(key=weight)  # stable: a scope's tests keep their order


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER"):
        _longest_scopes_first(items)
    run_slow = os.environ.get("RUN_SLOW", "") == "1"
    for item in items:
        if DOCKER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.docker)
        if item.get_closest_marker("slow") and not run_slow:
            item.add_marker(pytest.mark.skip(reason="slow test: set RUN_SLOW=1 to run it"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cleanup_session_containers()
