#!/usr/bin/env bash
# The project's test command (see README): venv, Docker Engine, lint, test image, then the whole pytest suite.
#
#   bash tests/run.sh [extra pytest args]
#
# Exits non-zero on any failure, and also when pytest ran no test at all (pytest exit code 5).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

step() { printf '\n==> %s\n' "$*" >&2; }
started=$SECONDS

step "venv .venv + install -e '.[test]' (uv when it can be had, else pip)"
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
# uv installs the same resolution in ~11 s where pip takes ~38 s of CPU on 2 cores (fresh venv, 2026-12-04): most
# of the wait before the first test. It is given pip's own configured indexes, constraints and find-links (uv reads
# no pip.conf) and pip's choice among indexes (the best version on any of them; uv's default takes the first index
# that has the package, an older mirror's versions included); pip stays the fallback (no uv on the index, an offline
# mirror without it).
uv_args=(--index-strategy unsafe-best-match)
while IFS= read -r line; do
    key=${line%%=*} value=${line#*=}
    value=${value#\'} value=${value%\'}
    case "$key" in
        *.constraint) for v in $value; do uv_args+=(--constraint "$v"); done ;;
        *.find-links) for v in $value; do if [[ -e $v ]]; then uv_args+=(--find-links "$v"); fi; done ;;
        *.extra-index-url) for v in $value; do
            if [[ $v != file://* || -e ${v#file://} ]]; then uv_args+=(--extra-index-url "$v"); fi; done ;;
        *.index-url) uv_args+=(--index-url "$value") ;;
        *.no-index) uv_args+=(--no-index) ;;
    esac
done < <(.venv/bin/python -m pip config list 2>/dev/null)
if ! { .venv/bin/python -m pip install -q uv 2>/dev/null \
        && .venv/bin/uv pip install -q --python .venv/bin/python "${uv_args[@]}" -e '.[test]'; }; then
    .venv/bin/python -m pip install -q -e '.[test]'
fi
# Bytecode, written once: where the environment sets PYTHONDONTWRITEBYTECODE (this project's CI machines do), every
# CLI, supervisor and server process the suite starts (~350) would compile the editable package from source again
# (~0.25 s of CPU each), and every xdist worker would redo pytest's assertion rewriting of each test module.
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q skill/verl_async_dapo

step "Ray for tests/ray (tests/ray/ensure_ray.sh: its own venv outside the repo, ~360 MB once)"
# Not in .venv: the server talks to Ray over HTTP only, and a `ray` on .venv's PATH would make host-target
# tests run `ray stop --force` (machine-wide). The tests start a private loopback head with this CLI.
VERL_ASYNC_DAPO_TEST_RAY=$(bash tests/ray/ensure_ray.sh | tail -n 1)
export VERL_ASYNC_DAPO_TEST_RAY

step "Docker Engine, mmdebstrap, shellcheck (tests/harness/ensure_docker.sh)"
bash tests/harness/ensure_docker.sh

step "SLURM for tests/slurm (tests/slurm/ensure_slurm.sh: slurm-wlm + munge, one node on 127.0.0.1)"
# Quick when it already answers (sinfo only). Not fatal here: without root or SLURM the tests/slurm tests skip
# (fail with CI=true) and say why.
bash tests/slurm/ensure_slurm.sh >/dev/null || echo "tests/run.sh: SLURM is not available; tests/slurm will say why" >&2

step "ruff check"
.venv/bin/ruff check .

step "shellcheck"
mapfile -t scripts < <(find tests scripts .ci -type f \( -name '*.sh' -o -path .ci/run \) 2>/dev/null | LC_ALL=C sort)
shellcheck "${scripts[@]}"

step "test image (tests/harness/build_image.sh)"
image=$(bash tests/harness/build_image.sh | tail -n 1)
printf 'test image: %s\n' "$image" >&2

step "pytest"
# On every core and a bit more (VAD_TEST_WORKERS): many tests wait on real processes, servers and containers, so two
# workers more than cores keep the CPU busy (2 cores, fresh clone, 2026-12-04: 4 workers 569 s of pytest at 2.0 cores
# busy, 3 workers 633 s at 1.9); one scope per file (tests/harness/fixtures.py). -n 0 runs serially.
workers=${VAD_TEST_WORKERS:-$(( $(nproc) + 2 ))}
rc=0
.venv/bin/python -m pytest -p no:cacheprovider -n "$workers" tests/ "$@" || rc=$?
printf 'tests/run.sh: %ss in total\n' "$((SECONDS - started))" >&2
if [[ $rc -eq 5 ]]; then
    echo "tests/run.sh: ERROR: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
