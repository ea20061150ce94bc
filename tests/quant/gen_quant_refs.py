#!/usr/bin/python3
"""Writes the quantization references of tests/quant/data (format: README.md).

Run with Debian's python (torch 1.13, numpy): /usr/bin/python3 tests/quant/gen_quant_refs.py
Deterministic (fixed seeds): rerunning rewrites the same bytes.

1. kernels.safetensors: MLX affine quantize/dequantize of small matrices for
   every bits (2, 3, 4, 5, 6, 8) x group (32, 64, 128) x dtype (float32,
   bfloat16, float16), with constant, all-zero, all-negative, all-positive,
   extreme-magnitude groups and groups whose codes fall on exact halves.
   The quantizer is tests/quant/mlx_affine.py (written from MLX's kernels).
2. <case>/: small MLX-quantized models (config.json with "quantization" and
   "quantization_config", MLX tensor names: .weight U32 codes, .scales,
   .biases) and, as tests/ref/data's cases, a LoRA or DoRA adapter, a batch
   and the float64 PyTorch reference (tests/ref/torch_model.py) run on the
   DEQUANTIZED weights: loss, logits and every adapter gradient.
"""

import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "ref"))
import gen_refs as gr  # noqa: E402  (safetensors I/O, configs, weights, batches, adapters)
import mlx_affine as mq  # noqa: E402
import torch_model as tm  # noqa: E402

DATA = os.environ.get("LMTUNE_QUANT_OUT") or os.path.join(HERE, "data")
NP_TO_TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def as_torch(x, dtype):
    """float32 numpy holding dtype values -> torch tensor of that dtype (exact)."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(NP_TO_TORCH[dtype])


class U32:
    """Packed codes to be written as safetensors U32 (torch 1.13 has no uint32)."""

    def __init__(self, packed):
        self.raw = np.ascontiguousarray(packed).tobytes()
        self.shape = [packed.shape[0], packed.shape[1] // 4]


class U8(U32):
    def __init__(self, packed):
        self.raw = np.ascontiguousarray(packed).tobytes()
        self.shape = list(packed.shape)


def save_safetensors(path, tensors, metadata):
    """gen_refs' writer, plus U32 and U8 tensors."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        if isinstance(t, U32):
            dt, shape, b = ("U8" if isinstance(t, U8) else "U32"), t.shape, t.raw
        else:
            dt, shape, b = gr._DT[t.dtype], list(t.shape), gr._raw_bytes(t)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = metadata
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(hj).to_bytes(8, "little"))
        f.write(hj)
        for b in blobs:
            f.write(b)


# ---- 1. kernel cases ---------------------------------------------------------
def kernel_matrix(rng, bits, group, dtype):
    """(4, 256): row 0 mixed special groups, row 1 all negative, row 2 all
    positive, row 3 extreme magnitudes."""
    rows, cols = 4, 256
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    n_bins = (1 << bits) - 1
    g0 = w[0].reshape(-1, group)
    ng = g0.shape[0]
    g0[0 % ng] = 0.0375                      # constant positive
    g0[1 % ng] = -0.0625                     # constant negative
    if ng > 2:
        g0[2] = 0.0                          # all zero
    if ng > 3:
        # codes on exact halves: range [0, n_bins], so scale is exactly -1 and
        # (w - bias) / scale = n_bins - w: w = k + 0.5 gives ties
        vals = np.arange(group, dtype=np.float32) % (n_bins + 1)
        vals[1::3] = np.minimum(vals[1::3] + 0.5, n_bins - 0.5)
        vals[0], vals[-1] = 0.0, float(n_bins)
        g0[3] = vals
    w[1] = -np.abs(w[1]) - 0.01
    w[2] = np.abs(w[2]) + 0.01
    big = 8e3 if dtype == "float16" else 3e4
    w[3] = rng.standard_normal(cols).astype(np.float32) * big
    w[3, :group // 2] *= 1e-6                # a group with tiny and huge values
    return mq.to_dtype(w, dtype)


def kernel_cases():
    rng = np.random.default_rng(15)
    out = {}
    for dtype in ("float32", "bfloat16", "float16"):
        for bits in (2, 3, 4, 5, 6, 8):
            for group in (32, 64, 128):
                w = kernel_matrix(rng, bits, group, dtype)
                packed, scales, biases = mq.quantize(w, bits, group, dtype)
                deq = mq.dequantize(packed, scales, biases, bits, group, dtype)
                # the packed bytes read as the bit stream of the C side's layout
                stream = np.unpackbits(packed, axis=1, bitorder="little")
                rebuilt = np.zeros((4, 256), dtype=np.int64)
                for b in range(bits):
                    rebuilt += stream[:, b::bits][:, :256].astype(np.int64) << b
                assert np.array_equal(rebuilt.astype(np.float32), mq.codes(packed, bits, 256))
                key = f"b{bits}_g{group}_{dtype}"
                out[key + ".w"] = as_torch(w, dtype)
                out[key + ".packed"] = U8(packed)
                out[key + ".scales"] = as_torch(scales, dtype)
                out[key + ".biases"] = as_torch(biases, dtype)
                out[key + ".deq"] = as_torch(deq, dtype)
                err = np.abs(deq - w).max() / max(np.abs(w).max(), 1e-30)
                print(f"  {key}: max |deq - w| / max|w| = {err:.2e}")
    return out


# ---- 2. model cases ----------------------------------------------------------
def module_params(path, quant):
    """The (bits, group) of module `path` or None (full precision)."""
    if path in quant:
        v = quant[path]
        if v is False:
            return None
        return v.get("bits") or 4, v.get("group_size") or 64
    return quant["bits"], quant["group_size"]


def quantize_model(weights, quant, dtype):
    """HF float32 weights -> (MLX file tensors, dequantized weights as torch
    tensors of dtype). Every linear and the embedding is quantized unless its
    override is false (the modules mlx_lm.convert quantizes)."""
    file_t, deq_w = {}, {}
    for name, t in sorted(weights.items()):
        stem = name[:-len(".weight")] if name.endswith(".weight") else None
        if t.dim() != 2 or stem is None:
            file_t[name] = t.to(NP_TO_TORCH[dtype])
            deq_w[name] = t.to(NP_TO_TORCH[dtype])
            continue
        w = mq.to_dtype(t.numpy(), dtype)
        p = module_params(stem, quant)
        if p is None:
            file_t[name] = as_torch(w, dtype)
            deq_w[name] = as_torch(w, dtype)
            continue
        bits, group = p
        packed, scales, biases = mq.quantize(w, bits, group, dtype)
        file_t[stem + ".weight"] = U32(packed)
        file_t[stem + ".scales"] = as_torch(scales, dtype)
        file_t[stem + ".biases"] = as_torch(biases, dtype)
        deq_w[name] = as_torch(mq.dequantize(packed, scales, biases, bits, group, dtype), dtype)
    return file_t, deq_w


def fuse_requantized(cfg, deq, adapters, quant, case, tokens, lens, offs, logits):
    """mlx_lm.fuse on the quantized base: W' = dequant(W) + scale B^T A^T,
    rounded to the model dtype and quantized again with the module's bits and
    group size. Returns how far the fused model's logits land from base +
    adapter (max abs, and the share of positions whose argmax agrees): the
    requantization error the C test allows."""
    lo = case["lora"]
    fused = dict(deq)
    dtype = case["weights_dtype"]
    for name in [n for n in adapters if n.endswith(".lora_a")]:
        stem = name[:-len(".lora_a")]
        W = deq[stem + ".weight"].double()
        delta = lo["scale"] * adapters[stem + ".lora_b"].double().t() @ adapters[name].double().t()
        w = mq.to_dtype((W + delta).float().numpy(), dtype)
        p = module_params(stem, quant)
        if p is None:   # a full-precision module: merged, not quantized
            fused[stem + ".weight"] = as_torch(w, dtype)
            continue
        packed, scales, biases = mq.quantize(w, p[0], p[1], dtype)
        fused[stem + ".weight"] = as_torch(mq.dequantize(packed, scales, biases, p[0], p[1], dtype), dtype)
    m = tm.DecoderLM(cfg, fused, compute_dtype=torch.float64, bf16_mode="emulate")
    _, _, fl = tm.forward_loss(m, tokens, lens, offs)
    fl = fl.detach()
    err = (fl - logits).abs().max().item()
    agree = (fl.argmax(-1) == logits.argmax(-1)).double().mean().item()
    print(f"  fused and re-quantized: logits max |diff| {err:.3e}, argmax agrees at {agree:.3f} of positions")
    return {"logits_max_abs": float(f"{err:.3e}"), "argmax_agree": agree}


def model_case(name, seed, cfg, quant, case, B, W, lengths, offsets, description):
    gen = torch.Generator().manual_seed(seed)
    base = gr.make_weights(cfg, gen)
    dtype = case["weights_dtype"]
    file_t, deq = quantize_model(base, quant, dtype)
    cfg = dict(cfg, quantization=quant, quantization_config=quant)
    tokens, lens, offs = gr.make_batch(gen, B, W, cfg["vocab_size"], lengths, offsets)
    inputs = {"tokens": tokens, "lengths": lens, "offsets": offs}
    lo = case["lora"]
    adapters = gr.make_adapters(cfg, gen, case["num_layers"], lo["keys"], lo["rank"])
    if case["fine_tune_type"] == "dora":
        gr.add_dora_magnitudes(adapters, {k: v.float() for k, v in deq.items()}, gen)
    inputs.update(adapters)
    case = dict(case, batch=B, width=W, description=description)
    model = gr.build_model(cfg, deq, case, adapters)
    loss, ntok, logits = tm.forward_loss(model, tokens, lens, offs)
    names = sorted(model.trainable)
    grads = torch.autograd.grad(loss, [model.trainable[n] for n in names])
    expected = {"loss": torch.tensor([loss.item()], dtype=torch.float32),
                "ntokens": torch.tensor([ntok], dtype=torch.int32),
                "logits": logits.detach().float()}
    for n, g in zip(names, grads):
        expected["grad." + n] = g.float()
    print(f"{name}: loss={loss.item():.6f} ntokens={ntok} trainable tensors={len(names)}")
    if case["fine_tune_type"] == "lora":
        case["fuse_requantized"] = fuse_requantized(cfg, deq, adapters, quant, case, tokens, lens, offs,
                                                    logits.detach())
    gr.finite_difference_check(name, model, tokens, lens, offs)
    case["fp32_deviation"] = gr.fp32_deviation(name, cfg, deq, case, adapters, inputs, expected)
    d = os.path.join(DATA, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
        f.write("\n")
    save_safetensors(os.path.join(d, "model.safetensors"), file_t, {"format": "mlx"})
    save_safetensors(os.path.join(d, "inputs.safetensors"), inputs, {"format": "pt"})
    save_safetensors(os.path.join(d, "expected.safetensors"), expected, {"format": "pt"})
    if dtype == "bfloat16":   # fp32 products on the bf16 dequantized weights (gen_refs.unrounded_expected)
        save_safetensors(os.path.join(d, "fp32_expected.safetensors"), gr.unrounded_expected(model, inputs),
                         {"format": "pt"})
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"  wrote {d} ({size / 1024:.0f} KB)")


# ---- 3. lmtune convert: a source model and what mlx_lm.convert writes -------
def mixed_bits(recipe, path, layers):
    """mlx_lm/convert.py mixed_quant_predicate_builder, for our module paths."""
    low, high = {"mixed_2_6": (2, 6), "mixed_3_4": (3, 4), "mixed_3_6": (3, 6), "mixed_4_6": (4, 6)}[recipe]
    parts = path.split(".")
    index = int(parts[2]) if len(parts) > 2 else 0
    more = index < layers // 8 or index >= 7 * layers // 8 or (index - layers // 8) % 3 == 2
    if ("v_proj" in path or "v_a_proj" in path or "v_b_proj" in path) and more:
        return high
    if "down_proj" in path and more:
        return high
    if "lm_head" in path:
        return high
    return low


def convert_cases():
    """convert_src: a bf16 llama (4 blocks, so the mixed recipe gives both bit
    widths) with constant and extreme rows; convert_q4g64 and
    convert_mixed_<recipe>_g<group> (each of the four recipes): the tensors and
    quantization mlx_lm.convert -q writes for it; convert_q4g64_deq:
    convert -d of the first."""
    cfg = gr.hf_config("llama", 64, 4, 2, 1, 64, 32, tied=False, dtype="bfloat16")
    gen = torch.Generator().manual_seed(105)
    w = gr.make_weights(cfg, gen)
    q = w["model.layers.0.self_attn.q_proj.weight"]
    q[0, :64] = 0.03125                     # a constant group
    q[1, :64] = -0.5
    q[2, :] = torch.linspace(-3e3, 3e3, 64)   # extreme magnitudes
    q[3, 32:] = 0.0                         # a zero group
    src = {k: v.to(torch.bfloat16) for k, v in w.items()}
    d = os.path.join(DATA, "convert_src")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_safetensors(os.path.join(d, "model.safetensors"), src, {"format": "pt"})
    layers = cfg["num_hidden_layers"]
    # every mixed recipe of mlx_lm.convert, at both group sizes the 64-wide rows allow
    cases = (("convert_q4g64", None, 4, 64), ("convert_mixed_3_6_g32", "mixed_3_6", 4, 32),
             ("convert_mixed_2_6_g64", "mixed_2_6", 4, 64), ("convert_mixed_3_4_g64", "mixed_3_4", 4, 64),
             ("convert_mixed_4_6_g32", "mixed_4_6", 4, 32))
    for name, recipe, bits, group in cases:
        quant = {"group_size": group, "bits": bits, "mode": "affine"}
        out, deq = {}, {}
        for k in sorted(src):
            t = src[k]
            if t.dim() == 2 and k.endswith(".weight") and t.shape[1] % group == 0:
                stem = k[:-len(".weight")]
                b = bits
                if recipe:
                    b = mixed_bits(recipe, stem, layers)
                    quant[stem] = {"group_size": group, "bits": b, "mode": "affine"}
                packed, scales, biases = mq.quantize(t.float().numpy(), b, group, "bfloat16")
                out[stem + ".weight"] = U32(packed)
                out[stem + ".scales"] = as_torch(scales, "bfloat16")
                out[stem + ".biases"] = as_torch(biases, "bfloat16")
                deq[k] = as_torch(mq.dequantize(packed, scales, biases, b, group, "bfloat16"), "bfloat16")
            else:
                out[k] = t
                deq[k] = t
        od = os.path.join(DATA, name)
        os.makedirs(od, exist_ok=True)
        save_safetensors(os.path.join(od, "model.safetensors"), out, {"format": "mlx"})
        with open(os.path.join(od, "quantization.json"), "w") as f:
            json.dump(quant, f, indent=2)
        if recipe is None:
            od = os.path.join(DATA, "convert_q4g64_deq")
            os.makedirs(od, exist_ok=True)
            save_safetensors(os.path.join(od, "model.safetensors"), deq, {"format": "mlx"})
    print("  wrote convert_src, convert_q4g64, convert_q4g64_deq, " + ", ".join(c[0] for c in cases[1:]))


def lora(keys, rank, scale):
    return {"rank": rank, "scale": scale, "dropout": 0.0, "keys": keys}


def main():
    # one thread: the float32 deviation statistics in case.json are then the
    # same on every run (with two threads they moved in the third digit when
    # the machine was loaded, and test_quant_regen compares them bit for bit)
    torch.set_num_threads(1)
    os.makedirs(DATA, exist_ok=True)
    print("kernels:")
    save_safetensors(os.path.join(DATA, "kernels.safetensors"), kernel_cases(), {"format": "pt"})
    print("convert:")
    convert_cases()
    all_keys = gr.ALL_KEYS
    # llama, tied quantized embedding (the LM head is QuantizedEmbedding.as_linear), 4-bit g64
    cfg = gr.hf_config("llama", 128, 2, 4, 2, 256, 160, tied=True)
    model_case("q4_llama_tied_lora", 101, cfg, {"group_size": 64, "bits": 4, "mode": "affine"},
               {"fine_tune_type": "lora", "num_layers": -1, "lora": lora(all_keys, 4, 2.0),
                "weights_dtype": "float32"}, 2, 17, [17, 11], [0, 4],
               "llama, tied 4-bit g64 embedding, LoRA on every linear")
    # qwen2, untied, a mixed recipe: defaults 3-bit g32, per-module overrides
    cfg = gr.hf_config("qwen2", 128, 2, 4, 2, 256, 136, tied=False)
    quant = {"group_size": 32, "bits": 3, "mode": "affine",
             "model.embed_tokens": {"group_size": 32, "bits": 2, "mode": "affine"},
             "lm_head": {"group_size": 64, "bits": 8, "mode": "affine"},
             "model.layers.0.self_attn.v_proj": {"group_size": 128, "bits": 6, "mode": "affine"},
             "model.layers.1.mlp.down_proj": {"group_size": None, "bits": 6, "mode": "affine"},
             "model.layers.1.self_attn.o_proj": False}
    model_case("q_mixed_qwen2_lora", 102, cfg, quant,
               {"fine_tune_type": "lora", "num_layers": 1, "lora": lora(all_keys, 4, 2.0),
                "weights_dtype": "float32"}, 3, 17, [17, 9, 13], [0, 3, 0],
               "qwen2 with biases, untied; 3-bit g32 with 2/6/8-bit overrides and one full-precision o_proj")
    # qwen3 q/k norms, DoRA on a 5-bit g128 base
    cfg = gr.hf_config("qwen3", 128, 2, 4, 2, 256, 128, tied=True, head_dim=32)
    model_case("q5_qwen3_dora", 103, cfg, {"group_size": 128, "bits": 5, "mode": "affine"},
               {"fine_tune_type": "dora", "num_layers": -1,
                "lora": lora(["self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.up_proj",
                              "mlp.down_proj"], 4, 2.0),
                "weights_dtype": "float32"}, 2, 17, [17, 12], [0, 5],
               "qwen3 (q/k norms), tied 5-bit g128, DoRA")
    # llama, bf16 scales (bf16 products), 8-bit g64 untied, LoRA on q, v, down
    cfg = gr.hf_config("llama", 128, 2, 4, 4, 256, 128, tied=False, dtype="bfloat16")
    model_case("q8_llama_lora_bf16", 104, cfg, {"group_size": 64, "bits": 8, "mode": "affine"},
               {"fine_tune_type": "lora", "num_layers": 1,
                "lora": lora(["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"], 8, 1.0),
                "weights_dtype": "bfloat16"}, 2, 17, [17, 10], [0, 2],
               "llama, bfloat16 scales and biases, 8-bit g64, LoRA q, v, down")


if __name__ == "__main__":
    main()
