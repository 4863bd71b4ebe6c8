"""The Ray target's pure parts, no cluster needed: cluster configuration, address validation, submission ids,
entrypoint quoting (run through a real ``sh -c``, exactly as Ray's job supervisor runs it), result parsing,
status mapping, GPU placement, and where the cluster's token comes from (and that it is never shown)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from verl_async_dapo.context import AppContext
from verl_async_dapo.exceptions import InvalidTargetInput, TargetError
from verl_async_dapo.targets.ray import RayTarget, _check_no_secret_in, exit_code_of, submission_id_for
from verl_async_dapo.targets.ray.api import JobInfo, RayJobsClient, auth_error_message
from verl_async_dapo.targets.ray.auth import TOKEN_ENV, TOKEN_PATH_ENV, RayToken, RayTokenError, find_token
from verl_async_dapo.targets.ray.clusters import ADDRESS_ENV, configured_clusters, normalise_address, resolve
from verl_async_dapo.targets.ray.resources import ClusterResources, assess, fits
from verl_async_dapo.targets.ray.scripts import (
    WRITE_DATA_ENV,
    decode_b64,
    launch_entrypoint,
    parse_result,
    probe_entrypoint,
)
from verl_async_dapo.targets.registry import get_target

NASTY = ["$(touch {pwned})", "`touch {pwned}`", "a'b\"c", "; touch {pwned}", "x\\ny", "*", "--", "-rf", "é ü"]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://10.0.0.5:8265", "http://10.0.0.5:8265"),
        ("  https://ray.example.org/dash/  ", "https://ray.example.org/dash"),
        ("http://[::1]:8265/", "http://[::1]:8265"),
        ("http://HEAD", "http://head"),
    ],
)
def test_addresses_are_normalised(given: str, expected: str) -> None:
    assert normalise_address(given) == expected


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("10.0.0.5:8265", "http"),
        ("file:///etc/passwd", "http"),
        ("ray://head:10001", "http"),
        ("http://user:secret@head:8265", "user or password"),
        ("http://head:8265/?x=1", "query"),
        ("http://head:99999", "valid URL"),
        ("http://", "no host"),
        ("http://head 8265", "whitespace"),
        ("", "non-empty"),
    ],
)
def test_bad_addresses_are_refused_without_echoing_credentials(given: str, why: str) -> None:
    with pytest.raises(InvalidTargetInput, match=why) as caught:
        normalise_address(given)
    assert "secret" not in str(caught.value)


def test_clusters_come_from_the_config_file_and_the_environment(tmp_path: Path) -> None:
    (tmp_path / "ray_clusters.json").write_text(json.dumps({"farm": "http://10.1.2.3:8265/", "default": "http://a:1"}))
    env = {ADDRESS_ENV: "https://head.internal:8265"}
    assert configured_clusters(env, tmp_path) == {
        "farm": "http://10.1.2.3:8265",
        "default": "https://head.internal:8265",
    }
    assert resolve("ray:farm", env, tmp_path) == "http://10.1.2.3:8265"
    with pytest.raises(TargetError, match=r"no Ray cluster named 'gone'.*ray:default, ray:farm.*ray_clusters.json"):
        resolve("ray:gone", env, tmp_path)
    (tmp_path / "ray_clusters.json").write_text(json.dumps({"bad": "ftp://x"}))
    with pytest.raises(TargetError, match=r"cluster 'bad'.*http"):
        configured_clusters({}, tmp_path)
    (tmp_path / "ray_clusters.json").write_text("[1, 2]")
    with pytest.raises(TargetError, match="JSON object"):
        configured_clusters({}, tmp_path)


def test_get_target_makes_a_ray_target_without_io() -> None:
    target = get_target("ray:not-configured-anywhere")  # no lookup yet: that happens on first use
    assert isinstance(target, RayTarget) and target.name == "ray:not-configured-anywhere"
    for bad in ("ray:", "ray:a b", "ray:../x", "ray:-x"):
        with pytest.raises(InvalidTargetInput):
            get_target(bad)


def test_submission_ids_are_deterministic_readable_and_distinct() -> None:
    a = submission_id_for("/verl/.verl-async-dapo/runs/run_abc/attempt-1")
    assert a == submission_id_for("/verl/.verl-async-dapo/runs/run_abc/attempt-1")
    assert a.startswith("vad-run_abc-attempt-1-")
    assert a != submission_id_for("/other/.verl-async-dapo/runs/run_abc/attempt-1")
    assert a != submission_id_for("/verl/.verl-async-dapo/runs/run_abc/attempt-2")
    assert set(submission_id_for("/x/we ird;$(id)/a b")) <= set("abcdefghijklmnopqrstuvwxyz0123456789_-")


def test_entrypoints_quote_every_argument_for_the_shell(tmp_path: Path) -> None:
    """Ray runs the entrypoint with ``/bin/sh -c``; every argument must arrive literally."""
    pwned = tmp_path / "pwned"
    args = [a.format(pwned=pwned) for a in NASTY]
    printer = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", *args]
    entry = launch_entrypoint(str(tmp_path / "job"), str(tmp_path / "job" / "train.log"), str(tmp_path), printer)
    done = subprocess.run(["sh", "-c", entry], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(done.stdout) == args
    assert not pwned.exists()
    assert json.loads((tmp_path / "job" / "train.log").read_text()) == args  # the log mirror
    probe = probe_entrypoint("vad" + "0" * 32, "exists", args)
    assert shlex.split(probe)[4:] == ["exists", *args]


def test_launch_script_returns_the_programs_exit_code_not_tees(tmp_path: Path) -> None:
    entry = launch_entrypoint(
        str(tmp_path / "j"), "/proc/not-writable/train.log", str(tmp_path), ["sh", "-c", "exit 7"]
    )
    assert subprocess.run(["sh", "-c", entry], capture_output=True, timeout=30).returncode == 7
    entry = launch_entrypoint(str(tmp_path / "j"), str(tmp_path / "l"), str(tmp_path / "missing"), ["true"])
    assert subprocess.run(["sh", "-c", entry], capture_output=True, timeout=30).returncode == 96


def test_probe_results_are_found_by_nonce_only() -> None:
    nonce = "vad" + "ab" * 16
    other = "vad" + "cd" * 16
    import base64

    def line(n: str, data: dict[str, object]) -> bytes:
        return f"{n}:".encode() + base64.b64encode(json.dumps(data).encode())

    log = b"\n".join([b"Running entrypoint for job x: python3 -c ... " + nonce.encode(), line(other, {"rc": 9}),
                      line(nonce, {"rc": 0}), b"trailing noise"])  # fmt: skip
    assert parse_result(log, nonce) == {"rc": 0}
    assert parse_result(b"nothing here", nonce) is None
    assert parse_result(f"{nonce}:not-base64!".encode(), nonce) is None


def probe(op: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The probe program run here exactly as a Ray job runs it (``sh -c`` + the quoted entrypoint)."""
    nonce = "vad" + "12" * 16
    done = subprocess.run(["sh", "-c", probe_entrypoint(nonce, op, list(args))], capture_output=True, timeout=30,
                          env={"PATH": os.environ["PATH"], **(env or {})})  # fmt: skip
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    result = parse_result(done.stdout, nonce)
    assert result is not None, done.stdout
    return result


def test_the_probe_program_answers_every_operation(tmp_path: Path) -> None:
    import base64

    ran = probe("run", str(tmp_path), "10", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert (ran["rc"], decode_b64(ran["out"]), decode_b64(ran["err"])) == (5, b"out\n", b"err\n")
    assert probe("run", "", "10", "--", "sh", "-c", "kill -TERM $$")["rc"] == 143
    assert probe("run", "", "10", "--", "no-such-program")["rc"] == 127
    assert "does not exist" in probe("run", str(tmp_path / "gone"), "10", "--", "true")["error"]
    assert probe("run", "", "0.5", "--", "sleep", "5") == {"error": "timeout"}
    data = base64.b64encode(b"0123456789").decode()
    assert probe("write", str(tmp_path / "d" / "f"), "640", env={WRITE_DATA_ENV: data}) == {"ok": True}
    assert (tmp_path / "d" / "f").stat().st_mode & 0o777 == 0o640
    assert decode_b64(probe("tail", str(tmp_path / "d" / "f"), "4")["data"]) == b"6789"
    assert decode_b64(probe("range", str(tmp_path / "d" / "f"), "2", "3")["data"]) == b"234"
    assert probe("size", str(tmp_path / "d" / "f")) == {"size": 10}
    assert probe("size", str(tmp_path / "nope")) == {"missing": True}
    assert probe("tail", str(tmp_path / "nope"), "4") == {"missing": True}
    assert probe("exists", str(tmp_path), str(tmp_path / "nope")) == {"exists": [True, False]}
    assert "Is a directory" in probe("tail", str(tmp_path), "4")["error"]


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [("SUCCEEDED", 0, 0), ("FAILED", 3, 3), ("FAILED", None, 1), ("STOPPED", None, 143), ("RUNNING", None, None),
     ("PENDING", None, None)],
)  # fmt: skip
def test_ray_statuses_map_to_exit_codes(status: str, code: int | None, expected: int | None) -> None:
    assert exit_code_of(JobInfo(submission_id="s", status=status, driver_exit_code=code)) == expected


def test_gpu_pools_must_each_fit_on_one_node() -> None:
    assert fits([6, 2], [8.0])  # share a node
    assert fits([4, 4], [4.0, 4.0])  # one node each
    assert not fits([4, 4], [6.0, 2.0])  # 8 in total, but no placement
    assert not fits([1], [0.0])
    cluster = ClusterResources(node_gpus=(6.0, 2.0), node_cpus=(16.0, 16.0))
    (finding,) = [f for f in assess(cluster, [("trainer", 4), ("rollout", 4)], 10) if f[0] == "gpus"]
    assert finding[1] == "error" and "needs 8 GPU(s) (trainer 4 + rollout 4), each pool on one node" in finding[2]
    assert "8 GPU(s) on 2 node(s) (per node: 6, 2)" in finding[2]
    busy = ClusterResources(node_gpus=(8.0,), node_cpus=(4.0,), gpus_in_use=6.0)
    names = {name: status for name, status, _, _ in assess(busy, [("trainer", 4)], 10)}
    assert names == {"gpus": "ok", "gpu use": "warning", "ray cpus": "warning"}


def test_a_secret_in_the_entrypoint_is_refused() -> None:
    key = "sk-live-0123456789"
    with pytest.raises(InvalidTargetInput, match="SWANLAB_API_KEY"):
        _check_no_secret_in(f"python3 -m x key={key}", {"SWANLAB_API_KEY": key})
    _check_no_secret_in("python3 -m x", {"SWANLAB_API_KEY": key, "PYTHONUNBUFFERED": "1"})


def test_the_ray_token_is_found_in_rays_precedence(tmp_path: Path) -> None:
    home, given = tmp_path / "home", tmp_path / "given"
    (home / ".ray").mkdir(parents=True)
    assert find_token({}, home) is None  # no source at all: send no token
    (home / ".ray" / "auth_token").write_text("from-home\n")
    given.write_text("  from-path \n")
    assert find_token({}, home) == RayToken("from-home", str(home / ".ray" / "auth_token"))
    assert find_token({TOKEN_PATH_ENV: str(given)}, home) == RayToken("from-path", f"{TOKEN_PATH_ENV}={given}")
    both = {TOKEN_ENV: " from-env ", TOKEN_PATH_ENV: str(given)}
    assert find_token(both, home) == RayToken("from-env", TOKEN_ENV)
    assert find_token({TOKEN_ENV: "", TOKEN_PATH_ENV: str(given)}, home).source.startswith(TOKEN_PATH_ENV)  # type: ignore[union-attr]
    (home / ".ray" / "auth_token").write_text("")
    assert find_token({}, home) is None  # an empty default file is no token, as in Ray


@pytest.mark.parametrize(("content", "why"), [(None, "cannot read"), ("\n ", "is empty"), ("a\nb", "more than one")])
def test_a_broken_ray_token_path_is_reported_without_falling_back(
    tmp_path: Path, content: str | None, why: str
) -> None:
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("the-default-file")  # never used instead
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RayTokenError, match=why) as caught:
        find_token({TOKEN_PATH_ENV: str(path)}, tmp_path)
    assert str(caught.value).startswith(f"{TOKEN_PATH_ENV}={path}: ")
    assert "the-default-file" not in str(caught.value) and "a\nb" not in str(caught.value)


def test_the_ray_token_never_shows_in_reprs_errors_or_redacted_text(tmp_path: Path) -> None:
    token = RayToken("canary-" + "9" * 20, TOKEN_ENV)
    assert token.value not in repr(token) + str(token) + repr(RayJobsClient("http://h:1", token=token))
    for status in (401, 403):
        message = auth_error_message("http://h:1", status, token)
        assert message and token.value not in message and "http://h:1" in message
    assert "refused the token from RAY_AUTH_TOKEN" in (auth_error_message("http://h:1", 403, token) or "")
    assert auth_error_message("http://h:1", 403, None) is None  # not ours to explain without a token sent
    (tmp_path / "t").write_text("file-token-0123456789\n")
    env = {TOKEN_ENV: "env-token-0123456789"}
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path, env=env)
    assert ctx.scrub("a env-token-0123456789 b") == "a *** b"
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path, env={TOKEN_PATH_ENV: str(tmp_path / "t")})
    assert ctx.scrub("x file-token-0123456789") == "x ***"
    ctx = AppContext(home=tmp_path / "state", config_home=tmp_path, env={TOKEN_PATH_ENV: str(tmp_path / "none")})
    assert ctx.scrub("plain") == "plain" and not (tmp_path / "state").exists()  # no failure, nothing created
