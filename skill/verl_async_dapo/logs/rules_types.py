"""Rules for exception *types* and for the categories added from the v2 corpus (pure data).

Written from the train split of tests/logs/corpus (SPLIT.json): each anchors on what a library
prints for a class of failure (omegaconf's error classes, Ray's memory monitor, NCCL/HCCL, the
Ascend runtime's error codes, datasets/pyarrow casts, wandb's init errors), not on one log's
wording. Every pattern is anchored or literal, with bounded repeats and no nested quantifiers,
so matching a (clipped) line is linear in its length.
"""

from __future__ import annotations

import re

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.logs.rule_base import Rule, make_rule

C = ErrorCategory


def _not_a_timeout(match: re.Match[str]) -> bool:
    """NCCL errors that say they timed out are nccl_timeout's (watchdog / store rules)."""
    line = match.string
    return "imeout" not in line and "timed out" not in line


TYPE_RULES: tuple[Rule, ...] = (
    # -- configuration: omegaconf's error classes wherever they are raised (worker init too) ----------
    make_rule(
        C.CONFIG_ERROR,
        "config_key_unknown",
        "not in '",
        r"ConfigKeyError: Key '(?P<detail>[^']+)' not in '(?P<d2>\w+)'",
    ),
    make_rule(
        C.CONFIG_ERROR,
        "config_key_missing",
        "Missing key",
        r"Config(?:Attribute|Key)Error: Missing key (?P<detail>\S+)",
    ),
    make_rule(
        C.CONFIG_ERROR,
        "omegaconf_error",
        "omegaconf.errors.",
        r"\bomegaconf\.errors\.(?P<detail>Config\w*Error|ValidationError|MissingMandatoryValue|UnsupportedValueType)\b",
    ),
    # "Invalid attention backend: ''. Valid backends are: [...]" and the like: a setting with a bad value.
    make_rule(
        C.CONFIG_ERROR,
        "invalid_value",
        "Invalid ",
        r"\bInvalid (?P<d2>[\w ]{1,40}): '(?P<detail>[^']{0,200})'\. Valid \w+ are",
    ),
    # -- environment: a GPU newer (or older) than the torch build, a module without the attribute -----
    make_rule(
        C.ENVIRONMENT,
        "gpu_arch_unsupported",
        "is not compatible with the current PyTorch installation",
        r"with CUDA capability (?P<detail>sm_\d+) is not compatible with the current PyTorch installation",
    ),
    make_rule(
        C.ENVIRONMENT,
        "gpu_arch_unsupported",
        "no kernel image is available",
        r"CUDA error: no kernel image is available for execution on the device",
    ),
    make_rule(
        C.ENVIRONMENT,
        "module_api_mismatch",
        "has no attribute",
        r"^(?:[\w.]+\.)?AttributeError: module '(?P<detail>[\w.]+)' has no attribute '(?P<d2>\w+)'",
    ),
    # -- missing files: a model folder without its files, an incomplete download ---------------------
    make_rule(
        C.MISSING_FILE,
        "model_files_missing",
        ("not the path to a directory containing", "No config file found"),
        r"(?<!\S)(?P<detail>\S{1,300}) is not the path to a directory containing a [\w.]{1,40} file|No config file found\b",
    ),
    make_rule(
        C.MISSING_FILE,
        "download_incomplete",
        "Consistency check failed",
        r"Consistency check failed: file should be of size \d+ but has size \d+ \((?P<detail>[^)]{1,200})\)",
    ),
    make_rule(
        C.MISSING_FILE,
        "model_path_not_found",
        "Can't load",
        r"Can't load (?:tokenizer|the model|config|the configuration) for '(?P<detail>[^']+)'",
    ),
    # -- resources: fewer devices than the plan ------------------------------------------------------
    make_rule(
        C.RESOURCES,
        "not_enough_devices",
        "must be less than or equal to the number",
        r"must be less than or equal to the number(?: of visible devices \((?P<detail>\d+)\))?",
    ),
    # -- tracking: wandb refusing to start (key, entity/project permission, host unreachable) --------
    make_rule(
        C.TRACKING,
        "wandb_init_failed",
        ("wandb.errors.", "wandb.run_manager.LaunchError"),
        r"\bwandb\.errors\.(?P<detail>\w+)|\bwandb\.run_manager\.LaunchError\b",
    ),
    make_rule(
        C.TRACKING,
        "wandb_init_failed",
        ("wandb: ERROR", "do not have permission to access the requested resource"),
        r"^wandb: ERROR (?P<detail>Error while calling W&B API|Error communicating with wandb process"
        r"|W&B process failed to launch|It appears that you do not have permission|Run initialization has timed out)"
        r"|It appears that you do not have permission to access the requested resource",
    ),
    make_rule(
        C.TRACKING,
        "wandb_project_mismatch",
        "Project Mismatch",
        r"Project Mismatch: weave and wandb must be initialized using the same project",
    ),
    make_rule(
        C.TRACKING,
        "wandb_unreachable",
        "api.wandb.ai",
        r"(?:ProxyError|ConnectionError|ConnectTimeout)\S{0,80}: HTTPSConnectionPool\(host='api\.wandb\.ai'",
    ),
    # -- host RAM: Ray's memory monitor and its "top memory users" table, raylet / K8s kills ----------
    make_rule(
        C.HOST_OOM,
        "ray_memory_monitor",
        ("RayOutOfMemoryError", "exceeds the memory usage threshold", "memory users", "memory consumers"),
        r"\bRayOutOfMemoryError\b|which exceeds the memory usage threshold of|\b[Tt]op \d+ memory (?:users|consumers)\b",
    ),
    make_rule(
        C.HOST_OOM,
        "ray_memory_monitor",
        "COMMAND",
        r"^PID\s{1,8}MEM(?:\(GB\))?\s{1,8}COMMAND\s{0,8}$",
    ),
    make_rule(
        C.HOST_OOM,
        "raylet_oom_kill",
        ("to free up memory", "OUT_OF_MEMORY"),
        r"Killing worker with the \w+ (?:task assigned time|started task) to free up memory"
        r"|exit_type = NODE_OUT_OF_MEMORY|Worker exit type: (?:NODE_)?OUT_OF_MEMORY",
    ),
    make_rule(
        C.HOST_OOM,
        "container_memory_limit",
        ("K8s pod memory limits", "cgroup"),
        r"may have exceeded K8s pod memory limits|Memory cgroup out of memory|memory\.max exceeded",
    ),
    make_rule(
        C.HOST_OOM,
        "ray_memory_monitor",
        "Node memory usage above threshold",
        r"Node memory usage above threshold",
        supporting=True,
    ),
    # -- rollout engine memory: vLLM's start-up check when it wraps over two lines --------------------
    make_rule(
        C.ROLLOUT_OOM,
        "vllm_startup_memory",
        "on startup is less than desired",
        r"Free memory on device .{0,40} on startup is less than desired",
    ),
    # vLLM raises from its sampler warm-up only when the profiling batch ran out of memory; the frame
    # is there even when the message itself was cut.
    make_rule(
        C.ROLLOUT_OOM,
        "vllm_sampler_warmup",
        "in _dummy_sampler_run",
        r'^File "[^"]*gpu_model_runner\.py", line \d+, in _dummy_sampler_run$',
        weak=True,
    ),
    # -- accelerator memory on Ascend (torch_npu's OOM; re-filed under rollout_oom like a CUDA one) ----
    make_rule(
        C.GPU_OOM,
        "npu_oom",
        "NPU out of memory",
        r"NPU out of memory\.(?: Tried to allocate (?P<detail>[\d.]+ [KMGT]iB))?",
    ),
    # -- collective communication that failed without timing out --------------------------------------
    make_rule(
        C.COMM_ERROR,
        "hccl_error",
        ("HCCL function error", "call hccl api failed"),
        r"HCCL function error: (?P<detail>\w+)|DIST call hccl api failed",
    ),
    make_rule(
        C.COMM_ERROR,
        "nccl_error",
        ("NCCL error", "NCCL Error", "ncclCommInitRank failed", "Unhandled", "SystemError", "InternalError"),
        r"\bNCCL (?:error|Error \d+)\b|ncclCommInitRank failed: (?P<detail>[\w ]{1,60})"
        r"|\b(?P<d2>ncclUnhandled(?:Cuda|System)Error|ncclSystemError|ncclInternalError|ncclInvalidUsage)\b",
        accept=_not_a_timeout,
    ),
    make_rule(
        C.COMM_ERROR,
        "nccl_cuda_failure",
        "NCCL WARN Cuda failure",
        r"NCCL WARN Cuda failure (?P<detail>\d+ '[^']{0,80}')",
    ),
    # -- Ascend NPU runtime (CANN / ACL through torch_npu) ---------------------------------------------
    make_rule(
        C.ACCELERATOR_ERROR,
        "npu_runtime_error",
        ("NPU function error", "PTA call acl api failed"),
        r"NPU function error: (?P<detail>[\w:]+)|PTA call acl api failed",
    ),
    make_rule(
        C.ACCELERATOR_ERROR,
        "npu_runtime_error",
        ("9999", "_Failure(E", "_Error(E"),
        r"^(?P<detail>E[A-Z]9999)(?:: Inner Error|\[PID| \[)|_(?:Failure|Error)\((?P<d2>E[A-Z]\d{4})\)",
    ),
    # -- checkpoints: a state that does not fit, a save that could not be written, a full disk --------
    make_rule(
        C.CHECKPOINT_ERROR,
        "state_dict_mismatch",
        "Error(s) in loading state_dict",
        r"Error\(s\) in loading state_dict for (?P<detail>\w+)",
    ),
    make_rule(
        C.CHECKPOINT_ERROR,
        "save_failed",
        ("Error writing (tmp) checkpoint", "PytorchStreamWriter failed writing"),
        r"Error writing \(tmp\) checkpoint file|PytorchStreamWriter failed writing file",
    ),
    make_rule(
        C.CHECKPOINT_ERROR,
        "disk_full",
        ("No space left on device", "Disk quota exceeded"),
        r"No space left on device|Disk quota exceeded",
    ),
    # -- training data: schema, casts, missing columns, chat templates --------------------------------
    make_rule(
        C.DATA_ERROR,
        "dataloader_worker",
        "in DataLoader worker process",
        r"Caught (?P<detail>\w+) in DataLoader worker process",
    ),
    make_rule(
        C.DATA_ERROR,
        "schema_cast",
        ("Couldn't cast", "datasets dtype equivalent", "Arrow"),
        r"\bCouldn't cast\b|does not have a datasets dtype equivalent"
        r"|\b(?:pyarrow\.lib\.)?(?P<detail>ArrowInvalid|ArrowNotImplementedError|ArrowTypeError)\b",
    ),
    make_rule(
        C.DATA_ERROR,
        "missing_column",
        ("are in the [columns]", "not in the dataset"),
        r"None of \[Index\(\[(?P<detail>[^\]]{0,200})\]|Column (?P<d2>\S+) not in the dataset",
    ),
    make_rule(
        C.DATA_ERROR,
        "no_chat_template",
        ("No chat template is set", "chat_template is not set"),
        r"No chat template is set for this (?P<detail>processor|tokenizer)|chat_template is not set",
    ),
    make_rule(
        C.DATA_ERROR,
        "tools_schema",
        "Tools should either be a JSON schema",
        r"Tools should either be a JSON schema",
    ),
    # -- reward functions -------------------------------------------------------------------------------
    make_rule(
        C.REWARD_ERROR,
        "no_scorer_for_data_source",
        "Reward function is not implemented",
        r"Reward function is not implemented for (?P<detail>.{0,120})",
    ),
    make_rule(
        C.REWARD_ERROR,
        "reward_signature",
        "got an unexpected keyword argument",
        r"(?P<detail>(?<!\w)\w{0,60}Reward\w{0,60}\.__init__|compute_score)\(\) got an unexpected keyword argument",
    ),
)
