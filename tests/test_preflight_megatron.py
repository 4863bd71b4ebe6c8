"""Preflight for FRAMEWORK=megatron: the stack and the bridge verl 0.9.x imports (the H200's first Megatron run
needed `vanilla_mbridge=True`: docs/GPU.md §6). The probe runs for real on this host, where no Megatron is installed;
the combinations the host cannot show are judged on the probe's answer (pure)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verl_async_dapo.plans.preflight import CheckStatus, run_preflight
from verl_async_dapo.plans.preflight_megatron import (
    ENGINE_CONFIG,
    PROBE_SCRIPT,
    VANILLA_KEY,
    megatron_findings,
    parse_probe,
)
from verl_async_dapo.settings import TrainingSettings
from verl_async_dapo.targets.host import HostTarget
from verl_async_dapo.wording import Face, render

# The bridge lines of verl 0.9.1's verl/trainer/config/engine/megatron.yaml (the wheel's text).
ENGINE_091 = "# oc.select: default val for ref.megatron.use_mbridge\nuse_mbridge: True\n\n" \
             "# oc.select: default val for ref.megatron.vanilla_mbridge\nvanilla_mbridge: False\n"  # fmt: skip
FULL = {"megatron.core": True, "transformer_engine": True, "transformer_engine_torch": True}
VANILLA = (f"{VANILLA_KEY}=True",)


@pytest.fixture
def venv_python_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host target runs `python3` from PATH: the venv's (as in tests/test_preflight.py)."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _by_name(findings: list, name: str):  # type: ignore[no-untyped-def]
    (f,) = [f for f in findings if f.name == name]
    return f


def test_the_probe_answers_for_this_python_without_importing() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], capture_output=True, text=True, check=True).stdout
    found = parse_probe(out)
    assert found is not None and set(found) == {*FULL, "megatron.bridge", "mbridge"}
    assert not any(found.values())  # none of them is installed in the test venv
    assert parse_probe("Traceback …") is None and parse_probe("") is None


def test_only_mbridge_on_verl_09_names_the_override() -> None:
    bridge = _by_name(megatron_findings({**FULL, "mbridge": True}, (), ENGINE_091), "megatron bridge")
    assert not bridge.ok and "the target has only mbridge" in bridge.detail
    assert f"--override {VANILLA_KEY}=True" in render(bridge.fix, Face.CLI)
    assert f'overrides=["{VANILLA_KEY}=True"]' in render(bridge.fix, Face.MCP)
    # With the override (what the H200 run used) and mbridge present, both checks pass.
    assert all(f.ok for f in megatron_findings({**FULL, "mbridge": True}, VANILLA, ENGINE_091))
    # Megatron-Bridge present: verl's default path is fine without any override.
    assert all(f.ok for f in megatron_findings({**FULL, "megatron.bridge": True}, (), ENGINE_091))


def test_the_override_without_mbridge_and_a_verl_without_the_bridge_choice() -> None:
    bridge = _by_name(megatron_findings({**FULL, "megatron.bridge": True}, VANILLA, ENGINE_091), "megatron bridge")
    assert not bridge.ok and "mbridge is not installed" in bridge.detail
    # An engine config without vanilla_mbridge (or none found): only the stack is judged.
    assert [f.name for f in megatron_findings(FULL, (), None)] == ["megatron stack"]
    assert [f.name for f in megatron_findings(FULL, (), "use_mbridge: False\n")] == ["megatron stack"]


async def test_host_preflight_warns_when_megatron_is_missing(host_verl_tree: Path, venv_python_first: None) -> None:
    home = str(host_verl_tree)
    assert (host_verl_tree / ENGINE_CONFIG).read_text().count("vanilla_mbridge: False") == 1  # the real 0.9.1 config
    report = await run_preflight(HostTarget(), TrainingSettings.model_validate({"VERL_HOME": home,
                                                                                "FRAMEWORK": "megatron"}))  # fmt: skip
    stack = next(c for c in report.checks if c.name == "megatron stack")
    assert stack.status is CheckStatus.WARNING and "lacks megatron-core, transformer-engine" in stack.detail
    bridge = next(c for c in report.checks if c.name == "megatron bridge")
    assert bridge.status is CheckStatus.WARNING and "neither Megatron-Bridge nor mbridge" in bridge.detail
    assert "megatron stack" not in [c.name for c in report.errors]  # a warning: start is not refused for it
    vanilla = await run_preflight(HostTarget(), TrainingSettings.model_validate(
        {"VERL_HOME": home, "FRAMEWORK": "megatron", "EXTRA_OVERRIDES": f"{VANILLA_KEY}=True"}))  # fmt: skip
    assert "mbridge is not installed" in next(c for c in vanilla.checks if c.name == "megatron bridge").detail
    fsdp = await run_preflight(HostTarget(), TrainingSettings.model_validate({"VERL_HOME": home, "FRAMEWORK": "fsdp"}))
    assert not [c for c in fsdp.checks if c.name.startswith("megatron")]
