"""The README's first command, ``python3 scripts/install.py``, on Debian's own Python (PEP 668 marker present, so
``pip install .`` is refused there): it installs into a venv of its own and the linked command serves MCP.

Three ways to a venv with pip, as users meet them: ensurepip (python3-venv installed), no ensurepip but the system's
pip (``pip --python``), and neither (pip from its own wheel, offline through PIP_FIND_LINKS). No package index: the
dependencies come from a wheelhouse packed from this test venv (tests/harness/wheelhouse.py), pip's configuration
files are ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters

from harness.standin_files import put_tree
from harness.wheelhouse import build_wheelhouse
from mcp import Client

REPO = Path(__file__).resolve().parents[1]
DEBIAN_PYTHON = Path("/usr/bin/python3")


def _marker(python: Path) -> Path:
    stdlib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    return Path(stdlib) / "EXTERNALLY-MANAGED"


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the project's wheel, a wheelhouse of its dependencies and pip)."""
    if not DEBIAN_PYTHON.exists() or not _marker(DEBIAN_PYTHON).exists():
        pytest.skip("needs Debian's /usr/bin/python3 with its EXTERNALLY-MANAGED marker (Debian 12+ / Ubuntu 23.04+)")
    root = tmp_path_factory.mktemp("offline")
    house = build_wheelhouse(root / "wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "project"), str(REPO)],
                   check=True, timeout=600, cwd=root)  # fmt: skip
    (wheel,) = (root / "project").glob("verl_async_dapo-*.whl")
    return wheel, house


def _env(tmp_path: Path, house: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(house), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"), "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config")}


def test_plain_pip_install_is_refused_on_debian_python(offline: tuple[Path, Path], tmp_path: Path) -> None:
    """The premise: without the installer, pip refuses Debian's Python (and the escape hatch is not set here)."""
    wheel, house = offline
    refused = subprocess.run([str(DEBIAN_PYTHON), "-m", "pip", "install", str(wheel)], env=_env(tmp_path, house),
                             capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr


@pytest.mark.parametrize("way", ["ensurepip", "system_pip", "pip_wheel_only"])
def test_install_line_installs_into_its_own_venv_and_serves(offline: tuple[Path, Path], tmp_path: Path,
                                                            way: str) -> None:  # fmt: skip
    wheel, house = offline
    env = _env(tmp_path, house)
    python, extra = DEBIAN_PYTHON, [] if way == "ensurepip" else ["--no-ensurepip"]
    if way == "pip_wheel_only":  # a Python with neither ensurepip in use nor a pip module: a pip-less venv of Debian's
        subprocess.run([str(DEBIAN_PYTHON), "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True,
                       timeout=120)  # fmt: skip
        python = tmp_path / "bare" / "bin" / "python"
        assert subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, check=False).returncode
    venv, bin_dir = tmp_path / "home-venv", tmp_path / "bin"
    done = subprocess.run([str(python), str(REPO / "scripts" / "install.py"), "--source", str(wheel), "--venv",
                           str(venv), "--bin-dir", str(bin_dir), *extra], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=900, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    command = bin_dir / "verl-async-dapo"
    assert command.is_symlink() and command.resolve() == (venv / "bin" / "verl-async-dapo").resolve()
    assert f"installed: {command}" in done.stdout and "preflight" in done.stdout, done.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import verl_async_dapo; print(verl_async_dapo.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert where.stdout.startswith(str(venv)), where.stdout  # the venv's own copy, not this checkout
    system = subprocess.run([str(DEBIAN_PYTHON), "-c", "import verl_async_dapo"], env=env, cwd=tmp_path,
                            capture_output=True, check=False, timeout=60)  # fmt: skip
    assert system.returncode != 0  # nothing went into Debian's Python
    helped = subprocess.run([str(command), "--help"], env=env, cwd=tmp_path, capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    assert helped.returncode == 0 and "serve" in helped.stdout, helped.stderr

    async def serve() -> list[str]:
        params = StdioServerParameters(command=str(command), args=["serve"], env=env, cwd=str(tmp_path))
        async with Client(params, mode="legacy") as client:
            return [t.name for t in (await client.list_tools()).tools]

    names = anyio.run(serve)
    assert "start_training" in names and "list_containers" in names, names


def test_the_docs_show_commands_that_work() -> None:
    """README's first command is the install line tested above; INSTALL.md has no `mcp dev` recipe and every npx
    runs without a prompt (``-y``)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in first_block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert commands[0] == "python3 scripts/install.py && ~/.local/bin/verl-async-dapo serve", commands
    assert commands[1] == "bash tests/run.sh", commands
    assert "preflight" in readme and "claude mcp add" in readme
    for doc in (REPO / "README.md", REPO / "docs" / "INSTALL.md", REPO / "SKILL.md"):
        text = doc.read_text(encoding="utf-8")
        assert "\nmcp dev " not in text, doc
        for line in text.splitlines():
            if "npx " in line:
                assert "npx -y " in line, (doc, line)


@pytest.fixture(scope="module")
def readme_install(offline: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The README's install line as a fresh user runs it (HOME a new directory, ~/.local/bin not on PATH), once for
    the tests below: (that HOME, what the installer printed)."""
    wheel, house = offline
    home = tmp_path_factory.mktemp("readme-home")
    installed = subprocess.run([str(DEBIAN_PYTHON), str(REPO / "scripts" / "install.py"), "--source", str(wheel)],
                               env={**_env(home, house), "SHELL": "/bin/bash"}, cwd=home, capture_output=True,
                               text=True, timeout=900, check=False)  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    return home, installed.stdout


def test_readme_line_by_line_reaches_a_started_run_on_the_test_image(offline: tuple[Path, Path],
                                                                     readme_install: tuple[Path, str],
                                                                     container: Any) -> None:  # fmt: skip
    """README: install (command 1's first half), preflight a target, start. The installed command, the test image's
    container, the verl stand-in; no GPU there, so the explicit --allow-no-gpus a user would need too."""
    _, house = offline
    tmp_path, _ = readme_install
    env = {**_env(tmp_path, house), "TRAIN_STEPS": "3", "FRAMEWORK": "fsdp", "TRAINER_GPUS": "1", "ROLLOUT_GPUS": "1",
           "ROLLOUT_TP": "1", "SWANLAB_MODE": "disabled"}  # fmt: skip
    if os.environ.get("DOCKER_HOST"):
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    put_tree(container)
    home_bin = tmp_path / ".local" / "bin"  # the README's path: ~/.local/bin/verl-async-dapo with HOME=tmp_path
    command = str(home_bin / "verl-async-dapo")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([command, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                              check=False, stdin=subprocess.DEVNULL)  # fmt: skip

    refused = cli("preflight", "--container", container.name)
    assert refused.returncode == 1 and "[error] gpus: " in refused.stdout and "--allow-no-gpus" in refused.stdout
    checked = cli("preflight", "--container", container.name, "--allow-no-gpus")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    started = cli("start", "--container", container.name, "--allow-no-gpus", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    try:
        assert run_id in cli("runs").stdout
    finally:
        assert cli("stop", run_id, "--yes").returncode == 0


def test_readme_scripts_and_plugin_find_the_installed_cli_with_local_bin_off_path(offline: tuple[Path, Path],
                                                                                  readme_install: tuple[Path, str],
                                                                                  ) -> None:  # fmt: skip
    """Issue 28 (blocker): the README's install, then its script lines, in a shell whose PATH lacks ~/.local/bin (a
    fresh user's, before a new login). Every script reaches the installed CLI (not "not installed: run install.py
    first"), the installer says how to put it on PATH, and the plugin's .mcp.json command serves MCP."""
    _, house = offline
    tmp_path, printed = readme_install
    env = {**_env(tmp_path, house), "CONTAINER": "host", "TRAIN_STEPS": "1", "SWANLAB_MODE": "disabled",
           "VERL_HOME": str(tmp_path / "no-verl"), "SHELL": "/bin/bash"}  # fmt: skip
    assert "not on PATH" in printed and 'export PATH="$HOME/.local/bin:$PATH"' in printed
    assert ">> ~/.bashrc" in printed, printed
    assert str(tmp_path / ".local" / "bin") not in env["PATH"]
    for script in ("preflight_check.sh", "quick_start.sh", "run_dapo.sh"):
        done = subprocess.run(["bash", str(REPO / "scripts" / script)], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        output = done.stdout + done.stderr
        assert "not installed" not in output, (script, output)
        # The CLI ran: preflight's own lines (a host without verl fails them, and says so).
        assert "[ok] target: host is reachable" in output or "preflight failed" in output, (script, output)
        assert f"VERL_HOME {tmp_path / 'no-verl'} does not exist" in output, (script, output)

    servers = json.loads((REPO / ".mcp.json").read_text("utf-8"))["mcpServers"]["verl-async-dapo"]
    args = [a.replace("${CLAUDE_PLUGIN_ROOT}", str(REPO)) for a in servers["args"]]

    async def serve() -> list[str]:
        params = StdioServerParameters(command=servers["command"], args=args, env=env, cwd=str(tmp_path))
        async with Client(params, mode="legacy") as client:
            return [t.name for t in (await client.list_tools()).tools]

    assert "start_training" in anyio.run(serve)
