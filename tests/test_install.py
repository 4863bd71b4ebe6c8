"""`pip install .` builds a wheel that works on its own: installed into a fresh venv (its dependencies borrowed from
the test venv, so no index is needed), the console script answers ``--help``, serves MCP over stdio, and the
package is the installed copy, not this checkout (an editable install would hide a file missing from the wheel)."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import anyio
from mcp.client.stdio import StdioServerParameters

from mcp import Client

REPO = Path(__file__).resolve().parents[1]
# The installed wheel serves exactly the tools of the golden schema (tests/mcp/snapshots/tools.json).
EXPECTED_TOOLS = [t["name"] for t in json.loads((REPO / "tests" / "mcp" / "snapshots" / "tools.json").read_text())]


def _fresh_install(tmp_path: Path) -> Path:
    """A venv holding only the built wheel; returns its bin directory."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO)],
                   check=True, timeout=600, cwd=tmp_path)  # fmt: skip
    (wheel,) = wheels.glob("verl_async_dapo-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    # The dependencies, as a plain path: .pth files there (the checkout's editable hook) are not processed.
    (site / "borrowed_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, timeout=600, cwd=tmp_path)  # fmt: skip
    return venv / "bin"


def test_the_built_wheel_installs_and_serves(tmp_path: Path) -> None:
    bin_dir = _fresh_install(tmp_path)
    env = {"HOME": str(tmp_path), "VERL_ASYNC_DAPO_HOME": str(tmp_path / "state"),
           "VERL_ASYNC_DAPO_CONFIG_DIR": str(tmp_path / "config"), "PATH": "/usr/bin:/bin"}  # fmt: skip
    where = subprocess.run([str(bin_dir / "python"), "-c", "import verl_async_dapo; print(verl_async_dapo.__file__)"],
                           env=env, cwd=tmp_path, capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout
    helped = subprocess.run([str(bin_dir / "verl-async-dapo"), "--help"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert helped.returncode == 0 and "serve" in helped.stdout, helped.stderr

    async def serve() -> list[str]:
        params = StdioServerParameters(command=str(bin_dir / "verl-async-dapo"), args=["serve"], env=env,
                                       cwd=str(tmp_path))  # fmt: skip
        async with Client(params, mode="legacy") as client:
            return [t.name for t in (await client.list_tools()).tools]

    names = anyio.run(serve)
    assert names == EXPECTED_TOOLS, names


def test_the_serve_banner_names_the_command_as_it_can_be_typed(tmp_path: Path) -> None:
    """Issue 28: right after the installer, ~/.local/bin is often not on PATH; the banner's `claude mcp add … serve`
    then names the full path (a bare name would not start), and the bare name when PATH finds this same command."""
    from verl_async_dapo.cli import serve_banner
    from verl_async_dapo.cli.common import invoked_as

    bin_dir = tmp_path / ".local" / "bin"
    bin_dir.mkdir(parents=True)
    command = bin_dir / "verl-async-dapo"
    command.write_text("#!/bin/sh\n", encoding="utf-8")
    command.chmod(0o755)
    assert invoked_as(str(command), path="/usr/bin:/bin") == str(command)
    assert f"-- {command} serve" in serve_banner(invoked_as(str(command), path="/usr/bin:/bin"))
    assert invoked_as(str(command), path=f"/usr/bin:{bin_dir}") == "verl-async-dapo"


def test_the_base_install_leaves_out_the_chart_and_swanlab_sdks_and_the_readme_says_the_size() -> None:
    """Issue 28, item 8: matplotlib and the SwanLab SDK are extras (charts, swanlab); the server and the CLI never
    import the SDK (the key check is stdlib HTTP); the README gives the measured size of both installs."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    base = " ".join(project["dependencies"])
    assert "matplotlib" not in base and "swanlab" not in base, base
    assert project["optional-dependencies"]["charts"] == ["matplotlib>=3.7"]
    assert project["optional-dependencies"]["swanlab"] == ["swanlab>=0.7"]
    code = ("import sys, verl_async_dapo.server, verl_async_dapo.cli, verl_async_dapo.runs, verl_async_dapo.sessions; "
            "import verl_async_dapo.swanlab.check; print(sorted(m for m in ('swanlab', 'matplotlib') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout
    readme = (REPO / "README.md").read_text("utf-8")
    assert "--with charts" in readme and "Install size" in readme
