"""Detached jobs on a real container and on this host: exit codes, stop, follow."""

from __future__ import annotations

import dataclasses
import os
import time

import anyio
import pytest
from target_helpers import Env

from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.records import JobHandle
from verl_async_dapo.targets.base import COMMAND_NOT_FOUND, JobStatus

# A fixed test script: the child's pid goes to the file named by $1, then bash waits for it.
SPAWN_CHILD = 'sleep 300 & echo $! > "$1"; wait'


async def start(env: Env, name: str, argv: list[str], *, job_env: dict[str, str] | None = None) -> JobHandle:
    return await env.target.start_detached(
        argv, env=job_env or {}, cwd=env.work, job_dir=f"{env.work}/{name}", log_path=f"{env.work}/{name}.log"
    )


async def wait_done(env: Env, handle: JobHandle, timeout: float = 15.0) -> JobStatus:
    with anyio.fail_after(timeout):
        while (status := await env.target.job_status(handle)).running:
            await anyio.sleep(0.1)
    return status


async def alive(env: Env, pid: int) -> bool:
    """Alive = listed by ps and not a zombie (checked inside the target itself)."""
    res = await env.target.run(["ps", "-o", "stat=", "-p", str(pid)])
    return bool(res.stdout.strip()) and not res.stdout.strip().startswith("Z")


async def wait_for_file(env: Env, path: str, timeout: float = 10.0) -> bytes:
    with anyio.fail_after(timeout):
        while not (await env.target.paths_exist([path]))[path] or not await env.target.file_size(path):
            await anyio.sleep(0.05)
    return await env.target.read_tail(path, 64)


async def test_run_captures_output_and_exit_code(env: Env) -> None:
    res = await env.target.run(["sh", "-c", 'echo out; echo "$VAD_X" >&2; exit 3'], env={"VAD_X": "err"})
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert (await env.target.run(["pwd"], cwd=env.work)).stdout.strip() == env.work


async def test_run_missing_program_is_127(env: Env) -> None:
    res = await env.target.run(["vad-no-such-program", "--x"])
    assert res.exit_code == COMMAND_NOT_FOUND
    assert "vad-no-such-program" in res.stderr


async def test_run_timeout_raises_quickly(env: Env) -> None:
    t0 = time.monotonic()
    with pytest.raises(TargetError, match="did not finish"):
        await env.target.run(["sleep", "20"], timeout=0.5)
    assert time.monotonic() - t0 < 10


async def test_exit_code_comes_from_rc_file_without_exec_record(env: Env) -> None:
    handle = await start(env, "rc", ["bash", "-c", "echo started; exit 7"])
    status = await wait_done(env, handle)
    assert status == JobStatus(running=False, exit_code=7, pgid=status.pgid)
    assert status.pgid is not None and status.pgid > 1
    assert (await env.target.read_tail(f"{handle.job_dir}/rc", 8)).strip() == b"7"
    # As after a daemon restart: no exec id at all, or one the daemon never heard of.
    for forgotten in (None, "0" * 64):
        again = await env.target.job_status(dataclasses.replace(handle, exec_id=forgotten))
        assert again == status
    assert (await env.target.read_tail(handle.log_path, 100)) == b"started\n"


async def test_job_files_are_private_whatever_the_umask(env: Env) -> None:
    """Issue 20: train.log (raw, unredacted), pgid, rc and Hydra's outputs/ were 0644 in 0755 dirs."""
    previous = os.umask(0o022)  # the host target inherits ours; docker exec's default is 022 too
    try:
        handle = await start(env, "private", ["bash", "-c", "mkdir -p outputs/d && echo x > outputs/d/main.log"])
    finally:
        os.umask(previous)
    await wait_done(env, handle)
    paths = [handle.job_dir, f"{handle.job_dir}/pgid", f"{handle.job_dir}/rc", handle.log_path,
             f"{env.work}/outputs", f"{env.work}/outputs/d", f"{env.work}/outputs/d/main.log"]  # fmt: skip
    res = await env.target.run(["stat", "-c", "%a %n", *paths])
    modes = dict(reversed(line.split(" ", 1)) for line in res.stdout.splitlines())
    assert {p: modes[p] for p in paths} == {p: ("700" if p in (handle.job_dir, f"{env.work}/outputs",
                                                                f"{env.work}/outputs/d") else "600")
                                            for p in paths}, res.stdout  # fmt: skip


async def test_job_env_cwd_and_arguments_are_literal(env: Env) -> None:
    injections = [f"; touch {env.canary}", f"$(touch {env.canary})", f"`touch {env.canary}`", f"| touch {env.canary}"]
    proxy = f"http://proxy:3128 && touch {env.canary}"
    argv = ["bash", "-c", 'pwd; printf "%s\\n" "$HTTPS_PROXY" "$@"', "vad", *injections]
    handle = await start(env, "literal", argv, job_env={"HTTPS_PROXY": proxy})
    assert (await wait_done(env, handle)).exit_code == 0
    lines = (await env.target.read_tail(handle.log_path, 4096)).decode().splitlines()
    assert lines == [env.work, proxy, *injections]
    assert not await env.exists(env.canary)


async def test_stop_kills_the_whole_process_group(env: Env) -> None:
    handle = await start(env, "grp", ["bash", "-c", SPAWN_CHILD, "vad", f"{env.work}/child.pid"])
    child = int(await wait_for_file(env, f"{env.work}/child.pid"))
    status = await env.target.job_status(handle)
    assert status.running and status.pgid is not None
    assert await alive(env, status.pgid) and await alive(env, child)

    await env.target.stop_job(handle, grace_seconds=5)

    assert not await alive(env, status.pgid)
    assert not await alive(env, child)
    after = await env.target.job_status(handle)
    assert after == JobStatus(running=False, exit_code=None, pgid=status.pgid)


async def test_stop_escalates_to_kill_when_term_is_ignored(env: Env) -> None:
    # Ignored signals stay ignored across fork/exec, so both bash and its sleep ignore TERM.
    script = "trap '' TERM; " + SPAWN_CHILD
    handle = await start(env, "stubborn", ["bash", "-c", script, "vad", f"{env.work}/child.pid"])
    child = int(await wait_for_file(env, f"{env.work}/child.pid"))
    pgid = (await env.target.job_status(handle)).pgid
    assert pgid is not None
    await env.target.stop_job(handle, grace_seconds=1)
    assert not await alive(env, pgid)
    assert not await alive(env, child)


async def test_follow_streams_appended_lines_and_ends_with_the_job(env: Env) -> None:
    script = 'for i in 1 2 3 4; do echo "line $i"; sleep 0.5; done'
    handle = await start(env, "follow", ["bash", "-c", script])
    received = b""
    running_after_first: bool | None = None
    with anyio.fail_after(20):  # the iterator must end by itself once the job exits
        async for chunk in env.target.follow(handle, from_offset=0):
            received += chunk
            if running_after_first is None and b"line 1\n" in received:
                running_after_first = (await env.target.job_status(handle)).running
    assert running_after_first is True, "the first line must arrive while the job still runs"
    assert received == b"line 1\nline 2\nline 3\nline 4\n"
    assert (await env.target.job_status(handle)).exit_code == 0


async def test_follow_default_starts_at_the_last_mib_and_honours_offsets(env: Env) -> None:
    script = "yes abcdefghijklmno | head -c 1572864; echo; echo END"
    handle = await start(env, "big", ["bash", "-c", script])
    await wait_done(env, handle)
    size = await env.target.file_size(handle.log_path)
    assert size == 1572864 + 5
    got = b""
    with anyio.fail_after(20):
        async for chunk in env.target.follow(handle):
            got += chunk
    assert len(got) == 1 << 20
    assert got == await env.target.read_tail(handle.log_path, 1 << 20)
    tail = b"".join([c async for c in env.target.follow(handle, from_offset=size - 4)])
    assert tail == b"END\n"


async def _tails_for(env: Env, pgid: int) -> list[str]:
    res = await env.target.run(["ps", "-e", "-o", "args="])
    return [line for line in res.stdout.splitlines() if line.startswith(f"tail --pid={pgid} ")]


async def test_closing_or_cancelling_follow_returns_promptly(env: Env) -> None:
    handle = await start(env, "quiet", ["bash", "-c", "echo first; sleep 60"])
    pgid = (await env.target.job_status(handle)).pgid
    assert pgid is not None
    agen = env.target.follow(handle, from_offset=0)
    with anyio.fail_after(10):
        assert await agen.__anext__() == b"first\n"
        await agen.aclose()  # type: ignore[attr-defined]
    with anyio.fail_after(10):
        with anyio.move_on_after(0.5) as scope:
            async for _ in env.target.follow(handle, from_offset=0):
                pass
        assert scope.cancelled_caught
    await env.target.stop_job(handle, grace_seconds=2)
    # No follower outlives the job (host: killed on close; container: tail --pid exits with the job).
    with anyio.fail_after(5):
        while await _tails_for(env, pgid):
            await anyio.sleep(0.2)


async def test_job_dir_holding_a_job_is_refused(env: Env) -> None:
    handle = await start(env, "once", ["true"])
    await wait_done(env, handle)
    with pytest.raises(InvalidTargetInput, match="already holds a job"):
        await start(env, "once", ["true"])


async def test_missing_working_directory_is_reported(env: Env) -> None:
    with pytest.raises(TargetError, match=r"working directory|is a directory"):
        await env.target.start_detached(
            ["true"], env={}, cwd=f"{env.work}/missing-dir", job_dir=f"{env.work}/j", log_path=f"{env.work}/j.log"
        )


async def test_launcher_failure_is_reported(env: Env) -> None:
    # The cwd exists, so every check before the job dir passes; its job_dir lies under a regular file, so creating
    # it fails (the target creates it before the launcher since issue 27: a launch that began leaves that evidence)
    # and nothing is started.
    await env.target.write_file(f"{env.work}/plain-file", b"x")
    with pytest.raises(TargetError, match=r"cannot create \S*/plain-file/j (on the host|in ')"):
        await env.target.start_detached(
            ["true"], env={}, cwd=env.work, job_dir=f"{env.work}/plain-file/j", log_path=f"{env.work}/j.log"
        )


async def test_a_launcher_that_ends_without_a_pgid_is_reported(env: Env) -> None:
    # The job dir can be made, but the launcher cannot record its pgid (pgid.tmp is a directory): it runs the
    # command and exits without one, which start_detached reports instead of waiting out its timeout.
    await env.target.write_file(f"{env.work}/nopgid/pgid.tmp/x", b"x")
    with pytest.raises(TargetError, match=r"the launcher exited with code 0 before the job started"):
        await env.target.start_detached(
            ["true"], env={}, cwd=env.work, job_dir=f"{env.work}/nopgid", log_path=f"{env.work}/nopgid.log"
        )


async def test_reused_pids_do_not_look_like_running_jobs(env: Env) -> None:
    # A live process that is not a group leader stands in for "the launcher's pid was reused".
    holder = await start(env, "holder", ["bash", "-c", SPAWN_CHILD, "vad", f"{env.work}/child.pid"])
    child = await wait_for_file(env, f"{env.work}/child.pid")
    ghost = JobHandle(env.target.name, f"{env.work}/ghost", f"{env.work}/ghost.log")
    await env.target.write_file(f"{ghost.job_dir}/pgid", child)
    assert await env.target.job_status(ghost) == JobStatus(running=False, exit_code=None, pgid=int(child))
    # A finished job whose pid is alive again: follow reads the complete log once and ends.
    done = await start(env, "done", ["echo", "complete"])
    await wait_done(env, done)
    await env.target.write_file(f"{done.job_dir}/pgid", child)
    with anyio.fail_after(10):
        assert b"".join([c async for c in env.target.follow(done, from_offset=0)]) == b"complete\n"
    await env.target.stop_job(holder, grace_seconds=2)
