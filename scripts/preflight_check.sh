#!/usr/bin/env bash
#: Usage: CONTAINER=jins bash scripts/preflight_check.sh
#:
#: Checks the target before training: container reachable and running, GPUs visible and
#: enough for the plan, verl installed (and its version), the DAPO recipe present, MODEL_PATH /
#: TRAIN_FILE / VAL_FILE present inside the container, free disk for checkpoints.
#: One line per check: [ok] / [warn] / [error] with the fix. Exit 1 when any check fails.
#: Starts nothing and changes nothing.
#:
#: Environment: CONTAINER (default jins; "host" = this machine), MODE (dapo|one_step_off_policy),
#: FRAMEWORK, MODEL_PATH, TRAIN_FILE, VAL_FILE, TRAINER_GPUS, ROLLOUT_GPUS, N_GPUS, VERL_HOME.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
handle_args "${BASH_SOURCE[0]}" "$@"

container="$(pick_container)"
args=(preflight --container "${container}")
if [[ -n "${MODE:-}" ]]; then
    args+=(--mode "${MODE}")
fi
log_info "preflight for ${container}"
status=0
vad "${args[@]}" || status=$?
[[ ${status} -eq 0 ]] || die "preflight failed (exit ${status}): fix what is reported above, then run again"
log_info "preflight passed"
