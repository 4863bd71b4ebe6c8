"""File access inside a target: tails and ranges by seeking, sizes, existence, small writes."""

from __future__ import annotations

import time

import pytest
from docker.models.containers import Container
from target_helpers import Env

from harness.fixtures import exec_argv, silent_first
from verl_async_dapo.exceptions import TargetError
from verl_async_dapo.targets.docker import DockerTarget

GIB = 1 << 30


async def test_tail_of_a_1gib_file_reads_only_the_end(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    path = f"{env.work}/huge.log"
    # Sparse: 1 GiB of holes costs no disk; a reader that scanned it would take seconds.
    assert (await env.target.run(["truncate", "-s", "1G", "--", path])).exit_code == 0
    append = await env.target.run(["sh", "-c", 'printf "%s\\n" "$1" >> "$2"', "vad", "THE LAST LINE", path])
    assert append.exit_code == 0
    t0 = time.monotonic()
    tail = await env.target.read_tail(path, 14)
    t_tail = time.monotonic() - t0
    t0 = time.monotonic()
    size = await env.target.file_size(path)
    end = await env.target.read_range(path, GIB, 64)
    middle = await env.target.read_range(path, GIB // 2, 16)
    t_rest = time.monotonic() - t0
    assert tail == b"THE LAST LINE\n"
    assert size == GIB + 14
    assert end == b"THE LAST LINE\n"
    assert middle == b"\0" * 16
    with capsys.disabled():
        print(f"\n[{env.kind}] tail of 1 GiB: {t_tail * 1000:.0f} ms; size + 2 ranges: {t_rest * 1000:.0f} ms")


async def test_read_range_edges(env: Env) -> None:
    path = f"{env.work}/digits"
    await env.target.write_file(path, b"0123456789")
    assert await env.target.read_range(path, 2, 3) == b"234"
    assert await env.target.read_range(path, 8, 10) == b"89"
    assert await env.target.read_range(path, 100, 5) == b""
    assert await env.target.read_range(path, 0, 0) == b""
    assert await env.target.read_tail(path, 100) == b"0123456789"
    assert await env.target.read_tail(path, 0) == b""


async def test_missing_files(env: Env) -> None:
    missing = f"{env.work}/nope/nothing.log"
    assert await env.target.file_size(missing) is None
    with pytest.raises(TargetError, match=r"nothing\.log"):
        await env.target.read_tail(missing, 10)
    with pytest.raises(TargetError, match=r"nothing\.log"):
        await env.target.read_range(missing, 0, 10)
    assert await env.target.paths_exist([missing, env.work, "/"]) == {missing: False, env.work: True, "/": True}
    assert await env.target.paths_exist([]) == {}


async def test_write_file_creates_parents_sets_mode_and_replaces(env: Env) -> None:
    path = f"{env.work}/a/b c/secret.txt"
    await env.target.write_file(path, b"first version, longer\n", mode=0o600)
    await env.target.write_file(path, b"second\n", mode=0o640)
    assert await env.target.read_tail(path, 100) == b"second\n"
    mode = await env.target.run(["stat", "-c", "%a", "--", path])
    assert mode.stdout.strip() == "640"


async def test_binary_roundtrip(env: Env) -> None:
    data = bytes(range(256)) * 4
    path = f"{env.work}/bin"
    await env.target.write_file(path, data)
    assert await env.target.read_range(path, 0, len(data)) == data
    assert await env.target.read_range(path, 255, 3) == bytes([255, 0, 1])
    assert await env.target.file_size(path) == len(data)


@pytest.mark.parametrize(("fails", "code"), [(1, 126), (2, 0)])
async def test_a_lost_existence_answer_is_asked_again_not_read_as_missing(container: Container, fails: int,
                                                                         code: int) -> None:  # fmt: skip
    """An exec that failed to start (126), or one whose output Docker lost (exit 0, nothing printed), is not "no such
    path": paths_exist asks again (a suite run once refused a launch over "VERL_HOME /verl does not exist")."""
    silent_first(container, "stat", fails, code)
    target = DockerTarget(container.name)
    assert await target.paths_exist(["/verl", "/nope"]) == {"/verl": True, "/nope": False}
    assert exec_argv(container, ["cat", "/tmp/stat-calls"]).stdout.strip() == str(fails + 1)


async def test_an_existence_answer_that_stays_lost_is_an_error(container: Container) -> None:
    silent_first(container, "stat", 99)
    with pytest.raises(TargetError, match="could not check paths"):
        await DockerTarget(container.name).paths_exist(["/verl"])


async def test_a_lost_process_list_does_not_leave_a_stopped_job_running(container: Container) -> None:
    """ps lists at least itself: no row at all is a lost answer, asked again, not a job group that is gone (the stop
    would otherwise skip its signals and leave the job training under a run marked stopped)."""
    target = DockerTarget(container.name)
    handle = await target.start_detached(["sleep", "300"], env={}, cwd="/tmp", job_dir="/tmp/vad-job",
                                         log_path="/tmp/vad-job/log")  # fmt: skip
    assert (await target.job_status(handle)).running
    silent_first(container, "ps", 1)
    await target.stop_job(handle, grace_seconds=1)
    assert not (await target.job_status(handle)).running


async def test_a_lost_size_answer_is_asked_again_not_an_error(container: Container) -> None:
    """A stat whose answer Docker lost (a missing file's reason, an existing file's size) is asked again: a fresh-clone
    suite run once failed with "cannot stat …:" and nothing after it. An answer that stays lost is an error."""
    target = DockerTarget(container.name)
    await target.write_file("/tmp/vad-size.log", b"12345")
    silent_first(container, "stat", 1, code=1)
    assert await target.file_size("/tmp/nope/nothing.log") is None
    assert exec_argv(container, ["cat", "/tmp/stat-calls"]).stdout.strip() == "2"
    exec_argv(container, ["rm", "-f", "/tmp/stat-calls"])
    silent_first(container, "stat", 2, code=0)
    assert await target.file_size("/tmp/vad-size.log") == 5
    exec_argv(container, ["rm", "-f", "/tmp/stat-calls"])
    silent_first(container, "stat", 99, code=1)
    with pytest.raises(TargetError, match="no answer"):
        await target.file_size("/tmp/vad-size.log")


async def test_a_lost_tail_is_read_again_and_an_empty_file_is_still_empty(container: Container) -> None:
    """A log's tail read as nothing would classify an OOM as no error: empty output from a file with bytes is asked
    again; a file that is empty reads empty."""
    target = DockerTarget(container.name)
    await target.write_file("/tmp/vad.log", b"torch.OutOfMemoryError: CUDA out of memory.\n")
    await target.write_file("/tmp/empty.log", b"")
    silent_first(container, "tail", 1)
    assert await target.read_tail("/tmp/vad.log", 64) == b"torch.OutOfMemoryError: CUDA out of memory.\n"
    silent_first(container, "tail", 99)
    assert await target.read_tail("/tmp/empty.log", 64) == b""
    with pytest.raises(TargetError, match="no answer"):
        await target.read_tail("/tmp/vad.log", 64)
