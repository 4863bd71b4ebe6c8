#!/usr/bin/env bash
# On the GPU machine: wait until scenario NAME is done (or SECONDS pass), print its figures, pack it into $OUT.
#   bash wait.sh NAME SECONDS
name=$1; secs=$2; res=/root/results/$name; t0=$SECONDS
while [[ ! -f $res/done ]] && (( SECONDS - t0 < secs )); do sleep 5; done
home=/root/vad-$name
if [[ -f $res/done ]]; then echo "== $name done ($(cat "$res/done"))"; tag=$name
else  # still running: figures.py reads the state DB read-only and copies each attempt's verl log into $res
  echo "== $name still running"; tag=$name-partial
  VERL_ASYNC_DAPO_HOME=$home timeout 60 python3 "$(dirname "$0")/figures.py" "$res" >/dev/null 2>&1 || true
fi
tail -n 4 "$res/trace.jsonl" 2>/dev/null; tail -n 5 "$res/drive.log" 2>/dev/null
cat "$res/figures.txt" "$res/driver-error.txt" 2>/dev/null
tail -n 12 "$res/holder.log" 2>/dev/null
head -c 1500 "$res/errors.txt" 2>/dev/null
last=$(ls "$res"/attempt*.log 2>/dev/null | tail -n 1)  # what verl printed last, for a failure read off output_tail
[[ -n $last ]] && { echo "--- $last (errors, last lines)"; grep -aE 'Error|Exception|Traceback|No module' "$last" | cut -c1-300 | tail -n 12; tail -n 8 "$last" | cut -c1-300; }
cat "$res/sigstop.txt" "$res/webhook.jsonl" 2>/dev/null | cut -c1-600
# Processes still alive now (a stopped trainer the product failed to kill would show here, state T).
ps -eo pid,pgid,stat,etime,args | grep -E 'ray::|raylet|gcs_server' | grep -v grep >"$res/ps-now.txt" || true
wc -l <"$res/ps-now.txt"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
tar -czf "${OUT:-/tmp}/$tag.tgz" -C /root results/"$name" "vad-$name" 2>/dev/null
[[ -f $res/figures.txt ]] && cp "$res/figures.txt" "${OUT:-/tmp}/$name-figures.txt"
ls -la "${OUT:-/tmp}"
true
