#!/usr/bin/env bash
#: Usage: TRAIN_STEPS=100 TRAINER_GPUS=4 ROLLOUT_GPUS=4 bash scripts/run_one_step_off_policy.sh
#:
#: One-step-off-policy training: trainer and rollout on separate GPU groups
#: (TRAINER_GPUS + ROLLOUT_GPUS). Prints the run id, the SwanLab link and the monitoring
#: commands, then follows the run until it ends (DETACH=1 to return at once): exit 0 only when
#: it succeeded. Same OOM recovery and state as the agent path.
#:
#: Environment: CONTAINER=jins, FRAMEWORK=megatron|fsdp (fsdp = FSDP2), TRAINER_GPUS=4,
#: ROLLOUT_GPUS=4, ROLLOUT_TP=2 (must divide ROLLOUT_GPUS), MAX_RESPONSE_LENGTH=8192,
#: ENABLE_OFFLOAD=False, TRAIN_STEPS=100, USER_FEATURES, MAX_OOM_RETRIES=2, MODEL_PATH,
#: TRAIN_FILE, VAL_FILE, SwanLab and proxy variables; every parameter of references/params.md
#: (e.g. TRAIN_BATCH_SIZE, ACTOR_TP, REWARD_FN_PATH). EXTRA_OVERRIDES='key=value key2=value2': Hydra
#: overrides of your own, applied last and checked with verl's own config before anything starts.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
handle_args "${BASH_SOURCE[0]}" "$@"

container="$(pick_container)"
log_info "starting one-step-off-policy on ${container} (trainer and rollout on separate GPU groups)"
start_run --container "${container}" --mode one_step_off_policy
if [[ "${DETACH:-0}" != "1" ]]; then
    follow_run
fi
