"""A Ray cluster's GPUs and CPUs as Ray itself counts them, and whether a plan's GPU pools fit.

On a cluster ``nvidia-smi`` on the head node says nothing about the workers (and the head often
has no GPU at all), so preflight asks Ray's own resource table instead. verl places each resource
pool as ``[n_gpus_per_node] * nnodes``; our plans always use ``nnodes=1``, so every pool must fit
on ONE node, and two pools may share a node only when it has room for both (verl.md §4, §10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from verl_async_dapo.targets.ray.api import RayJobsClient


@dataclass(frozen=True)
class ClusterResources:
    node_gpus: tuple[float, ...]  # per alive node
    node_cpus: tuple[float, ...]
    gpus_in_use: float | None = None  # cluster-wide, from the autoscaler report; None = unknown
    ray_version: str | None = None

    @property
    def nodes(self) -> int:
        return len(self.node_gpus)

    @property
    def total_gpus(self) -> int:
        return int(sum(self.node_gpus))

    @property
    def max_node_cpus(self) -> float:
        return max(self.node_cpus, default=0.0)

    def describe(self) -> str:
        """``8 GPU(s) on 2 node(s) (per node: 4, 4)``."""
        per_node = ", ".join(_num(g) for g in self.node_gpus)
        text = f"{self.total_gpus} GPU(s) on {self.nodes} node(s)"
        return f"{text} (per node: {per_node})" if self.nodes > 1 else text


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _alive(node: dict[str, Any]) -> bool:
    return str(node.get("state", "ALIVE")).upper() == "ALIVE"


def read_resources(client: RayJobsClient) -> ClusterResources:
    """Blocking: the alive nodes' totals (State API) plus GPUs in use (cluster status), and the Ray version."""
    nodes = [n for n in client.nodes() if _alive(n)]
    totals = [n.get("resources_total") or {} for n in nodes]
    usage = client.resource_usage()
    gpu_usage = usage.get("GPU")
    try:
        version = str(client.version().get("ray_version"))
    except Exception:  # the resources are what matter here; the version is a nicety
        version = None
    return ClusterResources(
        node_gpus=tuple(float(t.get("GPU", 0) or 0) for t in totals),
        node_cpus=tuple(float(t.get("CPU", 0) or 0) for t in totals),
        gpus_in_use=gpu_usage[0] if gpu_usage else None,
        ray_version=version,
    )


def fits(pools: Sequence[int], node_gpus: Sequence[float]) -> bool:
    """Can each pool (GPUs needed on one node) be placed, pools sharing a node only if it holds both?"""
    free = sorted(node_gpus, reverse=True)

    def place(i: int) -> bool:
        if i == len(ordered):
            return True
        for n, room in enumerate(free):
            if room >= ordered[i]:
                free[n] -= ordered[i]
                if place(i + 1):
                    return True
                free[n] += ordered[i]
        return False

    ordered = sorted(pools, reverse=True)  # largest first: few pools, so this search is tiny
    return place(0)


# One line per finding for preflight: (check name, "ok" | "warning" | "error", detail, fix).
Finding = tuple[str, str, str, "str | None"]


def assess(resources: ClusterResources, pools: Sequence[tuple[str, int]], cpus_per_node: int) -> list[Finding]:
    """Does the plan's GPU pools (name, GPUs on one node) and driver-runner CPUs fit this cluster?"""
    need = sum(n for _, n in pools)
    wanted = " + ".join(f"{what} {n}" for what, n in pools)
    have = resources.describe()
    fix = "lower TRAINER_GPUS / ROLLOUT_GPUS / N_GPUS, or add GPU nodes to the Ray cluster"
    findings: list[Finding] = []
    if resources.total_gpus < need:
        findings.append(("gpus", "error", f"the plan needs {need} GPU(s) ({wanted}); the Ray cluster has {have}", fix))
    elif not fits([n for _, n in pools], resources.node_gpus):
        detail = f"the plan needs {need} GPU(s) ({wanted}), each pool on one node; the Ray cluster has {have}"
        findings.append(("gpus", "error", detail, fix))
    else:
        findings.append(("gpus", "ok", f"the plan needs {need} GPU(s) ({wanted}); the Ray cluster has {have}", None))
    if resources.gpus_in_use and resources.total_gpus - resources.gpus_in_use < need:
        detail = f"{_num(resources.gpus_in_use)} of the cluster's {resources.total_gpus} GPU(s) are held by other jobs"
        findings.append(("gpu use", "warning", detail, "the run will wait for them; stop those jobs or expect a delay"))
    if resources.max_node_cpus < cpus_per_node:
        detail = (
            f"verl's task runner asks Ray for {cpus_per_node} CPU(s) on one node; the largest node offers "
            f"{_num(resources.max_node_cpus)}"
        )
        findings.append(
            ("ray cpus", "warning", detail, "start the nodes with more --num-cpus, or the run stays pending")
        )
    return findings
