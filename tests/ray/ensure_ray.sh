#!/usr/bin/env bash
# Ray for tests/ray, in its own venv OUTSIDE the repo; prints the path of its `ray` CLI on stdout.
#
#   bash tests/ray/ensure_ray.sh            # idempotent: installs only when missing or another version
#
# Why not the project's .venv: the server never imports ray (it speaks the Jobs REST API), and a `ray`
# on the venv's PATH would make HostTarget.stop_job run `ray stop --force`, which kills EVERY Ray on
# the machine (this suite's head included) from unrelated host-target tests. Only the test head
# needs Ray; its jobs still run the project venv's python3 (the head is started with that first on PATH).
# Size: ~360 MB, ~40 s from PyPI.
set -euo pipefail

RAY_VERSION=2.60.0
venv=${VERL_ASYNC_DAPO_RAY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/verl-async-dapo-tests/ray-$RAY_VERSION}

have_ray() {
    [[ -x "$venv/bin/ray" ]] &&
        "$venv/bin/python" -c "import sys, ray; sys.exit(ray.__version__ != '$RAY_VERSION')" 2>/dev/null
}

if ! have_ray; then
    started=$SECONDS
    printf 'installing ray[default]==%s into %s\n' "$RAY_VERSION" "$venv" >&2
    python3 -m venv "$venv"
    # pip's output only when it fails (a machine's pip config can make it chatty).
    if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "ray[default]==$RAY_VERSION" \
        >"$venv/pip-install.log" 2>&1; then
        cat "$venv/pip-install.log" >&2
        exit 1
    fi
    have_ray || { echo "ensure_ray.sh: ray $RAY_VERSION is still not importable in $venv" >&2; exit 1; }
    printf 'ray installed in %ss\n' "$((SECONDS - started))" >&2
fi
printf '%s\n' "$venv/bin/ray"
