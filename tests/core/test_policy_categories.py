"""The supervisor's decision for the categories issue 26 added: none is relaunched, each says its fix.

A relaunch with the same settings cannot help a data, reward-function, checkpoint, accelerator-runtime or
communication error (the same data, function, checkpoint, device or network fail the same way), so the
decision stops the run and hands the user the category's fix; the engine's generation-time OOM is relaunched
with fewer concurrent sequences, never with actor offload.
"""

from __future__ import annotations

import pytest

from verl_async_dapo.categories import CATEGORY_INFO, ErrorCategory
from verl_async_dapo.features import FeatureSet
from verl_async_dapo.policy import AttemptConfig, decide, fix_text

NEW = (
    ErrorCategory.DATA_ERROR,
    ErrorCategory.REWARD_ERROR,
    ErrorCategory.CHECKPOINT_ERROR,
    ErrorCategory.ACCELERATOR_ERROR,
    ErrorCategory.COMM_ERROR,
)


@pytest.mark.parametrize("category", NEW, ids=[c.value for c in NEW])
def test_a_new_category_stops_the_run_with_its_fix(category: ErrorCategory) -> None:
    info = CATEGORY_INFO[category]
    assert not info.auto_retry and info.explanation and info.fix
    decision = decide(
        AttemptConfig(features=FeatureSet()),
        category,
        relaunches_so_far=0,
        max_retries=5,
        base_gpu_memory_utilization=0.6,
    )
    assert not decision.relaunch and decision.next_config is None
    assert decision.reason.startswith(category.value)
    assert decision.suggestions[0] == info.fix == fix_text(category, None)


def test_every_category_has_its_text_and_only_the_two_oom_categories_retry() -> None:
    assert set(CATEGORY_INFO) == set(ErrorCategory)
    retried = {c for c, info in CATEGORY_INFO.items() if info.auto_retry}
    assert retried == {ErrorCategory.GPU_OOM, ErrorCategory.ROLLOUT_OOM}


def test_the_engines_generation_oom_relaunches_with_fewer_sequences_not_offload() -> None:
    decision = decide(
        AttemptConfig(features=FeatureSet()),
        ErrorCategory.ROLLOUT_OOM,
        relaunches_so_far=0,
        max_retries=5,
        base_gpu_memory_utilization=0.6,
        kind="generation_oom",
    )
    assert decision.relaunch and decision.changes == ("rollout max_num_seqs → 128",)
    assert decision.next_config is not None and decision.next_config.features.oom_appended == ()
    assert "max_num_seqs" in fix_text(ErrorCategory.ROLLOUT_OOM, "generation_oom")
