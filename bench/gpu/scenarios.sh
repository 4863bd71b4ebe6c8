#!/usr/bin/env bash
# On the GPU machine: start one scenario, detached (it outlives the device call), through the product.
#   bash scenarios.sh healthy|oom|rollout|rollout-fix|hang|megatron-healthy|megatron-oom
# healthy: tiny model, 6 steps, the MCP path (drive.py healthy-mcp).
# oom:     the ~1B wide model (make_wide.py), 4 steps, checkpoint every 2; holder.py takes the GPU's free memory
#          after checkpoint 2 once the step-3 rollout has ended, then leaves 50 GiB free for the relaunch.
# rollout: tiny model, vLLM share 0.6 while holder.py holds 62 GiB from the start (vLLM refuses to start); started
#          with --skip-preflight, because preflight foresees it and refuses (that path is rollout-fix).
# rollout-fix: the same, started with --apply-memory-fix: preflight's fix lowers the share before the first attempt.
# hang:    tiny model, 10 steps; once step 4 shows, drive.py SIGSTOPs the trainer (ray::WorkerDict); the watchman's
#          stall window is 60 s (VAD_STALL_MIN_SECONDS), VAD_STALL_RELAUNCH=1 stops and relaunches from global_step_4;
#          notifications go to a webhook receiver on 127.0.0.1 (drive.py --webhook).
# megatron-healthy: tiny model, FRAMEWORK=megatron (TP=1, PP=1), 4 steps, checkpoint every 2, the CLI path; verl 0.9.1's
#          legacy bridge (`--override actor_rollout_ref.actor.megatron.vanilla_mbridge=True`: Megatron-Bridge 0.5.2, verl's
#          default, is not on the index; mbridge 0.15.1 is). Needs install_megatron.sh first.
#          12 steps: so it ran on the H200; before the product's fix (lr_warmup_steps < steps on Megatron) 4 steps failed.
# megatron-oom: the oom scenario (wide model, holder after checkpoint 2) on Megatron: the relaunch gets Megatron offload.
# Results: /root/results/NAME (wait.sh packs them into $OUT).
set -euo pipefail
kit=$(cd "$(dirname "$0")" && pwd)
export VERL_HOME=/root/verl FRAMEWORK=fsdp MODE=dapo N_GPUS=1 ROLLOUT_TP=1 TRAINER_GPUS=1 ROLLOUT_GPUS=1 \
  SAVE_FREQ=2 TRAIN_BATCH_SIZE=8 PPO_MINI_BATCH_SIZE=8 N_RESP_PER_PROMPT=4 MAX_PROMPT_LENGTH=128 \
  MAX_RESPONSE_LENGTH=32 SWANLAB_MODE=local VERL_VERSION=0.9.1 VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \
  RESULTS=/root/results FEATURES=no_flash_attn
res=$RESULTS/$1
MEGATRON_EXTRA="--override actor_rollout_ref.actor.megatron.vanilla_mbridge=True ${MEGATRON_EXTRA:-}"
case $1 in
  healthy) export MODEL_PATH=tiny-qwen TRAIN_STEPS=6 GPU_MEMORY_UTILIZATION=0.3 VERL_ASYNC_DAPO_HOME=/root/vad-healthy
           args=(healthy-mcp healthy 560) ;;
  oom)     export MODEL_PATH=wide-qwen TRAIN_STEPS=4 GPU_MEMORY_UTILIZATION=0.3 VERL_ASYNC_DAPO_HOME=/root/vad-oom
           args=(cli oom 1500 --holder after-ckpt "$VERL_HOME/checkpoints" 2 1.5 50 "$res/holder.log") ;;
  rollout) export MODEL_PATH=tiny-qwen TRAIN_STEPS=4 GPU_MEMORY_UTILIZATION=0.6 VERL_ASYNC_DAPO_HOME=/root/vad-rollout \
             START_EXTRA=--skip-preflight
           args=(cli rollout 900 --holder static 62 900) ;;
  rollout-fix) export MODEL_PATH=tiny-qwen TRAIN_STEPS=4 GPU_MEMORY_UTILIZATION=0.6 \
             VERL_ASYNC_DAPO_HOME=/root/vad-rollout-fix START_EXTRA=--apply-memory-fix
           args=(cli rollout-fix 900 --holder static 62 900) ;;
  hang)    export MODEL_PATH=tiny-qwen TRAIN_STEPS=10 GPU_MEMORY_UTILIZATION=0.3 VERL_ASYNC_DAPO_HOME=/root/vad-hang \
             VAD_STALL_MIN_SECONDS=60 VAD_STALL_RELAUNCH=1
           args=(cli hang 1500 --webhook --sigstop 4 'ray::WorkerDict') ;;
  megatron-healthy) export FRAMEWORK=megatron MODEL_PATH=tiny-qwen TRAIN_STEPS=12 GPU_MEMORY_UTILIZATION=0.3 \
             VERL_ASYNC_DAPO_HOME=/root/vad-megatron-healthy START_EXTRA="$MEGATRON_EXTRA"
           args=(cli megatron-healthy 900) ;;
  megatron-oom) export FRAMEWORK=megatron MODEL_PATH=wide-qwen TRAIN_STEPS=4 GPU_MEMORY_UTILIZATION=0.3 \
             VERL_ASYNC_DAPO_HOME=/root/vad-megatron-oom START_EXTRA="$MEGATRON_EXTRA"
           args=(cli megatron-oom 1500 --holder after-ckpt "$VERL_HOME/checkpoints" 2 1.5 50 "$res/holder.log") ;;
  *) echo "unknown scenario $1"; exit 2 ;;
esac
for _ in $(seq 30); do pgrep -f "$kit/drive.py" >/dev/null || break; sleep 1; done  # one that just wrote `done`
if pgrep -f "$kit/drive.py" >/dev/null; then echo "a scenario is still running: wait.sh it first"; exit 3; fi
rm -rf "$res" "$VERL_ASYNC_DAPO_HOME"; mkdir -p "$res"
# What an earlier scenario left behind (Ray processes, stopped ones included), then a clean slate for this one.
ps -eo pid,pgid,stat,etime,args | grep -E 'ray::|raylet|gcs_server|holder.py' | grep -v grep >"$res/leftovers.txt" || true
ray stop --force >/dev/null 2>&1 || true
setsid nohup python3 "$kit/drive.py" "${args[@]}" >"$res/drive.log" 2>&1 </dev/null &
echo "started $1 (pid $!) at $(date +%T)"
