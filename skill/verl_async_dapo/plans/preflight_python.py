"""The preflight's python3 probe: the Python the entry runs with, and whether it imports hydra, in one process."""

from __future__ import annotations

from dataclasses import dataclass

# The python3 check and the hydra check in one interpreter start (one exec in a container instead of two): line 1
# the version and sys.executable, then a marked line with hydra's version or why it is not importable (hydra is what
# verl composes its config with). Marked, because importing hydra could print; %-formatting, so that an old Python
# still answers the python3 check instead of failing on the script's syntax.
HYDRA_VERSION, HYDRA_ERROR = "vad-hydra-version", "vad-hydra-error"
NO_ANSWER = "no answer from the probe"
PROBE_TRIES = 3  # an exit 0 without the marked line is asked again
PYTHON_SCRIPT = f"""import sys
print(sys.version.split()[0], sys.executable)
try:
    import hydra
    print("{HYDRA_VERSION}", hydra.__version__)
except Exception as exc:
    print("{HYDRA_ERROR}", ("%s: %s" % (type(exc).__name__, exc)).replace(chr(10), " "))
"""


@dataclass(frozen=True)
class PythonProbe:
    """What ``PYTHON_SCRIPT`` printed: the Python, and hydra's version or why it is not importable."""

    version: str
    executable: str
    hydra_version: str | None
    hydra_error: str | None

    @property
    def answered(self) -> bool:
        """Whether the script's marked line came back (Docker can lose a short exec's output: moby#27289)."""
        return self.hydra_version is not None or self.hydra_error != NO_ANSWER


def parse_python_probe(stdout: str) -> PythonProbe:
    lines = stdout.strip().splitlines()
    version, _, executable = (lines[0] if lines else "").strip().partition(" ")
    for line in reversed(lines[1:]):
        word, _, rest = line.strip().partition(" ")
        if word == HYDRA_VERSION and rest.strip():
            return PythonProbe(version, executable, rest.strip(), None)
        if word == HYDRA_ERROR:
            return PythonProbe(version, executable, None, rest.strip())
    return PythonProbe(version, executable, None, NO_ANSWER)
