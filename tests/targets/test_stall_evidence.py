"""The stall evidence on a real container and on this host: the process that hangs is a descendant outside the job's
process group (Ray gives ``ray::WorkerDict``, the trainer, a group of its own; this test's child goes further, into a
session of its own), stopped with SIGSTOP as on the H200 (bench/gpu/results/hang), where it was one row of 40 and
py-spy dumped three other processes."""

from __future__ import annotations

import contextlib

import anyio
from target_helpers import Env
from test_target_jobs import start, wait_for_file

from verl_async_dapo.watchman import evidence

# A fixed test script: a child that retitles itself like a Ray worker, in a new session (as the raylet starts them),
# writes its pid to $1, prints one verl step line, then waits.
JOB = """
import subprocess, sys, time
child = subprocess.Popen(["ray::WorkerDict", "-c", "import time; time.sleep(300)"], executable=sys.executable,
                         start_new_session=True)
open(sys.argv[1], "w").write(str(child.pid))
print("\\x1b[36m(DAPOTaskRunner pid=1)\\x1b[0m step:1 - x:1", flush=True)
print("\\x1b[36m(DAPOTaskRunner pid=1)\\x1b[0m ", flush=True)
time.sleep(300)
"""


async def test_a_stopped_worker_in_its_own_session_is_named_and_dumped_first(env: Env) -> None:
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
    if bundle["py_spy"] != evidence.PY_SPY_HINT:  # py-spy present: the stopped worker is dumped first
        assert bundle["py_spy"].startswith(f"--- py-spy dump --pid {child} ")


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
    assert evidence.dump_order(tree) == [2705, 3001, 849]  # the stopped worker, Ray's workers, then the driver
    assert tree[2].line == "2705 TNl 04:30 30.0 9000000 ray::WorkerDict"
