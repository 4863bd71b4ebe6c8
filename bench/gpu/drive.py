"""Run one GPU scenario through the product on the device and keep what it shows (runs there, detached).

  python3 drive.py healthy-mcp LABEL MAX_SECONDS           the MCP path: the SDK's stdio client asks the questions
  python3 drive.py cli LABEL MAX_SECONDS [--webhook] [--sigstop STEP PATTERN] [--holder ARGS]
                                                           the CLI path: preflight, start, follow `status --json`
  --webhook             a real webhook receiver on 127.0.0.1 (VAD_NOTIFY_WEBHOOK_URL points the product's generic
                        webhook sink at it): every POST lands in webhook.jsonl with its wall time
  --sigstop STEP PAT    once `status` shows step >= STEP, SIGSTOP every process whose command line matches PAT
                        (pgrep -f; on verl: ray::WorkerDict, the trainer): a hang, for the watchman to find

Environment: the training settings (bench/gpu/scenarios.sh sets them per scenario). Results go to
$RESULTS/LABEL (default /root/results/LABEL): trace.jsonl (one poll per line, with the wall time), timing.json,
preflight.txt, the product's status/errors/runs answers, holder.log, state.tgz, and done (last, so a waiting call
knows the scenario ended). figures.py turns them into the numbers docs/GPU.md quotes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FINAL = {"succeeded", "failed", "stopped"}
POLL = 2.0


def _cli(*args: str, timeout: float = 120) -> tuple[int, str]:
    r = subprocess.run(["verl-async-dapo", *args], capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def _write(res: Path, name: str, data: Any) -> None:
    text = data if isinstance(data, str) else json.dumps(data, indent=1, ensure_ascii=False, default=str)
    (res / name).write_text(text, encoding="utf-8")


def _preflight(res: Path, timing: dict[str, Any]) -> None:
    t0 = time.time()
    rc, out = _cli("preflight", "--container", "host")
    timing["preflight_cli_s"] = round(time.time() - t0, 2)
    timing["preflight_rc"] = rc
    _write(res, "preflight.txt", out)


def _trace_line(res: Path, t0: float, progress: dict[str, Any]) -> dict[str, Any]:
    row = {
        "t": round(time.time() - t0, 1),
        "status": progress.get("status"),
        "attempt": progress.get("attempt"),
        "step": progress.get("step"),
        "total": progress.get("total_steps") or progress.get("total"),
        "stalled": progress.get("stalled"),
    }
    with open(res / "trace.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return row


def _first_steps(res: Path) -> dict[str, float]:
    """Seconds after `start` when each attempt was first seen at a step >= 1 (poll resolution: 2 s)."""
    firsts: dict[str, float] = {}
    trace = res / "trace.jsonl"
    for line in trace.read_text().splitlines() if trace.exists() else []:  # none when `start` refused
        row = json.loads(line)
        if (row.get("step") or 0) >= 1:
            firsts.setdefault(f"attempt{row.get('attempt')}", row["t"])
    return firsts


def _finish(res: Path, timing: dict[str, Any]) -> None:
    for name, args in (
        ("status.json", ("status", "--json")),
        ("errors.json", ("errors", "--json")),
        ("errors.txt", ("errors",)),
        ("runs.txt", ("runs",)),
    ):
        _write(res, name, _cli(*args)[1])
    timing["first_step_after_start_s"] = _first_steps(res)
    _write(res, "timing.json", timing)
    home = os.environ["VERL_ASYNC_DAPO_HOME"]
    subprocess.run(["tar", "-czf", str(res / "state.tgz"), "-C", os.path.dirname(home), os.path.basename(home)])
    subprocess.run([sys.executable, str(Path(__file__).with_name("figures.py")), str(res)])
    (res / "done").write_text(time.strftime("%H:%M:%S"))


def _webhook(res: Path) -> str:
    """Start a webhook receiver on 127.0.0.1 for the rest of this process; returns its URL."""

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with open(res / "webhook.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"wall": time.time(), "body": body.decode("utf-8", "replace")}) + "\n")
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:  # quiet: drive.log keeps the scenario's own lines
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/hook"


def _sigstop(res: Path, pattern: str, t: float, timing: dict[str, Any]) -> bool:
    """SIGSTOP what matches ``pattern`` (not this process); False while nothing matches yet."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    pids = [int(p) for p in found if int(p) != os.getpid()]
    if not pids:
        return False
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended between pgrep and now
            os.kill(pid, signal.SIGSTOP)
    listing = subprocess.run(["ps", "-o", "pid,pgid,stat,args", "-p", ",".join(map(str, pids))],
                             capture_output=True, text=True).stdout  # fmt: skip
    _write(res, "sigstop.txt", listing)
    timing.update(sigstop_at_s=t, sigstop_pids=pids)
    return True


def cli(label: str, max_s: float, holder: list[str], sigstop: tuple[int, str] | None = None,
        webhook: bool = False) -> None:  # fmt: skip
    res = _results(label)
    timing: dict[str, Any] = {"path": "cli"}
    if webhook:
        os.environ["VAD_NOTIFY_WEBHOOK_URL"] = _webhook(res)  # inherited by `start` and its detached supervisor
    _preflight(res, timing)
    hold = None
    if holder:
        out = open(res / "holder.out", "w")  # noqa: SIM115 (the child writes to it until it is terminated)
        hold = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("holder.py")), *holder],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        time.sleep(5)  # its CUDA context is up before the trainer starts
    t0 = time.time()
    rc, out = _cli(
        "start",
        "--container",
        "host",
        "--features",
        os.environ.get("FEATURES", "no_flash_attn"),
        *os.environ.get("START_EXTRA", "").split(),  # e.g. --skip-preflight, --apply-memory-fix (scenarios.sh)
        "--swanlab-mode",
        "local",
        timeout=300,
    )
    timing["start_cli_s"] = round(time.time() - t0, 2)
    _write(res, "start.txt", out)
    stopped = False
    while time.time() - t0 < max_s and rc == 0:
        _, out = _cli("status", "--json")
        try:
            row = _trace_line(res, t0, json.loads(out))
        except json.JSONDecodeError:
            row = {}
        if row.get("status") in FINAL:
            break
        if sigstop and not stopped and (row.get("step") or 0) >= sigstop[0]:
            stopped = _sigstop(res, sigstop[1], round(time.time() - t0, 1), timing)
        if row.get("stalled") and "stalled_seen_at_s" not in timing:
            timing["stalled_seen_at_s"] = row["t"]
            _write(res, "errors-while-stalled.txt", _cli("errors")[1])
        time.sleep(POLL)
    timing["wall_s"] = round(time.time() - t0, 1)
    if hold is not None:
        hold.terminate()
    _finish(res, timing)


async def _mcp(label: str, max_s: float) -> None:
    from mcp.client.stdio import StdioServerParameters

    from mcp import Client

    res = _results(label)
    timing: dict[str, Any] = {"path": "mcp"}
    _preflight(res, timing)
    calls: list[dict[str, Any]] = []
    params = StdioServerParameters(command="verl-async-dapo", args=["serve"], env=dict(os.environ))
    async with Client(params) as c:

        async def call(tool: str, args: dict[str, Any]) -> dict[str, Any]:
            t = time.time()
            r = await c.call_tool(tool, args)
            data = r.structured_content or {}
            text = "\n".join(getattr(b, "text", "") for b in r.content)
            calls.append(
                {
                    "tool": tool,
                    "args": args,
                    "s": round(time.time() - t, 2),
                    "error": r.is_error,
                    "text": text[:2000] if r.is_error else None,
                }
            )
            if r.is_error:
                raise RuntimeError(f"{tool}: {text}")
            return data

        await call("list_containers", {})
        await call("select_container", {"name": "host"})
        await call("set_proxy", {})
        session = await call("choose_features", {"names": [os.environ.get("FEATURES", "no_flash_attn")]})
        if session.get("state") != "ready":
            await call("configure_swanlab", {"mode": "local"})
        t0 = time.time()
        started = await call("start_training", {})
        timing["start_training_tool_s"] = round(time.time() - t0, 2)
        _write(res, "start.json", started)
        while time.time() - t0 < max_s:
            row = _trace_line(res, t0, await call("get_progress", {"run_id": started["run_id"]}))
            calls.pop()  # keep the log of calls short: polls are in trace.jsonl
            if row.get("status") in FINAL:
                break
            time.sleep(POLL)
        timing["wall_s"] = round(time.time() - t0, 1)
        _write(res, "check_errors.json", await call("check_errors", {"run_id": started["run_id"]}))
    _write(res, "mcp_calls.json", calls)
    _finish(res, timing)


def _results(label: str) -> Path:
    res = Path(os.environ.get("RESULTS", "/root/results")) / label
    res.mkdir(parents=True, exist_ok=True)
    return res


if __name__ == "__main__":
    kind, label, max_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    try:
        if kind == "healthy-mcp":
            import anyio

            anyio.run(_mcp, label, max_s)
        else:
            argv = sys.argv[4:]
            holder = argv[argv.index("--holder") + 1 :] if "--holder" in argv else []
            argv = argv[: argv.index("--holder")] if "--holder" in argv else argv
            i = argv.index("--sigstop") if "--sigstop" in argv else -1
            stop = (int(argv[i + 1]), argv[i + 2]) if i >= 0 else None
            cli(label, max_s, holder, stop, "--webhook" in argv)
    except BaseException as exc:
        res = _results(label)
        _write(res, "driver-error.txt", repr(exc))
        (res / "done").write_text("error")
        raise
