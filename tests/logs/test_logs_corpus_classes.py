"""The failure classes issue 26 lists, each on a real log of the corpus' train split (fixtures named by file).

The held-out test split is not read here (test_logs_corpus_heldout.py scores it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from verl_async_dapo.categories import ErrorCategory as C
from verl_async_dapo.logs.classify import Finding, classify
from verl_async_dapo.logs.corpus_eval import source_key, source_of

CORPUS = Path(__file__).parent / "corpus"
HELD_OUT = frozenset(json.loads((CORPUS / "SPLIT.json").read_text(encoding="utf-8"))["test_sources"])


def _train(name: str) -> str:
    text = (CORPUS / f"{name}.log").read_text(encoding="utf-8")
    assert source_key(source_of(text) or "") not in HELD_OUT, f"{name} is in the held-out split"
    return text


def _primary(name: str) -> Finding:
    primary = classify(_train(name)).primary
    assert primary is not None, name
    return primary


@pytest.mark.parametrize(
    ("name", "category", "kind"),
    [
        # An omegaconf error raised in a worker's init, the excerpt starting mid-traceback: never healthy.
        ("config_error__configkeyerror_worker_init_hfmodelconfig", C.CONFIG_ERROR, "config_key_unknown"),
        ("config_error__omegaconf_missing_key_config", C.CONFIG_ERROR, "config_key_missing"),
        ("config_error__swift_max_tokens_negative", C.CONFIG_ERROR, "invalid_value"),
        # Tracebacks cut before their exception line: a failure, said to be cut.
        ("unknown__main_generation_init_model_traceback_cut", C.UNKNOWN, "traceback_cut"),
        ("unknown__sglang_scheduler_kv_pool_traceback_cut", C.UNKNOWN, "traceback_cut"),
        # Where the OOM happened decides: inside generate_sequences (Ray names the call after the OOM) → the
        # engine's; in update_actor / a trainer → training.
        ("rollout_oom__toolrl_softmax_oom_then_generate_sequences", C.ROLLOUT_OOM, "generation_oom"),
        ("gpu_oom__torch_cuda_oom__entropy_from_logits_one_step_off", C.GPU_OOM, "torch_cuda_oom"),
        ("gpu_oom__npu_out_of_memory_torchrun_sft", C.GPU_OOM, "npu_oom"),
        # Host memory as Ray's memory monitor shows it: the "top memory users" table, raylet and K8s kills.
        ("host_oom__ray_memory_monitor_top_consumers_rllib", C.HOST_OOM, "ray_memory_monitor"),
        ("host_oom__vllm_ray_worker_memory_threshold_top_10", C.HOST_OOM, "ray_memory_monitor"),
        ("host_oom__easyr1_raylet_killed_memory_pressure_compute_log_probs", C.HOST_OOM, "raylet_oom_kill"),
        # wandb refusing a setting (entity/project permission, weave project) at start-up.
        ("tracking__wandb_permission_denied_403_launch_error", C.TRACKING, "wandb_init_failed"),
        ("tracking__weave_wandb_project_mismatch", C.TRACKING, "wandb_project_mismatch"),
        ("tracking__wandb_sender_init_run_commerror_reraise", C.TRACKING, "tracker_raised"),
        # A model path without HF files; a download left incomplete.
        ("missing_file__unsloth_no_config_file_model_name", C.MISSING_FILE, "model_files_missing"),
        ("missing_file__tokenizer_vocab_download_consistency", C.MISSING_FILE, "download_incomplete"),
        # Environments that do not fit: a module moved, a GPU newer than the torch build, an ABI behind [rank0]:.
        ("environment__module_not_found_tasks_importlib", C.ENVIRONMENT, "import_error"),
        ("environment__areal_torch_memory_saver_attribute", C.ENVIRONMENT, "module_api_mismatch"),
        ("environment__sm_120_rtx5080_laptop", C.ENVIRONMENT, "gpu_arch_unsupported"),
        ("environment__flash_attn_undefined_symbol_rank0_unsloth_vllm", C.ENVIRONMENT, "flash_attn_abi"),
        # The Ascend NPU runtime, HCCL and NCCL errors that are not timeouts.
        ("accelerator_error__npu_synchronize_stream_507035_vector_core", C.ACCELERATOR_ERROR, "npu_runtime_error"),
        ("accelerator_error__npu_el0004_ge_memory_allocation_failure", C.ACCELERATOR_ERROR, "npu_runtime_error"),
        ("comm_error__hccl_multinode_init_error_code_4_ref_init", C.COMM_ERROR, "hccl_error"),
        ("comm_error__nccl_unhandled_cuda_error_802_nvls_b200", C.COMM_ERROR, "nccl_cuda_error"),
        ("comm_error__horovod_nccl_comm_init_rank_system_error", C.COMM_ERROR, "nccl_error"),
        # Data, reward function and checkpoint errors.
        ("data_error__rm_switch_chat_template_raw_prompt_keyerror", C.DATA_ERROR, "missing_field"),
        ("data_error__ray_read_parquet_unsupported_cast", C.DATA_ERROR, "schema_cast"),
        ("data_error__processor_no_chat_template_set", C.DATA_ERROR, "no_chat_template"),
        ("unknown__python_exception__archer_dapo_reward_model_keyerror", C.DATA_ERROR, "missing_field"),
        ("unknown__python_exception__reward_fn_not_implemented", C.REWARD_ERROR, "reward_fn_raised"),
        ("checkpoint_error__resume_load_checkpoint_attribute_error", C.CHECKPOINT_ERROR, "checkpoint_io"),
        ("unknown__python_exception__dataloader_resume_stopiteration", C.CHECKPOINT_ERROR, "checkpoint_io"),
        ("checkpoint_error__h5_model_ckpt_no_space_left", C.CHECKPOINT_ERROR, "disk_full"),
        ("checkpoint_error__unexpected_keys_dataparallel", C.CHECKPOINT_ERROR, "state_dict_mismatch"),
    ],
)
def test_each_class_on_its_real_log(name: str, category: C, kind: str) -> None:
    primary = _primary(name)
    assert (primary.category, primary.kind) == (category, kind)


def test_a_config_key_error_names_the_key_and_the_config_class() -> None:
    primary = _primary("config_error__configkeyerror_worker_init_hfmodelconfig")
    assert primary.detail == "enable_activation_offloading"
    assert "omegaconf.errors.ConfigKeyError" in primary.message


def test_a_cut_traceback_names_its_last_frame_and_is_never_healthy() -> None:
    raw = _train("unknown__main_generation_init_model_traceback_cut")
    primary = classify(raw).primary
    assert primary is not None and primary.detail is not None and primary.detail.endswith("ray/_private/worker.py")
    # The same traceback with an exception line no rule knows: unknown, quoting that exception.
    ended = raw + "SomeBrandNewError: the worker gave up\n"
    primary = classify(ended).primary
    assert primary is not None
    assert (primary.category, primary.kind, primary.detail) == (C.UNKNOWN, "python_exception", "SomeBrandNewError")


def test_a_traceback_a_worker_logged_and_the_run_went_on_is_not_a_failure() -> None:
    for name in ("none__agent_loop_logged_tool_errors_disk_warning", "none__search_tool_logged_execution_failed"):
        assert classify(_train(name)).primary is None, name
    # Printed by the logger of the last process in the log, it is still handled; without the logger line it is not.
    logged = _train("none__search_tool_logged_execution_failed")
    assert "ERROR:2026-02-15 13:40:19,925:[SearchTool] Execution failed" in logged
    bare = logged.replace("ERROR:2026-02-15 13:40:19,925:[SearchTool] Execution failed: ", "")
    primary = classify(bare).primary
    assert primary is not None and primary.kind == "traceback_cut"


def test_errors_after_the_final_validation_are_shutdown_noise_on_npu_too() -> None:
    raw = _train("none__npu_final_validation_then_tbe_subprocess_errors")
    assert "TBE Subprocess[task_distribute] raise error" in raw
    assert classify(raw).primary is None


def test_a_generation_oom_fix_is_the_engines_and_the_training_oom_fix_is_not() -> None:
    engine = _primary("rollout_oom__toolrl_softmax_oom_then_generate_sequences")
    assert "max_num_seqs" in engine.fix and "offload" not in engine.fix.split(";")[0]
    trainer = _primary("gpu_oom__torch_cuda_oom__entropy_from_logits_one_step_off")
    assert "offload" in trainer.fix


def test_nccl_errors_that_are_not_timeouts_are_communication_errors_not_timeouts() -> None:
    for name in ("comm_error__nccl_unhandled_cuda_error_802_nvls_b200", "comm_error__hccl_init_root_info_hccp_busy"):
        assert _primary(name).category is C.COMM_ERROR, name
    timeout = "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)\n"
    primary = classify(timeout).primary
    assert primary is not None and primary.category is C.NCCL_TIMEOUT
    # An NCCL error that says it timed out stays a timeout.
    timed_out = "torch.distributed.DistBackendError: NCCL error in: x.cpp:1, remote timed out\n"
    primary = classify("Traceback (most recent call last):\n" + timed_out).primary
    assert primary is None or primary.category is not C.COMM_ERROR
