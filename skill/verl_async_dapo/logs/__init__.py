"""Reading verl's console log: clean lines, progress, and why a run failed (all pure)."""

from verl_async_dapo.logs.classify import Classification, Finding, classify, classify_tail
from verl_async_dapo.logs.progress import ProgressParser, parse_progress
from verl_async_dapo.logs.snapshot import ProgressSnapshot
from verl_async_dapo.logs.text import clean_lines, clean_text, strip_ansi, strip_ray_prefix

__all__ = [
    "Classification",
    "Finding",
    "ProgressParser",
    "ProgressSnapshot",
    "classify",
    "classify_tail",
    "clean_lines",
    "clean_text",
    "parse_progress",
    "strip_ansi",
    "strip_ray_prefix",
]
