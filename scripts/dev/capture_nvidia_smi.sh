#!/usr/bin/env bash
# Captures real nvidia-smi CSV output for the test fixtures (tests/memory/fixtures/), on a GPU machine:
# idle, then while a process holds GPU memory (a CUDA context + cuMemAlloc through ctypes, no torch needed).
# Usage: OUT=dir bash scripts/dev/capture_nvidia_smi.sh [GiB to hold, default 64]
set -euo pipefail
out=${OUT:?set OUT}; hold=${1:-64}
q_gpu="--query-gpu=index,uuid,name,memory.total,memory.used,memory.free"
q_app="--query-compute-apps=gpu_uuid,pid,process_name,used_memory"
snap() {
  { nvidia-smi --version | head -3; echo "# nvidia-smi $q_gpu --format=csv,noheader,nounits"; } > "$out/$1-meta.txt" 2>&1 || true
  nvidia-smi "$q_gpu" --format=csv,noheader,nounits > "$out/$1-gpus-nounits.csv"
  nvidia-smi "$q_gpu" --format=csv > "$out/$1-gpus-units.csv"
  nvidia-smi "$q_app" --format=csv,noheader,nounits > "$out/$1-apps-nounits.csv"
}
snap idle
python3 - "$hold" <<'PY' &
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int(); assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
ptr = ctypes.c_uint64(); size = int(float(sys.argv[1]) * (1 << 30))
rc = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)); print("cuMemAlloc rc", rc, flush=True)
time.sleep(40)
PY
holder=$!
sleep 12
snap busy
kill "$holder" 2>/dev/null || true
wait "$holder" 2>/dev/null || true
ls -la "$out"
head -50 "$out"/*
