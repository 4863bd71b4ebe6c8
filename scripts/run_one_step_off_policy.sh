#!/usr/bin/env bash
#: Usage: TRAIN_STEPS=100 TRAINER_GPUS=4 ROLLOUT_GPUS=4 bash scripts/run_one_step_off_policy.sh
#:
#: One-step-off-policy training: trainer and rollout on separate GPU groups
#: (TRAINER_GPUS + ROLLOUT_GPUS), then follows the run until it ends (DETACH=1 to return
#: at once). Same OOM recovery and state as the agent path.
#:
#: Environment: CONTAINER=jins, FRAMEWORK=megatron|fsdp (fsdp = FSDP2), TRAINER_GPUS=4,
#: ROLLOUT_GPUS=4, MAX_RESPONSE_LENGTH=8192, ENABLE_OFFLOAD=False, TRAIN_STEPS=100,
#: USER_FEATURES, MAX_OOM_RETRIES=2, MODEL_PATH, TRAIN_FILE, VAL_FILE, SwanLab and proxy vars.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wants_help "$@" && print_help "${BASH_SOURCE[0]}"

export MODE=one_step_off_policy
container="${CONTAINER:-jins}"
args=(start --container "${container}" --mode one_step_off_policy)
[[ "${DETACH:-0}" == "1" ]] || args+=(--wait)
log_info "starting one-step-off-policy on ${container}: trainer ${TRAINER_GPUS:-4} GPUs + rollout ${ROLLOUT_GPUS:-4} GPUs"
status=0
vad "${args[@]}" || status=$?
print_monitoring "${container}"
if [[ ${status} -ne 0 ]]; then
    log_error "training did not succeed (exit ${status}); see: verl-async-dapo errors"
    exit "${status}"
fi
