#!/usr/bin/env bash
#: Usage: CONTAINER=jins bash scripts/preflight_check.sh
#:
#: Checks the target before training: container reachable and running, GPUs visible and
#: enough for the plan, verl installed (and its version), the DAPO recipe present, MODEL_PATH /
#: TRAIN_FILE / VAL_FILE present inside the container, free disk for checkpoints.
#: One line per check: [ok] / [warn] / [error] with the fix. Exit 1 when any check fails.
#:
#: Environment: CONTAINER (default jins; "host" = this machine), MODE (dapo|one_step_off_policy),
#: FRAMEWORK, MODEL_PATH, TRAIN_FILE, VAL_FILE, TRAINER_GPUS, ROLLOUT_GPUS, VERL_HOME.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wants_help "$@" && print_help "${BASH_SOURCE[0]}"

container="${CONTAINER:-jins}"
args=(preflight --container "${container}")
[[ -n "${MODE:-}" ]] && args+=(--mode "${MODE}")
log_info "preflight for ${container}"
if vad "${args[@]}"; then
    log_info "preflight passed"
else
    die "preflight failed: fix the [error] lines above, then run again"
fi
