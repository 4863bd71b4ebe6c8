"""Benchmark 5: refusing a stale override before launch, inside a container with the verl 0.9.1 tree.

Ours: ``prelaunch.validate_overrides`` (a Hydra compose of the run's real overrides plus one stale key, in the
container) in this process. Theirs: launching the entry the way a run does — ``python3 -m recipe.dapo.main_dapo``
with the same overrides — which fails the same way, timed until it exits. The stale key is the one of
tests/logs/corpus/config_error__hydra_not_in_struct__stale_key.log.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field

import anyio

from bench import common
from bench.common import Sample

STALE_OVERRIDE = "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpus=4"


@dataclass
class PrelaunchBench:
    ours: Sample = field(default_factory=lambda: Sample("validate_overrides"))
    theirs: Sample = field(default_factory=lambda: Sample("stand-in launch"))
    ours_error: str = ""
    theirs_error: str = ""

    @property
    def ratio(self) -> float:
        return self.theirs.median / self.ours.median


def _plan(state: common.State) -> dict:
    return json.loads(state.cli("plan", "--json"))


def run(image: str, reps: int = 5) -> PrelaunchBench:
    from verl_async_dapo.plans.prelaunch import validate_overrides
    from verl_async_dapo.targets.docker import DockerTarget

    bench = PrelaunchBench()
    with common.bench_container(image, prefix="vad-bench-prelaunch") as container, common.isolated_state() as state:
        plan = _plan(state)
        entry = plan["entry"]
        overrides = [a for a in plan["argv"][3:] if not a.startswith("--")] + [STALE_OVERRIDE]
        target = DockerTarget(container.name)

        async def ours_once() -> tuple[float, str]:
            began = time.perf_counter()
            result = await validate_overrides(target, entry["cwd"], entry["config_path"], entry["config_name"],
                                              overrides)  # fmt: skip
            elapsed = time.perf_counter() - began
            if result.ok:
                raise AssertionError("the stale override was accepted")
            return elapsed, result.error or ""

        argv = ["docker", "exec", "-w", entry["cwd"], container.name, "python3", "-m", entry["module"],
                f"--config-path={entry['config_dir']}", f"--config-name={entry['config_name']}", *overrides]  # fmt: skip
        anyio.run(ours_once)  # warm-up: docker client, page cache of hydra in the container
        for _ in range(reps):
            elapsed, bench.ours_error = anyio.run(ours_once)
            bench.ours.values.append(elapsed)
            began = time.perf_counter()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
            bench.theirs.values.append(time.perf_counter() - began)
            if proc.returncode == 0:
                raise AssertionError("the stand-in accepted the stale override")
            bench.theirs_error = (proc.stderr or proc.stdout).strip()
    return bench
