"""The evidence bundle of a stalled attempt, read from its target: the log's last lines, GPU utilisation and
memory (nvidia-smi), the job's processes, and ``py-spy dump`` of its Python processes when py-spy is there.

Every command is a fixed argv (no shell string from user input) with a short timeout; a missing tool or a
failing command becomes a line saying so, never an exception.
"""

from __future__ import annotations

from typing import Any

from verl_async_dapo.targets.base import JobHandle, Target, TargetError

LOG_TAIL_BYTES = 8 << 10
LOG_LINES = 30
MAX_DUMPS = 3
PY_SPY_HINT = ("py-spy is not installed in the target: `pip install py-spy` there, then "
               "`py-spy dump --pid <trainer pid>` shows where each thread is stuck")  # fmt: skip
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader"]


async def _run(target: Target, argv: list[str], timeout: float = 20.0) -> tuple[int, str]:
    try:
        result = await target.run(argv, timeout=timeout)
    except TargetError as exc:
        return 127, f"could not run {argv[0]}: {exc}"
    return result.exit_code, (result.stdout + result.stderr).strip()


def gpu_summary(nvidia_smi_csv: str) -> str | None:
    """'0: 0 %, 61000/81559 MiB; 1: …' from nvidia-smi's CSV; None if it is not that CSV."""
    parts = []
    for line in nvidia_smi_csv.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4 and cells[0].isdigit():
            parts.append(f"GPU{cells[0]} {cells[1]}, {cells[2]}/{cells[3]}")
    return "; ".join(parts) or None


async def collect(target: Target, handle: JobHandle, pgid: int | None) -> dict[str, Any]:
    bundle: dict[str, Any] = {}
    try:
        tail = (await target.read_tail(handle.log_path, LOG_TAIL_BYTES)).decode("utf-8", errors="replace")
        bundle["last_log_lines"] = tail.replace("\r", "\n").splitlines()[-LOG_LINES:]
    except TargetError as exc:
        bundle["last_log_lines"] = [f"could not read the log: {exc}"]
    code, out = await _run(target, GPU_QUERY)
    bundle["nvidia_smi"] = out[-2000:] if code == 0 else f"nvidia-smi unavailable (exit {code}): {out[-300:]}"
    bundle["gpu_util"] = gpu_summary(out) if code == 0 else None
    pids: list[int] = []
    if pgid is not None:
        code, out = await _run(target, ["ps", "-o", "pid=,stat=,etime=,pcpu=,rss=,args=", "-g", str(pgid)])
        bundle["processes"] = out.splitlines()[:40] if code == 0 else [f"ps failed (exit {code}): {out[-300:]}"]
        for line in bundle["processes"]:
            cells = line.split(None, 5)
            if len(cells) == 6 and cells[0].isdigit() and "python" in cells[5].split(" ", 1)[0]:
                pids.append(int(cells[0]))
    else:
        bundle["processes"] = ["the job's process group is unknown"]
    code, _ = await _run(target, ["py-spy", "--version"], timeout=10)
    if code != 0:
        bundle["py_spy"] = PY_SPY_HINT
    else:
        dumps = []
        for pid in pids[:MAX_DUMPS]:
            code, out = await _run(target, ["py-spy", "dump", "--pid", str(pid)], timeout=30)
            dumps.append(f"--- py-spy dump --pid {pid} (exit {code}) ---\n{out[-4000:]}")
        bundle["py_spy"] = "\n".join(dumps) or "no Python process found in the job's process group"
    return bundle
