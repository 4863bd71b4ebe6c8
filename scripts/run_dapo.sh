#!/usr/bin/env bash
#: Usage: TRAIN_STEPS=4 CONTAINER=jins bash scripts/run_dapo.sh
#:
#: Starts single-async DAPO training (verl's DAPO recipe, colocated) with the default
#: performance features, prints the run id, the SwanLab link and the monitoring commands, then
#: follows the run until it ends: exit 0 only when it succeeded. OOM recovery happens in the
#: background supervisor: offload, then recompute, resuming from the last checkpoint, at most
#: MAX_OOM_RETRIES times. Ctrl-C stops following, not training.
#:
#: Environment (defaults from the original skill): CONTAINER=jins, FRAMEWORK=megatron|fsdp,
#: MODEL_PATH=Qwen3-8B, TRAIN_FILE=dapo-math-17k.parquet, VAL_FILE=aime-2024.parquet,
#: TRAIN_STEPS=100, N_GPUS (default TRAINER_GPUS+ROLLOUT_GPUS), MAX_RESPONSE_LENGTH=8192,
#: USER_FEATURES (comma-separated), ENABLE_OFFLOAD=False, MAX_OOM_RETRIES=2,
#: SWANLAB_HOST / SWANLAB_API_KEY / SWANLAB_MODE, http_proxy / https_proxy / no_proxy; every
#: parameter of references/params.md (e.g. TRAIN_BATCH_SIZE, ACTOR_TP, REWARD_FN_PATH).
#: EXTRA_OVERRIDES='key=value key2=value2': Hydra overrides of your own, applied last (they win over
#: this tool's values, also on OOM relaunches) and checked with verl's own config before anything starts.
#: DETACH=1 returns right after the start instead of following.
set -euo pipefail
# shellcheck source=scripts/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
handle_args "${BASH_SOURCE[0]}" "$@"

container="$(pick_container)"
log_info "starting single-async DAPO on ${container}"
start_run --container "${container}" --mode dapo
if [[ "${DETACH:-0}" != "1" ]]; then
    follow_run
fi
