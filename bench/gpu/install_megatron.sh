#!/usr/bin/env bash
# On the GPU machine, after install.sh: put Megatron on it for verl 0.9.1's legacy bridge path (vanilla_mbridge=True):
# TransformerEngine 2.20.2 (core library wheel for CUDA 13 + the Python package + the PyTorch extension built here
# by build_te.sh), megatron-core 0.19.2, mbridge 0.15.1, nvdlfw-inspect (device-packages-megatron.txt pins them).
#   bash install_megatron.sh [WAIT_S]     joins /root/megparts/meg.* (the core wheel), installs /root/megsmall/*.whl,
#                                         waits up to WAIT_S (default 420) for /root/te-build/done, installs its wheel
set -euo pipefail
M=/root/megparts; S=/root/megsmall; B=/root/te-build; wait_s=${1:-420}
t0=$SECONDS
mkdir -p $M/w && cat $M/meg.* | tar -x -C $M/w
python3 -m pip install -q --no-index --no-deps --no-compile $M/w/*.whl $S/*.whl
echo "core + python wheels installed in $((SECONDS - t0)) s"
while [[ ! -f $B/done ]] && (( SECONDS - t0 < wait_s )); do sleep 3; done
if [[ ! -f $B/done ]]; then echo "TE build still running after ${wait_s} s"; tail -n 5 $B/build.log; exit 4; fi
read -r rc secs <$B/done
echo "TE build: rc $rc, $secs s"
if [[ $rc != 0 ]]; then grep -iE 'error|fatal' $B/build.log | head -n 40; tail -n 30 $B/build.log; exit 5; fi
python3 -m pip install -q --no-index --no-deps --no-compile $B/wheel/transformer_engine_torch-*.whl
# mbridge 0.15.1 (the newest on the index) compares with ModelType.encoder_and_decoder, which megatron-core 0.19.2 lacks:
# verl's init_model failed with "AttributeError: type object 'ModelType' has no attribute 'encoder_and_decoder'"
# (results/megatron-try1). The two comparisons only pick the encoder-decoder branch, which a decoder-only model never
# takes, so a missing member compares unequal. Patched in the installed copy, as was done by hand on the H200.
mb=$(python3 -c 'import mbridge, os; print(os.path.dirname(mbridge.__file__))')
grep -rl 'ModelType\.encoder_and_decoder' "$mb" | xargs -r sed -i 's/ModelType\.encoder_and_decoder/getattr(ModelType, "encoder_and_decoder", object())/g'
ls -la $B/wheel
python3 - <<'PY'
import importlib.metadata as md
import torch
import transformer_engine.pytorch as te
import megatron.core
import mbridge
from megatron.core.transformer.enums import AttnBackend
print("transformer_engine", md.version("transformer-engine"), "torch ext", md.version("transformer_engine_torch"),
      "megatron-core", md.version("megatron-core"), "mbridge", md.version("mbridge"))
lin = te.Linear(256, 256, device="cuda", params_dtype=torch.bfloat16)
y = lin(torch.randn(4, 256, device="cuda", dtype=torch.bfloat16))
y.sum().backward()
print("te.Linear forward/backward ok:", tuple(y.shape), lin.weight.grad is not None, AttnBackend.fused)
PY
echo "megatron install done in $((SECONDS - t0)) s"
