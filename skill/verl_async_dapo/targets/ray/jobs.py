"""Our jobs on a Ray cluster's Jobs API: the submission id a job dir maps to, the exit code a job's final status
means, and the entrypoint check that keeps secrets out of Ray's (logged) command line. Pure helpers of RayTarget."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

from verl_async_dapo.exceptions import InvalidTargetInput
from verl_async_dapo.targets.base import check_target_path
from verl_async_dapo.targets.ray.api import JobInfo
from verl_async_dapo.verl.launch_env import MIN_SECRET_LENGTH, has_credentials, looks_secret

EXIT_STOPPED = 143  # what a TERMed process reports on the other targets
EXIT_FAILED_UNKNOWN = 1

_SID_PART_RE = re.compile(r"[^A-Za-z0-9_-]+")
_SID_RE = re.compile(r"^vad-[A-Za-z0-9_-]{1,120}$")


def submission_id_for(job_dir: str) -> str:
    """Deterministic and readable: ``vad-<run>-<attempt>-<hash>`` (the hash keeps different dirs apart)."""
    check_target_path(job_dir, "job_dir")
    parts = [p for p in job_dir.rstrip("/").split("/") if p][-2:]
    slug = _SID_PART_RE.sub("_", "-".join(parts))[:80].strip("_-") or "job"
    digest = hashlib.sha256(job_dir.encode()).hexdigest()[:12]
    return f"vad-{slug}-{digest}"


@dataclass(frozen=True)
class _JobFile:
    """A path that names one of our jobs' files: its log (``is_log``) or its pgid marker."""

    is_log: bool
    info: JobInfo


def exit_code_of(info: JobInfo) -> int | None:
    if info.status == "SUCCEEDED":
        return 0
    if info.status == "STOPPED":
        return EXIT_STOPPED
    if info.status == "FAILED":
        return info.driver_exit_code if info.driver_exit_code else EXIT_FAILED_UNKNOWN
    return None


def _complete_lines(data: bytes, start: int) -> int:
    """End of the last complete line (``\\n`` or tqdm's ``\\r``) at or after ``start``."""
    end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    return end if end > start else start


def _check_no_secret_in(entrypoint: str, env: Mapping[str, str]) -> None:
    """Defence in depth: a secret-looking env value must never appear in the (logged) entrypoint."""
    for name, value in env.items():
        if (looks_secret(name) or has_credentials(value)) and len(value) >= MIN_SECRET_LENGTH and value in entrypoint:
            raise InvalidTargetInput(f"refusing to submit: the value of {name} appears in the job's command line")
