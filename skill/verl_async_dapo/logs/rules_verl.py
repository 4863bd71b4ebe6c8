"""Rules for verl's own checks and for libraries whose versions do not fit (pure data).

Each anchor comes from a real log in tests/logs/corpus (the file names say which); they run
before the generic table in ``rules.py`` because they are exact. The rollout-memory rules
stay in ``rules.py``.
"""

from __future__ import annotations

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.logs.rule_base import Rule, first_then, make_rule

C = ErrorCategory

# Findings that are reported while training goes on; their own explanation and fix replace
# the category's (which describe a run that failed).
NONFATAL_NOTES: dict[str, tuple[str, str]] = {
    "swanlab_api_error": (
        "SwanLab rejected metric uploads while training went on: the run continues, but its "
        "metrics are not reaching the SwanLab project.",
        "check the SwanLab key and host with configure_swanlab (a key for another host answers "
        "401); the next run picks up the fix, this one keeps training",
    ),
}

VERL_RULES: tuple[Rule, ...] = (
    # -- verl's own checks, with the key named when the message names it ---------------------
    make_rule(
        C.CONFIG_ERROR,
        "verl_validation",
        "Please increase",
        r"Please increase (?P<detail>(?:actor_rollout_ref\.)?rollout\.[\w.]+)",
    ),
    make_rule(
        C.CONFIG_ERROR,
        "verl_validation",
        ("is not divisible by", "is too large to fit in the bucket"),
        r"^(?:[\w.]+\.)?AssertionError: (?P<detail>.*(?:is not divisible by|is too large to fit in the bucket).*)",
    ),
    # Parallel sizes that do not fit the GPUs: torch cannot lay out the device mesh.
    make_rule(
        C.CONFIG_ERROR,
        "device_mesh",
        "cannot reshape tensor of 0 elements",
        r"^RuntimeError: cannot reshape tensor of 0 elements into shape",
    ),
    # An actor whose constructor raised: the real exception is printed right under it.
    make_rule(
        C.WORKER_DIED,
        "actor_creation_failed",
        "error raised in its creation task",
        r"\bActorDiedError: The actor died because of an error raised in its creation task",
        weak=True,
    ),
    # Ray's header over an actor's death: the line under it says how it died.
    make_rule(
        C.WORKER_DIED,
        "actor_died",
        ("RayTaskError(ActorDiedError)", "RayTaskError(RayActorError)"),
        r"RayTaskError\((?:ActorDiedError|RayActorError)\)",
        weak=True,
    ),
    # -- library versions that do not fit together ---------------------------------------------
    make_rule(
        C.ENVIRONMENT,
        "vllm_engine_mismatch",
        "VLLM_USE_V1",
        r"Using V1 (?:Async)?LLMEngine, but envs\.VLLM_USE_V1=(?P<detail>\w+)",
    ),
    # mbridge 0.15.1 (verl's legacy Megatron bridge, vanilla_mbridge=True) against a megatron-core that no longer
    # has the enum member it compares with (H200, megatron-core 0.19.2).
    make_rule(
        C.ENVIRONMENT,
        "mbridge_megatron_version",
        "type object 'ModelType' has no attribute",
        r"AttributeError: type object 'ModelType' has no attribute '(?P<detail>\w+)'",
    ),
    make_rule(
        C.ENVIRONMENT,
        "datasets_version",
        "Available feature types",
        r"Feature type '(?P<detail>\w+)' not found\. Available feature types",
    ),
    make_rule(
        C.ENVIRONMENT,
        "tensordict_version",
        "TensorDict does not support membership checks",
        r"TensorDict does not support membership checks",
    ),
    make_rule(
        C.ENVIRONMENT,
        "flash_attn_gpu_arch",
        "FlashAttention only supports",
        r"FlashAttention only supports (?P<detail>Ampere GPUs or newer)",
    ),
    # The traceback frame names the failing step (the log often ends in a bare CalledProcessError).
    make_rule(
        C.ENVIRONMENT,
        "triton_compile",
        "compile_module_from_src",
        r'^File "[^"]*triton[^"]*", line \d+, in compile_module_from_src$',
    ),
    # A flattened traceback puts the import error mid-line; "cannot import name … from …" is
    # specific enough to trust there (handled import failures say "Failed to import …").
    make_rule(
        C.ENVIRONMENT,
        "import_error",
        "cannot import name",
        r"\bImportError: cannot import name '(?P<detail>\w+)' from '(?P<d2>[\w.]+)'",
    ),
    # Ray's wrapper header when the inner import error was cut off.
    make_rule(
        C.ENVIRONMENT,
        "import_error",
        ("RayTaskError(ImportError)", "RayTaskError(ModuleNotFoundError)"),
        r"RayTaskError\((?:ImportError|ModuleNotFoundError)\)",
        weak=True,
    ),
    # -- missing files ---------------------------------------------------------------------------
    make_rule(
        C.MISSING_FILE,
        "model_files_missing",
        "Error no file named",
        first_then("Error no file named ", r"(?P<d2>.+?) found in directory (?P<detail>\S+?)\.?$"),
    ),
    # Newer huggingface_hub prints the message without the path; verl passes a local path there.
    make_rule(
        C.MISSING_FILE,
        "model_path_not_found",
        "Repo id must be in the form",
        r"HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name':\s*$",
    ),
    # -- trackers failing while training goes on ------------------------------------------------
    make_rule(
        C.TRACKING,
        "swanlab_api_error",
        "swanlab api error",
        r"^swanlab: swanlab api error(?:, status code: (?P<detail>\d+)|.*'(?P<d2>\d{3} [\w ]+)'\))",
        nonfatal=True,
    ),
)
