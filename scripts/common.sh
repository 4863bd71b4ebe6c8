#!/usr/bin/env bash
# Shared helpers for the verl-async-dapo scripts. Sourced, never run. Only helpers live here:
# every decision (defaults, validation, features, OOM recovery, state) is made by the
# verl-async-dapo CLI, so the scripts behave exactly like the agent path.

# shellcheck disable=SC2034  # variables used by the scripts that source this file
VAD_SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VAD_REPO_DIR="$(cd "${VAD_SCRIPTS_DIR}/.." && pwd)"
VAD_RUN_ID=""

log_info() { printf '[INFO] %s\n' "$*" >&2; }
log_warn() { printf '[WARN] %s\n' "$*" >&2; }
log_error() { printf '[ERROR] %s\n' "$*" >&2; }
die() { log_error "$*"; exit 1; }

# The CLI: VAD_CLI if set, else on PATH, else where scripts/install.py puts it (~/.local/bin is often not on PATH
# right after the install: a fresh login shell adds it only if it existed then), else the repo's own virtualenv.
# HOME may be unset (a minimal environment, `env -i`): then only an explicit XDG_DATA_HOME names the venv.
VAD_INSTALLED_LINK="${HOME:+${HOME}/.local/bin/verl-async-dapo}"
VAD_INSTALLED_DATA="${XDG_DATA_HOME:-${HOME:+${HOME}/.local/share}}"
VAD_INSTALLED_VENV="${VAD_INSTALLED_DATA:+${VAD_INSTALLED_DATA}/verl-async-dapo/venv/bin/verl-async-dapo}"
find_cli() {
    if [[ -n "${VAD_CLI:-}" ]]; then
        printf '%s\n' "${VAD_CLI}"
    elif command -v verl-async-dapo >/dev/null 2>&1; then
        command -v verl-async-dapo
    elif [[ -n "${VAD_INSTALLED_LINK}" && -x "${VAD_INSTALLED_LINK}" ]]; then
        printf '%s\n' "${VAD_INSTALLED_LINK}"
    elif [[ -n "${VAD_INSTALLED_VENV}" && -x "${VAD_INSTALLED_VENV}" ]]; then
        printf '%s\n' "${VAD_INSTALLED_VENV}"
    elif [[ -x "${VAD_REPO_DIR}/.venv/bin/verl-async-dapo" ]]; then
        printf '%s\n' "${VAD_REPO_DIR}/.venv/bin/verl-async-dapo"
    else
        die "verl-async-dapo is not installed (not on PATH, not in ${VAD_INSTALLED_LINK:-~/.local/bin}): run 'python3 ${VAD_REPO_DIR}/scripts/install.py' first (or set VAD_CLI)"
    fi
}

# The CLI as the user can type it in the hints below: the bare name when PATH finds it, else its full path.
cli_shown() {
    if [[ -z "${VAD_CLI:-}" ]] && command -v verl-async-dapo >/dev/null 2>&1; then
        printf 'verl-async-dapo\n'
    else
        find_cli
    fi
}

# The target: CONTAINER, or the original skill's default 'jins' when CONTAINER is unset. Dies naming the variable and
# listing the targets that exist when the one meant is not there (instead of a bare "container not found").
pick_container() {
    local wanted="${CONTAINER:-jins}" names
    if [[ "${wanted}" == host || "${wanted}" == ray:* ]]; then
        printf '%s\n' "${wanted}"
        return 0
    fi
    names="$(vad containers --names)" || die "cannot list the targets (see above)"
    if grep -qxF -- "${wanted}" <<<"${names}"; then
        printf '%s\n' "${wanted}"
        return 0
    fi
    local listed
    listed="$(paste -sd ' ' <<<"${names}")"
    if [[ -z "${CONTAINER:-}" ]]; then
        die "CONTAINER is not set and the default container 'jins' does not exist; set CONTAINER to one of: ${listed} (e.g. CONTAINER=host)"
    fi
    die "CONTAINER=${wanted}: no such target; existing: ${listed}"
}

# Run the CLI; its exit code is returned to the caller (no set -e surprises: callers test it).
vad() {
    local cli
    cli="$(find_cli)" || return 1
    "${cli}" "$@"
}

# The scripts are configured by environment variables only: --help/-h prints the '#:' lines of
# the calling script and exits 0 before anything else runs; any other argument is refused.
handle_args() {
    local script="$1" arg
    shift
    for arg in "$@"; do
        case "${arg}" in -h | --help) sed -n 's/^#: \{0,1\}//p' "${script}"; exit 0 ;; esac
    done
    if [[ $# -gt 0 ]]; then
        log_error "unexpected argument '$1': configure with environment variables (see --help)"
        exit 2
    fi
}

# Start a run through the CLI and print its summary at once (run id, SwanLab link or note, the
# monitoring commands, original and CLI). Sets VAD_RUN_ID. Dies when nothing was started.
start_run() {
    local out status=0
    out="$(mktemp)"
    # tee, not $(...): the summary (and an interactive SwanLab prompt) must reach the terminal.
    vad start "$@" | tee "${out}" || status=$?
    VAD_RUN_ID="$(sed -n 's/^run id: *//p' "${out}" | head -n 1)"
    rm -f "${out}"
    if [[ ${status} -eq 130 ]]; then
        die "interrupted while starting: a run may have been created; see: $(cli_shown) runs"
    fi
    [[ ${status} -eq 0 ]] || die "nothing was started (exit ${status}): fix what is reported above, then run again"
    [[ -n "${VAD_RUN_ID}" ]] || die "the CLI started a run but printed no run id; see: $(cli_shown) runs"
    log_info "training runs in the background under a supervisor; '$(cli_shown) stop ${VAD_RUN_ID}' stops it"
}

# Follow VAD_RUN_ID until it ends; returns 0 only when it succeeded.
follow_run() {
    local status=0
    log_info "following ${VAD_RUN_ID} until it ends (Ctrl-C stops following, not training)"
    vad status "${VAD_RUN_ID}" --follow || status=$?
    case "${status}" in
        0) log_info "run ${VAD_RUN_ID} succeeded" ;;
        130) log_warn "stopped following; ${VAD_RUN_ID} keeps training: $(cli_shown) status --follow ${VAD_RUN_ID}" ;;
        *) log_error "run ${VAD_RUN_ID} did not succeed (exit ${status}); see: $(cli_shown) errors ${VAD_RUN_ID}" ;;
    esac
    return "${status}"
}
