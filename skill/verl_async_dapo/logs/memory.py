"""GPU memory facts a verl log states (pure).

verl's FSDP workers print ``Before FSDP, …`` / ``After FSDP, memory allocated (GB): …, device memory used/total
(GB): 63.67/139.80`` (``verl/utils/profiler/performance.py``) while they start, before the rollout engine asks
for its share: what is used then (other processes, a leftover engine, the trainer's own weights) is what the
engine cannot have. The rollout-OOM ladder raises the share only into the room this leaves.
"""

from __future__ import annotations

import re

_USED_TOTAL_RE = re.compile(r"device memory used/total \(GB\): (?P<used>[\d.]+)/(?P<total>[\d.]+)")


def gpu_used_share(text: str) -> float | None:
    """The share of the GPU in use at the last such line (None when the log has none)."""
    last = None
    for last in _USED_TOTAL_RE.finditer(text):  # noqa: B007 (only the last one counts)
        pass
    if last is None or float(last.group("total")) <= 0:
        return None
    return round(float(last.group("used")) / float(last.group("total")), 4)
