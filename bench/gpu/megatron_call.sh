#!/usr/bin/env bash
# On the GPU machine, the last transfer call of a Megatron session, so that nothing waits between calls:
# install.sh (verl + vLLM + Ray + the project), install_megatron.sh (TE, megatron-core, mbridge; waits for build_te.sh,
# started detached by the first call), make_tiny.py, the megatron-healthy scenario (detached), then, chained and
# detached, make_wide.py + megatron-oom if megatron-healthy succeeded; waits for megatron-healthy until BUDGET_S.
#   bash megatron_call.sh [BUDGET_S]      (default 540: the call's 600 s limit less a margin)
# Into $OUT: te-build.log, the built transformer_engine_torch wheel (split in 15 MB pieces if over the 16 MiB a file
# the device tool returns), install-megatron.txt, and what wait.sh packs.
set -uo pipefail
kit=$(cd "$(dirname "$0")" && pwd); out=${OUT:-/tmp}; t0=$SECONDS; budget=${1:-540}
keep() {
  cp /root/te-build/build.log "$out/te-build.log" 2>/dev/null
  for w in /root/te-build/wheel/*.whl; do
    [[ -f $w ]] || continue
    if (( $(stat -c %s "$w") < 16000000 )); then cp "$w" "$out/"; else split -b 15M -d -a 1 "$w" "$out/$(basename "$w").part"; fi
  done
}
bash "$kit/install.sh" || { keep; exit 1; }
echo "== install.sh done at +$((SECONDS - t0)) s"
bash "$kit/install_megatron.sh" 300 >"$out/install-megatron.txt" 2>&1; rc=$?
cat "$out/install-megatron.txt"; keep
(( rc == 0 )) || { echo "install_megatron.sh failed (rc $rc)"; exit "$rc"; }
python3 "$kit/make_tiny.py" /root/verl 2>&1 | tail -n 2
echo "== models done at +$((SECONDS - t0)) s"
bash "$kit/scenarios.sh" megatron-healthy || exit 1
chain="OUT=/tmp bash $kit/wait.sh megatron-healthy 1500 >/dev/null 2>&1
if grep -q '\"status\": \"succeeded\"' /root/results/megatron-healthy/status.json 2>/dev/null; then
  python3 $kit/make_wide.py /root/verl >/root/results/make_wide.txt 2>&1; bash $kit/scenarios.sh megatron-oom
fi"
(setsid nohup bash -c "$chain" >/root/results/chain.log 2>&1 </dev/null &)
bash "$kit/wait.sh" megatron-healthy $(( budget - (SECONDS - t0) ))
