"""The tools' argument types: validated at the boundary (names, run ids, proxies, SwanLab), and the elicitation forms."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from verl_async_dapo.features import FEATURE_ORDER

if TYPE_CHECKING:
    from verl_async_dapo.sessions import CreateSpec

# Docker's own container-name rule (targets.base.CONTAINER_NAME_RE); checked here too so a
# name with shell metacharacters is refused before any service runs.
CONTAINER_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$"
RUN_ID_PATTERN = r"^run_[A-Za-z0-9_-]{1,60}$"
FEATURE_NAMES_TEXT = ", ".join(f.value for f in FEATURE_ORDER)


# -- inputs --------------------------------------------------------------------------------

ContainerName = Annotated[
    str,
    Field(
        pattern=CONTAINER_NAME_PATTERN,
        max_length=128,
        description="Container name (letters, digits, '_', '.', '-'), or 'host' for this machine without Docker",
    ),
]
RunId = Annotated[
    str | None,
    Field(
        default=None,
        pattern=RUN_ID_PATTERN,
        description="Run id from start_training (run_…); omitted = the current session's run, else the latest",
    ),
]
ProxyUrl = Annotated[
    str | None,
    Field(
        default=None,
        max_length=2048,
        description='Proxy URL such as http://proxy.example:8080 (schemes http, https, socks5); empty or "无"/"none" = no proxy',
    ),
]


NoProxy = Annotated[
    str | None, Field(max_length=4096, description="Comma-separated hosts/domains/CIDRs that bypass the proxy")
]
FeatureNames = Annotated[
    list[Annotated[str, Field(max_length=64)]],
    Field(
        max_length=32,
        description=f"Feature names ({FEATURE_NAMES_TEXT}); no_<name> turns a default one off; "
        '[] or ["default"] = the defaults (flash_attn, dynamic_batch, remove_padding, gradient_checkpointing)',
    ),
]
SwanlabModeName = Literal["cloud", "local", "disabled"]
SwanlabModeArg = Annotated[
    SwanlabModeName | None,
    Field(
        description="cloud (a SwanLab server; needs a key), local (files only) or disabled; "
        "omitted with no host/key = report the current setting"
    ),
]
SwanlabHost = Annotated[
    str | None,
    Field(max_length=2048, description="Self-hosted SwanLab server, e.g. http://10.0.0.5:8000; omitted = swanlab.cn"),
]
SwanlabKey = Annotated[
    str | None,
    Field(
        max_length=512,
        description="SwanLab API key; omitted = asked from the user in a form where supported",
        json_schema_extra={"writeOnly": True},
    ),
]
SwanlabLogDir = Annotated[str | None, Field(max_length=4096, description="SWANLAB_LOG_DIR (local mode)")]
SwanlabSave = Annotated[
    bool, Field(description="Also store the setting in the user's SwanLab config file (0600) for later sessions")
]
class CreateContainerIn(BaseModel):
    """A new training container: GPUs, shared memory and ulimits as verl needs them, otherwise confined."""

    model_config = ConfigDict(extra="forbid")

    name: ContainerName
    image: Annotated[
        str, Field(min_length=1, max_length=512, description="Image reference, e.g. verlai/verl:vllm011.latest")
    ]
    gpus: Annotated[
        str,
        Field(
            max_length=512,
            pattern=r"^(all|none|[A-Za-z0-9,/-]+)$",
            description='"all", "none", or comma-separated device ids such as "0,1,2,3"',
        ),
    ] = "all"
    shm_size: Annotated[
        str | None,
        Field(max_length=16, pattern=r"^[1-9][0-9]{0,12}[bkmgBKMG]?$", description="shared-memory size, e.g. 64g; omitted = 10g"),
    ] = None
    mounts: Annotated[
        dict[Annotated[str, Field(max_length=4096)], Annotated[str, Field(max_length=4096)]],
        Field(
            max_length=16,
            description="Host directory → container directory (absolute paths). Read-only unless listed in "
            "writable. System and home directories and anything holding the Docker socket are refused; "
            "directories outside the allow-list need the user's confirmation",
        ),
    ] = {}
    writable: Annotated[
        list[Annotated[str, Field(max_length=4096)]],
        Field(max_length=16, description="Container directories of mounts that training writes (checkpoints)"),
    ] = []
    network: Annotated[
        Literal["bridge", "none"],
        Field(description="The container's own network (bridge) or none; the host's network is the host_network "
                          "privilege"),
    ] = "bridge"  # fmt: skip
    privileges: Annotated[
        list[Literal["sys_ptrace", "sys_admin", "host_network", "host_ipc", "host_pid"]],
        Field(max_length=5, description="Extra privileges beyond the confined default (no added capabilities, "
              "no-new-privileges, Docker's seccomp profile, its own IPC/PID namespaces, 10g /dev/shm). Each is asked "
              "of the user in a form and named in the answer; only when the user wants one"),
    ] = []  # fmt: skip

    def to_spec(self) -> CreateSpec:
        from verl_async_dapo.sessions import CreateSpec

        return CreateSpec(name=self.name, image=self.image, gpus=self.gpus, shm_size=self.shm_size,
                          mounts=dict(self.mounts), writable=tuple(self.writable), network_mode=self.network,
                          privileges=tuple(self.privileges))  # fmt: skip


TargetName = Annotated[
    str,
    Field(
        pattern=r"^(ray:)?" + CONTAINER_NAME_PATTERN.lstrip("^"),
        max_length=132,
        description="An existing container, 'host' for this machine, or 'ray:<cluster>' for a configured Ray cluster",
    ),
]
ContainerChoice = Annotated[
    TargetName | None, Field(description="An existing target from list_containers: container, 'host' or 'ray:<name>'")
]
CreateArg = Annotated[CreateContainerIn | None, Field(description="Create (and start) a new container instead")]
AllowSharedGpus = Annotated[
    bool, Field(description="Accept a target where another run of this tool is training (shares its GPUs)")
]
AllowNoGpus = Annotated[
    bool,
    Field(description="Accept a target where no GPU is visible (training needs GPUs: only when the user explicitly "
                      "wants to run without, e.g. a CPU-only test); otherwise preflight refuses it"),
]
ApplyMemoryFixArg = Annotated[bool, Field(description="The user agreed to preflight's GPU-memory fix (a lower "
                                  "rollout share, memory features): apply it, then start")]  # fmt: skip
ChartArg = Annotated[bool, Field(description="Also return a PNG chart of the run's curves (per attempt)")]
ConfirmArg = Annotated[
    bool, Field(description="The user confirmed stopping; needed only when the client cannot show a form")
]
class ContainerConfirmation(BaseModel):
    """The form shown before a container is created with mounts outside the allow-list or extra privileges (flat)."""

    create: bool = Field(description="Create the container with these mounts and privileges")


class StartApproval(BaseModel):
    """The form shown before a run starts with overrides or parameters that load code or write outside its tree."""

    approve: bool = Field(description="Start training with exactly these values")


class StopConfirmation(BaseModel):
    """The form shown to the user before a run is stopped (flat: elicitation allows primitives only)."""

    stop: bool = Field(description="Stop the training run now (checkpoints already written are kept)")


class SwanlabKeyForm(BaseModel):
    """The form that asks the user for the SwanLab API key directly (the model never sees the answer)."""

    api_key: str = Field(min_length=1, max_length=512, description="SwanLab API key (Settings → API Key)")
