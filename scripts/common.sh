#!/usr/bin/env bash
# Shared helpers for the verl-async-dapo scripts. Sourced, never run. Only helpers live here:
# every decision (features, OOM recovery, state) is made by the verl-async-dapo CLI, so the
# scripts behave exactly like the agent path.

# shellcheck disable=SC2034  # variables used by the scripts that source this file
VAD_SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VAD_REPO_DIR="$(cd "${VAD_SCRIPTS_DIR}/.." && pwd)"

log_info() { printf '[INFO] %s\n' "$*" >&2; }
log_warn() { printf '[WARN] %s\n' "$*" >&2; }
log_error() { printf '[ERROR] %s\n' "$*" >&2; }
die() { log_error "$*"; exit 1; }

# The CLI: VAD_CLI if set, else on PATH, else the repo's own virtualenv.
find_cli() {
    if [[ -n "${VAD_CLI:-}" ]]; then
        printf '%s\n' "${VAD_CLI}"
    elif command -v verl-async-dapo >/dev/null 2>&1; then
        command -v verl-async-dapo
    elif [[ -x "${VAD_REPO_DIR}/.venv/bin/verl-async-dapo" ]]; then
        printf '%s\n' "${VAD_REPO_DIR}/.venv/bin/verl-async-dapo"
    else
        die "verl-async-dapo is not installed: run 'python3 -m pip install ${VAD_REPO_DIR}' first"
    fi
}

# Run the CLI; its exit code is returned to the caller (no set -e surprises: callers test it).
vad() {
    local cli
    cli="$(find_cli)" || return 1
    "${cli}" "$@"
}

# Print --help text (the lines starting with '#:' in the calling script) and exit.
print_help() {
    sed -n 's/^#: \{0,1\}//p' "$1"
    exit 0
}

wants_help() {
    local arg
    for arg in "$@"; do
        case "${arg}" in -h | --help) return 0 ;; esac
    done
    return 1
}

# The original skill's monitoring commands, with the faster CLI equivalents.
print_monitoring() {
    local container="$1" log="${VERL_HOME:-/verl}/train.log" prefix=""
    [[ "${container}" != "host" ]] && prefix="docker exec ${container} "
    cat <<MSG
Monitoring (training keeps running in the background; nothing needs to stay open):
  verl-async-dapo status --follow      # live progress bar (fast: reads state, not the log)
  verl-async-dapo errors               # classified errors and what the supervisor did
  verl-async-dapo stop                 # stop the run
The original commands still work (train.log points at the current attempt):
  ${prefix}grep "Training Progress" ${log} | tail -1
  ${prefix}tail -F ${log}
  ${prefix}grep -E "Error|error|OOM|Exception" ${log} | tail -10
MSG
}
