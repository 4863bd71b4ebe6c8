"""GPU memory before a launch (pure): what the GPUs have free, what the plan will ask for, whether it fits.

* ``gpus``: nvidia-smi's CSV (``--query-gpu`` / ``--query-compute-apps``) parsed into numbers.
* ``estimate``: the peak memory per GPU of a plan, from the model's config.json and the plan's knobs.
* ``fit``: the fit decision per GPU (the rollout share vLLM will ask for + what the trainer holds), and the fix.

No I/O here: preflight runs nvidia-smi and reads config.json inside the target, then hands the text over.
"""

from verl_async_dapo.memory.estimate import (
    EstimateInput,
    MemoryEstimate,
    ModelShape,
    estimate_from_settings,
    estimate_memory,
    propose_features,
)
from verl_async_dapo.memory.fit import FitReport, GpuFit, check_fit
from verl_async_dapo.memory.gpus import ComputeApp, GpuMemory, parse_apps_csv, parse_gpu_csv

__all__ = [
    "ComputeApp",
    "EstimateInput",
    "FitReport",
    "GpuFit",
    "GpuMemory",
    "MemoryEstimate",
    "ModelShape",
    "check_fit",
    "estimate_from_settings",
    "estimate_memory",
    "parse_apps_csv",
    "parse_gpu_csv",
    "propose_features",
]
