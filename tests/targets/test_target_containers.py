"""Listing, creating and starting containers on the real docker_client; the registry; no-Docker behaviour."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import docker
import pytest
from docker.models.containers import Container
from target_helpers import unique_name

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError, TargetUnavailable
from verl_async_dapo.targets.base import HOST_TARGET_NAME, MANAGED_LABEL, CreateSpec, TargetKind
from verl_async_dapo.targets.docker import DockerTarget, create_container, list_containers
from verl_async_dapo.targets.docker.containers import container_info, reset_client
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.targets.registry import find_target_info, get_target, list_targets


def host_config(client: docker.DockerClient, name: str) -> dict:
    return client.api.inspect_container(name)["HostConfig"]


async def test_list_shows_containers_without_their_environment(
    container_factory: Callable[..., Container], test_image: str
) -> None:
    secrets = {"SWANLAB_API_KEY": "sekrit-value-123", "NVIDIA_VISIBLE_DEVICES": "sekrit-value-456"}
    name = container_factory(environment=secrets).name
    infos = {i.name: i for i in await list_containers()}
    info = infos[name]
    assert (info.kind, info.state, info.image, info.managed, info.gpus) == (
        TargetKind.DOCKER,
        "running",
        test_image,
        False,
        None,
    )
    assert info.started and info.created
    assert "sekrit" not in repr(list(infos.values()))
    targets = await list_targets()
    assert targets[0].name == HOST_TARGET_NAME and targets[0].kind is TargetKind.HOST and targets[0].note is None
    assert name in {t.name for t in targets[1:]}
    assert (await find_target_info(name)).name == name


@pytest.mark.docker
async def test_create_follows_verls_recipe(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str], tmp_path: Path
) -> None:
    name = unique_name()
    created.append(name)
    proxy = "http://user@proxy:3128; touch /tmp/CANARY $(id) `id` | x && y"
    spec = CreateSpec(
        name=name,
        image=test_image,
        gpus="none",
        network_mode="none",
        mounts={str(tmp_path / "data"): "/workspace/data", str(tmp_path / "ckpt"): "/workspace/ckpt"},
        writable=("/workspace/ckpt",),
        env={"HTTPS_PROXY": proxy, "PYTHONUNBUFFERED": "1"},
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "ckpt").mkdir()
    info = await create_container(spec, extra_labels=test_labels)
    assert (info.name, info.state, info.managed, info.gpus) == (name, "running", True, None)
    attrs = docker_client.api.inspect_container(name)
    hc = attrs["HostConfig"]
    assert attrs["Config"]["Labels"][MANAGED_LABEL] == "true"
    assert attrs["Config"]["Cmd"] == ["sleep", "infinity"]
    # Confined (issue 27; tests/targets/test_target_confinement.py): its own IPC namespace with verl's 10g /dev/shm.
    assert (hc["IpcMode"], hc["ShmSize"]) == ("private", 10 << 30)
    assert not hc.get("DeviceRequests")
    assert hc["NetworkMode"] == "none"
    assert not hc.get("CapAdd") and hc["SecurityOpt"] == ["no-new-privileges"]
    # memlock unlimited, unless this daemon may not raise it (then the info says so); NVIDIA's 64 MiB stack.
    limits = [(u["Name"], u["Soft"], u["Hard"]) for u in hc.get("Ulimits") or []]
    stack = ("stack", 64 << 20, 64 << 20)
    assert limits == [("memlock", -1, -1), stack] or (limits == [stack] and info.note and "memlock" in info.note)
    # Read-only where training only reads (issue 20): only the declared writable mount is rw.
    assert sorted(hc["Binds"]) == [f"{tmp_path}/ckpt:/workspace/ckpt:rw", f"{tmp_path}/data:/workspace/data:ro"]
    assert hc["Init"] is True
    # The proxy value arrives byte for byte and nothing in it ran.
    target = DockerTarget(name)
    assert (await target.run(["printenv", "HTTPS_PROXY"])).stdout == proxy + "\n"
    (tmp_path / "data" / "from-host.txt").write_text("mounted\n")
    assert await target.read_tail("/workspace/data/from-host.txt", 100) == b"mounted\n"
    refused = await target.run(["sh", "-c", "echo x > /workspace/data/new.txt"])
    assert refused.exit_code != 0 and "Read-only" in refused.stderr
    assert (await target.run(["sh", "-c", "echo x > /workspace/ckpt/step_1"])).exit_code == 0
    assert (tmp_path / "ckpt" / "step_1").read_text() == "x\n"
    assert not (await target.paths_exist(["/tmp/CANARY"]))["/tmp/CANARY"]


@pytest.mark.docker
async def test_shm_size_replaces_ipc_host(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    name = unique_name()
    created.append(name)
    spec = CreateSpec(name=name, image=test_image, gpus="none", network_mode="none", shm_size="1g")
    await create_container(spec, extra_labels=test_labels)
    hc = host_config(docker_client, name)
    assert hc["ShmSize"] == 1 << 30
    assert hc["IpcMode"] != "host"
    df = await DockerTarget(name).run(["df", "-Pk", "/dev/shm"])
    assert df.stdout.splitlines()[1].split()[1] == str(1 << 20)  # 1 GiB in KiB


@pytest.mark.docker
@pytest.mark.parametrize(("gpus", "expected"), [("all", {"Count": -1}), ("0,1", {"DeviceIDs": ["0", "1"]})])
async def test_gpu_requests(
    docker_client: docker.DockerClient,
    created: list[str],
    test_image: str,
    test_labels: dict[str, str],
    gpus: str,
    expected: dict,
) -> None:
    name = unique_name()
    created.append(name)
    spec = CreateSpec(name=name, image=test_image, gpus=gpus, network_mode="none")
    info = await create_container(spec, start=False, extra_labels=test_labels)
    assert info.state == "created" and info.gpus == gpus
    hc = host_config(docker_client, name)
    (request,) = hc["DeviceRequests"]
    assert [(u["Name"], u["Soft"], u["Hard"]) for u in hc["Ulimits"]] == [("memlock", -1, -1),
                                                                          ("stack", 64 << 20, 64 << 20)]
    assert hc["IpcMode"] == "private" and not hc.get("CapAdd")
    assert request["Capabilities"] == [["gpu"]]
    assert {k: request.get(k) for k in expected} == expected


@pytest.mark.docker
async def test_gpus_on_a_machine_without_gpu_runtime_fail_clearly(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    name = unique_name()
    created.append(name)
    spec = CreateSpec(name=name, image=test_image, gpus="all", network_mode="none")
    with pytest.raises(TargetUnavailable, match=r"could not select device driver.*NVIDIA Container Toolkit"):
        await create_container(spec, extra_labels=test_labels)
    assert not docker_client.containers.list(all=True, filters={"name": name}), (
        "a container that cannot start is removed"
    )


@pytest.mark.docker
async def test_missing_image_and_name_clash(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    spec = CreateSpec(name=unique_name(), image="vad-test:does-not-exist", gpus="none", network_mode="none")
    with pytest.raises(TargetError) as excinfo:
        await create_container(spec, extra_labels=test_labels)
    assert str(excinfo.value) == (
        "image vad-test:does-not-exist not found locally; pull it first: docker pull vad-test:does-not-exist"
    )
    name = unique_name()
    created.append(name)
    spec = CreateSpec(name=name, image=test_image, gpus="none", network_mode="none")
    await create_container(spec, start=False, extra_labels=test_labels)
    with pytest.raises(TargetError, match="already exists"):
        await create_container(spec, extra_labels=test_labels)


@pytest.mark.docker
async def test_ensure_running_starts_created_and_stopped_containers(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    name = unique_name()
    created.append(name)
    docker_client.containers.create(
        test_image, ["sleep", "infinity"], name=name, network_mode="none", labels=test_labels
    )
    target = DockerTarget(name)
    with pytest.raises(TargetUnavailable, match="not running"):
        await target.run(["true"])
    await target.ensure_running()
    assert docker_client.containers.get(name).status == "running"
    docker_client.containers.get(name).stop(timeout=0)
    await target.ensure_running()
    assert (await target.run(["echo", "back"])).stdout == "back\n"
    docker_client.containers.get(name).pause()
    await target.ensure_running()
    assert (await target.run(["echo", "unpaused"])).stdout == "unpaused\n"


async def test_unknown_container_is_unavailable(docker_engine: None) -> None:
    target = DockerTarget(unique_name("vadt-missing"))
    with pytest.raises(TargetUnavailable, match="not found"):
        await target.ensure_running()
    with pytest.raises(TargetUnavailable, match="not found"):
        await target.run(["true"])
    with pytest.raises(TargetUnavailable):
        await find_target_info(target.name)


@pytest.mark.filterwarnings("ignore")
async def test_without_docker_the_host_is_still_offered(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    reset_client()
    targets = await list_targets()
    # Only the host among the machine's own targets (a SLURM cluster, where its client commands exist, needs no Docker).
    assert [t.name for t in targets if t.kind is not TargetKind.SLURM] == [HOST_TARGET_NAME]
    assert targets[0].note and "Docker is not reachable" in targets[0].note and "DOCKER_HOST" in targets[0].note
    with pytest.raises(TargetUnavailable, match="Start the Docker daemon"):
        await DockerTarget("anything").run(["true"])
    assert isinstance(get_target(HOST_TARGET_NAME), HostTarget)
    assert (await find_target_info(HOST_TARGET_NAME)).kind is TargetKind.HOST


def test_registry_validates_names_without_io() -> None:
    assert isinstance(get_target("host"), HostTarget)
    target = get_target("verl_0.9-train")
    assert isinstance(target, DockerTarget) and target.name == "verl_0.9-train"
    with pytest.raises(InvalidTargetInput):
        get_target("../etc")


class _Fake:
    """Just enough of a docker-py Container for the projection."""

    def __init__(self, host_config: dict, env: list[str]) -> None:
        self.name, self.status = "c", "running"
        self.attrs = {"Name": "/c", "State": {"Status": "running"}, "Config": {"Env": env}, "HostConfig": host_config}


@pytest.mark.parametrize(
    ("host_config", "env", "gpus"),
    [
        ({"DeviceRequests": [{"Count": -1, "Capabilities": [["gpu"]]}]}, [], "all"),
        ({"DeviceRequests": [{"Count": 0, "DeviceIDs": ["1", "3"], "Capabilities": [["gpu"]]}]}, [], "1,3"),
        ({"DeviceRequests": [{"Count": 2, "Capabilities": [["gpu", "utility"]]}]}, [], "count=2"),
        ({"DeviceRequests": [{"Count": -1, "Capabilities": [["tpu"]]}]}, [], None),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=all", "API_KEY=s3cret"], "all"),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=0,2"], "0,2"),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=void"], None),
        ({"Runtime": "nvidia"}, ["NVIDIA_VISIBLE_DEVICES=$(s3cret)"], "nvidia runtime"),
        ({"Runtime": "nvidia"}, [], "nvidia runtime"),
        ({"Runtime": "runc"}, ["NVIDIA_VISIBLE_DEVICES=all"], None),  # CUDA images set it without GPU access
    ],
)
def test_gpu_projection_never_leaks_environment(host_config: dict, env: list[str], gpus: str | None) -> None:
    info = container_info(_Fake(host_config, env))  # type: ignore[arg-type]
    assert info.gpus == gpus
    assert "s3cret" not in repr(info)
