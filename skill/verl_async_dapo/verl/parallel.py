"""Parallelism of the training actor: the user's sizes, or defaults chosen from the model and the GPUs (pure).

Megatron: tensor (TP), pipeline (PP), context (CP) and expert (EP) parallel sizes of the actor; verl's
reference model follows the actor (its config interpolates ``actor.megatron.*``). FSDP: the Ulysses
sequence-parallel size of the actor (the reference follows it the same way).

Defaults (references/params.md, "Parallelism"), from the parameter count in the model's name
(``Qwen3-8B`` → 8, ``Qwen2.5-0.5B-Instruct`` → 0.5; a MoE name such as ``Qwen3-30B-A3B`` counts its total):

* TP: the smallest power of two that puts at most ``PARAMS_PER_TP_SHARD_B`` billion parameters on a
  shard, at most 8 (one node's NVLink domain) and dividing the trainer GPUs. 8B → 2, 32B → 8, 1.5B → 1,
  as in verl's own Megatron examples (Qwen2-7B TP=2, Qwen2.5-32B TP=8).
* PP: 1, unless a TP-8 shard would still hold more than twice that: then the smallest power of two
  that brings it under, if the GPUs allow (70B on 16 GPUs → TP 8, PP 2).
* CP and EP: 1 (context parallelism pays off only for very long sequences; EP only for MoE models
  whose expert count the name does not tell). Ulysses SP: 1, or 2 once a sequence (prompt + response)
  reaches ``LONG_SEQUENCE_TOKENS``, if the trainer GPUs are even.
* A model name without a size: TP = PP = 1 (verl's defaults), with a note asking for actor_tp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PARAMS_PER_TP_SHARD_B = 4.0
MAX_TP = 8
LONG_SEQUENCE_TOKENS = 32768
_SIZE_RE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)[bB](?![A-Za-z0-9])")


@dataclass(frozen=True)
class Parallelism:
    tp: int
    pp: int
    cp: int
    ep: int
    ulysses_sp: int
    notes: tuple[str, ...] = ()


def model_size_b(model_path: str) -> float | None:
    """Billions of parameters as the model's directory name states them (the largest figure), else None."""
    name = model_path.rstrip("/").rsplit("/", 1)[-1]
    sizes = [float(m) for m in _SIZE_RE.findall(name)]
    return max(sizes) if sizes else None


def _pow2_at_least(x: float) -> int:
    n = 1
    while n < x:
        n *= 2
    return n


def _largest_dividing(limit: int, gpus: int) -> int:
    n = max(1, limit)
    while n > 1 and gpus % n:
        n //= 2
    return n


def choose(
    *,
    model_path: str,
    trainer_gpus: int,
    sequence_tokens: int,
    tp: int | None,
    pp: int | None,
    cp: int | None,
    ep: int | None,
    ulysses_sp: int | None,
) -> Parallelism:
    """The user's sizes where given, the defaults above elsewhere."""
    notes: list[str] = []
    size = model_size_b(model_path)
    if size is None and (tp is None or pp is None):
        notes.append(f"model size unknown from its name {model_path.rsplit('/', 1)[-1]!r}: actor TP=PP=1 unless "
                     "actor_tp / actor_pp are given")  # fmt: skip
    if tp is None:
        want = min(MAX_TP, _pow2_at_least(size / PARAMS_PER_TP_SHARD_B)) if size else 1
        tp = _largest_dividing(want, trainer_gpus)
    if pp is None:
        want = _pow2_at_least(size / (2 * PARAMS_PER_TP_SHARD_B * tp)) if size and tp >= MAX_TP else 1
        pp = _largest_dividing(want, max(1, trainer_gpus // tp))
    if ulysses_sp is None:
        ulysses_sp = 2 if sequence_tokens >= LONG_SEQUENCE_TOKENS and trainer_gpus % 2 == 0 else 1
    return Parallelism(tp=tp, pp=pp, cp=cp or 1, ep=ep or 1, ulysses_sp=ulysses_sp, notes=tuple(notes))


def check(par: Parallelism, trainer_gpus: int, megatron: bool) -> str | None:
    """Why these sizes cannot work on ``trainer_gpus`` GPUs (the fields to change are named), else None."""
    if megatron:
        model_parallel = par.tp * par.pp * par.cp
        if trainer_gpus % model_parallel:
            return (f"ACTOR_TP={par.tp} x ACTOR_PP={par.pp} x ACTOR_CP={par.cp} = {model_parallel} must divide the "
                    f"{trainer_gpus} trainer GPUs")  # fmt: skip
        if (trainer_gpus // (par.tp * par.pp)) % par.ep:
            return f"ACTOR_EP={par.ep} must divide the {trainer_gpus // (par.tp * par.pp)} GPUs left after TP x PP"
    elif trainer_gpus % par.ulysses_sp:
        return f"ULYSSES_SP={par.ulysses_sp} must divide the {trainer_gpus} trainer GPUs"
    return None
