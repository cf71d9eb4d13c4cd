"""Checks that a folder `pippin recover` wrote is what PEFT saves for a LoRA adapter of
the model: adapter_config.json's fields, and adapter_model.safetensors read by Python's
`safetensors` (numpy) — every module of every layer, PEFT's tensor names, lora_A
[r, in] and lora_B [out, r] in the model's Hugging Face shapes (read from its GGUF
with the `gguf` package), finite values, B not all zero (trained).

PEFT itself (`peft.PeftModel.from_pretrained`) needs torch, whose PyPI wheels bring
~3 GB of CUDA libraries: too much for CI here, so this checks the layout PEFT's
`save_pretrained` writes and its `load_state_dict` reads.

usage: check_peft.py ADAPTER_DIR MODEL.gguf
"""
import json
import re
import sys

import gguf
import numpy as np
from safetensors.numpy import load_file

folder, model = sys.argv[1], sys.argv[2]
cfg = json.load(open(f"{folder}/adapter_config.json"))
for key, want in [("peft_type", "LORA"), ("task_type", "CAUSAL_LM"), ("bias", "none")]:
    assert cfg[key] == want, (key, cfg[key])
r, alpha, modules = cfg["r"], cfg["lora_alpha"], cfg["target_modules"]
assert isinstance(r, int) and r > 0 and alpha > 0, cfg
assert cfg["fan_in_fan_out"] is False and cfg["use_rslora"] is False, cfg

reader = gguf.GGUFReader(model)
arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
def meta(key):
    return int(reader.fields[f"{arch}.{key}"].parts[-1][0])
hidden, layers, ffn = meta("embedding_length"), meta("block_count"), meta("feed_forward_length")
heads, kv_heads = meta("attention.head_count"), meta("attention.head_count_kv")
head_dim = hidden // heads
shapes = {  # (out, in), as Hugging Face's Linear layers have them
    "q_proj": (heads * head_dim, hidden), "k_proj": (kv_heads * head_dim, hidden),
    "v_proj": (kv_heads * head_dim, hidden), "o_proj": (hidden, heads * head_dim),
    "gate_proj": (ffn, hidden), "up_proj": (ffn, hidden), "down_proj": (hidden, ffn),
}

tensors = load_file(f"{folder}/adapter_model.safetensors")
name = re.compile(r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight")
seen = set()
for key, value in tensors.items():
    m = name.fullmatch(key)
    assert m, f"{key} is not PEFT's name for a LoRA weight"
    layer, block, module, half = int(m[1]), m[2], m[3], m[4]
    assert module in modules and layer < layers, key
    assert block == ("self_attn" if module.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"), key
    out, inp = shapes[module]
    want = (r, inp) if half == "A" else (out, r)
    assert value.shape == want, (key, value.shape, want)
    assert value.dtype in (np.float32, np.float16) and np.isfinite(value).all(), key
    seen.add((layer, module, half))
missing = {(l, m, h) for l in range(layers) for m in modules for h in "AB"} - seen
assert not missing, f"missing {sorted(missing)[:5]}"
assert any(np.abs(v).max() > 0 for k, v in tensors.items() if k.endswith("lora_B.weight")), "B is zero"
print(f"check_peft: {folder}: {len(tensors)} tensors, rank {r}, alpha {alpha}, {len(modules)} modules x {layers} layers: PEFT's layout")
