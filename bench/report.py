"""RESULTS.md from one run of the benchmarks: machine, command, one table per benchmark, targets as ratios."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.common import Sample, fmt_ratio, fmt_s

ORIGINAL_REACTION_S = 40.0  # the original skill: a 30 s poll + `sleep 10` (worst case; 25 s on average)


def _ok(met: bool | None) -> str:
    return "n/a" if met is None else ("**met**" if met else "**missed**")


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f} %"


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    out = [
        "# verl-async-dapo benchmarks",
        "",
        f"Written by `{results['command']}` on {m['date']} (code: working tree on top of `{results['head']}`; "
        f"{results['elapsed_s'] / 60:.1f} min). Every target is a ratio against a baseline measured in the same "
        "run, on the same machine, interleaved where possible. Times are medians unless noted. The machine is "
        "shared with other engineers' test runs, so absolute times wander; the ratios are what is compared.",
        "",
        "## Machine",
        "",
        _row("nproc", "memory", "kernel", "docker", "python", "cpu", "load avg at start"),
        _row("---", "---", "---", "---", "---", "---", "---"),
        _row(m["nproc"], m["memory"], m["kernel"], m["docker"], m["python"], m["cpu"], m["load average at start"]),
        "",
        "## Summary",
        "",
        _row("#", "benchmark", "target", "measured", "result"),
        _row("---", "---", "---", "---", "---"),
        *_summary_rows(results),
        "",
    ]
    if "progress" in results:
        out += _progress(results["progress"])
    if "oom" in results:
        out += _oom(results["oom"], results.get("oom_before"), results.get("before", "?"))
    if "cold" in results:
        out += _cold(results["cold"], results.get("before", "?"))
    if results.get("idle") is not None:
        out += _idle(results["idle"])
    if "prelaunch" in results:
        out += _prelaunch(results["prelaunch"])
    if "notify" in results:
        from bench import b6_notify

        out += b6_notify.section(results["notify"])
    for key, error in (results.get("errors") or {}).items():
        out += [f"## Benchmark `{key}` FAILED", "", "```", error, "```", ""]
    out += [line.replace("{before}", results.get("before", "?")) for line in CHANGES]
    return "\n".join(out) + "\n"


# -- summary --------------------------------------------------------------------------------------------------------
def _progress_ratios(bench: Any) -> tuple[float | None, float | None, Any, Any]:
    if not bench.results:
        return None, None, None, None
    first, last = bench.results[0], bench.results[-1]
    ours = last.samples["ours fresh: get_progress"]
    speedup = last.samples["theirs: grep | tail -1"].median / ours.median
    growth = ours.median / first.samples["ours fresh: get_progress"].median
    return speedup, growth, first, last


def _summary_rows(results: dict[str, Any]) -> list[str]:
    rows = []
    if "progress" in results:
        speedup, growth, first, last = _progress_ratios(results["progress"])
        if speedup is not None:
            rows.append(_row(1, f"get_progress vs `grep | tail -1`, {last.label} log", "≥ 200× faster",
                             f"{fmt_ratio(speedup)} faster", _ok(speedup >= 200)))  # fmt: skip
            rows.append(_row(1, f"get_progress at {last.label} vs at {first.label}", "≤ 2×", fmt_ratio(growth),
                             _ok(growth <= 2)))  # fmt: skip
            stale = last.samples["ours stale: get_progress"].median
            stale_first = first.samples["ours stale: get_progress"].median
            rows.append(_row(1, f"stale path (tail read) at {last.label}: vs grep / vs {first.label}",
                             "(reported)", f"{fmt_ratio(last.samples['theirs: grep | tail -1'].median / stale)} faster"
                             f" / {fmt_ratio(stale / stale_first)}", "—"))  # fmt: skip
    if "oom" in results:
        oom = results["oom"]
        median = oom.sample.median
        rows.append(_row(2, f"OOM → next attempt started (median of {len(oom.reactions)})", "< 1 s",
                         f"{fmt_s(median)}; {fmt_ratio(ORIGINAL_REACTION_S / median)} faster than 40 s",
                         _ok(median < 1.0)))  # fmt: skip
    if "cold" in results:
        cold = results["cold"]
        rows.append(_row(3, "MCP cold start, ours / mcp-server-git (median of paired ratios)", "≤ 1.0×",
                         f"{fmt_ratio(cold.ratio)} (medians {fmt_ratio(cold.ratio_of_medians)}, minimums "
                         f"{fmt_ratio(cold.ratio_of_minimums)})", _ok(cold.ratio <= 1.0)))  # fmt: skip
    if results.get("idle") is not None:
        idle = results["idle"]
        pct = idle.percent_core(idle.supervisor_cpu_s)
        rows.append(_row(4, "supervisor CPU while a run is healthy", "< 0.5 % of a core", _pct(pct),
                         _ok(pct is not None and pct < 0.5)))  # fmt: skip
    if "prelaunch" in results:
        pre = results["prelaunch"]
        rows.append(_row(5, "stale override refused before launch", "< 3 s",
                         f"{fmt_s(pre.ours.median)}; {fmt_ratio(pre.ratio)} faster than a stand-in launch",
                         _ok(pre.ours.median < 3.0)))  # fmt: skip
    if "notify" in results:
        from bench import b6_notify

        rows += b6_notify.summary_rows(results["notify"], _row, _ok)
    return rows


# -- sections ---------------------------------------------------------------------------------------------------------
def _sample_cells(sample: Sample) -> list[str]:
    return [fmt_s(sample.median), fmt_s(sample.p90), fmt_s(sample.minimum), str(len(sample.values))]


def _progress(bench: Any) -> list[str]:
    out = [
        "## 1. Progress on big logs",
        "",
        "One real run (`verl-async-dapo start`, detached supervisor, the verl stand-in writing a step every 3 s, "
        "TRAIN_STEPS=100000) in a container. For each size its attempt log (= `/verl/train.log`) is grown with "
        "realistic verl blocks (Ray prefixes, vLLM lines, the `step:N - k:np.float64(v)` metrics line, tqdm's "
        "`Training Progress` redraw; `bench/loggen.py`, run in the container) while the job is paused and the "
        "supervisor ended; then the run is healed (a new supervisor reattaches at the last MiB) and the live run "
        "writes its next step. *Fresh* = the supervisor's snapshot in the store; *stale* = the job paused (SIGSTOP, "
        "a hung job) and the snapshot aged past 30 s, so every call reads the log's last MiB from the container "
        "(each call checked to take that path). Theirs: "
        "`docker exec C sh -c 'grep \"Training Progress\" /verl/train.log | tail -1'`, page cache warm.",
        "",
    ]
    if bench.exec_floor is not None:
        out += [f"Floor of any `docker exec` here (`docker exec C true`): {fmt_s(bench.exec_floor.median)}.", ""]
    out += [_row("log", "what", "median", "p90", "min", "n", "theirs ÷ this"), _row(*["---"] * 7)]
    for size in bench.results:
        theirs = size.samples["theirs: grep | tail -1"].median
        for name, sample in size.samples.items():
            ratio = "1 (baseline)" if name.startswith("theirs") else f"{fmt_ratio(theirs / sample.median)}"
            out.append(_row(f"{size.label} ({size.size / (1 << 20):.0f} MiB)", name, *_sample_cells(sample), ratio))
    out += ["", "Scaling, ours at the largest size ÷ ours at the smallest:", ""]
    if len(bench.results) >= 2:
        first, last = bench.results[0], bench.results[-1]
        for name in last.samples:
            if name.startswith("ours"):
                out.append(f"- {name}: {fmt_ratio(last.samples[name].median / first.samples[name].median)}")
        theirs_growth = last.samples["theirs: grep | tail -1"].median / first.samples["theirs: grep | tail -1"].median
        out.append(f"- theirs: {fmt_ratio(theirs_growth)}")
    out += ["", "Same answer check (ours and the original command back to back, ±1 step):", ""]
    for size in bench.results:
        agree = size.checks.get("agree", {})
        out.append(f"- {size.label}: ours step {agree.get('ours_step')}, grep's bar {agree.get('grep_step')} → "
                   f"{'same' if agree.get('same') else 'DIFFERENT'}; fresh path tail reads "
                   f"{size.checks.get('fresh', {}).get('tail_reads')}, stale path tail reads "
                   f"{size.checks.get('stale', {}).get('tail_reads')}")  # fmt: skip
    cli = bench.results[0].samples["ours fresh: CLI status --json"].median if bench.results else float("nan")
    out += [
        "",
        f"The CLI rows are a whole `verl-async-dapo status --json` process: Python start-up and imports "
        f"({fmt_s(cli)} at the smallest size) dominate them, so the CLI beats the grep only once the log is "
        "large; the in-process call is what the MCP server's `get_progress` costs. The fresh path reads no log and "
        "the stale path reads one MiB of it (one `docker exec tail -c 1048576`, then parsing that MiB) whatever its "
        "size, so differences between sizes in those rows are the shared machine's load; the stale path is slower "
        "than the grep on a small log and faster on a big one.",
        "",
    ]
    return out


def _oom(bench: Any, before: Any, results_before: str) -> list[str]:
    stats = bench.stats()
    out = [
        "## 2. OOM reaction",
        "",
        'Real runs with the stand-in\'s `{"oom_at_step": 1, "oom_unless": []}` and MAX_OOM_RETRIES=3: each '
        "run climbs +offload, +recompute, token budget ×0.5, so each yields 3 reactions. Measured from the OOM "
        "traceback (mtime of the failed attempt's log: the traceback is the last thing written to it) to the next "
        "attempt's process start (mtime of its `started` file, written by the launcher right before it execs the "
        "workload); both stamps come from the same clock inside the container. No stand-in change was needed.",
        "",
        _row("what", "median", "p90", "min", "n", "vs original (40 s)"),
        _row(*["---"] * 6),
        _row(
            "ours (after)",
            *_sample_cells(bench.sample),
            f"{fmt_ratio(ORIGINAL_REACTION_S / bench.sample.median)} faster",
        ),
    ]
    if before is not None:
        out.append(_row(f"ours before (`{results_before}`)", *_sample_cells(before.sample),
                        f"{fmt_ratio(ORIGINAL_REACTION_S / before.sample.median)} faster"))  # fmt: skip
    if bench.naive:
        naive = Sample("naive", bench.naive)
        out.append(_row("naive: original loop emulated (30 s poll, cleanup, sleep 10)", *_sample_cells(naive),
                        f"ours {fmt_ratio(naive.median / bench.sample.median)} faster"))  # fmt: skip
    out += [
        "",
        f"Of ours' median: the stand-in's own exit after printing the traceback (Python shutdown, before the "
        f"supervisor can know) {fmt_s(stats['median_exit_lag_s'] or float('nan'))}; from its exit to the next "
        f"start {fmt_s(stats['median_after_exit_s'] or float('nan'))}.",
        "",
    ]
    if bench.profile:
        out += ["Where the time goes (one run with the supervisor in-process and every call timed; top-level "
                "calls between the job's exit and the next start, wall time; they overlap where run "
                "concurrently):", ""]  # fmt: skip
        out += [_row("relaunch after attempt", "total", "job exit lag", "exit → first call", "calls",
                     "docker execs (median each)"), _row(*["---"] * 6)]  # fmt: skip
        for p in bench.profile:
            calls = ", ".join(f"{k} {fmt_s(v)}" for k, v in p["calls_s"].items())
            exit_lag = fmt_s(p["stand_in_exit_s"]) if p["stand_in_exit_s"] is not None else "n/a"
            median_exec = fmt_s(p["median_exec_s"]) if p["median_exec_s"] is not None else "n/a"
            out.append(_row(p["attempt"], fmt_s(p["total_s"]), exit_lag, fmt_s(p["exit_to_first_call_s"]), calls,
                            f"{p['docker_execs']} ({median_exec})"))  # fmt: skip
        out.append("")
    return out


def _cold(bench: Any, results_before: str) -> list[str]:
    out = [
        "## 3. MCP cold start",
        "",
        f"spawn → initialize → tools/list with the mcp SDK's stdio client (`Client(StdioServerParameters(...), "
        f'mode="legacy")`, the initialize handshake), a fresh process each time, alternating. Theirs: '
        f"`mcp-server-git` {bench.reference_version} from PyPI in bench/.venv-ref (same mcp SDK version), "
        f"serving this repository. Tools listed: ours {bench.ours_tools}, theirs {bench.theirs_tools}. "
        f"Each repetition is a pair, ours and theirs back to back with the order alternating; the target is "
        f"judged on the median of the per-pair ratios ({fmt_ratio(bench.ratio)}), which a load change on this "
        f"shared machine skews least; the ratio of medians is {fmt_ratio(bench.ratio_of_medians)} and of minimums "
        f"{fmt_ratio(bench.ratio_of_minimums)}.",
        "",
        _row("server", "median", "p90", "min", "n", "÷ theirs (median of paired ratios)"),
        _row(*["---"] * 6),
        _row("ours (after)", *_sample_cells(bench.ours), fmt_ratio(bench.ratio)),
    ]
    if bench.before is not None:
        out.append(_row(f"ours before (`{results_before}`)", *_sample_cells(bench.before),
                        fmt_ratio(bench.before_ratio)))  # fmt: skip
    out += [_row("mcp-server-git", *_sample_cells(bench.theirs), "1 (baseline)"), ""]
    return out


def _idle(idle: Any) -> list[str]:
    s = idle.summary()
    orig = s["original_loop_cpu_s_per_min"]
    sup = s["supervisor_cpu_s_per_min"]
    ratio = f"{fmt_ratio(orig / sup)}" if orig and sup else "n/a"
    tail = s["follow_tail_cpu_s_per_min"]
    return [
        "## 4. Supervisor idle cost",
        "",
        f"Benchmark 1's run after its last size: a healthy job writing a step every 3 s ({s['steps_in_window']} "
        f"steps in the window) into a {idle.log_bytes / (1 << 20):.0f} MiB log; window {idle.window_s:.0f} s. "
        "CPU = utime+stime from /proc. In the same window the original skill's loop (`kill -0` and its "
        "case-insensitive OOM grep over the whole log every 30 s) ran inside the container, its CPU read with the "
        "shell's `times`.",
        "",
        _row("process", "CPU s / min", "% of one core"),
        _row("---", "---", "---"),
        _row("ours: supervisor (target < 0.5 %)", f"{sup:.4f}", _pct(s["supervisor_pct_core"])),
        _row(
            "ours: its `tail --pid -F` in the container",
            "n/a" if tail is None else f"{tail:.4f}",
            _pct(idle.percent_core(idle.tail_cpu_s)),
        ),
        _row(
            "original: 30 s `kill -0` + OOM grep loop",
            "n/a" if orig is None else f"{orig:.4f}",
            _pct(s["original_loop_pct_core"]),
        ),
        _row("a `sleep` process", "0.0000", "0.000 %"),
        "",
        f"The original loop costs {ratio} what our supervisor does here, and its cost grows with the log (it "
        "re-reads all of it every poll); ours reads only new bytes.",
        "",
    ]


def _prelaunch(bench: Any) -> list[str]:
    return [
        "## 5. Pre-launch rejection",
        "",
        "A run's real overrides (`verl-async-dapo plan`, FSDP, verl 0.9.1) plus the stale key "
        "`actor_rollout_ref.actor.ppo_micro_batch_size_per_gpus=4`, against the 0.9.1 tree in a container. Ours: "
        "`prelaunch.validate_overrides` (Hydra compose in the container). Theirs: the launch itself "
        "(`docker exec -w /verl C python3 -m recipe.dapo.main_dapo …`), timed until it exits with Hydra's error.",
        "",
        _row("what", "median", "p90", "min", "n", "÷ ours"),
        _row(*["---"] * 6),
        _row("ours: validate_overrides", *_sample_cells(bench.ours), "1 (baseline)"),
        _row("stand-in launch failing the same way", *_sample_cells(bench.theirs), fmt_ratio(bench.ratio)),
        "",
        f"Ours says: `{_first_line(bench.ours_error)}`; the launch says: `{_first_line(bench.theirs_error)}`.",
        "",
        "This baseline flatters the launch: the stand-in imports only Hydra before Hydra composes, while a real "
        "verl entry imports verl, torch and ray first (tens of seconds) and, on a cluster, queues a Ray job "
        "before failing the same way.",
        "",
    ]


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    picked = next(
        (ln for ln in lines if "not in struct" in ln or "Could not override" in ln), lines[0] if lines else ""
    )
    return picked.replace("`", "'")[:160]


CHANGES = [
    "## Product changes made for these targets",
    "",
    "Each change is the smallest that moved a missed target. Before/after come from this harness in the same "
    "run: *before* is the package as of commit `{before}` (the code these changes were made on), run from a "
    "`git archive` copy put first on PYTHONPATH (so its CLI, server and supervisors run); *after* is the working "
    "tree.",
    "",
    "1. **OOM reaction (benchmark 2).** The supervisor's relaunch waited ~1 s (0.6–1.4 s measured) for a Hydra "
    "dry-run of the new overrides inside the container, plus ~10 sequential `docker exec`s. Now "
    "(`supervisor.py`, `prelaunch.py`): at each launch, the plans an OOM would relaunch with (next rung of the "
    "GPU and the rollout ladder) are validated together with the attempt's own overrides, in one process "
    "(`prelaunch.validate_override_sets`, "
    "Hydra imported once), and the relaunch uses that result (waiting for it if still running; a transient "
    "failure is re-checked at relaunch; a real rejection still refuses the launch, so nothing unvalidated is "
    "ever launched). The old job's cleanup and the checkpoint lookup run concurrently, and so do the "
    "exit-code read and the read of the log's tail for classification once `tail --pid` has ended. `DockerTarget` "
    "(`targets/docker/__init__.py`) reads a job's pgid file once (it is write-once) instead of on every status/stop/follow, "
    "and probes for and runs `ray stop --force` in one exec; `tail --pid` checks the launcher every 0.1 s instead "
    "of 0.2 s (`targets/base.py`).",
    "2. **Cold start (benchmark 3).** `server.py` imported the whole service layer at start (runs, sessions and "
    "behind them the Docker SDK with requests/urllib3, the log rules, verl's planner, preflight, the SwanLab "
    "checks, pydantic-settings). Now `runs`, `sessions` and the target registry are loaded on first use "
    "(importlib's LazyLoader); `targets/registry.py` imports the Docker SDK only when a container is touched "
    "(which also takes ~0.1 s off every `verl-async-dapo status`); the two state/config directory functions moved "
    "from `settings.py` to a new `paths.py` (re-exported by `settings`), so `AppContext` no longer pulls in "
    "pydantic-settings, and `app.py` / `server_models.py` import the store, the secret store, the redactor and "
    "`targets.base` where they are used; and the SDK's `MCPServer()` is built with plain stderr logging instead of rich (rich is "
    "importable here only as a dependency of a dependency; it cost ~20 ms and wrapped log lines at a terminal "
    "width). That alone reached only parity (1.01× at `7adf0af`, the paired median of 25): both servers spend "
    "~0.55 s of their ~0.6 s importing the same mcp SDK, and the ~40 ms ours adds (the SDK building the JSON "
    "schemas of our ten tools' structured outputs, and our wire models) roughly equals the reference's GitPython "
    "and click. The import of the SDK was then measured with the cyclic garbage collector off: ~60 ms less (it "
    "builds several hundred pydantic models, and the collector, run on allocation counts, walks the growing heap "
    "again and again to free ~2,900 objects in all). `verl-async-dapo serve` now imports the server with the "
    "collector paused and freezes what the import built (`cli._gc_paused`), so later collections do not walk it "
    "either (without the freeze the first collections after start-up paid most of the gain back); the cost is "
    "that those ~2,900 objects (< 1 MiB) are never freed.",
    "3. **Snapshot freshness (found by benchmark 1's same-answer check).** The supervisor wrote progress at most "
    "every 2 s, but only when a chunk arrived: the last lines of a step (often the step line itself) stayed "
    "unwritten until the next step, minutes later with real verl. The 1 s heartbeat now writes a pending "
    "snapshot once 2 s have passed (`supervisor.py`).",
    "",
    "Left as is: the stand-in's own exit after its traceback (inside the measured window, not ours); `ray stop "
    "--force` in a real verl container (not installed in the test image, so not measured here; it runs only when "
    "ray exists and is needed before the next attempt can start); the SDK's eager JSON-schema building for our "
    "tools' structured outputs at registration (~15 ms; caching it would mean rebuilding the SDK's `Tool` "
    "construction outside the SDK, not worth the coupling once the target is met).",
]


def raw(results: dict[str, Any]) -> dict[str, Any]:
    """JSON-able copy of the results (dataclasses to dicts)."""

    def conv(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {k: conv(v) for k, v in dataclasses.asdict(value).items()}
        if isinstance(value, dict):
            return {str(k): conv(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [conv(v) for v in value]
        return value

    return conv(results)
