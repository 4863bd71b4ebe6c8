"""Preflight for FRAMEWORK=megatron: is the Megatron stack in the target, and the bridge verl will import (pure).

verl's Megatron engine needs megatron-core and TransformerEngine with its PyTorch extension, and builds the model
through a bridge: Megatron-Bridge by default in 0.9.x (``megatron.vanilla_mbridge: False``; verl's pin
``megatron-bridge==0.5.2`` is not on PyPI), or the legacy ``mbridge`` package with ``vanilla_mbridge=True``. A missing
piece fails only in ``init_model``, minutes after launch; on the H200 the first Megatron run needed the override
(docs/GPU.md §6). The probe finds modules without importing them (no torch/CUDA start-up in preflight).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from verl_async_dapo.verl.user_overrides import user_value
from verl_async_dapo.wording import Say, Term, Text

VANILLA_KEY = "actor_rollout_ref.actor.megatron.vanilla_mbridge"
# Where verl 0.9.x declares the bridge choice; older configs without the key have no Megatron-Bridge default.
ENGINE_CONFIG = "verl/trainer/config/engine/megatron.yaml"
STACK = {
    "megatron.core": "megatron-core",
    "transformer_engine": "transformer-engine",
    "transformer_engine_torch": "TransformerEngine's PyTorch extension (transformer-engine-torch)",
}
BRIDGES = ("megatron.bridge", "mbridge")
# Looked up as an installed distribution, not a module: its wheel puts the extension under
# transformer_engine/wheel_lib/ (seen in the one built on the H200), and TE checks it by distribution version.
DISTRIBUTIONS = ("transformer_engine_torch",)
PROBE_SCRIPT = (
    "import importlib.util as u, importlib.metadata as m, json\n"
    "def f(n):\n"
    "    try:\n        return m.version(n) is not None if n in D else u.find_spec(n) is not None\n"
    "    except (ImportError, ValueError, m.PackageNotFoundError):\n        return False\n"
    f"D = {list(DISTRIBUTIONS)!r}\n"
    f"print(json.dumps({{n: f(n) for n in {[*STACK, *BRIDGES]!r}}}))\n"
)
_DEFAULT_RE = re.compile(r"^vanilla_mbridge:\s*(\w+)", re.MULTILINE)
_OVERRIDE = Term(mcp=f"the start_training argument overrides=[\"{VANILLA_KEY}=True\"]",
                 cli=f"--override {VANILLA_KEY}=True")  # fmt: skip


@dataclass(frozen=True)
class Finding:
    name: str
    ok: bool
    detail: str
    fix: Text | None = None


def parse_probe(stdout: str) -> dict[str, bool] | None:
    """The probe's answer; None when it printed something else (then the check says it could not tell)."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except json.JSONDecodeError:
        return None
    return {str(k): bool(v) for k, v in data.items()} if isinstance(data, dict) else None


def megatron_findings(found: Mapping[str, bool], overrides: Sequence[str], engine_yaml: str | None) -> list[Finding]:
    """What preflight reports for a Megatron run, from the probe, the user's overrides and verl's engine config."""
    out: list[Finding] = []
    missing = [label for module, label in STACK.items() if not found.get(module)]
    if missing:
        out.append(Finding("megatron stack", False, f"FRAMEWORK=megatron but the target lacks {', '.join(missing)}",
                           "install megatron-core and TransformerEngine with its PyTorch extension in the target "
                           "(the extension is source-only on PyPI: bench/gpu/build_te.sh builds it), or use "
                           "FRAMEWORK=fsdp"))  # fmt: skip
    else:
        out.append(Finding("megatron stack", True, "megatron-core, TransformerEngine and its PyTorch extension found"))
    default = _DEFAULT_RE.search(engine_yaml or "")
    if default is None:
        return out  # a verl without the bridge choice (before 0.9): nothing more to tell
    vanilla = (user_value(overrides, VANILLA_KEY) or default.group(1)).lower() == "true"
    has_bridge, has_mbridge = found.get("megatron.bridge", False), found.get("mbridge", False)
    if vanilla and not has_mbridge:
        out.append(Finding("megatron bridge", False, f"{VANILLA_KEY}=True but mbridge is not installed",
                           "pip install mbridge in the target, or drop the override to use Megatron-Bridge"))  # fmt: skip
    elif vanilla:
        out.append(Finding("megatron bridge", True, "legacy mbridge (vanilla_mbridge=True)"))
    elif has_bridge:
        out.append(Finding("megatron bridge", True, "Megatron-Bridge (verl's default)"))
    elif has_mbridge:
        out.append(Finding("megatron bridge", False,
                           "verl imports Megatron-Bridge (vanilla_mbridge is False) and the target has only mbridge",
                           Say("start with {o} (verl's legacy bridge, deprecated but present in 0.9.x)",
                               o=_OVERRIDE)))  # fmt: skip
    else:
        out.append(Finding("megatron bridge", False, "neither Megatron-Bridge nor mbridge is installed",
                           Say("pip install mbridge in the target and start with {o} (verl's pin "
                               "megatron-bridge==0.5.2 is not on PyPI)", o=_OVERRIDE)))  # fmt: skip
    return out
