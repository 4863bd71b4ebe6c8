"""Against the real SwanLab SDK: local mode writes data with no network, and the SDK reads our env as intended.

The SDK runs in a child process (it hooks stdout and keeps global run state), with the same
loopback-only socket guard installed before it is imported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from verl_async_dapo.swanlab import PUBLIC_API_HOST, PUBLIC_WEB_HOST, SwanlabConfig, launch_env, run_link

_GUARD = textwrap.dedent(
    """
    import socket, sys
    BLOCKED = []
    _connect, _gai = socket.socket.connect, socket.getaddrinfo
    def connect(self, address):
        if isinstance(address, tuple) and address[0] != "127.0.0.1":
            BLOCKED.append(address)
            raise OSError("blocked by test guard")
        return _connect(self, address)
    def getaddrinfo(host, *a, **k):
        if host not in (None, "127.0.0.1", b"127.0.0.1"):
            BLOCKED.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "blocked by test guard")
        return _gai(host, *a, **k)
    socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
    """
)

# What verl/utils/tracking.py does with SWANLAB_* (verl passes no host).
_VERL_LIKE_RUN = textwrap.dedent(
    """
    import os, swanlab
    if os.environ.get("SWANLAB_API_KEY"):
        swanlab.login(os.environ["SWANLAB_API_KEY"])
    swanlab.init(
        project="verl-dapo", experiment_name="canary-exp", config={"FRAMEWORK": "verl"},
        logdir=os.environ.get("SWANLAB_LOG_DIR", "swanlog"), mode=os.environ.get("SWANLAB_MODE", "cloud"),
    )
    for step in range(3):
        swanlab.log({"critic/score/mean": 0.1 * step}, step=step)
    swanlab.finish()
    print("BLOCKED=" + repr(BLOCKED))
    """
)


def _child_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWANLAB_") and k != "COLUMNS"}
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env.pop(name, None)
    env.update(HOME=str(tmp_path / "home"), SWANLAB_ROOT=str(tmp_path / "swanlab-root"), PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _run(code: str, tmp_path: Path, extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _GUARD + code],
        cwd=tmp_path,
        env=_child_env(tmp_path, extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_local_mode_writes_data_without_network(tmp_path: Path) -> None:
    log_dir = tmp_path / "swanlog-local"
    cfg = SwanlabConfig(mode="local", log_dir=str(log_dir))  # type: ignore[arg-type]
    public, secret = launch_env(cfg)
    assert secret == {}
    proc = _run(_VERL_LIKE_RUN, tmp_path, public)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "BLOCKED=[]" in proc.stdout, proc.stdout[-2000:]

    runs = sorted(log_dir.glob("run-*"))
    assert len(runs) == 1, list(log_dir.iterdir())
    metric_files = [p for p in runs[0].rglob("*") if p.is_file() and p.suffix == ".log" and "logs" in p.parts]
    points = [json.loads(line) for p in metric_files for line in p.read_text().splitlines() if line.strip()]
    assert [round(p["data"], 6) for p in points] == [0.0, 0.1, 0.2]
    [summary] = [json.loads(p.read_text()) for p in runs[0].rglob("_summary.json")]
    assert summary["num"] == 3
    assert list(runs[0].glob("*.swanlab")), "the run's record file is missing"

    # Our link for local mode is the very command SwanLab prints, and COLUMNS keeps it on one line.
    link = run_link(cfg, None)
    assert link == f"swanlab watch {log_dir}"
    assert any(link in line for line in proc.stdout.splitlines()), proc.stdout[-2000:]


_GREETING = textwrap.dedent(
    """
    from rich.text import Text
    from swanlab.sdk.internal.pkg import console
    url = "http://10.143.2.129:8000/@someusername/verl-dapo-experiments/runs/cm9x8abcdefghijklmnop"
    console.info("🚀 View run", Text("qwen3-8b-dapo-megatron-run", "yellow"), "at", Text(url, style="link " + url))
    """
)
_GREETING_RE = re.compile(r"swanlab:.*View run (.+?) at (https?://\S+)")
_URL = "http://10.143.2.129:8000/@someusername/verl-dapo-experiments/runs/cm9x8abcdefghijklmnop"


def test_greeting_url_survives_on_one_line_only_with_our_columns(tmp_path: Path) -> None:
    cfg = SwanlabConfig(mode="cloud", host="http://10.143.2.129:8000", api_key="k")  # type: ignore[arg-type]
    public, _ = launch_env(cfg)
    wide = _run(_GREETING, tmp_path, {"COLUMNS": public["COLUMNS"]})
    assert wide.returncode == 0, wide.stderr
    match = _GREETING_RE.search(wide.stdout)
    assert match and match.group(2) == _URL and run_link(cfg, match.group(2)) == _URL
    # Without it, rich wraps at 80 columns in a log file and the URL is split: why COLUMNS is set.
    narrow = _run(_GREETING, tmp_path, {})
    match = _GREETING_RE.search(narrow.stdout)
    assert not (match and match.group(2) == _URL)


@pytest.mark.parametrize(
    ("host", "api", "web"),
    [
        ("http://10.143.2.129:8000", "http://10.143.2.129:8000", "http://10.143.2.129:8000"),
        (None, PUBLIC_API_HOST, PUBLIC_WEB_HOST),
    ],
)
def test_sdk_resolves_our_env_to_the_intended_server(
    host: str | None, api: str, web: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from swanlab.sdk.internal.settings import Settings

    cfg = SwanlabConfig(mode="cloud", host=host, api_key="sdk-key")  # type: ignore[arg-type]
    public, secret = launch_env(cfg)
    for name, value in {**public, **secret}.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert (settings.api_host, settings.web_host, settings.mode, settings.api_key) == (api, web, "online", "sdk-key")
    # the login URL we check is the one the SDK would use: Client posts to fmt(api_host) + "/api/login/api_key"
    assert cfg.login_url == f"{settings.api_host}/api/login/api_key"


def test_sdk_with_only_web_host_talks_to_the_public_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why launch_env sets SWANLAB_API_HOST too: with only SWANLAB_WEB_HOST, 0.10 uses the public API host."""
    from swanlab.sdk.internal.settings import Settings

    monkeypatch.setenv("SWANLAB_WEB_HOST", "http://10.143.2.129:8000")
    assert Settings().api_host == PUBLIC_API_HOST
