"""nvidia-smi's CSV output as numbers (pure).

Preflight sends these two queries (real outputs from an H200 are in tests/memory/fixtures/):

    nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits
    nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits

The parser also takes the forms with a header and with units (``143771 MiB``), because people paste those.
``memory.total`` includes memory the driver reserves and CUDA never hands out (615 MiB on the H200: 143771
total, 143156 free on an idle GPU); vLLM multiplies its share by CUDA's total, which is ``used + free``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_async_dapo.exceptions import NvidiaSmiError

GPU_QUERY = "index,uuid,name,memory.total,memory.used,memory.free"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"
GPU_QUERY_ARGV = ("nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits")
APPS_QUERY_ARGV = ("nvidia-smi", f"--query-compute-apps={APPS_QUERY}", "--format=csv,noheader,nounits")
MIB = 1 << 20


@dataclass(frozen=True)
class GpuMemory:
    index: int
    uuid: str
    name: str
    total_mib: int  # nvidia-smi's memory.total (includes the driver's reserve)
    used_mib: int
    free_mib: int

    @property
    def cuda_total_mib(self) -> int:
        """What ``torch.cuda.mem_get_info`` calls total, and vLLM multiplies gpu_memory_utilization by."""
        return self.used_mib + self.free_mib


@dataclass(frozen=True)
class ComputeApp:
    gpu_uuid: str
    pid: int
    process_name: str
    used_mib: int | None  # None: nvidia-smi printed [N/A] (e.g. a process in another container's namespace)


def _rows(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):  # fixtures carry their source as a comment
            continue
        fields = [f.strip() for f in stripped.split(",")]
        if fields[0] in ("index", "gpu_uuid"):  # the header of --format=csv
            continue
        rows.append(fields)
    return rows


def _mib(text: str) -> int | None:
    """'143771', '143771 MiB' → 143771; '[N/A]' / '[Not Supported]' → None."""
    value = text.removesuffix("MiB").strip()
    try:
        return int(float(value))
    except ValueError:
        return None


def parse_gpu_csv(text: str) -> list[GpuMemory]:
    """``--query-gpu=index,uuid,name,memory.total,memory.used,memory.free`` output, one GpuMemory per line.

    A GPU name may contain a comma, so the name is what lies between the uuid and the last three fields.
    """
    gpus = []
    for fields in _rows(text):
        if len(fields) < 6 or not fields[0].isdigit():
            raise NvidiaSmiError(f"not a --query-gpu={GPU_QUERY} line: {', '.join(fields)[:120]!r}")
        total, used, free = (_mib(f) for f in fields[-3:])
        if total is None or used is None or free is None:
            raise NvidiaSmiError(f"GPU {fields[0]} reports no memory figures: {', '.join(fields[-3:])!r}")
        gpus.append(GpuMemory(int(fields[0]), fields[1], ", ".join(fields[2:-3]), total, used, free))
    return gpus


def parse_apps_csv(text: str) -> list[ComputeApp]:
    """``--query-compute-apps=gpu_uuid,pid,process_name,used_memory`` output (empty when nothing runs)."""
    apps = []
    for fields in _rows(text):
        if len(fields) < 4 or not fields[1].isdigit():
            raise NvidiaSmiError(f"not a --query-compute-apps={APPS_QUERY} line: {', '.join(fields)[:120]!r}")
        apps.append(ComputeApp(fields[0], int(fields[1]), ", ".join(fields[2:-1]), _mib(fields[-1])))
    return apps
