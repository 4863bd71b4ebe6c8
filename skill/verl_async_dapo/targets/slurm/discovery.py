"""The SLURM cluster as a choice in list_containers: shown where the SLURM client commands are installed."""

from __future__ import annotations

import shutil

import anyio

from verl_async_dapo.exceptions import TargetError, TargetUnavailable
from verl_async_dapo.targets.base import ContainerInfo, TargetKind
from verl_async_dapo.targets.slurm import SLURM_TARGET_NAME, SlurmTarget
from verl_async_dapo.targets.slurm.states import parse_sinfo, sbatch_words

LIST_TIMEOUT = 5.0
SINFO_ARGV = ["sinfo", "-h", "-o", "%P|%a|%D|%G|%l"]


def slurm_installed() -> bool:
    return shutil.which("sinfo") is not None and shutil.which("sbatch") is not None


async def slurm_info(*, timeout: float = LIST_TIMEOUT) -> ContainerInfo:
    """The ``slurm`` choice: its partitions with their GPUs, or "unreachable" with what sinfo said."""
    try:
        with anyio.fail_after(timeout):
            res = await SlurmTarget().slurm(SINFO_ARGV, timeout=timeout)
    except (TargetError, TimeoutError) as exc:
        note = str(exc) if isinstance(exc, TargetError) else f"sinfo gave no answer within {timeout:g} s"
        return ContainerInfo(name=SLURM_TARGET_NAME, kind=TargetKind.SLURM, state="unreachable", note=note)
    if res.exit_code != 0:
        return ContainerInfo(name=SLURM_TARGET_NAME, kind=TargetKind.SLURM, state="unreachable",
                             note=f"sinfo: {sbatch_words(res.stderr or res.stdout)}")  # fmt: skip
    partitions = parse_sinfo(res.stdout)
    gpus = ", ".join(f"{p.name}: {p.gpus_per_node}/node" for p in partitions if p.gpus_per_node) or None
    note = "SLURM partitions: " + "; ".join(p.describe() for p in partitions) + (
        " (choose one with slurm_partition)" if partitions else "")  # fmt: skip
    return ContainerInfo(name=SLURM_TARGET_NAME, kind=TargetKind.SLURM, state="available", gpus=gpus, note=note)


async def list_slurm() -> list[ContainerInfo]:
    return [await slurm_info()] if slurm_installed() else []


async def find_slurm() -> ContainerInfo:
    if not slurm_installed():
        raise TargetError("the SLURM client commands (sinfo, sbatch) are not installed on this machine")
    info = await slurm_info(timeout=15.0)
    if info.state != "available":
        raise TargetUnavailable(f"{info.name}: {info.note}")
    return info
