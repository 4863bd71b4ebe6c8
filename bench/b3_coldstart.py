"""Benchmark 3: MCP cold start — spawn → initialize → tools/list over stdio with the SDK's own stdio client.

Ours: ``.venv/bin/verl-async-dapo serve``. Theirs: ``mcp-server-git`` from PyPI in its own venv (bench/.venv-ref,
made by ``ensure_reference()``), serving this repository. Both are timed with the same client, alternating
ours/theirs so the machine's load hits both alike; each measurement is a fresh process.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp.client.stdio import StdioServerParameters

from bench import common
from bench.common import Sample
from mcp import Client

REF_VENV = common.BENCH_DIR / ".venv-ref"
REF_SERVER = REF_VENV / "bin" / "mcp-server-git"
REF_PACKAGE = "mcp-server-git"


@dataclass
class ColdStartBench:
    ours: Sample = field(default_factory=lambda: Sample("ours"))
    theirs: Sample = field(default_factory=lambda: Sample("mcp-server-git"))
    before: Sample | None = None  # ours from an earlier revision (common.revision_tree), when asked
    ours_tools: int = 0
    theirs_tools: int = 0
    reference_version: str = "?"

    @property
    def ratio(self) -> float:
        """Median of the per-pair ratios: each pair is one ours and one theirs run back to back (the order
        alternating), so a load change on the shared machine hits both sides of a pair alike."""
        pairs = [o / t for o, t in zip(self.ours.values, self.theirs.values, strict=False)]
        return statistics.median(pairs) if pairs else float("nan")

    @property
    def before_ratio(self) -> float:
        """The same paired median for the 'before' code (run right after each pair)."""
        if self.before is None:
            return float("nan")
        pairs = [b / t for b, t in zip(self.before.values, self.theirs.values, strict=False)]
        return statistics.median(pairs) if pairs else float("nan")

    @property
    def ratio_of_medians(self) -> float:
        return self.ours.median / self.theirs.median

    @property
    def ratio_of_minimums(self) -> float:
        return self.ours.minimum / self.theirs.minimum


def ensure_reference() -> Path:
    """bench/.venv-ref with mcp-server-git from the package index (pip), once."""
    if not REF_SERVER.exists():
        common.log(f"installing {REF_PACKAGE} into {REF_VENV}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(REF_VENV)], check=True, timeout=300)
        subprocess.run([str(REF_VENV / "bin" / "pip"), "install", "-q", REF_PACKAGE], check=True, timeout=900)
    return REF_SERVER


def reference_version() -> str:
    proc = subprocess.run([str(REF_VENV / "bin" / "pip"), "show", REF_PACKAGE], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    return next((ln.split(":", 1)[1].strip() for ln in proc.stdout.splitlines() if ln.startswith("Version:")), "?")


async def _once(params: StdioServerParameters) -> tuple[float, int]:
    began = time.perf_counter()
    async with Client(params, mode="legacy") as client:  # legacy = the initialize handshake
        tools = await client.list_tools()
        elapsed = time.perf_counter() - began
    return elapsed, len(tools.tools)


def run(reps: int = 15, before_pythonpath: str | None = None) -> ColdStartBench:
    """``before_pythonpath``: also time ours from that tree (common.revision_tree), in the same alternation."""
    ensure_reference()
    bench = ColdStartBench(reference_version=reference_version())
    with tempfile.TemporaryDirectory(prefix="vad-bench-cold-") as tmp:
        env = {"VERL_ASYNC_DAPO_HOME": f"{tmp}/state", "VERL_ASYNC_DAPO_CONFIG_DIR": f"{tmp}/config"}
        ours = StdioServerParameters(command=common.CLI, args=["serve"], env=env)
        before = None
        if before_pythonpath:
            bench.before = Sample("ours before")
            before = StdioServerParameters(command=common.CLI, args=["serve"],
                                           env={**env, "PYTHONPATH": before_pythonpath})  # fmt: skip
            anyio.run(_once, before)
        theirs = StdioServerParameters(command=str(REF_SERVER), args=["--repository", str(common.REPO)], env={})
        anyio.run(_once, ours)  # warm the page cache for both (a cold disk is not what is compared)
        anyio.run(_once, theirs)
        for rep in range(reps):
            for which in ("ours", "theirs") if rep % 2 == 0 else ("theirs", "ours"):
                if which == "ours":
                    elapsed, bench.ours_tools = anyio.run(_once, ours)
                    bench.ours.values.append(elapsed)
                else:
                    elapsed, bench.theirs_tools = anyio.run(_once, theirs)
                    bench.theirs.values.append(elapsed)
            if before is not None and bench.before is not None:
                bench.before.values.append(anyio.run(_once, before)[0])
    return bench
