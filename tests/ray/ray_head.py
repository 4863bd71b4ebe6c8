"""A private, CPU-only, loopback-only Ray head for tests/ray, stopped by process id (never by name).

Loopback only: ``--node-ip-address=127.0.0.1`` alone is not enough — Ray rewrites a loopback node IP
to the machine's "reachable" address (services.resolve_ip_for_localhost) unless
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 marks the cluster single-node. Every port is a free loopback
port chosen here (none of Ray's fixed defaults: 6379, 8265, 10001, 52365), so a second head on the
machine cannot collide. Usage stats are off. ``extra_env`` is added after every inherited RAY_*
variable is dropped, e.g. ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` for a head that wants a
token (then readiness is asked with that token).

Stopping: ``ray stop`` has no address or temp-dir option; it kills every Ray process on the machine
by name. Instead the head starts in its own session, so all its daemons share one process group;
``stop`` signals that group, plus every process descending from it (job entrypoints run in their
own sessions), by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 120.0
STOP_GRACE_S = 3.0  # the temp dir is removed anyway; Ray daemons are slow to exit on TERM


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open until every one is picked)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, start time) of a live, non-zombie process, else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def _all_pids() -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]


def head_processes(pgid: int) -> dict[int, int]:
    """pid → start time for the head's process group and all descendants of its members."""
    table = {pid: st for pid in _all_pids() if (st := _stat(pid)) is not None}
    found = {pid: st[2] for pid, st in table.items() if st[1] == pgid}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, start) in table.items():
            if pid not in found and ppid in found:
                found[pid] = start
                grew = True
    return found


def _signal_all(procs: dict[int, int], sig: signal.Signals) -> None:
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == start:  # still the same process, not a reused pid
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


def _alive(procs: dict[int, int]) -> list[int]:
    return [pid for pid, start in procs.items() if (st := _stat(pid)) is not None and st[2] == start]


@dataclass
class RayHead:
    ray_bin: Path
    job_path: Iterable[str]  # PATH entries put first for the head and therefore every job
    num_cpus: int = 4
    extra_env: dict[str, str] = field(default_factory=dict)  # set last, so RAY_* here survive the drop
    temp_dir: Path = field(init=False)
    address: str = field(init=False, default="")
    pgid: int | None = field(init=False, default=None)

    def environment(self) -> dict[str, str]:
        """The head's (and so every job's) environment: nothing that points anywhere but loopback."""
        drop = ("RAY_", "http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
        env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        env.update(
            PATH=os.pathsep.join([*self.job_path, env.get("PATH", "/usr/bin:/bin")]),
            RAY_USAGE_STATS_ENABLED="0",
            RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # keep the node IP at 127.0.0.1 (see module doc)
            no_proxy="127.0.0.1,localhost",
        )
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        # Short path: Ray's unix sockets live under it (AF_UNIX paths are limited to ~107 bytes).
        self.temp_dir = Path(tempfile.mkdtemp(prefix="vadray-", dir="/tmp"))
        gcs, dashboard, client, agent_http, agent_grpc, runtime_env, metrics = free_ports(7)
        argv = [
            str(self.ray_bin), "start", "--head", "--disable-usage-stats",
            "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
            f"--port={gcs}", f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}",
            f"--dashboard-agent-listen-port={agent_http}", f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
            f"--num-cpus={self.num_cpus}", "--num-gpus=0", f"--temp-dir={self.temp_dir}",
        ]  # fmt: skip
        log = (self.temp_dir / "ray-start.log").open("wb")
        # Own session: every daemon `ray start` leaves behind keeps this process group.
        proc = subprocess.Popen(
            argv, env=self.environment(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=self.temp_dir,
        )  # fmt: skip
        self.pgid = proc.pid
        self.address = f"http://127.0.0.1:{dashboard}"
        try:
            rc = proc.wait(timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            log.close()
        if rc != 0 or not self._wait_ready():
            text = (self.temp_dir / "ray-start.log").read_text(errors="replace")[-3000:]
            self.stop()
            raise RuntimeError(f"ray start failed (rc={rc}):\n{text}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        token = self.extra_env.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"{self.address}/api/version", headers=headers)  # noqa: S310 (loopback)
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(request, timeout=5) as r:  # noqa: S310 (loopback)
                    if "ray_version" in json.loads(r.read()):
                        return True
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        """TERM the head's group and descendants, wait, then KILL what is left; remove the temp dir."""
        if self.pgid is not None:
            procs = head_processes(self.pgid)
            _signal_all(procs, signal.SIGTERM)
            deadline = time.monotonic() + STOP_GRACE_S
            while _alive(procs) and time.monotonic() < deadline:
                time.sleep(0.2)
            _signal_all(procs, signal.SIGKILL)
            deadline = time.monotonic() + 5.0
            while _alive(procs) and time.monotonic() < deadline:
                time.sleep(0.1)
            self.pgid = None
        if getattr(self, "temp_dir", None) is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
