"""The error categories every failure is sorted into, each with its meaning and its fix.

Pure data shared by the log classifier (which finds them), the recovery policy (which acts on
them) and the tools (which explain them).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ErrorCategory(str, Enum):
    GPU_OOM = "gpu_oom"
    ROLLOUT_OOM = "rollout_oom"
    HOST_OOM = "host_oom"
    NCCL_TIMEOUT = "nccl_timeout"
    # A collective (NCCL/HCCL) that failed without timing out: init, a system or CUDA error, a peer gone.
    COMM_ERROR = "comm_error"
    WORKER_DIED = "worker_died"
    CONFIG_ERROR = "config_error"
    MISSING_FILE = "missing_file"
    ENVIRONMENT = "environment"
    RESOURCES = "resources"
    TRACKING = "tracking"
    DATA_ERROR = "data_error"
    REWARD_ERROR = "reward_error"
    CHECKPOINT_ERROR = "checkpoint_error"
    # Ascend NPU runtime (CANN/ACL, torch_npu): error codes such as EZ9999, EL0004, 507035.
    ACCELERATOR_ERROR = "accelerator_error"
    UNKNOWN = "unknown"
    # Not found in a log but in its absence: no output for the stall window (watchman/stall.py).
    STALLED = "stalled"
    # Not found in a log but in the batch scheduler's final job state (targets/slurm/states.py).
    SCHEDULER_KILL = "scheduler_kill"


@dataclass(frozen=True)
class CategoryInfo:
    explanation: str
    fix: str
    # Whether the supervisor relaunches on its own for this category.
    auto_retry: bool


CATEGORY_INFO: dict[ErrorCategory, CategoryInfo] = {
    ErrorCategory.GPU_OOM: CategoryInfo(
        "CUDA ran out of GPU memory in training (actor update, log-prob or ref computation).",
        "relaunch with offload, then recompute, resuming from the last checkpoint",
        True,
    ),
    ErrorCategory.ROLLOUT_OOM: CategoryInfo(
        "The rollout engine (vLLM/SGLang) ran out of GPU memory for weights, KV cache or CUDA graphs.",
        "depends on the message: 'no memory for the cache blocks' / 'increase --mem-fraction-static' → relaunch with a "
        "higher rollout.gpu_memory_utilization, then a lower rollout.max_num_seqs; 'free memory on device … less than "
        "desired' or a CUDA-graph / wake-up OOM → a lower one, then eager mode (no CUDA graphs)",
        True,
    ),
    ErrorCategory.HOST_OOM: CategoryInfo(
        "The machine ran out of CPU RAM (Ray memory monitor or kernel OOM killer).",
        "reduce host memory use: smaller batches or rollout.n, turn offload off, or add RAM; "
        "CPU offload would make it worse, so it is never added for this",
        False,
    ),
    ErrorCategory.NCCL_TIMEOUT: CategoryInfo(
        "A collective operation timed out (a slow or hung rank, or a network problem).",
        "check GPU health and the interconnect, then start again; raise actor_rollout_ref.nccl_timeout if steps are slow",
        False,
    ),
    ErrorCategory.COMM_ERROR: CategoryInfo(
        "A collective-communication library (NCCL, or HCCL on Ascend) failed without a timeout: communicator "
        "init, a system or CUDA error inside NCCL, or a peer that went away.",
        "check the interconnect and the NCCL/HCCL environment (NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME / "
        "HCCL_IF_IP, IB/RoCE devices, shm size), that no earlier run still holds the devices, then start again",
        False,
    ),
    ErrorCategory.WORKER_DIED: CategoryInfo(
        "A Ray worker or actor died without a clearer error (often host OOM or a crash in native code).",
        "look at the worker logs under Ray's session_latest/logs; check host memory (dmesg) and GPU health",
        False,
    ),
    ErrorCategory.CONFIG_ERROR: CategoryInfo(
        "verl rejected the configuration (a stale or misspelt Hydra key, or a failed validation).",
        "fix the named key or value; retrying unchanged cannot help",
        False,
    ),
    ErrorCategory.MISSING_FILE: CategoryInfo(
        "A model, data or checkpoint path does not exist inside the target.",
        "check MODEL_PATH / TRAIN_FILE / VAL_FILE inside the container (bind mounts), then start again",
        False,
    ),
    ErrorCategory.ENVIRONMENT: CategoryInfo(
        "The software in the target does not fit together (import error, recipe/verl mismatch, flash-attn ABI, driver).",
        "install matching versions (see preflight); e.g. init the recipe submodule or reinstall flash-attn for this torch",
        False,
    ),
    ErrorCategory.RESOURCES: CategoryInfo(
        "The cluster has fewer GPUs or CPUs than the plan asks for.",
        "lower TRAINER_GPUS/ROLLOUT_GPUS to what the target has, or free the GPUs other jobs hold",
        False,
    ),
    ErrorCategory.TRACKING: CategoryInfo(
        "The experiment tracker (SwanLab) refused to start: wrong key, wrong host or no network.",
        "check SWANLAB_HOST and the API key with configure_swanlab, or use SWANLAB_MODE=local",
        False,
    ),
    ErrorCategory.DATA_ERROR: CategoryInfo(
        "The training data does not fit what the trainer reads: a missing column or prompt key, a schema or "
        "type that cannot be cast, a corrupt parquet file, or a tokenizer without a chat template.",
        "check the dataset's columns against data.prompt_key and the reward fields (reward_model.ground_truth, "
        "data_source), re-run the preprocessing script, or set the tokenizer's chat template; retrying the same "
        "data cannot help",
        False,
    ),
    ErrorCategory.REWARD_ERROR: CategoryInfo(
        "The reward function raised: no scorer for the batch's data_source, a custom reward function that "
        "fails or does not match the reward manager's call.",
        "fix custom_reward_function (path, name, signature) or map the data_source to a scorer; retrying "
        "unchanged cannot help",
        False,
    ),
    ErrorCategory.CHECKPOINT_ERROR: CategoryInfo(
        "Saving or resuming a checkpoint failed: the state does not match the model, the dataloader state "
        "cannot be restored, or the disk is full.",
        "free disk space or point trainer.default_local_dir elsewhere; to resume, check that the checkpoint "
        "belongs to this model and verl version, or start without it (trainer.resume_mode=disable)",
        False,
    ),
    ErrorCategory.ACCELERATOR_ERROR: CategoryInfo(
        "The Ascend NPU runtime (CANN/ACL through torch_npu) reported an error: an operator or stream failure, "
        "device memory the runtime could not allocate, or a broken CANN installation.",
        "read the error code (EZ…/EL…/EH…, 5070xx) in the excerpt and the plog (ASCEND_LAUNCH_BLOCKING=1 for a "
        "synchronous stack); check the CANN/torch_npu versions and npu-smi, then start again",
        False,
    ),
    ErrorCategory.UNKNOWN: CategoryInfo(
        "The run failed with an error this tool does not recognise.",
        "read the excerpt and the log tail; report it if it looks like a bug in verl",
        False,
    ),
    ErrorCategory.STALLED: CategoryInfo(
        "The training stopped making progress: no new step and no log output for the stall window (a hang: "
        "a stuck collective, a dead rollout worker, a deadlocked data loader).",
        "read the evidence in check_errors (GPU utilisation, py-spy stacks); stop and relaunch from the last "
        "checkpoint, or set VAD_STALL_RELAUNCH=1 to let the supervisor do it",
        False,
    ),
    ErrorCategory.SCHEDULER_KILL: CategoryInfo(
        "The batch scheduler (SLURM) ended the job, not the training: its time limit, a preemption, a failed node "
        "or a cancel from outside this tool.",
        "requeue from the last checkpoint (resume_training / `verl-async-dapo resume`: a new job, same parameters); "
        "for a time limit, a longer one (a new start_training with a longer slurm_time_limit, up to the partition's "
        "MaxTime, and ckpt_dir = this run's checkpoint directory resumes from it) or checkpoint more often "
        "(save_freq)",
        False,
    ),
}
