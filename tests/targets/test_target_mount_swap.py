"""A mount source cannot be swapped after it was checked (issue 27, item 2), on the real Docker Engine.

Seen before the fix: the mounts were judged once (targets/mounts.py) and Docker got the path as written, a symlink
included, so re-pointing the link between the check and the create mounted the new target; and a stopped container
was started again without a look at its binds. Now the check resolves every source and Docker gets the real path
(never the link); before each start of one of our containers its bind sources are checked again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import docker
import pytest
from target_helpers import unique_name

from verl_async_dapo import sessions
from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import InvalidTargetInput, TargetUnavailable
from verl_async_dapo.targets.base import CreateSpec
from verl_async_dapo.targets.docker import DockerTarget, create_args, create_container

pytestmark = pytest.mark.docker


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    """Two directories under the allow-list, each with its own marker file, and a link to the first."""
    good, other = tmp_path / "models", tmp_path / "swapped-in"
    for d in (good, other):
        d.mkdir()
        (d / "WHICH").write_text(d.name)
    (tmp_path / "link").symlink_to(good)
    return {"good": good, "other": other, "link": tmp_path / "link", "root": tmp_path}


async def test_a_link_repointed_between_check_and_create_mounts_what_was_checked(
    docker_client: docker.DockerClient,
    created: list[str],
    test_image: str,
    test_labels: dict[str, str],
    dirs: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = AppContext(home=dirs["root"] / "state", config_home=dirs["root"] / "config",
                     env={"VERL_ASYNC_DAPO_MOUNT_ALLOW": str(dirs["root"])})  # fmt: skip
    name = unique_name()
    created.append(name)
    real_create = sessions.create_container

    async def swap_then_create(spec: CreateSpec, **kwargs: Any) -> Any:
        # Between the session's check and Docker: the attacker re-points the link.
        dirs["link"].unlink()
        dirs["link"].symlink_to(dirs["other"])
        return await real_create(spec, extra_labels=test_labels, **kwargs)

    monkeypatch.setattr(sessions, "create_container", swap_then_create)
    spec = CreateSpec(name=name, image=test_image, gpus="none", network_mode="none",
                      mounts={str(dirs["link"]): "/models"})  # fmt: skip
    await sessions.select_container(ctx, create=spec, allow_no_gpus=True)
    (bind,) = [m for m in docker_client.api.inspect_container(name)["Mounts"] if m["Type"] == "bind"]
    assert bind["Source"] == str(dirs["good"])  # the resolved path, never the link
    assert (await DockerTarget(name).run(["cat", "/models/WHICH"])).stdout == "models"


async def test_a_source_swapped_for_a_link_while_stopped_is_not_started(
    docker_client: docker.DockerClient,
    created: list[str],
    test_image: str,
    test_labels: dict[str, str],
    dirs: dict[str, Path],
) -> None:
    name = unique_name()
    created.append(name)
    spec = CreateSpec(name=name, image=test_image, gpus="none", network_mode="none",
                      mounts={str(dirs["good"]): "/models"})  # fmt: skip
    await create_container(spec, extra_labels=test_labels)
    target = DockerTarget(name)
    assert (await target.run(["cat", "/models/WHICH"])).stdout == "models"
    docker_client.containers.get(name).stop(timeout=0)
    # While it is stopped the checked directory becomes a link to somewhere else.
    dirs["good"].rename(dirs["root"] / "moved-away")
    dirs["good"].symlink_to(dirs["other"])
    with pytest.raises(TargetUnavailable, match=r"not starting container .*now resolves to .*swapped-in"):
        await target.ensure_running()
    assert docker_client.containers.get(name).status == "exited"  # never ran with the new target mounted
    # Put back as checked, it starts again.
    dirs["good"].unlink()
    (dirs["root"] / "moved-away").rename(dirs["good"])
    await target.ensure_running()
    assert (await target.run(["cat", "/models/WHICH"])).stdout == "models"


async def test_docker_never_gets_a_link(test_image: str, dirs: dict[str, Path]) -> None:
    spec = CreateSpec(name=unique_name(), image=test_image, gpus="none", network_mode="none",
                      mounts={str(dirs["link"]): "/models"})  # fmt: skip
    with pytest.raises(InvalidTargetInput, match="not its real path"):
        create_args.create_kwargs(spec, None)
    ok = create_args.create_kwargs(dataclasses.replace(spec, mounts={str(dirs["good"]): "/models"}), None)
    assert list(ok["volumes"]) == [str(dirs["good"])]
