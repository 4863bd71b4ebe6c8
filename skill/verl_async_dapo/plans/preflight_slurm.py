"""Preflight's checks of a SLURM run, before anything is submitted: the batch-job options against the scheduler.

What only the scheduler knows (a partition that does not exist, GPUs a partition lacks, an account it refuses, a
time limit over the partition's MaxTime) is asked of it with ``sbatch --test-only``: the refusal quotes its own
words. Whether the time limit leaves room for one checkpoint is decided here from the options' estimates
(slurm_options.py). The GPU count is the job's (nodes x GPUs per node), not what nvidia-smi on the login
node shows.
"""

from __future__ import annotations

from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.slurm_options import options_from_settings, time_limit_problem
from verl_async_dapo.targets.slurm import SlurmTarget
from verl_async_dapo.wording import Say, Text, setting

# (name, status, detail, fix): preflight turns these into its Check lines.
SlurmCheck = tuple[str, str, str, Text | None]


async def slurm_checks(target: SlurmTarget, settings: TrainingSettings) -> tuple[list[SlurmCheck], bool]:
    """The SLURM lines, and whether the job asks for no GPU at all (preflight's no-GPU rule decides on that)."""
    options = options_from_settings(settings)
    out: list[SlurmCheck] = []
    problem = time_limit_problem(options, settings.save_freq)
    if problem:
        out.append(("slurm time limit", "error", problem,
                    Say("ask for a longer {time}, or checkpoint more often ({freq}); if steps are faster than "
                        "estimated, give {step}", time=setting("VAD_SLURM_TIME", "slurm_time_limit"),
                        freq=setting("SAVE_FREQ", "save_freq"),
                        step=setting("VAD_SLURM_STEP_SECONDS", "slurm_step_seconds"))))  # fmt: skip
    refused = await target.test_submit(options, settings.verl_home)
    if refused:
        out.append(("slurm", "error", f"sbatch --test-only refused the job ({options.describe()}): {refused}",
                    Say("choose a partition and account that `sinfo` / `sacctmgr show assoc` list for you ({part}), "
                        "and GPUs per node that partition has ({gpus})",
                        part=setting("VAD_SLURM_PARTITION", "slurm_partition"),
                        gpus=setting("VAD_SLURM_GPUS_PER_NODE", "slurm_gpus_per_node"))))  # fmt: skip
    else:
        out.append(("slurm", "ok", f"sbatch --test-only accepts the job ({options.describe()})", None))
    have, need = options.nodes * options.gpus_per_node, settings.required_gpus()
    if options.gpus_per_node and have < need:
        out.append(("gpus", "error", f"the job asks for {have} GPU(s) ({options.nodes} node(s) x "
                    f"{options.gpus_per_node}), the run needs {need} ({settings.mode.value})",
                    Say("raise {nodes} or {gpus}", nodes=setting("VAD_SLURM_NODES", "slurm_nodes"),
                        gpus=setting("VAD_SLURM_GPUS_PER_NODE", "slurm_gpus_per_node"))))  # fmt: skip
    elif options.gpus_per_node:
        out.append(("gpus", "ok", f"{have} GPU(s) asked of SLURM, {need} required", None))
    return out, options.gpus_per_node == 0
