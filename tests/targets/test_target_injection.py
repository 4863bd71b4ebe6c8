"""Hostile names, paths and values: refused up front, or passed through literally; never executed."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import docker
import pytest
from target_helpers import Env, unique_name

from verl_async_dapo.exceptions import InvalidTargetInput
from verl_async_dapo.targets.base import CreateSpec
from verl_async_dapo.targets.docker import DockerTarget, create_container
from verl_async_dapo.targets.registry import get_target


@pytest.fixture
def host_canary() -> Iterator[str]:
    path = f"/tmp/CANARY-{uuid.uuid4().hex[:8]}"
    yield path
    assert not os.path.exists(path), "an injected command ran on the host"


def shell_payloads(canary: str) -> list[str]:
    return [
        f"; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"| touch {canary}",
        f"&& touch {canary}",
        f"x\ntouch {canary}",
    ]


async def test_paths_with_metacharacters_are_literal(env: Env, host_canary: str) -> None:
    # (newline payloads are refused for paths; see test_bad_paths_are_refused_before_running)
    canaries = [env.canary] if env.kind == "docker" else [env.canary, host_canary]
    for payload in [p for c in canaries for p in shell_payloads(c)[:5]]:
        path = f"{env.work}/f{payload.replace('/', '_')}"
        assert await env.target.paths_exist([path]) == {path: False}
        assert await env.target.file_size(path) is None
        await env.target.write_file(path, b"literal\n")
        assert await env.target.read_tail(path, 100) == b"literal\n"
        assert await env.target.read_range(path, 0, 3) == b"lit"
    assert not await env.exists(env.canary)


@pytest.mark.parametrize(
    "bad",
    ["-c", "--help", "relative/path", "/tmp/a\x00b", "/tmp/a\nb", "/tmp/../etc/passwd", ""],
)
async def test_bad_paths_are_refused_before_running(env: Env, bad: str) -> None:
    with pytest.raises(InvalidTargetInput):
        await env.target.read_tail(bad, 10)
    with pytest.raises(InvalidTargetInput):
        await env.target.read_range(bad, 0, 10)
    with pytest.raises(InvalidTargetInput):
        await env.target.file_size(bad)
    with pytest.raises(InvalidTargetInput):
        await env.target.paths_exist([env.work, bad])
    with pytest.raises(InvalidTargetInput):
        await env.target.write_file(bad, b"x")
    with pytest.raises(ValueError):  # InvalidTargetInput is also a ValueError
        await env.target.start_detached(["true"], env={}, cwd=env.work, job_dir=bad, log_path=f"{env.work}/l")
    with pytest.raises(InvalidTargetInput):
        await env.target.start_detached(["true"], env={}, cwd=env.work, job_dir=f"{env.work}/j", log_path=bad)
    assert not await env.exists(f"{env.work}/j")  # nothing started


async def test_bad_commands_and_environments_are_refused(env: Env, host_canary: str) -> None:
    job = {"cwd": env.work, "job_dir": f"{env.work}/j", "log_path": f"{env.work}/j.log"}
    with pytest.raises(InvalidTargetInput):
        await env.target.run(["echo", "a\x00b"])
    with pytest.raises(InvalidTargetInput):
        await env.target.run([])
    with pytest.raises(InvalidTargetInput):
        await env.target.run(f"touch {host_canary}")  # type: ignore[arg-type]  # a string is not argv
    with pytest.raises(InvalidTargetInput):
        await env.target.run(["true"], env={f"A;touch {host_canary}": "1"})
    with pytest.raises(InvalidTargetInput):
        await env.target.start_detached(["true"], env={"OK": "a\x00b"}, **job)
    with pytest.raises(InvalidTargetInput):
        await env.target.start_detached(["echo", "a\x00b"], env={}, **job)
    with pytest.raises(InvalidTargetInput):
        await env.target.run(["pwd"], cwd="-P")
    assert not await env.exists(f"{env.work}/j")


async def test_values_with_metacharacters_reach_the_program_unchanged(env: Env, host_canary: str) -> None:
    payloads = shell_payloads(env.canary) + shell_payloads(host_canary)
    values = {f"VAD_P{i}": p for i, p in enumerate(payloads)}
    script = 'for v in "$@"; do printenv "$v"; done'
    res = await env.target.run(["bash", "-c", script, "vad", *values], env=values)
    assert res.stdout == "".join(f"{v}\n" for v in values.values())
    res = await env.target.run(["printf", "%s|", *payloads])
    assert res.stdout == "".join(f"{p}|" for p in payloads)
    assert not await env.exists(env.canary)


@pytest.mark.parametrize("name", ["x; touch /tmp/CANARY", "$(touch /tmp/CANARY)", "-rm", "a b", "`id`", "a\x00b", ""])
def test_container_names_are_validated_without_docker(name: str) -> None:
    with pytest.raises(InvalidTargetInput):
        DockerTarget(name)
    with pytest.raises(ValueError):
        get_target(name)


@pytest.mark.docker
async def test_create_container_refuses_hostile_specs(
    docker_client: docker.DockerClient, test_image: str, test_labels: dict[str, str]
) -> None:
    good = CreateSpec(name=unique_name(), image=test_image, gpus="none", network_mode="none")
    bad_specs = [
        CreateSpec(name="x; touch /tmp/CANARY", image=test_image, gpus="none"),
        CreateSpec(name=good.name, image=f"{test_image}; touch /tmp/CANARY", gpus="none"),
        CreateSpec(name=good.name, image="--privileged", gpus="none"),
        CreateSpec(name=good.name, image=test_image, gpus="all; touch /tmp/CANARY"),
        CreateSpec(name=good.name, image=test_image, gpus="none", shm_size="1g; touch /tmp/CANARY"),
        CreateSpec(name=good.name, image=test_image, gpus="none", network_mode="container:other"),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/tmp:/etc": "/x"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/tmp": "/x:ro,/y"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"relative": "/x"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/no/such/dir/vad": "/x"}),
        # Mounts that hand out the host are refused at the target too, whoever calls (issue 20).
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/": "/host"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/run": "/run"}, writable=("/run",)),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/etc": "/x"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", mounts={"/tmp": "/x"}, writable=("/y",)),
        CreateSpec(name=good.name, image=test_image, gpus="none", env={"A B": "1"}),
        CreateSpec(name=good.name, image=test_image, gpus="none", env={"A": "x\x00y"}),
    ]
    for spec in bad_specs:
        with pytest.raises(InvalidTargetInput):
            await create_container(spec, extra_labels=test_labels)
    with pytest.raises(InvalidTargetInput):
        await create_container(good, extra_labels={"Bad Label": "x"})
    assert not docker_client.containers.list(all=True, filters={"name": good.name})
    assert not os.path.exists("/tmp/CANARY")
