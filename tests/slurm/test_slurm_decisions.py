"""The SLURM target's decisions, in-process (no scheduler needed): parameter validation, the sbatch argv, what
squeue/sacct/sinfo output means, the scheduler-kill category, the queued phase, and the batch script itself
(verl's ray_on_slurm steps in order; shellcheck clean)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from verl_async_dapo import slurm_options as so
from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.exceptions import ParamError
from verl_async_dapo.logs import phases
from verl_async_dapo.logs.progress import ProgressParser
from verl_async_dapo.settings import settings_with_values
from verl_async_dapo.supervisor.attempt_log import scheduler_outcome
from verl_async_dapo.targets.slurm import script, states
from verl_async_dapo.watchman.stall import StallSettings, StallTracker


@pytest.mark.parametrize(("text", "seconds"), [("1", 60), ("90", 5400), ("2:30", 150), ("01:00:00", 3600),
                                                ("1-0", 86400), ("1-02:03", 93780), ("1-02:03:04", 93784)])  # fmt: skip
def test_time_limits_read_as_sbatch_reads_them(text: str, seconds: int) -> None:
    assert so.time_limit_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "0:30", "1h", "-5", "1:2:3:4", "1;rm -rf /", "$(id)"])
def test_bad_time_limits_are_refused(text: str) -> None:
    with pytest.raises(so.SlurmOptionError):
        so.time_limit_seconds(text)


def test_extra_lines_become_one_argv_element_each() -> None:
    opts = so.SlurmOptions(extra_lines=("#SBATCH --cpus-per-task=64", "#SBATCH --exclusive", "#SBATCH --mem=200G"))
    argv = opts.argv(job_name="vad-x", log_path="/l/train.log", cwd="/v", script="/j/job.sbatch", job_dir="/j")
    assert argv[-2:] == ["/j/job.sbatch", "/j"]
    assert {"--cpus-per-task=64", "--exclusive", "--mem=200G", "--open-mode=append", "--output=/l/train.log",
            "--no-requeue", "--nodes=1", "--ntasks-per-node=1"} <= set(argv)  # fmt: skip
    assert not any(a.startswith("--gpus-per-node") or a.startswith("--partition") for a in argv)  # cluster defaults


@pytest.mark.parametrize("line", [
    "#SBATCH --output=/tmp/x", "#SBATCH --export=ALL,TOKEN=x", "#SBATCH --wrap=id", "#SBATCH --partition=gpu",
    "#SBATCH -p gpu", "#SBATCH --comment=$(id)", "#SBATCH --comment=a b", "#SBATCH --comment=`id`",
    "#SBATCH --mail-user=x;id", "--mem=1G", "#SBATCH --mem=1G\n#SBATCH --wrap=id", "#SBATCH --time=1",
])  # fmt: skip
def test_extra_lines_outside_the_allow_list_are_refused(line: str) -> None:
    with pytest.raises(so.SlurmOptionError):
        so.sbatch_line_option(line)


def test_settings_refuse_bad_slurm_parameters_naming_them() -> None:
    with pytest.raises(ParamError) as bad:
        settings_with_values({"slurm_partition": "gpu;id"})
    assert "slurm_partition" in str(bad.value)
    with pytest.raises(ParamError, match="--export is set by this tool"):
        settings_with_values({"slurm_sbatch_lines": ("#SBATCH --export=NONE",)})
    ok = settings_with_values({"slurm_nodes": 2, "trainer_gpus": 4, "rollout_gpus": 4, "slurm_time_limit": "4:00:00"})
    opts = so.options_from_settings(ok)
    assert (opts.nodes, opts.gpus_per_node, opts.start_ray) == (2, 4, True)  # 8 GPUs over 2 nodes; Ray across them
    assert so.options_from_settings(settings_with_values({"slurm_start_ray": True})).start_ray  # one node, our Ray
    with pytest.raises(ParamError, match="slurm_start_ray=false needs slurm_nodes=1"):
        settings_with_values({"slurm_nodes": 2, "slurm_start_ray": False})


def test_a_time_limit_shorter_than_one_checkpoint_interval_is_a_problem() -> None:
    opts = so.SlurmOptions(time_limit="9:59", startup_seconds=300, step_seconds=60)
    problem = so.time_limit_problem(opts, save_freq=5)
    assert problem is not None and "(599 s)" in problem and "300 s + save_freq 5 x 60 s a step = 600 s" in problem
    assert so.time_limit_problem(so.SlurmOptions(time_limit="10", step_seconds=60), save_freq=5) is None  # 600 s: enough
    assert so.time_limit_problem(so.SlurmOptions(), save_freq=5) is None  # the partition's limit: not ours to judge


def test_job_names_are_stable_per_attempt_dir_and_distinct() -> None:
    a = so.job_name_for("/v/.verl-async-dapo/runs/run_x/attempt-1")
    assert a == so.job_name_for("/v/.verl-async-dapo/runs/run_x/attempt-1") != so.job_name_for("/v/runs/run_x/attempt-2")
    assert re.fullmatch(r"vad-run_x-attempt-1-[0-9a-f]{10}", a)


def test_squeue_sacct_and_sinfo_outputs() -> None:
    assert states.parse_squeue("PENDING|BeginTime\n") == states.JobState("PENDING", "BeginTime")
    assert states.parse_squeue("") is None
    # "0:15": no exit status, killed by signal 15 (a cancel) -- never read as a success.
    assert states.parse_sacct("CANCELLED by 0|0:15|None\n") == states.JobState("CANCELLED", None, 143)
    assert (states.exit_code_of("0:0"), states.exit_code_of("1:0"), states.exit_code_of("0:9")) == (0, 1, 137)
    assert states.parse_sacct("FAILED|1:0|NonZeroExitCode") == states.JobState("FAILED", "NonZeroExitCode", 1)
    assert states.parse_job_id("1234\n") == "1234" and states.parse_job_id("1234;cluster") == "1234"
    assert states.parse_job_id("sbatch: error: x") is None
    parts = states.parse_sinfo("gpu*|up|2|gpu:h100:8(S:0-1)|2-00:00:00\ngpu*|up|1|gpu:4|2-00:00:00\ncpu|up|4|(null)|1:00:00")
    assert [(p.name, p.default, p.nodes, p.gpus_per_node) for p in parts] == [("gpu", True, 3, 8), ("cpu", False, 4, 0)]


@pytest.mark.parametrize(("state", "kind"), [("TIMEOUT", "time_limit"), ("PREEMPTED", "preempted"),
                                             ("NODE_FAIL", "node_fail"), ("CANCELLED", "cancelled")])  # fmt: skip
def test_a_job_the_scheduler_ended_is_a_scheduler_kill(state: str, kind: str) -> None:
    log = ("Training Progress: 40%\nslurmstepd-vm: error: *** JOB 5 ON vm CANCELLED AT 2026-12-01T22:54:04 DUE TO "
           "TIME LIMIT ***\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")  # fmt: skip
    error = scheduler_outcome(state, log, 143, lambda s: s)
    assert error is not None and (error.category, error.kind) == ("scheduler_kill", kind)
    assert error.excerpt is not None and "DUE TO TIME LIMIT" in error.excerpt  # the scheduler's own line
    fix = CATEGORY_INFO[ErrorCategory.SCHEDULER_KILL].fix
    assert "requeue from the last checkpoint" in fix and "longer" in fix


def test_other_final_states_are_judged_by_the_log() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert scheduler_outcome("FAILED", oom, 1, lambda s: s).category == "gpu_oom"  # type: ignore[union-attr]
    assert scheduler_outcome(None, oom, 1, lambda s: s).category == "gpu_oom"  # type: ignore[union-attr]
    host = scheduler_outcome("OUT_OF_MEMORY", "bye\n", 137, lambda s: s)
    assert host is not None and (host.category, host.kind) == ("host_oom", "slurm_out_of_memory")
    assert states.scheduler_kill(states.JobState("CANCELLED"), stopped_by_us=True) is None
    assert states.scheduler_kill(states.JobState("RUNNING"), stopped_by_us=False) is None


def test_queued_is_a_phase_until_the_job_starts() -> None:
    parser = ProgressParser()
    parser.feed(script.queued_line("vad-x", "partition gpu"), now=100.0)
    assert parser.snapshot().phase == "queued"
    parser.feed("[verl-async-dapo] started: SLURM job 7 on 1 node(s): vm\n", now=200.0)
    assert (parser.snapshot().phase, parser.snapshot().phase_since) == ("starting", 200.0)
    parser.feed("ray init kwargs: {'num_cpus': None}\n", now=201.0)
    assert parser.snapshot().phase == "starting Ray"
    late = ProgressParser()  # a later "queued" line never moves a started job back
    late.feed("ray init kwargs: {}\n" + script.queued_line("vad-x", "p"))
    assert late.snapshot().phase == "starting Ray"
    # The markers the target and the script print are the ones the phase parser reads.
    assert (script.QUEUED_MARK, script.STARTED_MARK) == (phases._QUEUED_MARK, phases._JOB_STARTED_MARK)
    assert script.STARTED_MARK in script.BATCH_SCRIPT


def test_the_stall_clock_restarts_while_queued() -> None:
    tracker = StallTracker(StallSettings(min_seconds=1, startup_seconds=1), started_at=0.0)
    assert tracker.newly_stalled(5.0)  # silent past the window: a stall ...
    tracker.flagged_at = None
    tracker.queued(5.0)  # ... unless the scheduler says the job is still pending
    assert not tracker.newly_stalled(5.5) and tracker.newly_stalled(6.5)


# verl's recipe, examples/tutorial/slurm/ray_on_slurm.slurm
# (https://github.com/verl-project/verl/blob/main/examples/tutorial/slurm/ray_on_slurm.slurm), its steps in order:
RECIPE_STEPS = (
    r'mapfile -t \w+ < <\(scontrol show hostnames "\$SLURM_JOB_NODELIST"\)',  # the allocation's nodes
    r"head_node=\$\{nodes\[0\]\}",  # the first is the head
    r'srun --overlap --nodes=1 --ntasks=1 -w "\$head_node" hostname --ip-address',  # its address
    r'srun --overlap --nodes=1 --ntasks=1 -w "\$head_node" \\\n\s+ray start --head --node-ip-address="\$head_ip" '
    r'--port="\$port" \\\n\s+--num-cpus="\$cpus" --num-gpus="\$gpus" --block &',  # the head, in the background
    r"for \(\(i = 1; i < node_count; i\+\+\)\)",  # every other node ...
    r'srun --overlap --nodes=1 --ntasks=1 -w "\$\{nodes\[i\]\}" \\\n\s+ray start --address="\$ip_head" '
    r'--num-cpus="\$cpus" --num-gpus="\$gpus" --block &',  # ... gets a worker
    r"until alive=.*ray\.nodes\(\)",  # wait for them (the recipe sleeps)
    r'srun --overlap --nodes=1 --ntasks=1 -w "\$head_node" -- "\$\{argv\[@\]\}"',  # the trainer on the head node
)


def test_the_batch_script_follows_verls_ray_on_slurm_steps_in_order() -> None:
    position = 0
    for step in RECIPE_STEPS:
        found = re.compile(step).search(script.BATCH_SCRIPT, position)
        assert found is not None, f"step {step!r} missing (or out of order) after offset {position}"
        position = found.end()
    # Ray is started across the allocation only for several nodes (one node: verl's ray.init, as on the host).
    assert so.SlurmOptions(nodes=1).start_ray is False and so.SlurmOptions(nodes=3).start_ray is True
    assert 'if [[ ${VAD_SLURM_JOB_RAY:-0} == 1 ]]' in script.BATCH_SCRIPT


def test_the_batch_script_is_shellcheck_clean(tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (tests/harness/ensure_docker.sh installs it)")
    path = tmp_path / "job.sbatch"
    path.write_text(script.BATCH_SCRIPT, "utf-8")
    done = subprocess.run(["shellcheck", "--shell=bash", "--severity=style", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_records_round_trip_the_way_bash_reads_them(tmp_path: Path) -> None:
    argv = ["python3", "-c", "x", "a b", "$(id)", "'\";`id`", ""]
    (tmp_path / "argv").write_bytes(script.nul_records(argv))
    done = subprocess.run(["bash", "-c", 'mapfile -d "" -t a <"$1"; printf "%s\\n" "${#a[@]}"; printf "<%s>" "${a[@]}"',
                           "sh", str(tmp_path / "argv")], capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    count, shown = done.stdout.split("\n", 1)
    assert int(count) == len(argv) and shown == "".join(f"<{a}>" for a in argv)


def _plan_overrides(target_kind: str, **values: object) -> list[str]:
    from verl_async_dapo.plans.planning import DEFAULT_PLAN_VERSION, features_answer, preview

    s = settings_with_values(values)
    plan = preview(settings=s, sources={}, features=features_answer(s.feature_choice()), proxy_values={},
                   swanlab=None, target=(target_kind, target_kind), verl_version=DEFAULT_PLAN_VERSION)  # fmt: skip
    return [o for o in plan["overrides"] if o.startswith(("trainer.nnodes=", "trainer.n_gpus_per_node="))]


def test_several_slurm_nodes_become_verls_nnodes_on_the_slurm_target_only() -> None:
    assert _plan_overrides("slurm", slurm_nodes=2, trainer_gpus=4, rollout_gpus=4) == [
        "trainer.nnodes=2", "trainer.n_gpus_per_node=4"]  # fmt: skip
    # The same parameter in the server's environment must not make a host run plan two nodes.
    assert _plan_overrides("host", slurm_nodes=2, trainer_gpus=4, rollout_gpus=4) == [
        "trainer.nnodes=1", "trainer.n_gpus_per_node=8"]  # fmt: skip
    from verl_async_dapo.exceptions import PlanError

    with pytest.raises(PlanError, match="split evenly"):
        _plan_overrides("slurm", slurm_nodes=3, trainer_gpus=2, rollout_gpus=2)
    with pytest.raises(PlanError, match="one_step_off_policy across several SLURM nodes"):
        _plan_overrides("slurm", slurm_nodes=2, mode="one_step_off_policy", trainer_gpus=2, rollout_gpus=2)
