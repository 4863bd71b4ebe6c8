"""The estimate's arithmetic against hand-computed cases (each number below was worked out by hand from the
formulas in skill/verl_async_dapo/memory/estimate.py and references/memory.md)."""

from __future__ import annotations

import pytest

from verl_async_dapo.exceptions import ShapeError
from verl_async_dapo.memory import EstimateInput, ModelShape, estimate_from_settings, estimate_memory
from verl_async_dapo.memory.estimate import propose_features
from verl_async_dapo.settings import TrainingSettings

GIB = 2**30

# The config.json fields of two public models (huggingface.co/Qwen/Qwen3-8B and Qwen/Qwen2.5-0.5B config.json).
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "num_hidden_layers": 36, "vocab_size": 151936, "intermediate_size": 12288, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": False}  # fmt: skip
QWEN25_05B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
              "num_hidden_layers": 24, "vocab_size": 151936, "intermediate_size": 4864, "num_attention_heads": 14,
              "num_key_value_heads": 2, "tie_word_embeddings": True}  # fmt: skip


def test_parameter_counts_match_the_published_ones() -> None:
    q3 = ModelShape.from_config(QWEN3_8B)
    # layer: q 4096*4096 + k,v 2*4096*1024 + o 4096*4096 + q/k norms 2*128 + MLP 3*4096*12288 + 2 norms 2*4096
    assert q3.layer_params == 16777216 + 8388608 + 16777216 + 256 + 150994944 + 8192 == 192946432
    # + embeddings and untied lm_head 2*151936*4096 + final norm 4096
    assert q3.params == 36 * 192946432 + 1244659712 + 4096 == 8190735360  # Qwen3-8B: "8.2B"
    q05 = ModelShape.from_config(QWEN25_05B)
    # q 896*896 + k,v 2*896*128 + o 896*896 + biases (896 + 2*128) + MLP 3*896*4864 + norms 2*896; tied embeddings
    assert q05.layer_params == 802816 + 229376 + 802816 + 1152 + 13074432 + 1792 == 14912384
    assert q05.params == 24 * 14912384 + 136134656 + 896 == 494032768  # exactly Qwen2.5-0.5B's published count


def test_config_json_without_a_shape_is_refused_by_key() -> None:
    with pytest.raises(ShapeError, match="hidden_size"):
        ModelShape.from_config({"model_type": "qwen3"})
    vl = ModelShape.from_config({"model_type": "qwen2_5_vl", "text_config": QWEN3_8B})
    assert vl.params == 8190735360  # a vision-language model: its text_config is the language model


SMALL = ModelShape(hidden_size=1024, num_layers=2, vocab_size=1000, intermediate_size=2048, num_heads=8,
                   num_kv_heads=8, head_dim=128)  # fmt: skip
P_SMALL = 2 * (4 * 1024 * 1024 + 3 * 1024 * 2048 + 2 * 1024) + 2 * 1000 * 1024 + 1024  # = 23024640


def small(**changes: object) -> EstimateInput:
    values: dict[str, object] = dict(shape=SMALL, framework="fsdp", trainer_gpus=2, colocated=True, actor_tokens=1000,
                                     log_prob_tokens=1500, rollout_util=0.5, gpu_total_gib=80.0)  # fmt: skip
    return EstimateInput(**{**values, **changes})  # type: ignore[arg-type]


def test_fsdp_colocated_by_hand() -> None:
    assert SMALL.params == P_SMALL == 23024640
    est = estimate_memory(small())
    t = est.terms
    assert t["params_grads_optimizer"] * GIB == pytest.approx(23024640 * 16 / 2)  # 184,197,120 B
    # two layers + the root in bf16, plus the largest unit's fp32 grad: (2*10487808 + 2049024)*2 + 10487808*4
    assert t["fsdp_gathered"] * GIB == pytest.approx(88000512)
    # checkpointing: 2 layers x 2*1024*1000 B boundaries + one layer 1000*(20*1024 + 6*2048)
    assert t["activations"] * GIB == pytest.approx(2 * 2048000 + 32768000)
    assert t["logits"] * GIB == pytest.approx(1000 * 1000 * 10)
    assert t["log_prob_pass"] * GIB == pytest.approx(1500 * (1000 * 6 + 32768))  # 58,152,000: the larger pass
    assert t["weight_sync_bucket"] == 2.0
    assert est.trainer_peak_gib == pytest.approx((184197120 + 88000512 + 58152000) / GIB + 2.0)  # 2.3077
    assert est.trainer_resident_gib * GIB == pytest.approx(23024640 * 12 / 2)
    assert est.rollout_gib == 40.0
    # rollout phase 40 + 2 contexts + resident 0.1287 beats training phase 2.3077 + 0.5 + 1.0 (asleep) + 0.5
    assert est.phase == "rollout"
    assert est.peak_per_gpu_gib == pytest.approx(40 + 1.0 + 23024640 * 12 / 2 / GIB)
    assert est.trainer_at_rollout_start_gib * GIB == pytest.approx(23024640 * 4 / 2)


def test_the_line_names_small_models_in_millions() -> None:
    # SMALL is 23.0M parameters: it read "0.02B"; the H200 harness's 2-layer model (~0.4M) read "0.00B params".
    assert estimate_memory(small()).line().startswith("23.0M params: trainer peak 2.3 GiB")
    tiny = ModelShape.from_config({**QWEN25_05B, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                                   "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 384})  # fmt: skip
    assert 1e5 < tiny.params < 1e7
    assert f"{tiny.params / 1e6:.1f}M" == estimate_memory(small(shape=tiny)).line().split(" ", 1)[0]


def test_fsdp_offload_and_recompute_by_hand() -> None:
    est = estimate_memory(small(offload=True, recompute=True))
    t = est.terms
    assert t["params_grads_optimizer"] == 0.0 and est.trainer_resident_gib == 0.0
    assert est.trainer_at_rollout_start_gib == 0.0
    assert t["activations"] * GIB == pytest.approx(32768000 + 2 * 2048000)  # activation offload: one layer + 2 boundaries
    assert t["logits"] * GIB == pytest.approx(1000 * 1000 * 6)  # chunked entropy
    no_gc = estimate_memory(small(gradient_checkpointing=False))
    assert no_gc.terms["activations"] * GIB == pytest.approx(2 * 32768000)


def test_megatron_tp2_by_hand() -> None:
    est = estimate_memory(small(framework="megatron", trainer_gpus=4, tp=2))
    t = est.terms
    local = 23024640 / 2  # P / (TP*PP); DP = 4 / 2 = 2
    assert t["params_grads_optimizer"] * GIB == pytest.approx(local * 6 + local * 12 / 2)
    assert est.trainer_resident_gib * GIB == pytest.approx(local * 2 + local * 12 / 2)
    assert t["fsdp_gathered"] == 0.0
    assert t["activations"] * GIB == pytest.approx(2 * 32768000 / 2)  # selective recompute, sequence parallel
    assert t["logits"] * GIB == pytest.approx(1000 * 1000 * 10 / 2)  # vocab parallel
    full = estimate_memory(small(framework="megatron", trainer_gpus=4, tp=2, recompute=True))
    assert full.terms["activations"] * GIB == pytest.approx((2 * 2048000 + 32768000) / 2)


def test_one_step_off_has_no_bucket_and_vllm_alone() -> None:
    est = estimate_memory(small(colocated=False))
    assert est.terms["weight_sync_bucket"] == 0.0 and est.trainer_at_rollout_start_gib == 0.0
    assert est.peak_per_gpu_gib == pytest.approx(40 + 0.5)  # the rollout GPU: its share + one context


def test_settings_give_the_plans_token_caps() -> None:
    s = TrainingSettings.model_validate({"FRAMEWORK": "fsdp", "N_GPUS": 8})
    est = estimate_from_settings(s, ModelShape.from_config(QWEN3_8B), {"dynamic_batch", "gradient_checkpointing"})
    # P + R = 2048 + 8192; actor cap 2x, log-prob cap 3x (verl/feature_overrides.py)
    assert "micro-batch 20480 tokens (log-prob 30720)" in est.assumptions
    assert est.terms["params_grads_optimizer"] * GIB == pytest.approx(8190735360 * 16 / 8)
    fixed = estimate_from_settings(s, ModelShape.from_config(QWEN3_8B), set())
    assert "micro-batch 20480 tokens (log-prob 40960)" in fixed.assumptions  # micro batches 2 and 4 sequences


def test_proposal_adds_offload_first_and_keeps_the_users_no() -> None:
    s = TrainingSettings.model_validate({"FRAMEWORK": "fsdp", "N_GPUS": 1, "GPU_MEMORY_UTILIZATION": 0.3})
    shape = ModelShape.from_config(QWEN3_8B)
    on = {"flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing"}
    added, est = propose_features(s, shape, on, set(), budget_gib=139.0, gpu_total_gib=139.8)
    assert added == ["offload"]  # 122 GiB of fp32 state on one GPU → host RAM
    assert est.peak_per_gpu_gib is not None and est.peak_per_gpu_gib <= 139.0
    added, est = propose_features(s, shape, on, {"offload"}, budget_gib=139.0, gpu_total_gib=139.8)
    assert "offload" not in added  # the user said no_offload: never proposed
    assert added == ["recompute"] and est.peak_per_gpu_gib is not None and est.peak_per_gpu_gib > 139.0
    assert propose_features(s, shape, on, set(), budget_gib=1000.0, gpu_total_gib=139.8)[0] == []


def _measured(name: str, key: str) -> list[float]:
    from pathlib import Path

    from verl_async_dapo.logs.series import parse_series

    text = (Path(__file__).parent.parent / name).read_text()
    assert text.startswith("# source: ")
    return parse_series(text).values(key)[1]


def test_against_real_logs_as_documented_in_references_memory_md() -> None:
    """The comparison table of references/memory.md §3, recomputed: the doc and the code cannot drift apart."""
    # Qwen2-7B-Instruct (huggingface.co/Qwen/Qwen2-7B-Instruct config.json), the play-verl "min" run.
    qwen2_7b = ModelShape.from_config({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
                                       "vocab_size": 152064, "intermediate_size": 18944, "num_attention_heads": 28,
                                       "num_key_value_heads": 4, "tie_word_embeddings": False})  # fmt: skip
    est = estimate_memory(EstimateInput(shape=qwen2_7b, framework="fsdp", trainer_gpus=8, colocated=True,
                                        actor_tokens=8192, log_prob_tokens=8192, rollout_util=0.5,
                                        gpu_total_gib=79.1, offload=True))  # fmt: skip
    (measured,) = set(_measured("memory/fixtures/play-verl-qwen2-7b-min.step13.log", "perf/max_memory_allocated_gb"))
    assert measured == 54.493
    assert round(est.peak_per_gpu_gib or 0, 2) == 40.55 and round(est.trainer_peak_gib, 1) == 21.5
    assert round((est.peak_per_gpu_gib or 0) / measured - 1, 2) == -0.26
    # The older sync-mode weight sync gathered the full bf16 state dict instead of a 2 GiB bucket:
    assert round((est.peak_per_gpu_gib or 0) + qwen2_7b.params * 2 / GIB, 1) == 54.7
    # The H200 tiny-model runs: the 2 GiB weight-sync bucket is the term that dominates the measured peak.
    tiny = _measured("charts/fixtures/verl-0.9.1-h200-healthy-6-steps.metrics.log", "actor/perf/max_memory_allocated_gb")
    assert min(tiny) >= 2.0 and max(tiny) / 2.0 - 1 < 0.04


def test_moe_parameter_count_and_activation_width() -> None:
    # huggingface.co/Qwen/Qwen3-30B-A3B config.json (the fields the estimate reads)
    moe = ModelShape.from_config({"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
                                  "vocab_size": 151936, "intermediate_size": 6144, "num_attention_heads": 32,
                                  "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                                  "num_experts_per_tok": 8, "moe_intermediate_size": 768,
                                  "tie_word_embeddings": False})  # fmt: skip
    # attention 2048*4096 + 2*2048*512 + 4096*2048 + q/k norms 256; experts 128*3*2048*768 + router 2048*128; norms
    layer = 8388608 + 2097152 + 8388608 + 256 + 603979776 + 262144 + 4096
    assert moe.layer_params == layer == 623120640
    assert moe.params == 48 * layer + 2 * 151936 * 2048 + 2048 == 30532122624  # Qwen3-30B-A3B: "30.5B"
    assert moe.act_ffn_width == 8 * 768  # a token's activations go through its top-8 experts
