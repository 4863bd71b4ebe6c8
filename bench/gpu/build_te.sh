#!/usr/bin/env bash
# On the GPU machine: build TransformerEngine's PyTorch extension (transformer_engine_torch, source-only on the index)
# against the image's torch 2.11.0+cu130, as a wheel. Started detached by the first device call (it compiles while
# the payload parts travel); install_megatron.sh waits for it.
#   bash build_te.sh SDIST OUT_DIR        writes OUT_DIR/build.log, OUT_DIR/wheel/*.whl, OUT_DIR/done ("rc SECONDS")
# A wheel built earlier (carried back from $OUT, see README.md) skips the build: put it in OUT_DIR/wheel first.
# The extension is a CppExtension (C++ only, no .cu files): nvcc is used for nothing but the CUDA version check.
# NVTE_WITH_NCCL_EP=0: the expert-parallel bindings need nccl.h and touch NCCL's symmetric memory; a dense model on
# one or two GPUs needs neither (and the machines keep NVLink multicast off). NVTE_NO_LOCAL_VERSION=1: the version
# must read 2.20.2 exactly, or transformer_engine's import asserts a version mismatch with the core wheel.
set -uo pipefail
sdist=$1; out=$2; mkdir -p "$out/wheel"
t0=$(date +%s)
if compgen -G "$out/wheel/transformer_engine_torch-*.whl" >/dev/null; then
  echo "reusing $(ls "$out"/wheel/*.whl)" >"$out/build.log"; echo "0 0" >"$out/done"; exit 0
fi
inc=$(python3 - <<'PY'
import glob, os
import nvidia  # namespace package of the image's CUDA wheels (cudnn, nccl, cublas, ...)
dirs = sorted({d for p in nvidia.__path__ for d in glob.glob(os.path.join(p, "*", "include")) + glob.glob(os.path.join(p, "*", "*", "include"))})
print(":".join(dirs))
PY
)
export NVTE_FRAMEWORK=pytorch MAX_JOBS=${MAX_JOBS:-16} NVTE_CUDA_ARCHS=90 NVTE_PYTORCH_FORCE_BUILD=TRUE \
  NVTE_WITH_NCCL_EP=0 NVTE_NO_LOCAL_VERSION=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} \
  CPLUS_INCLUDE_PATH=${inc}${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}
{
  echo "== $(date -u +%T) build of $sdist"; echo "CPLUS_INCLUDE_PATH=$CPLUS_INCLUDE_PATH"
  nvcc --version | tail -2; gcc --version | head -1; python3 -c 'import torch; print("torch", torch.__version__)'
  echo "python3 -m pip wheel -v --no-build-isolation --no-deps -w $out/wheel $sdist"
  python3 -m pip wheel -v --no-build-isolation --no-deps -w "$out/wheel" "$sdist"
} >"$out/build.log" 2>&1
rc=$?
echo "== rc $rc after $(( $(date +%s) - t0 )) s" >>"$out/build.log"
ls -la "$out/wheel" >>"$out/build.log" 2>&1
echo "$rc $(( $(date +%s) - t0 ))" >"$out/done"
