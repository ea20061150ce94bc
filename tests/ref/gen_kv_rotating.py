#!/usr/bin/python3
"""gen_kv_rotating.py: the reference of generation with a rotating KV cache
(mlx_lm.generate --max-kv-size N: MLX-LM's RotatingKVCache with keep=4,
mlx_lm/models/cache.py). Keys are cached after RoPE at their absolute
positions, so a position p sees the first 4 positions and the N - 4 latest
ones, itself included: the reference is one forward pass of the plain
PyTorch decoder (torch_model.py, float64) over the whole sequence with that
attention mask instead of the causal one. (For the prompt rows past the
cache lmtune keeps the same rule; see the README's differences.)

Writes tests/ref/kv_rotating/: config.json, model.safetensors (llama, GQA,
float32), case.json {"max_kv_size": N, "keep": 4}, inputs.safetensors
{"tokens" I32 (T)}, expected.safetensors {"logits" F32 (T, V)} and
{"logits_full" F32 (T, V)}, the causal logits (a cache that never rotates).

Run: /usr/bin/python3 tests/ref/gen_kv_rotating.py [OUT_DIR]  (deterministic)
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_refs as gr  # noqa: E402
import torch_model as tm  # noqa: E402

N, KEEP, T = 10, 4, 28


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "kv_rotating")
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(1212)
    cfg = gr.hf_config("llama", 32, 2, 4, 2, 64, 96, tied=False)
    weights = {k: v.float() for k, v in gr.make_weights(cfg, gen).items()}   # the file's float32 values
    tokens = torch.randint(1, cfg["vocab_size"], (1, T), generator=gen)
    model = tm.DecoderLM(cfg, weights, compute_dtype=torch.float64)
    full = model.logits(tokens)[0]
    q = torch.arange(T).view(T, 1)
    k = torch.arange(T).view(1, T)
    model.visible = (k <= q) & ((k < KEEP) | (k > q - (N - KEEP)))
    rotating = model.logits(tokens)[0]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump({"max_kv_size": N, "keep": KEEP, "tokens": T,
                   "description": "llama C32 L2 H4 KVH2 I64 V96 untied; rotating KV cache of 10 positions, keep 4"},
                  f, indent=2, sort_keys=True)
        f.write("\n")
    gr.save_safetensors(os.path.join(out, "model.safetensors"), weights)
    gr.save_safetensors(os.path.join(out, "inputs.safetensors"), {"tokens": tokens[0].to(torch.int32)})
    gr.save_safetensors(os.path.join(out, "expected.safetensors"),
                        {"logits": rotating.float(), "logits_full": full.float()})
    differ = (rotating[N:] - full[N:]).abs().max().item()
    print(f"kv_rotating: positions {N}..{T - 1} differ from the causal logits by up to {differ:.3g}")


if __name__ == "__main__":
    main()
