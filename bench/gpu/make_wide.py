"""Widen the tiny Qwen2 into a ~1B-parameter model that answers exactly like it (for the real actor-OOM scenario).

Runs on the GPU machine after make_tiny.py. Usage: python3 make_wide.py VERL_HOME [EXTRA_LAYERS] [INTERMEDIATE]

Why this shape: the scenario needs an actor whose fp32 parameters + gradients + Adam states (16 bytes a parameter,
~16 GiB here) dominate GPU memory without offload and shrink to a few GiB with FSDP2's CPUOffloadPolicy, while the
rollouts stay as short and as mixed (half "Answer: 1", half "Answer: 2") as the tiny model's, so DAPO keeps groups.
* The MLP of the two trained layers is padded from 512 to INTERMEDIATE units: the new gate/up rows are random (real
  parameters, real gradients), the matching down_proj columns are zero, so the layer's output is unchanged.
* EXTRA_LAYERS decoder layers are appended whose o_proj and down_proj are zero: each adds nothing to the residual
  stream (identity), yet holds ~126M parameters that FSDP, the optimizer and vLLM must carry.
The script checks the claim: greedy logits of the wide model equal the tiny one's (bf16 tolerance).
"""

import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

home = sys.argv[1]
extra = int(sys.argv[2]) if len(sys.argv) > 2 else 6
inter = int(sys.argv[3]) if len(sys.argv) > 3 else 163840
src = os.path.join(home, "models", "tiny-qwen")
dst = os.path.join(home, "models", "wide-qwen")
os.makedirs(dst, exist_ok=True)
torch.manual_seed(0)

with open(os.path.join(src, "config.json")) as fh:
    cfg = json.load(fh)
small_inter, layers, hidden = cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["hidden_size"]
sd = load_file(os.path.join(src, "model.safetensors"), device="cuda")
out: dict[str, torch.Tensor] = {}
std = 0.02
for name, t in sd.items():
    if ".mlp.gate_proj." in name or ".mlp.up_proj." in name:  # [inter, hidden]: new rows random
        pad = torch.randn(inter - small_inter, hidden, device="cuda", dtype=t.dtype) * std
        out[name] = torch.cat([t, pad], 0)
    elif ".mlp.down_proj." in name:  # [hidden, inter]: new columns zero -> output unchanged
        out[name] = torch.cat([t, torch.zeros(hidden, inter - small_inter, device="cuda", dtype=t.dtype)], 1)
    else:
        out[name] = t
for i in range(layers, layers + extra):  # identity layers: copy layer 0's shapes, zero the residual writers
    for name in sd:
        if not name.startswith("model.layers.0."):
            continue
        new = name.replace("model.layers.0.", f"model.layers.{i}.")
        ref = out[name]
        if ".o_proj." in name or ".mlp.down_proj." in name:
            out[new] = torch.zeros_like(ref)
        elif "norm" in name:
            out[new] = ref.clone()
        else:
            out[new] = torch.randn_like(ref) * std
cfg.update(num_hidden_layers=layers + extra, intermediate_size=inter)
if "layer_types" in cfg:
    cfg["layer_types"] = [cfg["layer_types"][0]] * (layers + extra)
with open(os.path.join(dst, "config.json"), "w") as fh:
    json.dump(cfg, fh, indent=2)
save_file(
    {k: v.contiguous() for k, v in out.items()}, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"}
)
for f in os.listdir(src):
    if f not in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, f), dst)
n_params = sum(v.numel() for v in out.values())
print(f"wide model: {layers + extra} layers, intermediate {inter}, {n_params / 1e9:.3f}B parameters -> {dst}")

# The claim, checked: same logits as the tiny model on a real prompt.
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(src)
ids = tok.apply_chat_template(
    [{"role": "user", "content": "What is 3 + 2 - 4?"}],
    add_generation_prompt=True,
    return_tensors="pt",
    return_dict=True,
)["input_ids"].cuda()
with torch.no_grad():
    a = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).cuda()(ids).logits
    wide = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32).cuda()
    b = wide(ids).logits
print(
    f"max |logit diff| tiny vs wide: {(a - b).abs().max().item():.2e} (logit scale {a.abs().max().item():.1f}); "
    f"hf parameter count {sum(p.numel() for p in wide.parameters()) / 1e9:.3f}B"
)
