"""The rollout-OOM fix follows the error (issue #14, item 4): "no memory for the cache blocks" raises the engine's
share, "free memory on device is less than desired" lowers it (to what was free), the fix text says what the
ladder does, and the ladder is bounded and never oscillates (a property over any sequence of rollout messages)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from verl_async_dapo.categories import ErrorCategory
from verl_async_dapo.features import FeatureSet
from verl_async_dapo.logs.classify import classify
from verl_async_dapo.logs.memory import gpu_used_share
from verl_async_dapo.policy import AttemptConfig, Decision, decide, fix_text
from verl_async_dapo.rollout_policy import SHARE_TOO_SMALL, UTIL_MAX, UTIL_MIN

REAL_H200 = Path(__file__).resolve().parents[1] / "logs" / "real"
KINDS = (
    "vllm_kv_cache",
    "vllm_max_len",
    "sglang_memory",
    "vllm_startup_memory",
    "vllm_sleep_memory_grew",
    "vllm_wake_up",
    "torch_cuda_oom",
    "vllm_sampler_warmup",
    "generation_oom",
    "sglang_cuda_graph",
)
H200_FREE = (
    "ValueError: Free memory on device cuda:0 (75.62/139.8 GiB) on startup is less than desired GPU memory "
    "utilization (0.6, 83.88 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)


def _decide(config: AttemptConfig, kind: str | None, n: int = 0, base: float = 0.6, evidence: str | None = None,
            retries: int = 50, used: float | None = None) -> Decision:  # fmt: skip
    return decide(config, ErrorCategory.ROLLOUT_OOM, relaunches_so_far=n, max_retries=retries,
                  base_gpu_memory_utilization=base, kind=kind, evidence=evidence, gpu_used_share=used)  # fmt: skip


def _util(config: AttemptConfig | None, base: float = 0.6) -> float:
    assert config is not None
    return config.tweaks.rollout_gpu_memory_utilization or base


def test_no_memory_for_cache_blocks_raises_the_share_never_lowers_it() -> None:
    d = _decide(AttemptConfig(features=FeatureSet()), "vllm_kv_cache", base=0.5)
    assert d.relaunch and _util(d.next_config) == 0.6
    assert d.changes == ("rollout gpu_memory_utilization 0.5 → 0.6 (raised)",)
    # Up to the ceiling, then max_num_seqs comes down; the share never goes below where it failed.
    config, utils, seqs = d.next_config, [0.6], []
    for n in range(1, 20):
        d = _decide(config, "vllm_kv_cache", n, base=0.5)  # type: ignore[arg-type]
        if not d.relaunch:
            break
        config = d.next_config
        utils.append(_util(config, 0.5))
        seqs.append(config.tweaks.rollout_max_num_seqs)  # type: ignore[union-attr]
    assert utils == sorted(utils) and max(utils) == UTIL_MAX
    assert [s for s in seqs if s is not None] == [128, 64, 32]
    assert "every memory-saving step is already applied" in d.reason


def test_h200_free_memory_message_lowers_the_share_to_what_was_free() -> None:
    # The real H200 attempt: share 0.6 asked for 83.88 GiB with 75.62/139.8 free → 0.5 (what the real relaunch used).
    d = _decide(AttemptConfig(features=FeatureSet()), "vllm_startup_memory", evidence=H200_FREE)
    assert d.relaunch and _util(d.next_config) == 0.5
    assert d.changes == ("rollout gpu_memory_utilization 0.6 → 0.5 (lowered)",)
    # Much less free than one step: straight to what fits, not 0.1 at a time.
    tight = H200_FREE.replace("75.62/139.8", "50.0/139.8")
    assert (
        _util(_decide(AttemptConfig(features=FeatureSet()), "vllm_startup_memory", evidence=tight).next_config) == 0.3
    )
    assert any("nvidia-smi" in tip for tip in d.suggestions) is False  # only when giving up
    stuck = _decide(AttemptConfig(features=FeatureSet()), "vllm_startup_memory", base=0.3, evidence=tight)
    assert not stuck.relaunch and any("nvidia-smi" in tip for tip in stuck.suggestions)


def test_raise_after_a_free_memory_failure_stays_below_it() -> None:
    lowered = _decide(AttemptConfig(features=FeatureSet()), "vllm_startup_memory", evidence=H200_FREE).next_config
    assert lowered is not None and lowered.tweaks.rollout_util_ceiling == 0.6
    raised = _decide(lowered, "vllm_kv_cache", 1).next_config  # 0.5 is too small, 0.6 too large
    assert raised is not None and _util(raised) == 0.55
    last = _decide(raised, "vllm_kv_cache", 2)  # nothing on the grain left between 0.55 and 0.6
    assert last.changes == ("rollout max_num_seqs → 128",) and _util(last.next_config) == 0.55


def test_the_fix_shown_matches_the_direction() -> None:
    assert "higher rollout.gpu_memory_utilization" in fix_text(ErrorCategory.ROLLOUT_OOM, "vllm_kv_cache")
    assert "lowered" in fix_text(ErrorCategory.ROLLOUT_OOM, "vllm_startup_memory")
    assert "lower rollout.gpu_memory_utilization" in fix_text(ErrorCategory.ROLLOUT_OOM, "vllm_wake_up")
    assert fix_text(ErrorCategory.GPU_OOM, "torch_cuda_oom").startswith("relaunch with offload")
    d = _decide(AttemptConfig(features=FeatureSet()), "vllm_kv_cache", n=3, retries=3)  # out of retries
    assert d.suggestions[0] == fix_text(ErrorCategory.ROLLOUT_OOM, "vllm_kv_cache")


def test_the_real_h200_startup_log_gets_the_lowering_fix() -> None:
    text = (REAL_H200 / "dapo-fsdp-vllm-startup-memory-attempt1.log").read_text(encoding="utf-8")
    found = classify(text).primary
    assert found is not None and (found.category, found.kind) == (ErrorCategory.ROLLOUT_OOM, "vllm_startup_memory")
    d = _decide(AttemptConfig(features=FeatureSet()), found.kind, evidence=found.excerpt)
    assert _util(d.next_config) == 0.5


def test_the_real_h200_sleep_failure_under_a_shared_gpu_lowers_the_share() -> None:
    # The H200 harness's first OOM try: another process took memory while vLLM slept; it read `unknown` (no relaunch).
    log = Path(__file__).resolve().parents[1] / "logs" / "corpus" / "rollout_oom__vllm_sleep_memory_grew__h200_holder_during_sleep.log"
    found = classify(log.read_text(encoding="utf-8")).primary
    assert found is not None and (found.category, found.kind) == (ErrorCategory.ROLLOUT_OOM, "vllm_sleep_memory_grew")
    lowered = _decide(AttemptConfig(features=FeatureSet()), found.kind, base=0.6, evidence=found.excerpt)
    assert lowered.relaunch and _util(lowered.next_config) == 0.5
    # At the floor (the harness ran at 0.3) eager mode would not help: the user is told to free the GPU instead.
    floor = _decide(AttemptConfig(features=FeatureSet()), found.kind, base=UTIL_MIN, evidence=found.excerpt)
    assert not floor.relaunch and floor.next_config is None
    assert "shared" in fix_text(ErrorCategory.ROLLOUT_OOM, "vllm_sleep_memory_grew")


def test_a_raise_stays_in_the_room_the_gpu_has() -> None:
    # The H200 attempt's workers saw "device memory used/total (GB): 63.67/139.80" (another process held 63 GB).
    text = (REAL_H200 / "dapo-fsdp-vllm-startup-memory-attempt1.log").read_text(encoding="utf-8")
    used = gpu_used_share(text)
    assert used == round(63.67 / 139.80, 4)
    up = _decide(AttemptConfig(features=FeatureSet()), "vllm_kv_cache", base=0.4, used=used)
    assert _util(up.next_config, 0.4) == 0.5  # 1 - 0.455 leaves room for 0.5, not 0.6
    full = _decide(AttemptConfig(features=FeatureSet()), "vllm_kv_cache", base=0.5, used=used)
    assert full.changes == ("rollout max_num_seqs → 128",) and _util(full.next_config, 0.5) == 0.5  # no room: never up
    assert gpu_used_share("no memory lines here") is None


@settings(max_examples=300, deadline=None)
@given(kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=40),
       base=st.sampled_from([0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]),
       free=st.floats(min_value=0.1, max_value=0.95),
       used=st.none() | st.floats(min_value=0.0, max_value=0.9))  # fmt: skip
def test_the_ladder_is_bounded_and_never_oscillates(kinds: list[str], base: float, free: float,
                                                     used: float | None) -> None:  # fmt: skip
    config, tried, steps = AttemptConfig(features=FeatureSet()), [base], 0
    evidence = H200_FREE.replace("75.62/139.8", f"{free * 100:.2f}/100.0")
    for n, kind in enumerate(kinds):
        before = _util(config, base)
        d = _decide(config, kind, n, base=base, evidence=evidence, retries=100, used=used)
        if not d.relaunch:
            break
        steps += 1
        config = d.next_config  # type: ignore[assignment]
        after = _util(config, base)
        if after != before:
            # The direction the message asks for, never the other; never a share tried before; within bounds.
            assert (after > before) == (kind in SHARE_TOO_SMALL), (kind, before, after)
            if after > before and used is not None:
                assert after <= 1.0 - used, (used, after)  # a raise only into the room the GPU has
            assert after not in tried, (kinds[: n + 1], tried, after)
            assert UTIL_MIN <= after <= UTIL_MAX
            tried.append(after)
            lo, hi = config.tweaks.rollout_util_floor, config.tweaks.rollout_util_ceiling
            assert (lo is None or lo < after) and (hi is None or after < hi)  # strictly inside what was proved
        else:  # max_num_seqs or eager changed instead: the share stays where it was
            assert d.changes[0].startswith(("rollout max_num_seqs", "rollout enforce_eager")), d.changes
    assert steps <= 13 + 3 + 1  # every share on the 0.05 grain once, max_num_seqs thrice, eager once


def test_each_vllm_and_sglang_memory_message_has_its_kind() -> None:
    """One line per message, as vLLM / SGLang raise it (their sources), classified to the kind the ladder keys on."""
    lines = {
        "vllm_kv_cache": "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
        "when initializing the engine.",
        "vllm_max_len": "ValueError: To serve at least one request with the models's max seq len (118000), (6.30 GiB KV "
        "cache is needed, which is larger than the available KV cache memory (6.11 GiB).",
        "vllm_startup_memory": H200_FREE,
        "vllm_sampler_warmup": "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
        "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
        "sglang_memory": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        "sglang_cuda_graph": "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB",
    }
    for kind, line in lines.items():
        found = classify(f"Traceback (most recent call last):\n{line}\n").primary
        assert found is not None and (found.category, found.kind) == (ErrorCategory.ROLLOUT_OOM, kind), (kind, found)
    warm = _decide(AttemptConfig(features=FeatureSet()), "vllm_sampler_warmup")
    assert warm.changes == ("rollout max_num_seqs → 128",) and _util(warm.next_config) == 0.6
