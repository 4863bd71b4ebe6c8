#!/usr/bin/env bash
#: Usage: CONTAINER=jins TRAIN_STEPS=100 SWANLAB_HOST=http://host:8000 SWANLAB_API_KEY=... \
#:        bash scripts/quick_start.sh
#:
#: Preflight, then start DAPO with the default features in the background, and print the run
#: id, the SwanLab link and the monitoring commands. Returns at once; the supervisor keeps the
#: run going (OOM → offload → recompute, resuming from checkpoints) and stays silent.
#: Set FOLLOW=1 to follow the run until it ends (exit 0 only on success).
#:
#: Environment: everything run_dapo.sh reads, plus MODE (dapo|one_step_off_policy, default
#: dapo); SWANLAB_MODE=local|disabled works without a key.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
handle_args "${BASH_SOURCE[0]}" "$@"

container="$(pick_container)"
mode="${MODE:-dapo}"
log_info "1/2 preflight on ${container}"
status=0
vad preflight --container "${container}" --mode "${mode}" || status=$?
[[ ${status} -eq 0 ]] || die "preflight failed (exit ${status}): fix what is reported above; nothing was started"
log_info "2/2 starting ${mode} (default features unless USER_FEATURES is set)"
# No --skip-preflight: start runs its own preflight, which detects the verl version.
start_run --container "${container}" --mode "${mode}"
if [[ "${FOLLOW:-0}" == "1" ]]; then
    follow_run
fi
