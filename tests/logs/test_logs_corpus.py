"""The real-log corpus: its size and sources, its figure, and the classes real logs taught the classifier.

Every file in tests/logs/corpus is a real log (trimmed, never edited) whose first line is
``source: …``; what it should be classified as is in the corpus index (INDEX.tsv, by a human
reading). The corpus is split by source (SPLIT.json, seeded): the figure asserted here is the
train split's; the held-out test split is scored by test_logs_corpus_heldout.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.logs.classify import classify
from verl_async_dapo.logs.corpus_eval import (
    expected_from_name,
    figure,
    judge,
    parse_index,
    render,
    source_key,
    source_of,
)

CORPUS = Path(__file__).parent / "corpus"
INDEX = parse_index((CORPUS / "INDEX.tsv").read_text(encoding="utf-8"))
TEST_SOURCES = frozenset(json.loads((CORPUS / "SPLIT.json").read_text(encoding="utf-8"))["test_sources"])
REAL = sorted(CORPUS / name for name in INDEX)
H200_SOURCE = "verl-async-dapo H200 run, verl 0.9.1 + vLLM 0.24.0, 2026-12-01"
MIN_REAL_LOGS = 150
MIN_SOURCES = 40
MAX_SOURCE_SHARE = 0.10
MIN_SHARE_RIGHT = 0.95


def _text(name: str) -> str:
    return (CORPUS / f"{name}.log").read_text(encoding="utf-8")


def _key(path: Path) -> str:
    return source_key(source_of(path.read_text(encoding="utf-8")) or "")


def train_verdicts() -> list:
    return [judge(p.stem, p.read_text(encoding="utf-8"), INDEX[p.name]) for p in REAL if _key(p) not in TEST_SOURCES]


def test_every_corpus_log_is_indexed_and_names_its_source() -> None:
    on_disk = {p.name for p in CORPUS.glob("*.log")}
    assert on_disk == set(INDEX)
    assert len(REAL) >= MIN_REAL_LOGS
    for path in REAL:
        source = source_of(path.read_text(encoding="utf-8"))
        assert source is not None, path.name
        assert source.startswith("https://github.com/") or source == H200_SOURCE, path.name


def test_the_corpus_has_enough_sources_and_none_is_over_a_tenth() -> None:
    counts = Counter(_key(p) for p in REAL)
    assert len(counts) >= MIN_SOURCES
    source, most = counts.most_common(1)[0]
    assert most <= MAX_SOURCE_SHARE * len(REAL), (source, most, len(REAL))


def test_the_split_is_by_source_and_a_third_of_the_new_sources_are_held_out() -> None:
    split = json.loads((CORPUS / "SPLIT.json").read_text(encoding="utf-8"))
    keys = {_key(p) for p in REAL}
    assert set(split["test_sources"]) | set(split["train_sources"]) == keys
    assert not set(split["test_sources"]) & set(split["train_sources"])
    assert split["seed"] == 20261201
    held_out = [p for p in REAL if _key(p) in TEST_SOURCES]
    assert len(held_out) >= 30


def test_real_corpus_covers_healthy_runs_and_every_category() -> None:
    labels = Counter((INDEX[p.name].category or "none") for p in REAL)
    assert labels["none"] >= 20
    # "stalled" is found by the supervisor from silence, "scheduler_kill" from SLURM's job state, never in a log's
    # text: no log can carry them.
    missing = {c.value for c in ErrorCategory} - set(labels) - {"stalled", "scheduler_kill"}
    assert not missing


def test_classifier_is_right_on_at_least_95_percent_of_the_train_split() -> None:
    verdicts = train_verdicts()
    table = figure(verdicts)
    right, total = table["all"]
    wrong = [f"{v.name} -> {v.got_category}/{v.got_kind}" for v in verdicts if not v.right]
    assert right / total >= MIN_SHARE_RIGHT, "\n".join([render(table), *wrong])


def test_the_figure_counts_a_wrong_answer_as_wrong() -> None:
    healthy = judge("none__x", _text("config_error__verl_validation__infer_tp_not_divisible"))
    assert not healthy.right and healthy.got_category == "config_error"
    table = figure([healthy, judge("none__y", "all good\n")])
    assert table["none"] == (1, 2) and table["all"] == (1, 2)
    with pytest.raises(ValueError, match="category"):
        expected_from_name("gpu_oom_no_kind")


# -- the classes real logs taught ---------------------------------------------------------------


def test_h200_healthy_runs_are_healthy_and_the_startup_one_is_rollout_oom() -> None:
    for name in ("none__h200_dapo_fsdp_healthy_6_steps", "none__h200_dapo_fsdp_relaunch_gpu_util_0_5"):
        assert source_of(_text(name)) == H200_SOURCE
        assert classify(_text(name)).primary is None, name
    primary = classify(_text("rollout_oom__vllm_startup_memory__h200_attempt1")).primary
    assert primary is not None and primary.category is ErrorCategory.ROLLOUT_OOM
    assert "less than desired GPU memory utilization" in primary.message


def test_h200_megatron_logs_name_the_key_the_library_and_the_oom() -> None:
    # The first Megatron runs on the H200 (bench/gpu/results/megatron-*): both start-up failures read `unknown`.
    warmup = classify(_text("config_error__verl_validation__h200_megatron_lr_warmup_not_below_decay")).primary
    assert warmup is not None and warmup.category is ErrorCategory.CONFIG_ERROR
    assert warmup.detail == "actor_rollout_ref.actor.optim.lr_warmup_steps"  # from Megatron's bare assert line
    mbridge = classify(_text("environment__mbridge_megatron_version__h200_mbridge_0_15_megatron_core_0_19")).primary
    assert mbridge is not None and mbridge.category is ErrorCategory.ENVIRONMENT
    assert (mbridge.kind, mbridge.detail) == ("mbridge_megatron_version", "encoder_and_decoder")
    oom = classify(_text("gpu_oom__torch_cuda_oom__h200_megatron_update_actor_holder")).primary
    assert oom is not None and oom.category is ErrorCategory.GPU_OOM and oom.phase == "actor_rollout_update_actor"
    healthy = _text("none__h200_dapo_megatron_healthy_12_steps")
    assert "Please install swanboard" in healthy  # a tracker callback's ERROR line while training went on
    assert classify(healthy).primary is None


def test_handled_tracebacks_logged_through_a_logger_are_not_a_failure() -> None:
    raw = _text("none__agent_loop_logged_tool_errors_disk_warning")
    assert "ERROR:2025-08-05 01:37:46,087:Error when executing tool" in raw
    assert classify(raw).primary is None
    # The same handler printing the traceback on its own line from the driver's process.
    inline = "ERROR:2025-08-05 01:37:46,087:Traceback (most recent call last):\nKeyError: 'function'\n"
    assert classify(inline).primary is None
    # A traceback that starts the line is still fatal.
    assert classify("Traceback (most recent call last):\nKeyError: 'function'\n").primary is not None


def test_worker_deaths_after_the_final_validation_are_shutdown_not_a_failure() -> None:
    raw = _text("none__final_validation_then_worker_killed_at_shutdown")
    assert "Final validation metrics" in raw and "A worker died or was killed" in raw
    result = classify(raw)
    assert result.primary is None
    assert [f.kind for f in result.findings] == ["raylet_worker_died"]
    # Before the final validation the same line is the failure.
    before = raw.replace("Final validation metrics", "Validation metrics")
    primary = classify(before).primary
    assert primary is not None and primary.kind == "raylet_worker_died"


def test_an_agent_loop_reporting_a_tool_actor_death_is_not_a_failure() -> None:
    raw = _text("none__agent_loop_rate_limiter_actor_died_logged")
    assert classify(raw).primary is None
    from_driver = raw.replace("(AgentLoopWorker pid=2278822) ", "")
    primary = classify(from_driver).primary
    assert primary is not None and primary.category is ErrorCategory.WORKER_DIED


@pytest.mark.parametrize(
    ("name", "key"),
    [
        (
            "config_error__verl_validation__infer_tp_not_divisible",
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
        ),
        (
            "config_error__verl_validation__weights_bucket_too_small",
            "actor_rollout_ref.rollout.update_weights_bucket_megabytes",
        ),
        ("config_error__config_type__nnodes_empty_string", "trainer.nnodes"),
        (
            "config_error__device_mesh__ulysses_sp_exceeds_gpus",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        ),
    ],
)
def test_verl_config_assertions_are_config_errors_naming_the_key(name: str, key: str) -> None:
    primary = classify(_text(name)).primary
    assert primary is not None and primary.category is ErrorCategory.CONFIG_ERROR
    assert primary.detail == key


def test_an_assertion_outside_verl_init_is_not_called_a_config_error() -> None:
    raw = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/verl/verl/trainer/ppo/ray_trainer.py", line 1123, in fit\n'
        "    assert len(batch) > 0\n"
        "AssertionError\n"
    )
    primary = classify(raw).primary
    assert primary is not None and (primary.category, primary.detail) == (ErrorCategory.UNKNOWN, "AssertionError")


def test_actor_died_in_its_creation_task_is_classified_by_the_inner_exception() -> None:
    raw = _text("config_error__device_mesh__ulysses_sp_exceeds_gpus")
    assert "died because of an error raised in its creation task" in raw
    assert classify(raw).primary.kind == "device_mesh"  # type: ignore[union-attr]
    # An inner exception no rule knows: unknown with that exception, not "worker died".
    unknown = raw.replace("RuntimeError: cannot reshape tensor of 0 elements", "RuntimeError: something else")
    primary = classify(unknown).primary
    assert primary is not None
    assert (primary.category, primary.kind, primary.detail) == (
        ErrorCategory.UNKNOWN,
        "python_exception",
        "RuntimeError",
    )


def test_transformers_missing_weights_is_a_missing_file_naming_the_directory() -> None:
    primary = classify(_text("missing_file__model_files_missing__sft_checkpoint_no_weights")).primary
    assert primary is not None and primary.category is ErrorCategory.MISSING_FILE
    assert primary.detail is not None and primary.detail.endswith("global_step_250/huggingface")


def test_vllm_engine_mismatch_is_an_environment_error() -> None:
    primary = classify(_text("environment__vllm_engine_mismatch__vllm_use_v1")).primary
    assert primary is not None
    assert (primary.category, primary.kind, primary.detail) == (
        ErrorCategory.ENVIRONMENT,
        "vllm_engine_mismatch",
        "False",
    )


def test_a_tracker_failing_mid_run_is_a_non_fatal_tracking_finding() -> None:
    result = classify(_text("tracking__swanlab_api_error__nonfatal_midrun_401_metrics"))
    assert result.primary is None
    (finding,) = result.findings
    assert (finding.category, finding.kind, finding.fatal, finding.count) == (
        ErrorCategory.TRACKING,
        "swanlab_api_error",
        False,
        7,
    )
    assert "metrics" in finding.explanation and finding.to_dict()["fatal"] is False
    # Next to a real failure the failure is the primary, the tracker stays a finding.
    fatal = _text("tracking__swanlab_api_error__nonfatal_midrun_status_499") + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    result = classify(fatal)
    assert result.primary is not None and result.primary.category is ErrorCategory.GPU_OOM
    assert any(not f.fatal and f.kind == "swanlab_api_error" for f in result.findings)


def test_a_launcher_timestamp_before_each_line_does_not_hide_the_error() -> None:
    # The traceback stops in verl's reward manager: a reward-function error, read through the timestamps.
    primary = classify(_text("unknown__python_exception__reward_fn_data_source_timestamped")).primary
    assert primary is not None
    assert (primary.category, primary.kind) == (ErrorCategory.REWARD_ERROR, "reward_fn_raised")
    assert primary.detail is not None and primary.detail.endswith("reward_manager/naive.py:__call__")


def test_a_worker_dying_itself_is_still_the_failure_when_it_prints_it() -> None:
    # Only an actor's death *reported by another worker* steps aside; a worker's own crash does not.
    primary = classify("(WorkerDict pid=5) Fatal Python error: Segmentation fault\n").primary
    assert primary is not None and (primary.category, primary.kind) == (ErrorCategory.WORKER_DIED, "segfault")
