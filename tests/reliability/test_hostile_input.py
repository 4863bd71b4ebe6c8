"""Hostile input: every tool (and the resources and the prompt) fuzzed through the in-memory MCP client, both
protocol eras, with hypothesis (seeded).

Strings are drawn from shell-ish payloads that each embed ``touch <canary>`` (``$(…)``, backticks, ``;``, ``|``,
newlines, quotes, ``${IFS}``), leading ``-``/``--`` options, path traversal, NUL bytes, lone surrogates, Hydra
interpolations, URL tricks and 70 000-character strings, mixed with arbitrary text and wrong JSON types. Each
example first drives the session to a random stage (so the later questions' validation is reached too) and may
answer the SwanLab form with hostile content. Checked after every call:

* nothing unexpected reaches the model: a refusal is a ToolError with a message or a schema-validation error, never
  the SDK's bare ``Error executing tool X`` (an unexpected exception); no protocol error other than invalid params;
* a refused call changed no session, answer or run row;

and at the end: the canary file was never created, no file appeared outside the state/config dirs, the store passes
``PRAGMA integrity_check``. ``start_training`` runs its real preflight here with a ``python3`` without Hydra, so no
fuzzed call can launch a run; ``test_hostile_but_existing_paths_launch_as_data`` launches real runs with hostile
model paths that do exist.

Sizes: ~300 calls in CI; ``VAD_RELIABILITY_LARGE=1`` makes >= 10 000 (``VAD_FUZZ_EXAMPLES`` overrides).
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import docker
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from mcp.types import ElicitResult
from rel_helpers import (
    FINAL,
    LARGE,
    SEED,
    is_bare_crash,
    prepare_host_tree,
    record,
    result_text,
)

from harness.standin_files import write_model
from mcp import Client, MCPError
from verl_async_dapo.context import AppContext
from verl_async_dapo.server import mcp

CANARY = Path("/tmp") / f"vad-reliability-canary-{uuid.uuid4().hex[:12]}"
C = str(CANARY)
TOOLS = ("list_containers", "select_container", "set_proxy", "choose_features", "configure_swanlab",
         "start_training", "get_progress", "check_errors", "stop_training", "get_session")  # fmt: skip
EXAMPLES = int(os.environ.get("VAD_FUZZ_EXAMPLES") or (1800 if LARGE else 100))  # per round
TARGET_CALLS = int(os.environ.get("VAD_FUZZ_CALLS") or (10_000 if LARGE else 250))
MIN_CALLS, MAX_CALLS = (6, 12) if LARGE else (3, 8)  # calls per example, after the set-up calls

# Shell-ish payloads: each one would create the canary if any shell ever interpreted it.
SHELLY = [
    f"$(touch {C})",
    f"`touch {C}`",
    f"; touch {C}",
    f"| touch {C}",
    f"&& touch {C}",
    f"|| touch {C} ||",
    f"\ntouch {C}\n",
    f"' ; touch {C} ; '",
    f'" ; touch {C} ; "',
    f"${{IFS}}touch${{IFS}}{C}",
    f"x&touch {C}&",
    f"$({'touch'} {C})#",
    f"a'$(touch {C})'b",
    f"\r\ntouch {C}",
    f"-o ProxyCommand=touch {C}",
    f"--output={C}; touch {C}",
    f"-rf /; touch {C}",
    f"http://127.0.0.1:1/$(touch {C})",
    f"http://u:p$(touch {C})@127.0.0.1:3128",
    f"socks5://127.0.0.1:1080;touch {C}",
    f"run_$(touch {C})",
    f"host; touch {C}",
    f"/tmp/x\x00; touch {C}",
    f"{{{{touch {C}}}}}",
    f"%0atouch%20{C}",
]
OTHER = [
    "-", "--", "--help", "-rf", "-x=1", "..", "../../../../etc/passwd", "/../../../tmp", "/etc/passwd",
    "models/../../..", "%2e%2e%2f%2e%2e%2f", "file:///etc/passwd", "\x00", "a\x00b", "\udcff", "\ud800x",
    "é" * 3000, "x" * 70_000, "${oc.env:HOME}", "${oc.env:SWANLAB_API_KEY}", "a,b", "[1,2]", "{a: 1}", "~root",
    "null", "None", "true", " ", "\t", "无", "default", "host", "all", "0,1", "64g", "run_", "run_x" * 20,
    "http://[::1]:80", "http://user:pass@127.0.0.1:3128", "https://127.0.0.1:99999", "socks5h://h:1",
    "verl-async-dapo-test:latest", "../" * 64, "/" * 5000,
]  # fmt: skip
hostile = st.one_of(
    st.sampled_from(SHELLY),
    st.sampled_from(OTHER),
    st.text(max_size=40),
    st.builds(lambda a, p, b: a + p + b, st.text(max_size=6), st.sampled_from(SHELLY + OTHER), st.text(max_size=6)),
)
junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))  # fmt: skip
maybe_str = st.one_of(st.none(), hostile, hostile, hostile, junk)
maybe_int = st.one_of(st.none(), st.integers(-(2**40), 2**40), st.sampled_from([0, -1, 1, 2**31, 10**7 + 1]), junk)
run_id = st.one_of(
    st.none(), hostile, st.builds(lambda s: "run_" + s, st.from_regex(r"[A-Za-z0-9_-]{1,60}", fullmatch=True)), junk
)
feature = st.one_of(st.sampled_from(["flash_attn", "offload", "no_flash_attn", "recompute", "default", "no_default"]),
                    hostile)  # fmt: skip


def args_of(**fields: Any) -> Any:
    """A dict with any subset of ``fields`` (each drawn from its strategy), sometimes with an unknown key."""
    optional = st.fixed_dictionaries({}, optional=fields)
    return st.one_of(optional, st.builds(lambda d, k, v: {**d, k: v}, optional, hostile, junk))


create = st.fixed_dictionaries(
    {"name": hostile, "image": hostile},
    optional={
        "gpus": maybe_str,
        "shm_size": maybe_str,
        "mounts": st.dictionaries(hostile, hostile, max_size=3),
        "extra": junk,
    },
)
ARGS = {
    "list_containers": args_of(),
    "select_container": args_of(name=maybe_str, create=st.one_of(create, junk), allow_shared_gpus=st.booleans()),
    "set_proxy": args_of(http_proxy=maybe_str, https_proxy=maybe_str, no_proxy=maybe_str),
    "choose_features": args_of(names=st.one_of(st.lists(feature, max_size=6), junk, hostile)),
    "configure_swanlab": args_of(
        mode=st.one_of(st.sampled_from(["cloud", "local", "disabled"]), maybe_str),
        host=maybe_str,
        api_key=maybe_str,
        log_dir=maybe_str,
        save=st.booleans(),
    ),
    "start_training": args_of(
        mode=st.one_of(st.sampled_from(["dapo", "one_step_off_policy"]), maybe_str),
        framework=st.one_of(st.sampled_from(["megatron", "fsdp"]), maybe_str),
        model_path=maybe_str,
        train_file=maybe_str,
        val_file=maybe_str,
        train_steps=maybe_int,
        trainer_gpus=maybe_int,
        rollout_gpus=maybe_int,
        max_response_length=maybe_int,
        max_oom_retries=maybe_int,
    ),
    "get_progress": args_of(run_id=run_id),
    "check_errors": args_of(run_id=run_id),
    "stop_training": args_of(run_id=run_id, confirm=st.one_of(st.booleans(), junk)),
    "get_session": args_of(),
}
tool_call = st.sampled_from(TOOLS).flatmap(lambda tool: ARGS[tool].map(lambda args: ("tool", tool, args)))
call = st.one_of(tool_call, tool_call, tool_call, tool_call, tool_call, hostile.map(lambda r: ("resource", r, None)))
# The SwanLab key form: no form support, or a (hostile) answer / decline / cancel.
form = st.one_of(
    st.none(),
    st.tuples(st.just("accept"), st.fixed_dictionaries({"api_key": hostile})),
    st.tuples(st.sampled_from(["decline", "cancel"]), st.none()),
)
# Drive the session to a stage first (valid answers), so later questions' validation runs too.
STAGES = (
    [],
    [("select_container", {"name": "host"})],
    [("select_container", {"name": "host"}), ("set_proxy", {})],
    [("select_container", {"name": "host"}), ("set_proxy", {}), ("choose_features", {"names": ["default"]})],
    [("select_container", {"name": "host"}), ("set_proxy", {}), ("choose_features", {"names": ["default"]}),
     ("configure_swanlab", {"mode": "disabled"})],
)  # fmt: skip


def fingerprint(db: Path) -> tuple[Any, ...]:
    """Every session, answer (with its revision) and run row."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return (
            conn.execute("SELECT id FROM sessions ORDER BY id").fetchall(),
            conn.execute("SELECT session_id, question, value, revision FROM answers ORDER BY 1, 2").fetchall(),
            conn.execute("SELECT id, status FROM runs ORDER BY id").fetchall(),
        )


def files_under(root: Path, skip: tuple[Path, ...]) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        if any(Path(dirpath).is_relative_to(s) for s in skip):
            dirnames[:] = []
            continue
        found.update(os.path.join(dirpath, n) for n in filenames + dirnames)
    return found - {str(s) for s in skip}


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzzed SwanLab hosts are probed by the key check: refuse every address but 127.0.0.1 (and unix sockets)."""
    import socket

    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if isinstance(address, tuple) and address[0] != "127.0.0.1":
            raise ConnectionRefusedError(f"test guard: {address!r} blocked")
        return real_connect(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name is not None and name != "127.0.0.1":
            raise socket.gaierror(socket.EAI_NONAME, f"test guard: lookup of {name!r} blocked")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_every_tool_survives_hostile_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None, docker_engine: None
) -> None:
    assert not CANARY.exists()
    tree = tmp_path / "verl"
    prepare_host_tree(tree)
    monkeypatch.setenv("VERL_HOME", str(tree))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # python3 without Hydra: preflight refuses every start
    db = tmp_path / "state" / "state.db"
    before_files = files_under(tmp_path, skip=(tmp_path / "state", tmp_path / "config", tmp_path / "swanlab-root"))
    stats: Counter[str] = Counter()
    created_names: set[str] = set()
    problems: list[str] = []
    began = time.monotonic()

    async def example(mode: str, stage: int, answer: Any, plan: list[tuple[str, Any, Any]]) -> None:
        async def on_form(_ctx: Any, _params: Any) -> ElicitResult:
            stats["forms"] += 1
            action, content = answer
            return ElicitResult(action=action, content=content)

        kwargs = {"elicitation_callback": on_form} if answer is not None else {}
        async with Client(mcp, mode=mode, **kwargs) as client:
            for tool, args in STAGES[stage]:
                await client.call_tool(tool, args)  # may be refused (e.g. a run is frozen): that is fine
            for kind, name, args in plan:
                if kind == "resource":
                    await read_resource(client, name)
                    continue
                if name == "select_container" and isinstance(args.get("create"), dict):
                    created_names.add(str(args["create"].get("name")))
                before = fingerprint(db) if db.exists() else None
                try:
                    result = await client.call_tool(name, args)
                except UnicodeEncodeError:  # the client cannot put a lone surrogate (in a dict key) into JSON at all
                    stats["unsendable"] += 1
                    continue
                except MCPError as exc:
                    stats["calls"] += 1
                    stats["protocol_errors"] += 1
                    if exc.error.code != -32602:  # invalid params is a schema refusal; anything else is not
                        problems.append(f"{name}({args!r:.300}) → protocol error {exc.error.code}: {exc}")
                    continue
                stats["calls"] += 1
                stats["refused" if result.is_error else "accepted"] += 1
                if is_bare_crash(name, result):
                    problems.append(f"{name}({args!r:.300}) → unexpected exception: {result_text(result)[:300]}")
                if result.is_error and before is not None and fingerprint(db) != before:
                    problems.append(f"refused {name}({args!r:.300}) changed the store: {result_text(result)[:300]}")
                if CANARY.exists():
                    problems.append(f"{name}({args!r:.300}) created the canary")

    async def read_resource(client: Client, run_ref: str) -> None:
        stats["resource_reads"] += 1
        for uri in (f"verl-async-dapo://runs/{run_ref}/log", "verl-async-dapo://session/current"):
            try:
                await client.read_resource(uri)
            except MCPError as exc:
                if exc.error.code not in (-32602, -32002):  # not found / invalid params
                    problems.append(f"read_resource({uri!r:.200}) → {exc.error.code}: {exc}")
            except Exception as exc:  # a URI the client itself cannot form is fine
                if "Error executing" in str(exc):
                    problems.append(f"read_resource({uri!r:.200}) → {exc}")

    def fuzz_round(round_seed: int) -> None:
        @seed(round_seed)
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck), print_blob=True)  # fmt: skip
        @given(
            mode=st.sampled_from(["auto", "legacy"]),
            stage=st.integers(0, len(STAGES) - 1),
            answer=form,
            calls=st.lists(call, min_size=MIN_CALLS, max_size=MAX_CALLS),
        )
        def fuzz(mode: str, stage: int, answer: Any, calls: list[tuple[str, str, Any]]) -> None:
            anyio.run(example, mode, stage, answer, calls)
            stats["examples"] += 1
            assert not problems, "\n".join(problems[:10])

        fuzz()

    try:
        for round_no in range(5):  # more seeded rounds until the call target is met (hypothesis sizes vary)
            fuzz_round(SEED + round_no)
            stats["rounds"] += 1
            if stats["calls"] >= TARGET_CALLS:
                break
    finally:
        for name in created_names:  # never expected: only a fuzzed image that exists locally could create one
            _remove_managed(name)
    elapsed = time.monotonic() - began
    assert not CANARY.exists(), "a hostile argument was executed by a shell"
    after_files = files_under(tmp_path, skip=(tmp_path / "state", tmp_path / "config", tmp_path / "swanlab-root"))
    assert after_files == before_files, f"files appeared outside the state dir: {sorted(after_files - before_files)}"
    app = AppContext.from_environment()
    try:
        assert app.store.integrity_ok()
        assert app.store.runs(10) == [], "a fuzzed call launched a run"
    finally:
        app.close()
    record("hostile_input", seed=SEED, seconds=round(elapsed, 1), **dict(stats), unexpected_exceptions=0,
           store_changes_by_refused_calls=0, canary_created=False)  # fmt: skip
    assert stats["calls"] >= TARGET_CALLS, stats


def _remove_managed(name: str) -> None:
    try:
        client = docker.from_env(timeout=30)
        found = client.containers.list(all=True, filters={"name": f"^{name}$", "label": "io.verl-async-dapo.managed"})
        for item in found:
            item.remove(force=True)
    except Exception as exc:  # cleanup only; a bad name is simply not found
        print(f"cleanup of {name!r}: {exc}", file=sys.stderr)


# -- hostile model paths that exist: launched for real ------------------------------------------------------------
HOSTILE_DIRS_CI = {"command-substitution": f"$(touch {C})", "hydra-list-and-semicolon": f"a,b;touch {C}",
                   "leading-dash": "-rf", "hydra-interpolation": "${oc.env:HOME}"}  # fmt: skip
HOSTILE_DIRS_LARGE = {**HOSTILE_DIRS_CI, "backticks": f"`touch {C}`", "quotes-and-spaces": "a b 'q\"",
                      "backslash": "x\\y", "equals": "=eq", "brackets": "[list]", "braces": "{dict}", "tilde": "~home",
                      "unicode": "ünïcødé", "colon": "a:b", "percent": "%2e"}  # fmt: skip
HOSTILE_DIRS = HOSTILE_DIRS_LARGE if LARGE else HOSTILE_DIRS_CI


@pytest.mark.parametrize("name", list(HOSTILE_DIRS.values()), ids=list(HOSTILE_DIRS))
async def test_hostile_but_existing_paths_launch_as_data(
    name: str, host_verl_tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model directory whose name is a shell/Hydra payload: the run is refused with a clear message, or it runs
    with exactly that path as data (the stand-in's composed config shows it) and nothing is executed."""
    prepare_host_tree(host_verl_tree)
    write_model(host_verl_tree / "models" / name)  # a '/' in the payload nests directories; preflight reads it
    for var, value in {"VERL_HOME": str(host_verl_tree), "FRAMEWORK": "fsdp", "TRAIN_STEPS": "2", "SAVE_FREQ": "1",
                       "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1", "ROLLOUT_TP": "1", "STANDIN_STEP_SECONDS": "0.01",
                       "SWANLAB_MODE": "disabled",
                       "PATH": f"{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin"}.items():  # fmt: skip
        monkeypatch.setenv(var, value)
    async with Client(mcp) as c:
        for tool, args in STAGES[3]:
            assert not (await c.call_tool(tool, args)).is_error
        result = await c.call_tool("start_training", {"model_path": name})
        assert not is_bare_crash("start_training", result), result_text(result)
        must_refuse = "${" in name or name.startswith("-")  # a Hydra interpolation; something that reads as an option
        assert result.is_error == must_refuse, result_text(result)
        if result.is_error:  # refused: say why, start nothing
            text = result_text(result)
            assert "may not contain '${'" in text or "may not start with '-'" in text, text
            assert not CANARY.exists()
            return
        run_id = result.structured_content["run_id"]  # type: ignore[index]
        deadline = time.monotonic() + 120
        while (progress := await c.call_tool("get_progress", {"run_id": run_id})).structured_content[  # type: ignore[index]
            "status"
        ] not in FINAL:
            assert time.monotonic() < deadline, result_text(progress)
            await anyio.sleep(0.3)
        assert progress.structured_content["status"] == "succeeded", result_text(  # type: ignore[index]
            await c.call_tool("check_errors", {"run_id": run_id})
        )
    app = AppContext.from_environment()
    try:
        attempt = app.store.attempts(run_id)[0]
    finally:
        app.close()
    # Hydra reads the override back as exactly that path: data, not syntax (no list, no interpolation, no quote).
    from hydra.core.override_parser.overrides_parser import OverridesParser

    (override,) = [o for o in attempt.overrides if o.startswith("actor_rollout_ref.model.path=")]
    assert OverridesParser.create().parse_override(override).value() == str(host_verl_tree / "models" / name)
    assert not CANARY.exists(), f"{name!r} was executed"


async def test_the_crash_detector_recognises_an_unexpected_exception() -> None:
    """Positive control for the fuzz: the SDK's sanitized result for a tool that raises is what ``is_bare_crash``
    looks for (a throwaway server, not ours), while a ToolError with a message is not."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    probe: MCPServer = MCPServer("probe")

    @probe.tool()
    def boom() -> str:
        raise RuntimeError("a bug")

    @probe.tool()
    def refuse() -> str:
        raise ToolError("not now: call x first")

    async with Client(probe) as c:
        assert is_bare_crash("boom", await c.call_tool("boom", {}))
        assert not is_bare_crash("refuse", await c.call_tool("refuse", {}))
