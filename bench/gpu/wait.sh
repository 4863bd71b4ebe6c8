#!/usr/bin/env bash
# On the GPU machine: wait until scenario NAME is done (or SECONDS pass), print its figures, pack it into $OUT.
#   bash wait.sh NAME SECONDS
name=$1; secs=$2; res=/root/results/$name; t0=$SECONDS
while [[ ! -f $res/done ]] && (( SECONDS - t0 < secs )); do sleep 5; done
if [[ -f $res/done ]]; then echo "== $name done ($(cat "$res/done"))"; tag=$name; else echo "== $name still running"; tag=$name-partial; fi
tail -n 4 "$res/trace.jsonl" 2>/dev/null; tail -n 5 "$res/drive.log" 2>/dev/null
cat "$res/figures.txt" "$res/driver-error.txt" 2>/dev/null
tail -n 12 "$res/holder.log" 2>/dev/null
cat "$res/sigstop.txt" "$res/webhook.jsonl" 2>/dev/null | cut -c1-600
# Processes still alive now (a stopped trainer the product failed to kill would show here, state T).
ps -eo pid,pgid,stat,etime,args | grep -E 'ray::|raylet|gcs_server' | grep -v grep >"$res/ps-now.txt" || true
wc -l <"$res/ps-now.txt"
nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader
home=/root/vad-$name
tar -czf "${OUT:-/tmp}/$tag.tgz" -C /root results/"$name" "vad-$name" 2>/dev/null
[[ -f $res/figures.txt ]] && cp "$res/figures.txt" "${OUT:-/tmp}/$name-figures.txt"
ls -la "${OUT:-/tmp}"
true
