"""The preflight's python3 probe: the Python the entry runs with, and whether it imports hydra, in one process."""

from __future__ import annotations

from dataclasses import dataclass

# The python3 check and the hydra check in one interpreter start (one exec in a container instead of two): line 1
# the version and sys.executable, line 2 "hydra <version>" or "hydra-error <why>" (hydra is what verl composes with).
PYTHON_SCRIPT = """import sys
print(sys.version.split()[0], sys.executable)
try:
    import hydra
    print("hydra", hydra.__version__)
except Exception as exc:
    print("hydra-error", f"{type(exc).__name__}: {exc}".replace(chr(10), " "))
"""


@dataclass(frozen=True)
class PythonProbe:
    """What ``PYTHON_SCRIPT`` printed: the Python, and hydra's version or why it is not importable."""

    version: str
    executable: str
    hydra_version: str | None
    hydra_error: str | None


def parse_python_probe(stdout: str) -> PythonProbe:
    lines = stdout.strip().splitlines()
    version, _, executable = (lines[0] if lines else "").strip().partition(" ")
    word, _, rest = (lines[1] if len(lines) > 1 else "").strip().partition(" ")
    if word == "hydra" and rest:
        return PythonProbe(version, executable, rest.strip(), None)
    return PythonProbe(version, executable, None, rest.strip() if word == "hydra-error" else "no answer from the probe")
