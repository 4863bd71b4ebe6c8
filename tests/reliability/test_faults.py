"""Faults: the Docker daemon goes away mid-run, the product is pointed at a dead daemon, the disk holding the state
fills up, a secret file gets unsafe permissions. Tools must answer with a clear error, nothing may crash, the state
must stay intact, and supervision must resume once the fault is gone.

The shared Docker daemon is never stopped (other engineers' tests use it). Instead a second ``dockerd`` runs on its
own socket, data-root and exec-root (``--live-restore``, so its containers survive the daemon's absence as they do in
production), with the test image imported into it once (``docker save | docker -H … load``; the data-root is
reused across sessions under /tmp/vad-reliability-dockerd). That daemon is stopped and started freely. The full
disk is a 1 MiB tmpfs mounted as the state dir. Both need root; without it the tests skip (fail under CI=true).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from rel_helpers import (
    FINAL,
    LARGE,
    end_runs,
    is_bare_crash,
    prepare_host_tree,
    record,
    result_text,
)

from harness.fixtures import TEST_LABEL, unavailable
from harness.standin_files import put_tree
from harness.waiting import wait_until
from mcp import Client, MCPError
from verl_async_dapo.server import mcp
from verl_async_dapo.store import Store
from verl_async_dapo.targets.docker.containers import reset_client

D2_ROOT = Path("/tmp/vad-reliability-dockerd")  # data-root reused across sessions (the imported image)
D2_SOCK = D2_ROOT / "docker.sock"
D2_HOST = f"unix://{D2_SOCK}"
DEAD_HOST = "unix:///tmp/vad-reliability-no-daemon.sock"
FAULT_DOWN_S = 6.0
OUTAGES = 4 if LARGE else 1  # daemon stop/start cycles during one run
STEPS = 24 if OUTAGES == 1 else 50 * OUTAGES  # 0.5 s each: the run outlasts the outages (it trains through them)


class SecondDaemon:
    """A private dockerd that tests may stop and start."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.stops = 0

    def argv(self) -> list[str]:
        return ["dockerd", "--host", D2_HOST, "--data-root", str(D2_ROOT / "data"),
                "--exec-root", str(D2_ROOT / "exec"), "--pidfile", str(D2_ROOT / "docker.pid"),
                "--bridge=none", "--iptables=false", "--ip6tables=false", "--live-restore"]  # fmt: skip

    def start(self) -> None:
        log = (D2_ROOT / "dockerd.log").open("ab")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     start_new_session=True)  # fmt: skip
        log.close()
        wait_until(self.answers, "the second dockerd to answer", timeout=60, interval=0.25)

    def answers(self) -> bool:
        try:
            docker.DockerClient(base_url=D2_HOST, timeout=5).ping()
        except Exception:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM, as ``systemctl stop docker`` does; containers keep running (live-restore)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
            self.stops += 1
        self.proc = None

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=D2_HOST, timeout=120)


@pytest.fixture(scope="session")
def second_daemon(test_image: str) -> Iterator[SecondDaemon]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        unavailable("the daemon-fault test needs root and dockerd to run a second Docker daemon")
    D2_ROOT.mkdir(parents=True, exist_ok=True)
    lock = (D2_ROOT / "lock").open("ab")
    deadline = time.monotonic() + 600
    while True:  # one pytest session at a time uses this daemon
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail("another session holds the second dockerd for over 10 minutes")
            time.sleep(1)
    daemon = SecondDaemon()
    try:
        _kill_leftover_daemon()
        try:
            daemon.start()
        except AssertionError:
            tail = (D2_ROOT / "dockerd.log").read_text(errors="replace")[-2000:]
            unavailable(f"a second dockerd does not start here:\n{tail}")
        client = daemon.client()
        try:
            client.images.get(test_image)
        except docker.errors.ImageNotFound:
            save = subprocess.Popen(["docker", "save", test_image], stdout=subprocess.PIPE)
            loaded = subprocess.run(["docker", "-H", D2_HOST, "load"], stdin=save.stdout, capture_output=True,
                                    timeout=600, check=False)  # fmt: skip
            save.wait(timeout=60)
            assert loaded.returncode == 0 and save.returncode == 0, loaded.stderr
        yield daemon
    finally:
        if not daemon.answers():
            with contextlib.suppress(Exception):
                daemon.start()
        with contextlib.suppress(Exception):
            for item in daemon.client().containers.list(all=True, filters={"label": TEST_LABEL}):
                item.remove(force=True, v=True)
        daemon.stop()
        lock.close()


def _kill_leftover_daemon() -> None:
    """A dockerd of a crashed earlier session on our socket (found by its pidfile and argv) is stopped first."""
    pidfile = D2_ROOT / "docker.pid"
    with contextlib.suppress(OSError, ValueError):
        pid = int(pidfile.read_text().strip())
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"dockerd" in argv and str(D2_SOCK).encode() in argv:
            os.kill(pid, signal.SIGTERM)
            wait_until(lambda: not Path(f"/proc/{pid}").exists(), "the leftover dockerd to exit", timeout=60)


def _env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key, value in values.items():
        monkeypatch.setenv(key, value)


async def _answer(c: Client, name: str) -> None:
    for tool, args in (("select_container", {"name": name}), ("set_proxy", {}),
                       ("choose_features", {"names": ["default"]})):  # fmt: skip
        result = await c.call_tool(tool, args)
        assert not result.is_error, result_text(result)


async def test_docker_daemon_outage_mid_run(
    second_daemon: SecondDaemon, test_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = second_daemon.client().containers.run(
        test_image, detach=True, network_mode="none", labels={TEST_LABEL: "1"}, name=f"vad-rel-fault-{os.getpid()}"
    )
    put_tree(box)
    out = box.exec_run(["sh", "-c", "printf %s \"$1\" > /verl/standin_control.json", "sh",
                        json.dumps({"step_seconds": 0.5})])  # fmt: skip
    assert out.exit_code == 0, out.output
    _env(monkeypatch, DOCKER_HOST=D2_HOST, FRAMEWORK="fsdp", TRAIN_STEPS=str(STEPS), SAVE_FREQ="4", TRAINER_GPUS="1",
         ROLLOUT_GPUS="1", ROLLOUT_TP="1", SWANLAB_MODE="disabled")  # fmt: skip
    reset_client()
    answers: dict[str, str] = {}
    run_id = ""
    try:
        async with Client(mcp) as c:
            await _answer(c, box.name)
            started = await c.call_tool("start_training", {})
            assert not started.is_error, result_text(started)
            run_id = started.structured_content["run_id"]  # type: ignore[index]

            async def progress() -> dict[str, Any]:
                result = await c.call_tool("get_progress", {"run_id": run_id})
                assert not result.is_error and result.structured_content is not None, result_text(result)
                return result.structured_content

            deadline = time.monotonic() + 120
            while ((p := await progress())["step"] or 0) < 2:
                assert p["status"] not in FINAL and time.monotonic() < deadline, p
                await anyio.sleep(0.3)

            # 1) This server pointed at a dead daemon (the supervisor keeps its own): clear answers, no crash.
            monkeypatch.setenv("DOCKER_HOST", DEAD_HOST)
            reset_client()
            answers.update(await _fault_answers(c, box.name, run_id, "dead socket"))
            monkeypatch.setenv("DOCKER_HOST", D2_HOST)
            reset_client()
            assert (await progress())["status"] not in FINAL

            # 2) The daemon itself goes away mid-run, for a while (several times in the large run); the supervisor
            # must ride it out, and progress must move again after each restart.
            for cycle in range(OUTAGES):
                second_daemon.stop()
                down_at = time.monotonic()
                answers.update(await _fault_answers(c, box.name, run_id, "daemon stopped"))
                await anyio.sleep(max(0.0, FAULT_DOWN_S - (time.monotonic() - down_at)))
                during = await progress()
                assert during["status"] in ("running", "starting"), f"the outage ended the run: {during}"
                store = Store(Path(os.environ["VERL_ASYNC_DAPO_HOME"]) / "state.db")
                try:
                    assert store.integrity_ok()
                    assert [a.status for a in store.attempts(run_id)] == ["running"]
                finally:
                    store.close()
                second_daemon.start()
                if cycle + 1 < OUTAGES:
                    step = during["step"] or 0
                    deadline = time.monotonic() + 60
                    while ((p := await progress())["step"] or 0) <= step:
                        assert p["status"] not in FINAL and time.monotonic() < deadline, p
                        await anyio.sleep(0.3)

            # 3) Supervision resumes: the same attempt runs to the end, nothing was relaunched.
            deadline = time.monotonic() + 180
            while (p := await progress())["status"] not in FINAL:
                assert time.monotonic() < deadline, p
                await anyio.sleep(0.5)
            errors = result_text(await c.call_tool("check_errors", {"run_id": run_id}))
            assert p["status"] == "succeeded", errors
            assert p["attempt"] == 1 and p["step"] == p["total_steps"] == STEPS, (p, errors)
        log = (Path(os.environ["VERL_ASYNC_DAPO_HOME"]) / "runs" / run_id / "supervisor.log").read_text()
        assert "cannot read job status" in log or "lost the log stream" in log, (
            "the outage never reached the supervisor"
        )
    finally:
        end_runs([run_id] if run_id else [])
        with contextlib.suppress(Exception):
            if not second_daemon.answers():
                second_daemon.start()
            box.remove(force=True)
    record("fault_docker_daemon", faults=1 + OUTAGES, daemon_stops=OUTAGES, down_seconds=FAULT_DOWN_S,
           run_status="succeeded",
           relaunches=0, clear_errors=sorted(answers))  # fmt: skip


async def _fault_answers(c: Client, container: str, run_id: str, fault: str) -> dict[str, str]:
    """Every tool and the log resource while Docker is unreachable: an answer or a clear error, never a crash."""
    seen: dict[str, str] = {}
    listing = await c.call_tool("list_containers", {})
    assert not listing.is_error, result_text(listing)
    assert "not reachable" in (listing.structured_content or {}).get("docker_note", ""), result_text(listing)
    for tool, args in (("select_container", {"name": container}), ("get_progress", {"run_id": run_id}),
                       ("check_errors", {"run_id": run_id}), ("get_session", {})):  # fmt: skip
        result = await c.call_tool(tool, args)
        assert not is_bare_crash(tool, result), f"{fault}: {tool} crashed: {result_text(result)}"
        if tool == "select_container":
            assert result.is_error and "Docker is not reachable" in result_text(result), result_text(result)
        else:
            assert not result.is_error, f"{fault}: {tool}: {result_text(result)}"
        seen[f"{fault}: {tool}"] = "error" if result.is_error else "ok"
    try:
        await c.read_resource(f"verl-async-dapo://runs/{run_id}/log")
        seen[f"{fault}: log resource"] = "ok"
    except MCPError as exc:
        assert "not reachable" in str(exc) or "Docker" in str(exc), f"{fault}: log resource: {exc}"
        seen[f"{fault}: log resource"] = "error"
    return seen


# -- the disk holding the state fills up ----------------------------------------------------------------------------
@pytest.fixture
def tiny_state_fs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 1 MiB tmpfs as VERL_ASYNC_DAPO_HOME (root only)."""
    mnt = tmp_path / "statefs"
    mnt.mkdir()
    if os.geteuid() != 0:
        unavailable("the disk-full test needs root to mount a small tmpfs")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mnt)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    monkeypatch.setenv("VERL_ASYNC_DAPO_HOME", str(mnt))
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


def _fill(mnt: Path) -> Path:
    """Write a filler file until the filesystem is full."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
    finally:
        os.close(fd)
    return filler


def _fingerprint(db: Path) -> tuple[Any, ...]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return (conn.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
                conn.execute("SELECT * FROM answers ORDER BY 1, 2").fetchall())  # fmt: skip


async def test_disk_full_while_writing_state(tiny_state_fs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWANLAB_MODE", "disabled")
    db = tiny_state_fs / "state.db"
    refused: dict[str, str] = {}
    async with Client(mcp) as c:
        assert not (r := await c.call_tool("select_container", {"name": "host"})).is_error, result_text(r)
        filler = _fill(tiny_state_fs)
        before = _fingerprint(db)
        for tool, args in (("set_proxy", {"http_proxy": "http://proxy.example:3128"}),
                           ("set_proxy", {"http_proxy": "http://user:pw-0123456789@proxy.example:3128"}),
                           ("select_container", {"name": "host"})):  # fmt: skip
            result = await c.call_tool(tool, args)
            text = result_text(result)
            assert result.is_error and not is_bare_crash(tool, result), f"{tool}: {text}"
            assert "could not save state" in text, f"{tool}: {text}"
            assert "pw-0123456789" not in text
            refused[f"{len(refused)}:{tool}"] = text.splitlines()[0][:200]
        session = await c.call_tool("get_session", {})  # reads still work on a full disk
        assert not session.is_error and session.structured_content["state"] == "ask_proxy", result_text(session)  # type: ignore[index]
        assert _fingerprint(db) == before, "a refused write changed the state"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # Space again: the same server carries on.
        filler.unlink()
        assert not (r := await c.call_tool("set_proxy", {})).is_error, result_text(r)
        assert not (r := await c.call_tool("choose_features", {"names": ["default"]})).is_error, result_text(r)
        assert (await c.call_tool("get_session", {})).structured_content["state"] == "ready"  # type: ignore[index]
    record("fault_disk_full", refused_writes=len(refused), integrity="ok", recovered=True)


async def test_unsafe_secret_file_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, host_verl_tree: Path, tmp_path: Path
) -> None:
    """A secret file someone made group/world readable: start_training refuses, saying how to fix it."""
    prepare_host_tree(host_verl_tree)
    _env(monkeypatch, VERL_HOME=str(host_verl_tree), FRAMEWORK="fsdp", TRAINER_GPUS="1", ROLLOUT_GPUS="1",
         ROLLOUT_TP="1", SWANLAB_MODE="disabled", PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")  # fmt: skip
    async with Client(mcp) as c:
        for tool, args in (("select_container", {"name": "host"}),
                           ("set_proxy", {"http_proxy": "http://user:pw-0123456789@127.0.0.1:3128"}),
                           ("choose_features", {"names": ["default"]})):  # fmt: skip
            assert not (r := await c.call_tool(tool, args)).is_error, result_text(r)
        secrets = list((tmp_path / "state" / "secrets").glob("sec_*"))
        assert len(secrets) == 1
        secrets[0].chmod(0o644)
        result = await c.call_tool("start_training", {})
        text = result_text(result)
        assert result.is_error and not is_bare_crash("start_training", result), text
        assert "chmod 600" in text and "pw-0123456789" not in text, text
        assert (await c.call_tool("get_session", {})).structured_content["state"] == "ready"  # type: ignore[index]
    record("fault_secret_permissions", clear_error=True)
