"""The anchors the classifier looks for (pure data; see peers.md §2.2).

Every rule is a cheap substring test (``needles``) guarding an anchored, multi-word regex.
None matches a bare "oom"/"OOM": that is inside "bloom", "room" and "zoom", and the
classic false alarm is transformers failing to import the *bloom* modeling module when
flash_attn is missing. Order matters: within a category, earlier rules are more specific
and win over later ones.
"""

from __future__ import annotations

import re

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.logs.rule_base import (
    Rule,
    first_then,
    local_looking,
    make_rule,
    not_local_looking,
    positive_count,
)
from verl_async_dapo.logs.rules_types import TYPE_RULES
from verl_async_dapo.logs.rules_verl import VERL_RULES

C = ErrorCategory
_rule = make_rule
_positive_count = positive_count
_local_looking = local_looking
_not_local_looking = not_local_looking

__all__ = ["ANY_NEEDLE_RE", "CATEGORY_PRIORITY", "RULES", "Rule"]


_EXC = r"^(?:[\w.]+\.)?"  # an exception line: optional module path before the class
# An import failure as raised, or as the bare second line transformers prints under
# "Failed to import … because of the following error". Anchored: libraries log handled
# import failures mid-line ("Failed to import flash_attn: No module named …; falling back").
_IMPORT = r"^(?:(?:[\w.]+\.)?(?:ModuleNotFoundError|ImportError|OSError|RuntimeError): )?"

RULES: tuple[Rule, ...] = (
    # Specific to verl / vLLM / transformers versions and verl's own checks: first, they are exact.
    *VERL_RULES,
    # -- configuration (Hydra at compose time, OmegaConf, verl's validation, DAPO sampling) --
    _rule(C.CONFIG_ERROR, "hydra_not_in_struct", "Could not override", r"Could not override '(?P<detail>[^']+)'"),
    _rule(C.CONFIG_ERROR, "hydra_not_in_struct", "is not in struct", r"Key '(?P<detail>[^']+)' is not in struct"),
    _rule(
        C.CONFIG_ERROR,
        "hydra_append_exists",
        "Could not append to config",
        r"Could not append to config\. An item is already at '(?P<detail>[^']+)'",
    ),
    _rule(C.CONFIG_ERROR, "hydra_override_syntax", "override_grammar", r"hydra\.cc/docs/\S{1,120}?/override_grammar"),
    _rule(
        C.CONFIG_ERROR,
        "missing_mandatory_value",
        ("MissingMandatoryValue", "Missing mandatory value"),
        r"(?:MissingMandatoryValue|Missing mandatory value)(?::.*?(?:value: )?(?P<detail>[\w.]+)\s*$)?",
    ),
    _rule(
        C.CONFIG_ERROR,
        "interpolation_error",
        "Interpolation",
        r"\b(?:InterpolationKeyError|InterpolationResolutionError|InterpolationToMissingValueError)\b",
    ),
    _rule(
        C.CONFIG_ERROR,
        "data_too_difficult",
        "Generated too many",
        r"Generated too many\. Please check if your data are too difficult",
    ),
    _rule(
        C.CONFIG_ERROR,
        "verl_validation",
        ("must be divisible by", "Please set at least one of", "use_remove_padding", "You have set both"),
        r"must be divisible by|Please set at least one of|must enable `use_remove_padding`|You have set both '",
    ),
    _rule(
        C.CONFIG_ERROR,
        "verl_validation",
        "when enabling do_sample",
        r"should be greater than 0 when enabling do_sample",
    ),
    _rule(
        C.CONFIG_ERROR, "unsupported_backend", "is not supported", r"^AssertionError: (?P<detail>\S+) is not supported"
    ),
    _rule(
        C.CONFIG_ERROR,
        "hf_repo_id_invalid",
        "Repo id must",
        first_then(r"Repo id must (?:be in the form|use alphanumeric)", r"[^\n]*?: '(?P<detail>[^']+)'"),
        accept=_not_local_looking,
    ),
    # -- environment: versions that do not fit together -------------------------------------
    _rule(C.ENVIRONMENT, "flash_attn_abi", "undefined symbol", _IMPORT + r"\S*flash_attn\S*\.so: undefined symbol"),
    _rule(
        C.ENVIRONMENT, "flash_attn_missing", "flash_attn", _IMPORT + r"No module named '(?P<detail>flash_attn[\w.]*)'"
    ),
    _rule(
        C.ENVIRONMENT,
        "transformers_import",
        ("Failed to import transformers", "Could not import module"),
        _EXC + r"\w+Error: (?:Failed to import transformers\.models\.(?P<detail>[\w.]+)"
        r"|Could not import module '(?P<d2>\w+)')",
    ),
    _rule(
        C.ENVIRONMENT,
        "verl_import",
        ("cannot import name", "No module named"),
        _IMPORT + r"(?:cannot import name '(?P<detail>\w+)' from '(?:verl|recipe)\b"
        r"|No module named '(?P<d2>(?:recipe|verl)\b[\w.]*)')",
    ),
    _rule(
        C.ENVIRONMENT,
        "driver_too_old",
        ("driver on your system is too old", "driver version is insufficient", "Found no NVIDIA driver"),
        r"NVIDIA driver on your system is too old|driver version is insufficient for CUDA runtime"
        r"|Found no NVIDIA driver",
    ),
    _rule(C.ENVIRONMENT, "nvml_mismatch", "Driver/library version mismatch", r"Driver/library version mismatch"),
    _rule(
        C.ENVIRONMENT,
        "hydra_config_missing",
        ("Cannot find primary config", "Could not find '"),
        r"Cannot find primary config '(?P<detail>[^']+)'|In '[^']+': Could not find '(?P<d2>[^']+)'",
    ),
    _rule(C.ENVIRONMENT, "entrypoint_missing", "can't open file", r"can't open file '(?P<detail>[^']+)'"),
    _rule(
        C.ENVIRONMENT,
        "abi_mismatch",
        "undefined symbol",
        _IMPORT + r"\S+\.so(?:\.\d+)*: undefined symbol: (?P<detail>\S+)",
    ),
    _rule(
        C.ENVIRONMENT,
        "import_error",
        ("ModuleNotFoundError", "ImportError"),
        _EXC + r"(?:ModuleNotFoundError|ImportError): (?:No module named '(?P<detail>[^']+)'|.*)",
    ),
    # -- missing files: model, data, checkpoint paths ----------------------------------------
    _rule(C.MISSING_FILE, "hf_datasets_not_found", "Unable to find '", r"Unable to find '(?P<detail>[^']+)'"),
    _rule(
        C.MISSING_FILE,
        "model_path_not_found",
        "Repo id must",
        first_then(r"Repo id must (?:be in the form|use alphanumeric)", r"[^\n]*?: '(?P<detail>[^']+)'"),
        accept=_local_looking,
    ),
    _rule(
        C.MISSING_FILE,
        "model_path_not_found",
        "Incorrect path_or_model_id",
        r"Incorrect path_or_model_id: '(?P<detail>[^']+)'",
    ),
    _rule(
        C.MISSING_FILE,
        "model_files_missing",
        "does not appear to have a file named",
        r"(?<!\S)(?P<d2>\S+) does not appear to have a file named (?P<detail>[\w.-]+)",
    ),
    _rule(
        C.MISSING_FILE,
        "file_not_found",
        ("FileNotFoundError", "No such file or directory"),
        _EXC + r"(?:FileNotFoundError: (?:\[Errno 2\] No such file or directory: '(?P<detail>[^']+)'|(?P<d2>.+))"
        r"|(?:OSError|IOError): \[Errno 2\] No such file or directory: '(?P<d3>[^']+)')",
    ),
    _rule(
        C.MISSING_FILE,
        "file_not_found",
        "RayTaskError(FileNotFoundError)",
        r"RayTaskError\(FileNotFoundError\)",
        weak=True,
    ),
    # -- resources: the cluster is smaller than the plan -------------------------------------
    _rule(
        C.RESOURCES,
        "not_enough_gpus",
        "Total available GPUs",
        r"(?P<detail>Total available GPUs [\d.]+ is less than total desired GPUs \d+)",
    ),
    _rule(
        C.RESOURCES,
        "raylet_registration",
        "Unable to register worker with raylet",
        r"Unable to register worker with raylet",
    ),
    _rule(C.RESOURCES, "no_cuda_gpus", "No CUDA GPUs are available", r"No CUDA GPUs are available"),
    _rule(C.RESOURCES, "invalid_device_ordinal", "invalid device ordinal", r"CUDA error: invalid device ordinal"),
    # -- tracking: SwanLab (and wandb) refusing to start -------------------------------------
    _rule(C.TRACKING, "swanlab_init_failed", "Failed to initialize", r"Failed to initialize (?:the )?SwanLab\b"),
    _rule(
        C.TRACKING,
        "swanlab_auth",
        ("AuthenticationError", "APIKeyFormatError", "Stored API key is for", "API Key"),
        r"swanlab[\w.]{0,100}\.(?:AuthenticationError|APIKeyFormatError)|Stored API key is for '(?P<detail>[^']+)'"
        r"|API Key not provided and interactive mode is disabled|Cannot prompt for API Key in no-tty environment",
    ),
    _rule(C.TRACKING, "wandb_auth", "api_key not configured", r"api_key not configured"),
    # -- host RAM ----------------------------------------------------------------------------
    _rule(
        C.HOST_OOM,
        "ray_memory_monitor",
        "running low on memory",
        r"Task was killed due to the node running low on memory",
    ),
    # Ray's own OutOfMemoryError is the memory monitor, never the GPU. RayTaskError(OutOfMemoryError)
    # does not match here: that is a worker's (torch) error re-raised by Ray.
    _rule(
        C.HOST_OOM, "ray_memory_monitor", "ray.exceptions.OutOfMemoryError", r"\bray\.exceptions\.OutOfMemoryError\b"
    ),
    _rule(
        C.HOST_OOM,
        "raylet_oom_kill",
        "killed due to memory pressure (OOM)",
        r"(?<!\d)(?P<detail>\d+) Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)",
        accept=_positive_count,
    ),
    _rule(
        C.HOST_OOM,
        "kernel_oom_killer",
        ("Killed process", "oom-kill:"),
        r"(?:Memory cgroup out of memory|Out of memory): Killed process (?P<detail>\d+)"
        r"|\boom-kill:constraint=|\bKilled process (?P<d2>\d+) \(\S+\) total-vm",
    ),
    _rule(C.HOST_OOM, "cpu_allocator", "DefaultCPUAllocator", r"DefaultCPUAllocator: can't allocate memory"),
    _rule(C.HOST_OOM, "python_memory_error", "MemoryError", r"^MemoryError\b"),
    _rule(
        C.HOST_OOM,
        "shm_exhausted",
        ("shared memory (shm)", "/dev/shm"),  # noqa: S108 (a log text, not a path we use)
        r"insufficient shared memory \(shm\)|" + first_then(r"/dev/shm", ".*No space left on device"),  # noqa: S108
    ),
    # A bare `Killed` from the shell is SIGKILL, almost always the kernel OOM killer.
    _rule(C.HOST_OOM, "killed_sigkill", "Killed", r"^Killed$|^\S+: line \d+: +\d+ Killed\b"),
    # -- rollout engine (vLLM / SGLang) GPU memory -------------------------------------------
    _rule(C.ROLLOUT_OOM, "vllm_wake_up", "cumem_allocator", r"CUDA Error: out of memory at \S*cumem_allocator"),
    _rule(
        C.ROLLOUT_OOM,
        "vllm_kv_cache",
        "No available memory for the cache blocks",
        r"No available memory for the cache blocks",
    ),
    _rule(
        C.ROLLOUT_OOM,
        "vllm_max_len",
        ("max seq len", "stored in KV cache"),
        r"max seq len \((?P<detail>\d+)\).*KV cache|maximum number of tokens that can be stored in KV cache",
    ),
    _rule(
        C.ROLLOUT_OOM,
        "vllm_startup_memory",
        "less than desired GPU memory utilization",
        first_then("Free memory on device ", ".* less than desired GPU memory utilization"),
    ),
    # verl puts vLLM to sleep before each actor update; vLLM checks that freeing its memory lowered the device's
    # usage. Another process allocating on the same GPU in that window fails the check (H200 harness run,
    # bench/gpu/results/oom-try1): memory pressure on the rollout's GPU, so the rollout share is what to lower.
    _rule(
        C.ROLLOUT_OOM,
        "vllm_sleep_memory_grew",
        "Memory usage increased after sleeping",
        r"Memory usage increased after sleeping",
    ),
    _rule(
        C.ROLLOUT_OOM,
        "sglang_memory",
        "mem-fraction-static",
        r"Not enough memory\. Please try to increase --mem-fraction-static",
    ),
    # vLLM gpu_model_runner `_dummy_sampler_run`: the profiling batch of max_num_seqs requests did not fit.
    _rule(
        C.ROLLOUT_OOM,
        "vllm_sampler_warmup",
        "when warming up sampler",
        r"CUDA out of memory occurred when warming up sampler with (?P<detail>\d+) dummy requests",
    ),
    # SGLang cuda_graph_runner: capture failed for lack of memory ("set --mem-fraction-static to a smaller value").
    _rule(
        C.ROLLOUT_OOM,
        "sglang_cuda_graph",
        "Capture cuda graph failed",
        first_then("Capture cuda graph failed:", ".*(?:out of memory|OutOfMemory)"),
    ),
    # -- training GPU memory (re-filed under rollout_oom when the phase or stack is the rollout) --
    _rule(
        C.GPU_OOM,
        "torch_cuda_oom",
        "out of memory",
        r"(?:CUDA|HIP) out of memory\.(?: Tried to allocate (?P<detail>[\d.]+ [KMGT]iB))?",
    ),
    _rule(C.GPU_OOM, "cuda_error_oom", "CUDA error: out of memory", r"CUDA error: out of memory"),
    _rule(C.GPU_OOM, "cublas_alloc_failed", "CUBLAS_STATUS_ALLOC_FAILED", r"CUBLAS_STATUS_ALLOC_FAILED"),
    _rule(
        C.GPU_OOM,
        "nccl_cuda_oom",
        ("'out of memory'", "Failed to CUDA calloc"),
        r"Cuda failure (?:\d+ )?'out of memory'|Failed to CUDA calloc (?P<detail>\d+) bytes",
    ),
    _rule(
        C.GPU_OOM,
        "torch_cuda_oom",
        "OutOfMemoryError)",
        r"RayTaskError\((?:torch\.)?(?:cuda\.)?OutOfMemoryError\)",
        weak=True,
    ),
    # -- distributed communication ------------------------------------------------------------
    _rule(
        C.NCCL_TIMEOUT,
        "watchdog_timeout",
        "Watchdog caught collective operation timeout",
        r"Watchdog caught collective operation timeout(?:: WorkNCCL\(SeqNum=\d+, OpType=(?P<detail>\w+))?",
    ),
    _rule(
        C.NCCL_TIMEOUT,
        "store_timeout",
        ("Socket Timeout", "DistStoreError"),
        first_then("ncclUniqueId|DistBackendError|DistStoreError|TCPStore|store->get", ".*(?:Socket Timeout|[Tt]imed out)"),
    ),
    # Not timeouts: a communication error (a peer gone, NCCL's own CUDA call failing, the network).
    _rule(
        C.COMM_ERROR,
        "nccl_remote_error",
        "remote process exited",
        r"remote process exited or there was a network error",
    ),
    _rule(C.COMM_ERROR, "nccl_cuda_error", "unhandled cuda error", r"unhandled cuda error"),
    _rule(C.COMM_ERROR, "dist_network_error", "DistNetworkError", r"\bDistNetworkError\b"),
    # -- Ray workers dying without a clearer cause --------------------------------------------
    _rule(
        C.WORKER_DIED,
        "actor_died",
        ("ActorDiedError", "RayActorError", "WorkerCrashedError", "ActorUnavailableError"),
        r"\b(?P<detail>ActorDiedError|RayActorError|WorkerCrashedError|ActorUnavailableError)\b",
    ),
    _rule(
        C.WORKER_DIED,
        "segfault",
        ("Segmentation fault", "SIGSEGV"),
        r"Fatal Python error: Segmentation fault|Segmentation fault \(core dumped\)|\bSIGSEGV received\b",
    ),
    _rule(C.WORKER_DIED, "raylet_worker_died", "worker died or was killed", r"worker died or was killed"),
    _rule(
        C.WORKER_DIED,
        "raylet_workers_crashed",
        "crashed due to other reasons",
        r"(?<!\d)(?P<detail>\d+) Workers? crashed due to other reasons",
        supporting=True,
        accept=_positive_count,
    ),
    # Exception types and the v2 categories (data, reward, checkpoint, accelerator, communication): after
    # the exact anchors above, so a line one of those names keeps its kind.
    *TYPE_RULES,
    # -- recognised, but nothing this tool can fix --------------------------------------------
    _rule(C.UNKNOWN, "illegal_memory_access", "illegal memory access", r"an illegal memory access was encountered"),
    _rule(C.UNKNOWN, "device_side_assert", "device-side assert", r"device-side assert triggered"),
)

# One pass over a line decides whether any rule can apply at all (most lines match none).
ANY_NEEDLE_RE = re.compile("|".join(sorted({re.escape(n) for r in RULES for n in r.needles}, key=len, reverse=True)))

# Priority when several categories match (peers.md §2.1): configuration, environment, data,
# reward and checkpoint errors first (deterministic, the rest is their fallout), then host RAM,
# rollout, training GPU memory, communication / accelerator runtime, dead workers, unknown last.
CATEGORY_PRIORITY: dict[ErrorCategory, int] = {
    C.CONFIG_ERROR: 0,
    C.ENVIRONMENT: 0,
    C.MISSING_FILE: 0,
    C.RESOURCES: 0,
    C.TRACKING: 0,
    C.DATA_ERROR: 0,
    C.REWARD_ERROR: 0,
    C.CHECKPOINT_ERROR: 0,
    C.HOST_OOM: 1,
    C.ROLLOUT_OOM: 2,
    C.GPU_OOM: 3,
    # Communication and the accelerator runtime tie: the earlier (more specific) rule in the table wins.
    C.COMM_ERROR: 4,
    C.ACCELERATOR_ERROR: 4,
    C.NCCL_TIMEOUT: 4,
    C.WORKER_DIED: 5,
    C.UNKNOWN: 6,
}
