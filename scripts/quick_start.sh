#!/usr/bin/env bash
#: Usage: CONTAINER=jins TRAIN_STEPS=100 SWANLAB_HOST=http://host:8000 SWANLAB_API_KEY=... \
#:        bash scripts/quick_start.sh
#:
#: Preflight, then start DAPO with the default features in the background, and print the run
#: id, the SwanLab link and the monitoring commands. Returns at once; the supervisor keeps the
#: run going (OOM → offload → recompute, resuming from checkpoints) and stays silent.
#: Set FOLLOW=1 to follow the run until it ends (exit 0 only on success).
#:
#: Environment: everything run_dapo.sh reads; SWANLAB_MODE=local|disabled works without a key.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wants_help "$@" && print_help "${BASH_SOURCE[0]}"

container="${CONTAINER:-jins}"
export MODE="${MODE:-dapo}"
log_info "1/2 preflight on ${container}"
vad preflight --container "${container}" --mode "${MODE}" || die "preflight failed: fix the [error] lines above"
log_info "2/2 starting ${MODE} (default features unless USER_FEATURES is set)"
# No --skip-preflight: start needs its own preflight to detect the verl version (unless VERL_VERSION is set).
args=(start --container "${container}" --mode "${MODE}")
[[ "${FOLLOW:-0}" == "1" ]] && args+=(--wait)
status=0
vad "${args[@]}" || status=$?
[[ ${status} -eq 0 ]] || die "start failed (exit ${status})"
print_monitoring "${container}"
