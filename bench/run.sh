#!/usr/bin/env bash
# The benchmarks (see bench/RESULTS.md, which this rewrites): venv, Docker Engine, test image, then python -m bench.
#
#   bash bench/run.sh [--only 1,2,3,4,5] [--quick] [--json FILE]
#
# Needs a Docker Engine (tests/harness/ensure_docker.sh starts one as root) and the package index for
# mcp-server-git (installed once into bench/.venv-ref). Not part of the test suite.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
    .venv/bin/python -m pip install -q -e '.[test]'
fi
bash tests/harness/ensure_docker.sh >&2
exec .venv/bin/python -m bench "$@"
