"""Peak GPU memory per GPU of a plan, from the model's config.json and the plan's knobs (pure).

A first-order estimate, meant to say "this will not fit, turn on offload" before GPU time is spent, not to
predict the allocator to the MiB. Every term is written out (``MemoryEstimate.terms``) so a user can see
where the memory goes; the formulas and the comparison with real verl logs are in references/memory.md.

Byte counts per parameter P (N = trainer GPUs, the FSDP shard group):

* FSDP2 (verl keeps the sharded master weights in fp32, computes in bf16): fp32 params 4 + fp32 grads 4
  + Adam 8 = 16 B/P / N. ``offload`` (param + optimizer offload + FSDP2 CPUOffloadPolicy) moves all of it to
  host RAM. Gathered while computing: two decoder layers + the root (embeddings, lm_head) in bf16, plus the
  largest unit's fp32 gradient before its reduce-scatter.
* Megatron (distributed optimizer): bf16 params 2 + fp32 grads 4 per P/(TP*PP), + 12 B (fp32 master + Adam)
  per P/(TP*PP*DP). verl's Megatron offload reloads them for the update, so it lowers the rollout phase only.

Activations per micro-batch of T tokens (remove-padding packs sequences, so T is the per-GPU token cap),
bf16, flash attention (no T^2 term): one decoder layer holds T*(20h + 6I) bytes (attention about 18h as in
Korthikanti et al. 2022, a gated MLP 2h + 6I); gradient checkpointing keeps 2h*T per layer + one layer's worth;
activation offload (FSDP ``recompute``) keeps about one layer's worth on the GPU. Logits: T*V*10 bytes
(bf16 logits, their fp32 copy and its gradient); chunked entropy (FSDP ``recompute``) 6. Megatron's TP splits
activations and logits (sequence / vocab parallel). The forward-only log-prob pass uses its own token cap.
Colocated runs also hold verl's weight-sync bucket (``update_weights_bucket_megabytes``, 2048 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl_async_dapo.exceptions import ShapeError

GIB = float(1 << 30)
CUDA_CONTEXT_GIB = 0.5  # per process using the GPU; not part of torch's max_memory_allocated
VLLM_ASLEEP_GIB = 1.0  # what a sleeping vLLM keeps (CUDA graph pool, its allocator's slack)
WEIGHT_SYNC_BUCKET_GIB = 2048 / 1024  # verl's rollout.update_weights_bucket_megabytes default (2048)


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    num_layers: int
    vocab_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    num_experts: int = 0  # MoE: routed experts per layer (0 = dense)
    experts_per_token: int = 1  # MoE: routed experts each token goes through (top-k)
    moe_intermediate_size: int = 0
    shared_intermediate_size: int = 0
    model_type: str = ""

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        """A Hugging Face config.json (a vision-language model's ``text_config`` is used when present)."""
        cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
        assert isinstance(cfg, dict)

        def need(*keys: str) -> int:
            for key in keys:
                if isinstance(cfg.get(key), int) and cfg[key] > 0:
                    return int(cfg[key])
            raise ShapeError(f"config.json has no positive integer {' / '.join(keys)}")

        h, heads = need("hidden_size", "d_model"), need("num_attention_heads", "n_head")
        experts = next((int(cfg[k]) for k in ("num_experts", "n_routed_experts", "num_local_experts")
                        if isinstance(cfg.get(k), int)), 0)  # fmt: skip
        model_type = str(cfg.get("model_type") or config.get("model_type") or "")
        shared = cfg.get("shared_expert_intermediate_size") or 0
        if not shared and isinstance(cfg.get("n_shared_experts"), int) and experts:
            shared = cfg["n_shared_experts"] * int(cfg.get("moe_intermediate_size") or 0)
        return cls(
            hidden_size=h,
            num_layers=need("num_hidden_layers", "n_layer"),
            vocab_size=need("vocab_size"),
            intermediate_size=need("intermediate_size", "ffn_hidden_size") if not experts else
            int(cfg.get("intermediate_size") or 0),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or h // heads),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
            # Qwen2 has q/k/v biases without saying so in config.json; others say attention_bias.
            attention_bias=bool(cfg.get("attention_bias", model_type.startswith("qwen2"))),
            qk_norm=model_type.startswith("qwen3"),
            num_experts=experts,
            experts_per_token=int(cfg.get("num_experts_per_tok") or 1),
            moe_intermediate_size=int(cfg.get("moe_intermediate_size") or 0),
            shared_intermediate_size=int(shared),
            model_type=model_type,
        )  # fmt: skip

    @property
    def layer_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.attention_bias else 0)
        attn += 2 * self.head_dim if self.qk_norm else 0
        if self.num_experts:
            mlp = self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
            mlp += 3 * h * self.shared_intermediate_size
        else:
            mlp = 3 * h * self.intermediate_size  # gate, up, down
        return attn + mlp + 2 * h  # two RMSNorms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def root_params(self) -> int:
        """Outside the decoder layers: embeddings, final norm, lm_head (unless tied)."""
        return self.embedding_params * (1 if self.tie_embeddings else 2) + self.hidden_size

    @property
    def params(self) -> int:
        return self.num_layers * self.layer_params + self.root_params

    @property
    def act_ffn_width(self) -> int:
        """The MLP width one token's activations see (MoE: its top-k routed experts + the shared expert)."""
        if self.num_experts:
            return self.experts_per_token * self.moe_intermediate_size + self.shared_intermediate_size
        return self.intermediate_size


@dataclass(frozen=True)
class EstimateInput:
    shape: ModelShape
    framework: str  # "fsdp" | "megatron"
    trainer_gpus: int  # the trainer's world size (colocated: every GPU)
    colocated: bool  # DAPO: trainer and vLLM share each GPU; one-step-off: separate GPUs
    actor_tokens: int  # tokens in one training micro-batch per GPU
    log_prob_tokens: int  # tokens in one forward-only log-prob micro-batch per GPU
    rollout_util: float  # vLLM gpu_memory_utilization
    gpu_total_gib: float | None = None  # CUDA's total per GPU; None = not known (plan without a target)
    offload: bool = False
    gradient_checkpointing: bool = True
    recompute: bool = False
    tp: int = 1
    pp: int = 1
    rollout_tp: int = 1


@dataclass(frozen=True)
class MemoryEstimate:
    params_billion: float
    trainer_peak_gib: float  # comparable with verl's actor/perf/max_memory_allocated_gb
    trainer_resident_gib: float  # what the trainer keeps on the GPU while vLLM generates
    trainer_at_rollout_start_gib: float  # the trainer's weights when vLLM starts (optimizer state comes later)
    rollout_weights_gib: float  # the policy's bf16 weights in one vLLM replica's GPU (/ rollout TP)
    rollout_gib: float | None  # util x total (None without a GPU total)
    peak_per_gpu_gib: float | None  # the busiest GPU over both phases, CUDA contexts included
    phase: str  # which phase sets the peak: "rollout" or "training"
    terms: dict[str, float] = field(default_factory=dict)  # GiB per term
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "params_billion": round(self.params_billion, 3),
            "trainer_peak_gib": round(self.trainer_peak_gib, 2),
            "trainer_resident_gib": round(self.trainer_resident_gib, 2),
            "trainer_at_rollout_start_gib": round(self.trainer_at_rollout_start_gib, 2),
            "rollout_weights_gib": round(self.rollout_weights_gib, 2),
            "rollout_gib": None if self.rollout_gib is None else round(self.rollout_gib, 2),
            "peak_per_gpu_gib": None if self.peak_per_gpu_gib is None else round(self.peak_per_gpu_gib, 2),
            "phase": self.phase,
            "terms_gib": {k: round(v, 3) for k, v in self.terms.items()},
            "assumptions": list(self.assumptions),
        }

    def line(self) -> str:
        where = f"; peak per GPU {self.peak_per_gpu_gib:.1f} GiB ({self.phase})" if self.peak_per_gpu_gib else ""
        return f"{_params(self.params_billion)} params: trainer peak {self.trainer_peak_gib:.1f} GiB{where}"


def _params(billion: float) -> str:
    """0.49B stays 0.49B; a tiny test model is 1.2M, not "0.00B" (the H200 harness's 2-layer model read so)."""
    if billion >= 0.1:
        return f"{billion:.2f}B"
    return f"{billion * 1e3:.1f}M" if billion >= 1e-4 else f"{billion * 1e9:,.0f}"


def _states(inp: EstimateInput) -> tuple[float, float, list[str]]:
    """(GiB during the update, GiB kept while vLLM generates) of params + grads + optimizer, per GPU."""
    p = inp.shape.params
    if inp.framework == "megatron":
        model_parallel = inp.tp * inp.pp
        dp = max(1, inp.trainer_gpus // model_parallel)
        local = p / model_parallel
        update = (local * 6 + local * 12 / dp) / GIB
        resident = 0.0 if inp.offload else (local * 2 + local * 12 / dp) / GIB
        return update, resident, [f"Megatron TP={inp.tp} PP={inp.pp} DP={dp}, distributed optimizer"]
    if inp.offload:
        return 0.0, 0.0, ["FSDP2 CPU offload: params, grads and optimizer in host RAM"]
    return p * 16 / inp.trainer_gpus / GIB, p * 12 / inp.trainer_gpus / GIB, [f"FSDP2 over {inp.trainer_gpus} GPU(s)"]


def estimate_memory(inp: EstimateInput) -> MemoryEstimate:
    s = inp.shape
    h, layers, vocab = s.hidden_size, s.num_layers, s.vocab_size
    megatron = inp.framework == "megatron"
    update_states, resident, notes = _states(inp)
    split = inp.tp if megatron else 1  # sequence parallel / vocab parallel
    per_layer = inp.actor_tokens * (20 * h + 6 * s.act_ffn_width) / split / GIB
    boundary = inp.actor_tokens * 2 * h / split / GIB
    # Megatron 1F1B: pipeline stage 0 holds PP micro-batches of L/PP layers, i.e. L layers' worth in all.
    if inp.recompute and not megatron:
        activations = per_layer + 2 * boundary  # activation offload: the checkpointed boundaries go to host RAM
    elif (inp.recompute and megatron) or (inp.gradient_checkpointing and not megatron):
        activations = layers * boundary + per_layer  # checkpointed boundaries + one layer recomputed
    else:  # no checkpointing, or Megatron selective recompute (core attention only: flash stores little there)
        activations = layers * per_layer
    logit_bytes = 6 if (inp.recompute and not megatron) else 10
    logits = inp.actor_tokens * vocab * logit_bytes / split / GIB
    log_prob_pass = inp.log_prob_tokens * (vocab * 6 + 20 * h + 6 * s.act_ffn_width) / split / GIB
    gather = 0.0
    if not megatron:  # FSDP: two layers + the root gathered in bf16, the largest unit's fp32 grad
        gather = ((2 * s.layer_params + s.root_params) * 2 + max(s.layer_params, s.embedding_params) * 4) / GIB
    bucket = WEIGHT_SYNC_BUCKET_GIB if inp.colocated else 0.0
    compute = max(activations + logits, log_prob_pass)
    trainer_peak = update_states + gather + compute + bucket
    terms = {"params_grads_optimizer": update_states, "fsdp_gathered": gather, "activations": activations,
             "logits": logits, "log_prob_pass": log_prob_pass, "weight_sync_bucket": bucket}  # fmt: skip
    assumptions = [
        *notes,
        f"micro-batch {inp.actor_tokens} tokens (log-prob {inp.log_prob_tokens})",
        "gradient checkpointing" if inp.gradient_checkpointing else "no gradient checkpointing",
    ]
    rollout = inp.rollout_util * inp.gpu_total_gib if inp.gpu_total_gib else None
    peak, phase = None, "training"
    if rollout is not None:
        training_phase = trainer_peak + CUDA_CONTEXT_GIB + (VLLM_ASLEEP_GIB + CUDA_CONTEXT_GIB if inp.colocated else 0)
        # One-step-off: vLLM has its GPUs to itself; the busiest GPU is a rollout GPU or a trainer GPU.
        rollout_phase = rollout + CUDA_CONTEXT_GIB * (2 if inp.colocated else 1) + (resident if inp.colocated else 0)
        peak, phase = max((training_phase, "training"), (rollout_phase, "rollout"))
    if inp.offload or not inp.colocated:
        at_start = 0.0
    else:  # FSDP fp32 shards / Megatron bf16 shards; Adam's state appears at the first update
        at_start = s.params * 4 / inp.trainer_gpus / GIB if not megatron else s.params * 2 / (inp.tp * inp.pp) / GIB
    return MemoryEstimate(
        params_billion=s.params / 1e9, trainer_peak_gib=trainer_peak, trainer_resident_gib=resident,
        trainer_at_rollout_start_gib=at_start, rollout_weights_gib=s.params * 2 / inp.rollout_tp / GIB,
        rollout_gib=rollout, peak_per_gpu_gib=peak, phase=phase, terms=terms, assumptions=tuple(assumptions),
    )  # fmt: skip


def estimate_from_settings(
    settings: Any, shape: ModelShape, effective: set[str] | frozenset[str], *, token_budget_scale: float = 1.0,
    rollout_util: float | None = None, gpu_total_gib: float | None = None, tp: int = 1, pp: int = 1,
) -> MemoryEstimate:
    """The estimate for a TrainingSettings + the attempt's effective feature names (the plan's own numbers)."""
    from verl_async_dapo.verl.feature_overrides import SequenceBudget, micro_batches, token_caps

    budget = SequenceBudget(settings.max_prompt_length, settings.max_response_length)
    if "dynamic_batch" in effective:
        actor_tokens, log_prob_tokens = token_caps(budget, token_budget_scale)
    else:
        actor_mb, log_prob_mb = micro_batches(token_budget_scale)
        actor_tokens, log_prob_tokens = actor_mb * budget.sequence, log_prob_mb * budget.sequence
    colocated = settings.mode.value == "dapo"
    return estimate_memory(EstimateInput(
        shape=shape, framework=settings.framework.value,
        trainer_gpus=settings.colocated_gpus if colocated else settings.trainer_gpus, colocated=colocated,
        actor_tokens=actor_tokens, log_prob_tokens=log_prob_tokens,
        rollout_util=rollout_util if rollout_util is not None else settings.gpu_memory_utilization,
        gpu_total_gib=gpu_total_gib, offload="offload" in effective,
        gradient_checkpointing="gradient_checkpointing" in effective, recompute="recompute" in effective,
        tp=getattr(settings, "actor_tp", None) or tp, pp=getattr(settings, "actor_pp", None) or pp,
        rollout_tp=settings.resolved_rollout_tp(),
    ))  # fmt: skip


# The memory features the estimate proposes before a first launch, in the OOM ladder's order.
PROPOSAL_ORDER = ("offload", "recompute")


def propose_features(
    settings: Any, shape: ModelShape, effective: set[str] | frozenset[str], disabled: set[str] | frozenset[str],
    *, budget_gib: float, gpu_total_gib: float | None, rollout_util: float | None = None,
) -> tuple[list[str], MemoryEstimate]:
    """Memory features to add so the estimated peak fits ``budget_gib`` (what other processes leave per GPU).

    The user's explicit choices are kept: a feature turned off (``no_offload``) is never proposed. Returns the
    features to add (empty when it already fits, or when nothing may be added) and the estimate with them.
    """
    on = set(effective)

    def peak(est: MemoryEstimate) -> float:
        return est.peak_per_gpu_gib if est.peak_per_gpu_gib is not None else est.trainer_peak_gib

    est = estimate_from_settings(settings, shape, on, rollout_util=rollout_util, gpu_total_gib=gpu_total_gib)
    added: list[str] = []
    for feature in PROPOSAL_ORDER:
        if peak(est) <= budget_gib:
            break
        if feature in on or feature in disabled:
            continue
        on.add(feature)
        added.append(feature)
        est = estimate_from_settings(settings, shape, on, rollout_util=rollout_util, gpu_total_gib=gpu_total_gib)
    return added, est
