#!/usr/bin/env python3
"""Writes the headers of what `lmtune convert -q --q-bits BITS --q-group-size
GROUP` writes for a model directory made by `lmtune init` (its config.json
and tokenizer), with the data region left sparse (zeros): the same tensor
names, dtypes, shapes and bytes, without generating and quantizing billions
of random weights. For the headline run on a machine too loaded to make an
8B model in the time at hand: the memory plan and the measured memory and
time of a step depend on the shapes, not on the values.

Usage: bench/headline_model.py INIT_DIR OUT_DIR [BITS] [GROUP]   (BITS 16: the bf16 model itself)
Standard library only."""
import json, os, shutil, struct, sys

src, out = sys.argv[1], sys.argv[2]
bits = int(sys.argv[3]) if len(sys.argv) > 3 else 4
group = int(sys.argv[4]) if len(sys.argv) > 4 else 64
cfg = json.load(open(os.path.join(src, "config.json")))
C, F, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
H, KV, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
D = cfg.get("head_dim") or C // H
mods = {"model.embed_tokens": (V, C)}
if not cfg.get("tie_word_embeddings"):
    mods["lm_head"] = (V, C)
norms = {"model.norm.weight": C}
for i in range(L):
    p = f"model.layers.{i}."
    for k, shape in (("self_attn.q_proj", (H * D, C)), ("self_attn.k_proj", (KV * D, C)),
                     ("self_attn.v_proj", (KV * D, C)), ("self_attn.o_proj", (C, H * D)),
                     ("mlp.gate_proj", (F, C)), ("mlp.up_proj", (F, C)), ("mlp.down_proj", (C, F))):
        mods[p + k] = shape
    norms[p + "input_layernorm.weight"] = C
    norms[p + "post_attention_layernorm.weight"] = C
tensors = {}
for m, (o, i) in mods.items():
    if bits == 16:   # the bf16 model `lmtune init --dtype bf16` writes
        tensors[m + ".weight"] = ("BF16", [o, i], o * i * 2)
        continue
    tensors[m + ".weight"] = ("U32", [o, i * bits // 32], o * i * bits // 8)
    tensors[m + ".scales"] = ("BF16", [o, i // group], o * (i // group) * 2)
    tensors[m + ".biases"] = ("BF16", [o, i // group], o * (i // group) * 2)
for n, c in norms.items():
    tensors[n] = ("BF16", [c], c * 2)
header, off = {}, 0
for name in sorted(tensors):
    dt, shape, nbytes = tensors[name]
    header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nbytes]}
    off += nbytes
header["__metadata__"] = {"format": "mlx"}
hj = json.dumps(header, separators=(",", ":")).encode()
hj += b" " * ((8 - len(hj) % 8) % 8)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(hj)))
    f.write(hj)
    f.truncate(8 + len(hj) + off)
if bits != 16:
    q = {"group_size": group, "bits": bits, "mode": "affine"}
    cfg["quantization"] = q
    cfg["quantization_config"] = q
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(dict(sorted(cfg.items())), f, indent=4)
for t in ("tokenizer.json", "tokenizer_config.json"):
    if os.path.exists(os.path.join(src, t)):
        shutil.copy(os.path.join(src, t), out)
print(f"{out}: {len(tensors)} tensors, {off / 1e9:.2f} GB of data (sparse)")
