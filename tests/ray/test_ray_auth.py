"""Ray token authentication against a real second private head started with RAY_AUTH_MODE=token and a random
canary token (module scope, stopped at module end): without a token preflight, start and the listing say how to
give one; a wrong token is named by its source; RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH both work, and a real
stand-in run succeeds through ``start``; a broken RAY_AUTH_TOKEN_PATH is reported as such. The canary must never
show up in CLI output, the state dir (state.db, its WAL, supervisor logs), the run's files in the target, or the
jobs as the cluster reports them (entrypoint, runtime_env). The precedence itself is unit-tested, without Ray, in
test_ray_config.py."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from ray_head import RayHead
from ray_helpers import (
    CLI_OUTPUTS,
    cli,
    describe,
    jobs_under,
    run_dir,
    standin_tree,
    start,
    stop_active_runs,
    use_cluster,
    wait_final,
)

from verl_async_dapo.targets.ray.api import RayJobsClient
from verl_async_dapo.targets.ray.discovery import list_ray_clusters

TOKEN = "vadcanary" + secrets.token_hex(16)
CLUSTER = "secured"
NEEDS_TOKEN = "requires a token (token authentication is on): set RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH"


@pytest.fixture(scope="module")
def auth_head(ray_binary: Path) -> Iterator[RayHead]:
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN}
    head = RayHead(ray_bin=ray_binary, job_path=[str(Path(sys.executable).parent)], extra_env=env)
    head.start()
    try:
        yield head
    finally:
        head.stop()


@pytest.fixture
def secured(auth_head: RayHead, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``ray:secured`` in an isolated state, with no token from anywhere (a private HOME: no ~/.ray/auth_token)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    return use_cluster(CLUSTER, auth_head.address, tmp_path, monkeypatch)


@pytest.fixture(autouse=True)
def no_token_in_cli_output() -> Iterator[None]:
    """Every CLI call a test makes (ray_helpers.cli records them), checked for the canary once the test is done."""
    CLI_OUTPUTS.clear()
    yield
    assert [out for out in CLI_OUTPUTS if TOKEN in out] == [], "the token leaked into CLI output"


def target_check(ray_target: str) -> tuple[dict[str, str], str]:
    """Preflight's first check (the target itself) from ``preflight --json``, which must fail; and the output."""
    done = cli("preflight", "--container", ray_target, "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    checks = json.loads(done.stdout)["checks"]
    assert checks[0]["name"] == "target" and checks[0]["status"] == "error", checks
    return checks[0], done.stdout + done.stderr


def listing(ray_target: str) -> tuple[str, str | None]:
    (info,) = [i for i in anyio.run(list_ray_clusters) if i.name == ray_target]
    assert TOKEN not in (info.note or "")
    return info.state, info.note


def test_without_a_token_preflight_start_and_the_listing_say_how_to_give_one(secured: str) -> None:
    check, _ = target_check(secured)
    assert NEEDS_TOKEN in check["detail"] and "`ray get-auth-token` on the head node" in check["detail"], check
    assert "token" in (check.get("fix") or ""), check
    done = cli("start", "--container", secured, "--skip-preflight", "--swanlab-mode", "disabled")
    assert done.returncode == 1 and NEEDS_TOKEN in done.stderr, done.stdout + done.stderr
    state, note = listing(secured)
    assert state == "unauthorized" and NEEDS_TOKEN in (note or ""), note


def test_a_wrong_token_is_refused_and_named_by_its_source(secured: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    monkeypatch.setenv("RAY_AUTH_TOKEN", wrong)
    check, output = target_check(secured)
    assert "refused the token from RAY_AUTH_TOKEN: it is not this cluster's token" in check["detail"], check
    assert wrong not in output  # a wrong token is a secret too


def test_a_token_file_works_and_a_broken_one_is_a_misconfiguration(
    secured: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "ray-token"
    token_file.write_text(f"  {TOKEN}\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token_file))
    state, note = listing(secured)
    assert state == "available" and note and "cluster at" in note, note

    token_file.write_text("\n")
    detail = target_check(secured)[0]["detail"]
    assert f"RAY_AUTH_TOKEN_PATH={token_file}: the file is empty" in detail, detail
    assert listing(secured)[0] == "misconfigured"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "missing"))
    detail = target_check(secured)[0]["detail"]
    assert f"RAY_AUTH_TOKEN_PATH={tmp_path / 'missing'}: cannot read the Ray token file" in detail, detail


def test_a_run_with_the_token_succeeds_and_the_token_is_stored_nowhere(
    secured: str, auth_head: RayHead, host_verl_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = standin_tree(host_verl_tree, monkeypatch)
    monkeypatch.setenv("RAY_AUTH_TOKEN", TOKEN)
    try:
        run_id = start(secured)
        assert wait_final(run_id) == "succeeded", describe(run_id)
        status = cli("status", run_id, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["status"] == "succeeded", status.stderr
    finally:
        stop_active_runs()
    # The supervisor (a detached process) talked to the cluster with the token it inherited.
    (job,) = jobs_under(auth_head.address, run_dir(tree, run_id))
    assert job.status == "SUCCEEDED"

    # Nowhere on disk: the state dir (state.db, -wal, supervisor.log/.out, secrets) and the run's files.
    scanned = [p for root in (tmp_path / "state", Path(run_dir(tree, run_id))) for p in root.rglob("*") if p.is_file()]
    names = {p.name for p in scanned}
    assert {"state.db", "supervisor.log", "supervisor.out"} <= names, names
    assert [p for p in scanned if TOKEN.encode() in p.read_bytes()] == []

    # Nor in what the cluster keeps of our jobs: entrypoint and runtime_env, as GET /api/jobs/ reports them.
    raw = json.loads(RayJobsClient(auth_head.address)._request("GET", "/api/jobs/"))
    ours = [j for j in raw if (j.get("metadata") or {}).get("verl-async-dapo")]
    assert ours and all("runtime_env" in j and "entrypoint" in j for j in ours), ours
    assert TOKEN not in json.dumps([(j["entrypoint"], j["runtime_env"]) for j in ours])
