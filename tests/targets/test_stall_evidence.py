"""The stall evidence on a real container and on this host: the process that hangs is a descendant outside the job's
process group (Ray gives ``ray::WorkerDict``, the trainer, a group of its own; this test's child goes further, into a
session of its own), stopped with SIGSTOP as on the H200 (bench/gpu/results/hang), where it was one row of 40 and
py-spy dumped three other processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from target_helpers import Env
from test_target_jobs import start, wait_for_file

from verl_async_dapo.watchman import evidence

# A fixed test script: a child that retitles itself like a Ray worker, in a new session (as the raylet starts them),
# and writes its pid to $1 once its interpreter runs its code (stopped before that, it has no Python stack for py-spy
# to find: "Failed to find a python interpreter", seen once under load); the parent prints one verl step line, then
# waits.
CHILD = ("import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); "
         "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(300)")
JOB = f"""
import subprocess, sys, time
child = subprocess.Popen(["ray::WorkerDict", "-c", {CHILD!r}, sys.argv[1]], executable=sys.executable,
                         start_new_session=True)
print("\\x1b[36m(DAPOTaskRunner pid=1)\\x1b[0m step:1 - x:1", flush=True)
print("\\x1b[36m(DAPOTaskRunner pid=1)\\x1b[0m ", flush=True)
time.sleep(300)
"""


@pytest.fixture
def py_spy_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """py-spy (a test extra) next to this interpreter, on PATH: the host target runs what PATH finds."""
    here = Path(sys.executable).parent
    if shutil.which("py-spy") is None and (here / "py-spy").exists():
        monkeypatch.setenv("PATH", f"{here}{os.pathsep}{os.environ.get('PATH', '')}")


async def test_a_stopped_worker_in_its_own_session_is_named_and_dumped_first(env: Env, py_spy_on_path: None) -> None:
    pid_file = f"{env.work}/child.pid"
    handle = await start(env, "hang", ["python3", "-c", JOB, pid_file])
    child = int((await wait_for_file(env, pid_file)).decode())
    status = await env.target.job_status(handle)
    assert status.pgid is not None
    try:
        assert (await env.target.run(["kill", "-STOP", str(child)])).exit_code == 0
        with anyio.fail_after(10):  # the step line is in the log
            while b"step:1" not in await env.target.read_tail(handle.log_path, 4096):
                await anyio.sleep(0.1)
        bundle = await evidence.collect(env.target, handle, status.pgid)
    finally:
        for argv in (["kill", "-KILL", str(child)], ["kill", "-KILL", "--", f"-{status.pgid}"]):
            with contextlib.suppress(Exception):
                await env.target.run(argv)
    listed = [line.split(None, 1)[0] for line in bundle["processes"]]
    assert str(child) in listed, bundle["processes"]  # outside the group, inside the job's tree
    (stopped,) = bundle["stopped_processes"]
    assert stopped.split()[0] == str(child) and stopped.split()[1].startswith("T") and "ray::WorkerDict" in stopped
    # Colours gone, the Ray prefix kept (which process printed last is evidence), the prefix-only line dropped.
    assert bundle["last_log_lines"] == ["(DAPOTaskRunner pid=1) step:1 - x:1"], bundle["last_log_lines"]
    if env.kind == "host":  # py-spy is a test extra here (the test image may lack it: then the hint)
        assert bundle["py_spy"] != evidence.PY_SPY_HINT, "py-spy is in the test extras: pip install -e '.[test]'"
    if bundle["py_spy"] != evidence.PY_SPY_HINT:  # the stopped worker first, dumped without ptrace-suspending it
        first = bundle["py_spy"].split("\n--- ")[0]
        assert first.startswith(f"--- py-spy dump --nonblocking --pid {child} (exit 0) ---"), first
        assert "time.sleep" in first or "<module>" in first, first  # its stack, not py-spy's error


def test_the_job_tree_follows_children_out_of_the_group_and_orders_dumps() -> None:
    # ps -eo pid=,ppid=,pgid=,stat=,etime=,pcpu=,rss=,args= rows: the driver (group 849), the raylet it started,
    # a worker the raylet put in its own group (stopped), and an unrelated Ray worker of another job (group 77).
    ps = "\n".join([
        "  849     1   849 Sl   05:09  8.3 986024 python3 -m recipe.dapo.main_dapo --config-name=dapo_trainer",
        "  940   849   849 Sl   04:48  1.0 138124 /venv/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet",
        " 2705   940  2705 TNl  04:30 30.0 9000000 ray::WorkerDict",
        " 3001   940  3001 Sl   04:30  2.0 500000 ray::vLLMHttpServer.run",
        "   77     1    77 Sl   09:00  1.0 9000 ray::OtherJob",
        "garbage row",
    ])  # fmt: skip
    tree = evidence.job_tree(evidence.parse_ps(ps), 849)
    assert [p.pid for p in tree] == [849, 940, 2705, 3001]
    assert [p.pid for p in tree if p.stopped] == [2705]
    # The stopped worker, the driver, then Ray's other actors; never the raylet (not Python) nor another job's.
    assert evidence.dump_order(tree) == [2705, 849, 3001]
    assert tree[2].line == "2705 TNl 04:30 30.0 9000000 ray::WorkerDict"


# The H200 hang's process rows (bench/gpu/results/hang/webhook.jsonl, the run_stalled evidence, first 40 of the tree;
# args shortened), with the job's group and parents filled in: the dumps went to 849 (the driver), 922 (gcs_server)
# and 1000 (the autoscaler monitor), and the stopped ray::WorkerDict 2705 — the hang — was never dumped.
H200_ROWS = """\
844 Ss 05:09 0.0 4116 bash -c umask 077 job_dir=$1; log=$2; shift 3 vad-launch
849 Sl 05:09 8.3 986024 python3 -m recipe.dapo.main_dapo --config-path=/root/verl/recipe/dapo/config
922 Sl 04:48 1.0 138124 /opt/torch/.venv/lib/python3.12/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray
1000 Sl 04:48 0.5 92248 /opt/torch/.venv/bin/python3 -u /opt/torch/.venv/lib/python3.12/site-packages/ray/autoscaler/_private/monitor.py --logs-dir=/tmp/ray
1001 Sl 04:48 1.4 130712 /opt/torch/.venv/bin/python3 /opt/torch/.venv/lib/python3.12/site-packages/ray/dashboard/dashboard.py --host=127.0.0.1
1060 S 04:46 0.0 19444 /opt/torch/.venv/bin/python3 -B -c from multiprocessing.resource_tracker import main;main(25)
1061 S 04:46 0.7 116184 /opt/torch/.venv/bin/python3 -B -c from multiprocessing.forkserver import main; main(25, 27, ['ray'])
1068 Sl 04:44 0.1 102536 ray-dashboard-MetricsHead-0 (/opt/torch/.venv/bin/python3 -B -c "from multiprocessing.forkserver import main")
1512 Sl 04:44 1.8 87956 /opt/torch/.venv/bin/python3 -u /opt/torch/.venv/lib/python3.12/site-packages/ray/_private/log_monitor.py --session-dir=/tmp/ray
1513 Sl 04:44 0.9 46556 /opt/torch/.venv/lib/python3.12/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray
1562 Sl 04:43 2.6 163740 ray::DashboardAgent
1564 Sl 04:43 0.4 87920 ray::RuntimeEnvAgent
1696 SNl 04:41 0.8 87740 ray::IDLE
2451 SNl 04:40 10.9 1230648 ray::DAPOTaskRunner.run
2645 SNl 04:19 1.3 138420 ray::IDLE
2705 TNl 04:17 12.8 2562060 ray::WorkerDict
2850 SNl 03:55 6.8 925276 ray::RewardLoopWorker
"""


def _h200_tree() -> list[evidence.Proc]:
    rows = [row.split(None, 1) for row in H200_ROWS.splitlines()]
    ps = "\n".join(f"{pid} {844 if pid != '844' else 1} 844 {rest}" for pid, rest in rows)
    return evidence.job_tree(evidence.parse_ps(ps), 844)


def test_dumps_go_to_the_processes_that_explain_the_h200_hang() -> None:
    tree = _h200_tree()
    assert len(tree) == 17
    order = evidence.dump_order(tree)
    # The stopped worker, the driver, the task runner: the MAX_DUMPS=3 that are dumped. Then Ray's other actors.
    assert order[: evidence.MAX_DUMPS] == [2705, 849, 2451]
    assert order == [2705, 849, 2451, 2850]
    background = {922, 1000, 1001, 1060, 1061, 1068, 1512, 1513, 1562, 1564, 1696, 2645}
    assert not background & set(order)
    assert all(evidence.is_ray_background(p) for p in tree if p.pid in background)


def test_only_a_stopped_process_is_dumped_nonblocking() -> None:
    by_pid = {p.pid: p for p in _h200_tree()}
    assert evidence.py_spy_argv(by_pid[2705]) == ["py-spy", "dump", "--nonblocking", "--pid", "2705"]
    # A running one is suspended while read: its threads' stacks are consistent with each other.
    assert evidence.py_spy_argv(by_pid[849]) == ["py-spy", "dump", "--pid", "849"]
