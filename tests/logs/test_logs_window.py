"""One classification window for every reader: the CLI's `classify FILE` reads what the supervisor reads at an
attempt's end (the log's last CLASSIFY_WINDOW_BYTES through the target), so both name the same error.

The log is made of real logs from the corpus (each fixture's first line names its source): a config error, then healthy
training output repeated until that error lies beyond the window, then a GPU OOM at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from verl_async_dapo.logs.classify import CLASSIFY_WINDOW_BYTES, classify, window_text
from verl_async_dapo.redact import redact
from verl_async_dapo.supervisor.attempt_log import attempt_error
from verl_async_dapo.targets.host import HostTarget

CORPUS = Path(__file__).parent / "corpus"
EARLY = "config_error__verl_validation__infer_tp_not_divisible.log"
HEALTHY = "none__h200_dapo_fsdp_healthy_6_steps.log"
LAST = "gpu_oom__torch_cuda_oom__entropy_from_logits_one_step_off.log"


def _body(name: str) -> bytes:
    return (CORPUS / name).read_bytes().split(b"\n", 1)[1]  # without the source line


def _log(tmp_path: Path) -> Path:
    healthy = _body(HEALTHY)
    repeats = CLASSIFY_WINDOW_BYTES // len(healthy) + 2
    path = tmp_path / "train.log"
    path.write_bytes(_body(EARLY) + healthy * repeats + _body(LAST))
    return path


async def test_the_cli_and_the_supervisor_classify_the_same_window_of_a_log(tmp_path: Path) -> None:
    path = _log(tmp_path)
    data = path.read_bytes()
    assert len(data) - len(_body(EARLY)) > CLASSIFY_WINDOW_BYTES  # the config error lies outside the window
    whole = classify(data.decode("utf-8", errors="replace")).primary
    assert whole is not None and whole.category.value == "config_error"  # read whole, the log would say config

    # The supervisor's path: the target's tail read of the window, then the attempt's error.
    tail = await HostTarget().read_tail(str(path), CLASSIFY_WINDOW_BYTES)
    supervisor = attempt_error(window_text(tail), 1, redact)
    assert supervisor is not None and supervisor.category == "gpu_oom"

    env = {**os.environ, "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"),
           "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config")}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "verl_async_dapo", "classify", "--json", str(path)],
                         capture_output=True, text=True, timeout=60, env=env, check=True)  # fmt: skip
    primary = json.loads(out.stdout)["primary"]
    assert (primary["category"], primary["kind"]) == (supervisor.category, supervisor.kind)
    assert primary["excerpt"] == supervisor.excerpt


def test_the_cli_classify_masks_the_secrets_the_context_holds(tmp_path: Path) -> None:
    key = "swk-canary-93ab41c0"  # no secret-looking shape: only the known value can mask it
    log = tmp_path / "train.log"
    body = _body(LAST).replace(b"torch.OutOfMemoryError: CUDA out of memory.",
                               f"torch.OutOfMemoryError: CUDA out of memory. {key}".encode(), 1)
    assert key.encode() in body
    log.write_bytes(body)
    env = {**os.environ, "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"),
           "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"), "SWANLAB_API_KEY": key}  # fmt: skip
    out = subprocess.run([sys.executable, "-m", "verl_async_dapo", "classify", "--json", str(log)],
                         capture_output=True, text=True, timeout=60, env=env, check=True)  # fmt: skip
    primary = json.loads(out.stdout)["primary"]
    assert primary["category"] == "gpu_oom"
    assert key not in out.stdout and "CUDA out of memory. ***" in primary["excerpt"]
