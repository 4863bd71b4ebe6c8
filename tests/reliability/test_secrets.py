"""Secrets: ONE canary scan over everything the product makes observable.

Canary secrets (unique per test session, all matching ``vadcanary-<where>-<hex>``) enter every way they can:

* SwanLab API keys: from the server's environment (run 1), from the config file (run 2), as the
  ``configure_swanlab`` argument (run 3, in a Docker container), through the elicitation form (run 4), and a wrong key
  that a careless server echoes back in its refusal; ``verl-async-dapo start`` with the key in its environment (run 6);
* proxy URLs with passwords: ``http://user:<canary>@127.0.0.1:3128`` through ``set_proxy`` (runs 1, 3, 5) and in the
  CLI's environment (run 6);
* secret-looking lines printed by the training itself (run 5): known values (the SwanLab keys, the proxy password),
  with and without a name marker, plus a ``WANDB_API_KEY=`` value the product was never told (generic redaction).

The cloud runs really log in to a fake SwanLab server from the stand-in (``swanlab.login`` as verl does) and then fail
at ``swanlab.init`` (the fake only knows the login endpoint): a real failure with a real excerpt.

Scanned: every tool result (all ten tools, both protocol eras), the session and log resources, the prompt; CLI output
(``start``/``status``/``errors``/``runs``/``plan --json``); every file in the state dir (state.db, its WAL and SHM,
supervisor.log/.out, any *.log) and in the config dir but the 0600 SwanLab config file itself; the server's own log
records; /proc/*/cmdline of every process on the machine sampled every 50 ms during the runs; ``ps -eo args`` in the
container during its run; the attempts' Hydra overrides; the check_errors excerpts and log resource (known values and
the never-seen ``WANDB_API_KEY`` value masked); and the training logs of every run but run 5 (where we wrote the
secrets ourselves). Legitimate holders are not scanned: the secret store files (0600), the 0600 SwanLab config file,
process environments, and SwanLab's own credential dir (``SWANLAB_ROOT``), which ``swanlab.login`` writes.

The canaries, the scanner and its samplers, the tool-calling driver (``Shown``) are in ``secrets_scan.py``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from docker.models.containers import Container
from rel_helpers import FINAL, all_cmdlines, end_runs, prepare_host_tree, product_env, record, write_control
from secrets_scan import (
    K_ARG,
    K_CLI,
    K_ENV,
    K_FILE,
    K_FORM,
    K_WRONG,
    P_CLI,
    P_ONE,
    P_TWO,
    RUN_TIMEOUT_S,
    STEADY,
    U_GENERIC,
    Form,
    Leaks,
    Shown,
    attempt_log,
    cli,
    proxy,
    sampling,
    scan_db_live,
    scan_files,
    trainer_children,
    wait_final,
)

from harness.fixtures import exec_argv, put_file
from harness.standin_files import put_tree
from mcp import Client
from verl_async_dapo.secret_store import SecretStore
from verl_async_dapo.server import mcp
from verl_async_dapo.store import Store
from verl_async_dapo.swanlab import SwanlabConfig, SwanlabMode, save_config_file


async def test_no_secret_is_observable_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_verl_tree: Path, make_fake_swanlab: Callable[[], Any],
    container_factory: Callable[..., Container], caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.DEBUG)
    leaks = Leaks()
    home, config = tmp_path / "state", tmp_path / "config"
    prepare_host_tree(host_verl_tree)
    write_control(host_verl_tree, hang=True, fail_at_step=1, step_seconds=0.05)
    for var, value in {**STEADY, "VERL_HOME": str(host_verl_tree),
                       "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}.items():  # fmt: skip
        monkeypatch.setenv(var, value)
    fakes = {name: make_fake_swanlab() for name in ("env", "file", "arg", "form")}
    for name, key in (("env", K_ENV), ("file", K_FILE), ("arg", K_ARG), ("form", K_FORM)):
        fakes[name].good_key = key
    run_ids: dict[str, str] = {}
    eras_tools: dict[str, set[str]] = {}

    db_files: list[str] = []

    def scan_db() -> None:
        scan_db_live(leaks, home, db_files)

    def scan_cmdlines() -> None:
        for pid, cmdline in all_cmdlines().items():
            leaks.scan(f"/proc/{pid}/cmdline", cmdline)

    box = container_factory(network_mode="host")  # the stand-in in it reaches the fake SwanLab on 127.0.0.1
    put_tree(box)
    put_file(box, "/verl/standin_control.json", json.dumps({"hang": True, "fail_at_step": 1, "step_seconds": 0.05}))

    def scan_container() -> None:
        leaks.scan(f"ps -eo args in {box.name}", exec_argv(box, ["ps", "-eo", "args"], timeout_s=20).stdout)

    try:
        with sampling("cmdlines", scan_cmdlines, 0.05) as proc_samples:
            # Run 1 (legacy era): the key from the server's environment, a proxy password via set_proxy.
            monkeypatch.setenv("SWANLAB_API_KEY", K_ENV)
            monkeypatch.setenv("SWANLAB_HOST", fakes["env"].host)
            async with Client(mcp, mode="legacy") as c:
                s = Shown(c, leaks, "legacy")
                s.on_final = scan_db
                await s.set_up("host", proxy(P_ONE))
                configured = await s.call("configure_swanlab")  # reports the env setting, changes nothing
                assert configured["already_configured"] and configured["configured_from"] == "env"
                run_ids["env key"] = await s.start()
                await s.until_final(run_ids["env key"])
                eras_tools["legacy"] = set(s.tools)
            monkeypatch.delenv("SWANLAB_API_KEY")
            monkeypatch.delenv("SWANLAB_HOST")

            # Run 2 (2026 era): the key from the config file.
            save_config_file(SwanlabConfig(mode=SwanlabMode.CLOUD, host=fakes["file"].host, api_key=K_FILE),
                             config / "swanlab.json")  # fmt: skip
            async with Client(mcp, mode="auto") as c:
                s = Shown(c, leaks, "2026")
                s.on_final = scan_db
                await s.set_up("host", None)
                assert (await s.call("get_session"))["swanlab_source"] == "config_file"
                run_ids["config-file key"] = await s.start()
                await s.until_final(run_ids["config-file key"])
                eras_tools["2026"] = set(s.tools)

            # A wrong key that the server quotes back in its refusal; then run 3 (legacy era, in a container):
            # the key as configure_swanlab's argument, another proxy password.
            monkeypatch.setenv("VERL_HOME", "/verl")  # the stand-in tree inside the test image
            async with Client(mcp, mode="legacy") as c:
                s = Shown(c, leaks, "legacy")
                s.on_final = scan_db
                await s.set_up(box.name, proxy(P_TWO))
                fakes["arg"].behaviour = "echo"
                await s.call("configure_swanlab", {"mode": "cloud", "host": fakes["arg"].host, "api_key": K_WRONG},
                             ok=False)  # fmt: skip
                fakes["arg"].behaviour = "normal"
                done = await s.call("configure_swanlab", {"mode": "cloud", "host": fakes["arg"].host,
                                                          "api_key": K_ARG})  # fmt: skip
                assert done["key_from"] == "argument" and done["key_check"]["status"] == "ok", done
                with sampling("container ps", scan_container, 0.25) as box_samples:
                    run_ids["argument key (docker)"] = await s.start()
                    await s.until_final(run_ids["argument key (docker)"])
                eras_tools["legacy"] |= s.tools
            monkeypatch.setenv("VERL_HOME", str(host_verl_tree))

            # Run 4 (2026 era): the key typed into the client's form.
            form = Form(K_FORM)
            async with Client(mcp, mode="auto", elicitation_callback=form) as c:
                s = Shown(c, leaks, "2026")
                s.on_final = scan_db
                await s.set_up("host", None)
                done = await s.call("configure_swanlab", {"mode": "cloud", "host": fakes["form"].host})
                assert form.asked == 1 and done["key_from"] == "user", done
                run_ids["form key"] = await s.start()
                await s.until_final(run_ids["form key"])
                eras_tools["2026"] |= s.tools

            # Run 5 (legacy era, local SwanLab): the training prints secrets into its log, then dies of an OOM.
            async with Client(mcp, mode="legacy") as c:
                s = Shown(c, leaks, "legacy")
                s.on_final = scan_db
                await s.set_up("host", proxy(P_ONE))
                await s.call("configure_swanlab", {"mode": "local"})
                run_id = run_ids["printed secrets"] = await s.start()
                excerpt, tail = await _print_secrets_then_die(s, home, run_id)
                for shown in (excerpt, tail):
                    assert "torch.OutOfMemoryError" in shown and "logging in with key ***" in shown, shown
                    assert "WANDB_API_KEY=***" in shown and "proxy: http://user:***@127.0.0.1:3128" in shown, shown

        # Run 6: the CLI, with the key and a proxy password in its environment; then every read command.
        cli_env = product_env(home, host_verl_tree, **STEADY, SWANLAB_API_KEY=K_CLI, SWANLAB_HOST=fakes["env"].host,
                              HTTPS_PROXY=proxy(P_CLI), NO_PROXY="127.0.0.1,localhost",
                              VERL_ASYNC_DAPO_CONFIG_DIR=str(config))  # fmt: skip
        cli_env.pop("SWANLAB_MODE")  # the key in the environment configures SwanLab cloud
        fakes["env"].good_key = K_CLI
        with sampling("cmdlines", scan_cmdlines, 0.05) as cli_samples:
            started = cli(cli_env, leaks, "start", "--container", "host", "--json")
            run_ids["CLI env key"] = json.loads(started)["run_id"]
            wait_final(home, run_ids["CLI env key"])
        for run_id in run_ids.values():
            cli(cli_env, leaks, "status", run_id, "--json", codes=(0, 1))
            cli(cli_env, leaks, "errors", run_id, "--json")
        cli(cli_env, leaks, "runs", "--json")
        cli(cli_env, leaks, "plan", "--json")
    finally:
        end_runs(run_ids.values())

    # Every tool in both eras was seen (and scanned).
    every = {"list_containers", "select_container", "set_proxy", "choose_features", "configure_swanlab",
             "start_training", "get_progress", "check_errors", "stop_training", "get_session"}  # fmt: skip
    assert eras_tools["legacy"] == every and eras_tools["2026"] == every, eras_tools
    # Files we write: everything in the state dir (secret store excepted) and the config dir (the 0600 file excepted).
    files = scan_files(leaks, home, config)
    # The attempts' Hydra overrides and the training logs (run 5's holds what we wrote into it ourselves).
    store = Store(home / "state.db")
    try:
        for name, run_id in run_ids.items():
            for attempt in store.attempts(run_id):
                leaks.scan(f"overrides of {name} attempt {attempt.n}", "\n".join(attempt.overrides))
                if name != "printed secrets" and attempt.job and Path(attempt.job["log_path"]).is_file():
                    leaks.scan(f"training log of {name}", Path(attempt.job["log_path"]).read_bytes())
        statuses = {name: store.run(r).status for name, r in run_ids.items()}  # type: ignore[union-attr]
    finally:
        store.close()
    leaks.scan("server log records", caplog.text)
    # The keys really went where they had to: into the training's login (the fake saw each one) and the store.
    assert [r.headers.get("authorization") for r in fakes["env"].requests if "login" in r.path][-1] == K_CLI
    for name, key in (("file", K_FILE), ("arg", K_ARG), ("form", K_FORM)):
        assert key in [r.headers.get("authorization") for r in fakes[name].requests], f"the {name} key never went out"
    # Positive controls: the scanner does see the canaries where they legitimately are.
    control = Leaks()
    for path in (home / "secrets").iterdir():
        control.scan("secret store", path.read_bytes())
    control.scan("run 5's log", attempt_log(home, run_ids["printed secrets"]).read_bytes())
    assert len({f.split(":", 1)[0] for f in control.found}) == 2 and len(control.found) >= 8, control.found
    held = set(SecretStore(home / "secrets").known_values())
    assert {K_ENV, K_FILE, K_ARG, K_FORM, K_CLI, proxy(P_ONE)} <= {v for v in held} | {
        json.loads(v).get("http_proxy") for v in held if v.startswith("{")
    }
    assert all(s in FINAL for s in statuses.values()), statuses
    assert "state.db-wal" in db_files, db_files
    assert not leaks.found, "secrets leaked:\n" + "\n".join(leaks.found[:20])
    record("secrets_scan", canaries=10, runs=len(run_ids), places_scanned=leaks.places, bytes_scanned=leaks.bytes,
           files_scanned=files, proc_samples=proc_samples[0] + cli_samples[0], container_samples=box_samples[0],
           leaks_found=0, run_statuses=statuses)  # fmt: skip


async def _print_secrets_then_die(s: Shown, home: Path, run_id: str) -> tuple[str, str]:
    """Wait for the stand-in to hang at step 1, append secret-looking lines and an OOM to its log as the training
    would print them, kill the trainer; returns (check_errors excerpt, log resource)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        store = Store(home / "state.db")
        try:
            attempts = store.attempts(run_id)
        finally:
            store.close()
        if attempts and attempts[-1].job:
            log = Path(attempts[-1].job["log_path"])
            if log.is_file() and b"Training Progress:" in log.read_bytes():
                break
        assert time.monotonic() < deadline, "the stand-in never reached step 1"
        await anyio.sleep(0.3)
    await anyio.sleep(1.0)  # into the hang at step 1
    with log.open("a", encoding="utf-8") as fh:
        fh.write(
            f"(TaskRunner pid=4242) SWANLAB_API_KEY={K_ENV}\n"
            f"(TaskRunner pid=4242) logging in with key {K_FORM}\n"
            f"(TaskRunner pid=4242) Authorization: Bearer {K_ARG}\n"
            f"(TaskRunner pid=4242) proxy: {proxy(P_ONE)}\n"
            f"(TaskRunner pid=4242) --api-key {K_FILE} WANDB_API_KEY={U_GENERIC}\n"
            f"(TaskRunner pid=4242) swanlab: 🚀 View run demo at http://user:{P_ONE}@127.0.0.1:5092/@alice/p/runs/x"
            f"?token={U_GENERIC}\n"
            "(TaskRunner pid=4242) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
            "a total capacity of 79.15 GiB of which 6.75 MiB is free.\n"
        )
    pgid = int((log.parent / "pgid").read_text().strip())
    children = trainer_children(pgid)
    assert children, "no trainer under the launcher"
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    progress = await s.until_final(run_id)
    assert progress["status"] == "failed", progress
    # The SwanLab link the training printed is kept, with its password and token masked.
    assert progress["swanlab_url"] == "http://user:***@127.0.0.1:5092/@alice/p/runs/x?token=***", progress
    report = await s.call("check_errors", {"run_id": run_id})
    excerpt = report["attempts"][-1]["excerpt"] or ""
    assert report["attempts"][-1]["category"] == "gpu_oom", report
    tail = await s.resources(run_id)
    return excerpt, tail
