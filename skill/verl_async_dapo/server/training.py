"""The training tools: start_training, plan_training (the same launch, dry run) and resume_training.

Thin like the rest of the server: the arguments are the run parameters of ``server.params`` (one per
TrainingSettings field), the decisions are in ``runs`` / ``planning``. start_training and plan_training take
the same arguments (tests/mcp/test_mcp_training_params.py), so what the plan shows is what start launches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, Resolve
from mcp.server.mcpserver.exceptions import ToolError

import verl_async_dapo.server.models as wire
import verl_async_dapo.server.params as sp
from verl_async_dapo.context import AppContext
from verl_async_dapo.server.app import (
    NotAsked,
    app_of,
    can_elicit,
    lazy_module,
    off_loop,
    service_errors,
    tool,
    visible,
)

if TYPE_CHECKING:
    from verl_async_dapo import runs
    from verl_async_dapo.plans import planning
else:
    runs = lazy_module("verl_async_dapo.runs")
    planning = lazy_module("verl_async_dapo.plans.planning")


def _approval_params(verl_home: str | None, reward_fn_path: str | None, ckpt_dir: str | None,
                     overrides: list[str] | None) -> dict[str, Any]:
    return sp.training_params({"verl_home": verl_home, "reward_fn_path": reward_fn_path, "ckpt_dir": ckpt_dir,
                               "overrides": overrides})  # fmt: skip


async def _ask_approval(
    verl_home: sp.VerlHomeArg, reward_fn_path: sp.RewardFnPathArg, ckpt_dir: sp.CkptDirArg,
    overrides: sp.OverridesArg, ctx: Context[AppContext],
) -> Elicit[wire.StartApproval] | NotAsked:
    """Ask the user before a run loads code or writes outside its tree (issue 27): the exact values, in a form the
    model cannot fill in. Without a form the service refuses, naming what the user can do."""
    app = app_of(ctx)
    with service_errors(app):
        lines = await off_loop(runs.approvals_needed, app, _approval_params(verl_home, reward_fn_path, ckpt_dir,
                                                                            overrides))  # fmt: skip
    if not lines:
        return NotAsked("not_needed")
    if not can_elicit(ctx):
        return NotAsked("cannot_ask")
    numbered = " ".join(f"{i}) {line}" for i, line in enumerate(lines, 1))
    return Elicit(f"Start training with these values, which load code or write outside the run's tree? {numbered}",
                  wire.StartApproval)  # fmt: skip


@tool("Start training", read_only=False, idempotent=False, open_world=True)
async def start_training(
    ctx: Context[AppContext],
    approval: Annotated[ElicitationResult[wire.StartApproval], Resolve(_ask_approval)],
    mode: sp.ModeArg = None,
    framework: sp.FrameworkArg = None,
    verl_home: sp.VerlHomeArg = None,
    verl_version: sp.VerlVersionArg = None,
    model_path: sp.ModelPathArg = None,
    train_file: sp.TrainFileArg = None,
    val_file: sp.ValFileArg = None,
    train_steps: sp.TrainStepsArg = None,
    trainer_gpus: sp.TrainerGpusArg = None,
    rollout_gpus: sp.RolloutGpusArg = None,
    n_gpus: sp.NGpusArg = None,
    max_prompt_length: sp.MaxPromptLengthArg = None,
    max_response_length: sp.MaxResponseLengthArg = None,
    train_batch_size: sp.TrainBatchSizeArg = None,
    ppo_mini_batch_size: sp.PpoMiniBatchSizeArg = None,
    n_resp_per_prompt: sp.NRespPerPromptArg = None,
    rollout_tp: sp.RolloutTpArg = None,
    rollout_name: sp.RolloutNameArg = None,
    gpu_memory_utilization: sp.GpuMemArg = None,
    save_freq: sp.SaveFreqArg = None,
    ckpt_dir: sp.CkptDirArg = None,
    project_name: sp.ProjectNameArg = None,
    experiment_name: sp.ExperimentNameArg = None,
    max_oom_retries: sp.MaxOomRetriesArg = None,
    actor_tp: sp.ActorTpArg = None,
    actor_pp: sp.ActorPpArg = None,
    actor_cp: sp.ActorCpArg = None,
    actor_ep: sp.ActorEpArg = None,
    ulysses_sp: sp.UlyssesSpArg = None,
    reward_fn_path: sp.RewardFnPathArg = None,
    reward_fn_name: sp.RewardFnNameArg = None,
    prompt_key: sp.PromptKeyArg = None,
    reward_fn_key: sp.RewardFnKeyArg = None,
    slurm_partition: sp.SlurmPartitionArg = None,
    slurm_account: sp.SlurmAccountArg = None,
    slurm_nodes: sp.SlurmNodesArg = None,
    slurm_gpus_per_node: sp.SlurmGpusPerNodeArg = None,
    slurm_time_limit: sp.SlurmTimeLimitArg = None,
    slurm_sbatch_lines: sp.SlurmSbatchLinesArg = None,
    slurm_startup_seconds: sp.SlurmStartupSecondsArg = None,
    slurm_step_seconds: sp.SlurmStepSecondsArg = None,
    slurm_start_ray: sp.SlurmStartRayArg = None,
    overrides: sp.OverridesArg = None,
    apply_memory_fix: wire.ApplyMemoryFixArg = False,
) -> wire.StartOut:
    """Starts training once all setup questions are answered: runs preflight checks, freezes the
    answers into a run and hands it to a background supervisor, then returns at once with the run
    id and the SwanLab link (or why there is none yet). Every run parameter can be given here;
    omitted ones come from the server's environment, else the original skill's defaults.
    plan_training shows the exact launch for the same arguments without starting anything. When
    preflight finds the GPUs cannot hold the run (vLLM's share beside other processes, the estimated
    peak), nothing starts and the fix is named; apply_memory_fix=true applies it once the user agreed.
    Overrides or parameters that load code (a reward function, custom classes, external libs,
    trust_remote_code) or write outside the run's tree are shown to the user in a form to approve;
    the trainer's environment, Ray's address and tracker destinations are refused."""
    app = app_of(ctx)
    params = sp.training_params(locals())
    data = approval.data if isinstance(approval, AcceptedElicitation) else None
    if not isinstance(data, (wire.StartApproval, NotAsked)) or (isinstance(data, wire.StartApproval)
                                                                 and not data.approve):  # fmt: skip
        raise ToolError("not started: the user declined the values shown in the approval form; nothing was changed")
    with service_errors(app):
        # What the user approved is what the form showed: the same items, from the same arguments.
        approved = await off_loop(runs.approval_texts, app, params) if isinstance(data, wire.StartApproval) else ()
        result = await off_loop(runs.start_training, app, params, apply_memory_fix=apply_memory_fix,
                                approved=approved)  # fmt: skip
    out = wire.StartOut.model_validate({**result.model_dump(), "next_step": wire.START_NEXT_STEP})
    out.preflight = [visible(line) for line in out.preflight]  # scrubbed by the service
    return out


@tool("Plan training", read_only=True, idempotent=True, open_world=False)
async def plan_training(
    ctx: Context[AppContext],
    mode: sp.ModeArg = None,
    framework: sp.FrameworkArg = None,
    verl_home: sp.VerlHomeArg = None,
    verl_version: sp.VerlVersionArg = None,
    model_path: sp.ModelPathArg = None,
    train_file: sp.TrainFileArg = None,
    val_file: sp.ValFileArg = None,
    train_steps: sp.TrainStepsArg = None,
    trainer_gpus: sp.TrainerGpusArg = None,
    rollout_gpus: sp.RolloutGpusArg = None,
    n_gpus: sp.NGpusArg = None,
    max_prompt_length: sp.MaxPromptLengthArg = None,
    max_response_length: sp.MaxResponseLengthArg = None,
    train_batch_size: sp.TrainBatchSizeArg = None,
    ppo_mini_batch_size: sp.PpoMiniBatchSizeArg = None,
    n_resp_per_prompt: sp.NRespPerPromptArg = None,
    rollout_tp: sp.RolloutTpArg = None,
    rollout_name: sp.RolloutNameArg = None,
    gpu_memory_utilization: sp.GpuMemArg = None,
    save_freq: sp.SaveFreqArg = None,
    ckpt_dir: sp.CkptDirArg = None,
    project_name: sp.ProjectNameArg = None,
    experiment_name: sp.ExperimentNameArg = None,
    max_oom_retries: sp.MaxOomRetriesArg = None,
    actor_tp: sp.ActorTpArg = None,
    actor_pp: sp.ActorPpArg = None,
    actor_cp: sp.ActorCpArg = None,
    actor_ep: sp.ActorEpArg = None,
    ulysses_sp: sp.UlyssesSpArg = None,
    reward_fn_path: sp.RewardFnPathArg = None,
    reward_fn_name: sp.RewardFnNameArg = None,
    prompt_key: sp.PromptKeyArg = None,
    reward_fn_key: sp.RewardFnKeyArg = None,
    slurm_partition: sp.SlurmPartitionArg = None,
    slurm_account: sp.SlurmAccountArg = None,
    slurm_nodes: sp.SlurmNodesArg = None,
    slurm_gpus_per_node: sp.SlurmGpusPerNodeArg = None,
    slurm_time_limit: sp.SlurmTimeLimitArg = None,
    slurm_sbatch_lines: sp.SlurmSbatchLinesArg = None,
    slurm_startup_seconds: sp.SlurmStartupSecondsArg = None,
    slurm_step_seconds: sp.SlurmStepSecondsArg = None,
    slurm_start_ray: sp.SlurmStartRayArg = None,
    overrides: sp.OverridesArg = None,
    oom_step: sp.OomStepArg = 0,
) -> sp.PlanOut:
    """Dry run of start_training with the same arguments: the exact launch (entry, argv, Hydra
    overrides, environment with secrets as names only), the features, where each parameter and
    each override value came from (argument / environment / default; recipe / feature / oom_ladder /
    user) and what is still assumed (e.g. questions not answered yet). Starts and stores nothing."""
    app = app_of(ctx)
    args: dict[str, Any] = dict(locals())
    with service_errors(app):
        data = await off_loop(planning.plan_training, app, sp.training_params(args), oom_step=oom_step)
    return sp.PlanOut.model_validate(data)


@tool("Resume training", read_only=False, idempotent=False, open_world=True)
async def resume_training(ctx: Context[AppContext], run_id: wire.RunId = None,
                          force: sp.ResumeForceArg = False) -> sp.ResumeOut:  # fmt: skip
    """Continues a failed or stopped run from its last checkpoint, as a new attempt of the same run
    with the same answers and parameters (a background supervisor launches it; returns at once).
    Omitted run_id = the current session's run, else the latest. A run that failed for a reason its
    frozen answers cannot change (SwanLab key, a missing file, a config error) is refused with what to
    change; force=true resumes anyway once the cause is fixed outside the run's answers."""
    app = app_of(ctx)
    with service_errors(app):
        return sp.ResumeOut.model_validate(await off_loop(runs.resume_run, app, run_id, force=force))
