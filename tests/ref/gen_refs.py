#!/usr/bin/python3
"""Writes the reference cases of tests/ref/data/<case>/ (format: README.md).

Run from anywhere with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/gen_refs.py
Deterministic: every case has its own fixed seed, so rerunning rewrites the
same bytes. Each case is small (< ~300 KB) because the files are committed.
Also runs a self-check per case: a central finite difference in float64 on
one element of one trainable tensor against autograd (printed).
"""

import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_model as tm  # noqa: E402

DATA = os.environ.get("LMTUNE_REF_OUT") or os.path.join(HERE, "data")  # override: tests/ref/test_ref_regen.sh
ALL_KEYS = list(tm.LINEAR_KEYS)

# ---- safetensors (tiny writer/reader of our own: the package is not installed) ----
_DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int32: "I32",
       torch.float64: "F64", torch.int64: "I64", torch.float16: "F16"}
_DT_INV = {v: k for k, v in _DT.items()}


def _raw_bytes(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def save_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        b = _raw_bytes(tensors[name])
        header[name] = {"dtype": _DT[tensors[name].dtype], "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = metadata or {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        s, e = info["data_offsets"]
        raw = bytearray(data[8 + n + s:8 + n + e])
        dt = _DT_INV[info["dtype"]]
        if dt == torch.bfloat16:
            t = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if raw else torch.empty(0, dtype=dt)
        else:
            t = torch.frombuffer(raw, dtype=dt) if raw else torch.empty(0, dtype=dt)
        out[name] = t.reshape(info["shape"]).clone()
    return out


# ---- model configs and weights ----------------------------------------------
def hf_config(model_type, hidden, layers, heads, kv_heads, inter, vocab, tied,
              head_dim=None, rope_theta=10000.0, rope_scaling=None, eps=1e-5,
              dtype="float32", attention_bias=False):
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
            "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[model_type]
    c = {
        "architectures": [arch], "model_type": model_type,
        "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "intermediate_size": inter, "vocab_size": vocab,
        "hidden_act": "silu", "max_position_embeddings": 256,
        "rms_norm_eps": eps, "rope_theta": rope_theta, "rope_scaling": rope_scaling,
        "tie_word_embeddings": tied, "torch_dtype": dtype,
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
        "attention_dropout": 0.0, "use_cache": True, "transformers_version": "4.51.0",
    }
    if model_type in ("llama", "qwen3"):
        c["attention_bias"] = attention_bias
    if model_type == "llama":
        c["mlp_bias"] = False
        c["pretraining_tp"] = 1
    if model_type == "mistral":
        c["sliding_window"] = None
    if model_type in ("qwen2", "qwen3"):
        c["use_sliding_window"] = False
        c["sliding_window"] = None
        c["max_window_layers"] = layers
    if head_dim is not None:
        c["head_dim"] = head_dim
    return c


def make_weights(cfg, gen):
    """Random base weights with HF names, float32 (linears std 0.7/sqrt(in),
    norms 1 + 0.1 N(0,1), biases 0.1 N(0,1), embeddings std 1.5/sqrt(hidden))."""
    if cfg["model_type"] not in ("llama", "mistral", "qwen2", "qwen3"):
        return family_weights(cfg, gen)
    C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    mt = cfg["model_type"]
    bias = mt == "qwen2" or cfg.get("attention_bias", False)

    def n(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).float() * std

    def lin(out_f, in_f):
        return n(out_f, in_f, std=0.7 / in_f ** 0.5)

    w = {"model.embed_tokens.weight": n(V, C, std=1.5 / C ** 0.5),
         "model.norm.weight": 1 + n(C, std=0.1)}
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(V, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = 1 + n(C, std=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + n(C, std=0.1)
        w[p + "self_attn.q_proj.weight"] = lin(H * D, C)
        w[p + "self_attn.k_proj.weight"] = lin(KVH * D, C)
        w[p + "self_attn.v_proj.weight"] = lin(KVH * D, C)
        w[p + "self_attn.o_proj.weight"] = lin(C, H * D)
        if bias:
            w[p + "self_attn.q_proj.bias"] = n(H * D, std=0.1)
            w[p + "self_attn.k_proj.bias"] = n(KVH * D, std=0.1)
            w[p + "self_attn.v_proj.bias"] = n(KVH * D, std=0.1)
        if mt == "qwen3":
            w[p + "self_attn.q_norm.weight"] = 1 + n(D, std=0.1)
            w[p + "self_attn.k_norm.weight"] = 1 + n(D, std=0.1)
        w[p + "mlp.gate_proj.weight"] = lin(I, C)
        w[p + "mlp.up_proj.weight"] = lin(I, C)
        w[p + "mlp.down_proj.weight"] = lin(C, I)
    return w


def family_weights(cfg, gen):
    """Random base weights of a gemma2 / gemma3 / phi3 / smollm3 config (HF
    names under its prefix), float32: linears std 0.7/sqrt(in), embeddings
    1.5/sqrt(hidden) (gemma: times sqrt(hidden) in the model, so 1.5/hidden),
    norms 1 + 0.1 N(0,1) (gemma's zero-centred norms: 0.1 N(0,1)). A multimodal
    gemma3 also gets two vision-side tensors the text model must ignore."""
    text, prefix = tm.text_config(cfg)
    mt = text["model_type"]
    C, V, I = text["hidden_size"], text["vocab_size"], text["intermediate_size"]
    H, KVH = text["num_attention_heads"], text["num_key_value_heads"]
    D = text.get("head_dim") or C // H
    gemma = mt in tm.GEMMA

    def n(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).float() * std

    def lin(out_f, in_f):
        return n(out_f, in_f, std=0.7 / in_f ** 0.5)

    def norm(dim):
        return n(dim, std=0.1) if gemma else 1 + n(dim, std=0.1)

    w = {prefix + "embed_tokens.weight": n(V, C, std=1.5 / C if gemma else 1.5 / C ** 0.5),
         prefix + "norm.weight": norm(C)}
    tied = text.get("tie_word_embeddings", gemma or mt == "smollm3")
    if not tied:
        w[("language_model." if prefix.startswith("language_model") else "") + "lm_head.weight"] = lin(V, C)
    for i in range(text["num_hidden_layers"]):
        p = f"{prefix}layers.{i}."
        w[p + "input_layernorm.weight"] = norm(C)
        w[p + "post_attention_layernorm.weight"] = norm(C)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = norm(C)
            w[p + "post_feedforward_layernorm.weight"] = norm(C)
        if mt == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = lin((H + 2 * KVH) * D, C)
        else:
            w[p + "self_attn.q_proj.weight"] = lin(H * D, C)
            w[p + "self_attn.k_proj.weight"] = lin(KVH * D, C)
            w[p + "self_attn.v_proj.weight"] = lin(KVH * D, C)
        w[p + "self_attn.o_proj.weight"] = lin(C, H * D)
        if mt == "gemma3_text":
            w[p + "self_attn.q_norm.weight"] = norm(D)
            w[p + "self_attn.k_norm.weight"] = norm(D)
        if mt == "phi3":
            w[p + "mlp.gate_up_proj.weight"] = lin(2 * I, C)
        else:
            w[p + "mlp.gate_proj.weight"] = lin(I, C)
            w[p + "mlp.up_proj.weight"] = lin(I, C)
        w[p + "mlp.down_proj.weight"] = lin(C, I)
    if prefix == "language_model.model.":
        w["vision_tower.vision_model.embeddings.patch_embedding.weight"] = n(8, 3, 2, 2)
        w["multi_modal_projector.mm_input_projection_weight"] = n(8, C)
    return w


def make_batch(gen, B, W, V, lengths, offsets):
    tokens = torch.randint(1, V, (B, W), generator=gen, dtype=torch.int64)
    for b in range(B):
        tokens[b, lengths[b]:] = 0
    return (tokens.to(torch.int32), torch.tensor(lengths, dtype=torch.int32),
            torch.tensor(offsets, dtype=torch.int32))


def make_adapters(cfg, gen, num_layers, keys, rank):
    """MLX names/layouts: lora_a (in, r) U(+-1/sqrt(in)), lora_b (r, out) 0.02 N(0,1)."""
    weights_shape = make_shapes(cfg)
    text, prefix = tm.text_config(cfg)
    L = text["num_hidden_layers"]
    lowest = L - (L if num_layers <= 0 else num_layers)
    ad = {}
    for i in range(lowest, L):
        for key in keys:
            base = f"{prefix}layers.{i}.{key}"
            out_f, in_f = weights_shape[key]
            bound = 1.0 / in_f ** 0.5
            ad[base + ".lora_a"] = ((torch.rand(in_f, rank, generator=gen, dtype=torch.float64) * 2 - 1) * bound).float()
            ad[base + ".lora_b"] = (torch.randn(rank, out_f, generator=gen, dtype=torch.float64) * 0.02).float()
    return ad


def add_dora_magnitudes(adapters, base_weights, gen):
    """DoRA m (out,) F32: the row norms of W (MLX init) times 1 + 0.1 N(0,1),
    so that the scale m / ||adapted|| is not trivially close to one."""
    for name in [n for n in adapters if n.endswith(".lora_a")]:
        stem = name[:-len(".lora_a")]
        W = base_weights[stem + ".weight"].double()
        noise = 1 + 0.1 * torch.randn(W.shape[0], generator=gen, dtype=torch.float64)
        adapters[stem + ".m"] = (W.norm(dim=1) * noise).float()


def make_shapes(cfg):
    cfg, _ = tm.text_config(cfg)
    C, I = cfg["hidden_size"], cfg["intermediate_size"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H
    return {"self_attn.q_proj": (H * D, C), "self_attn.k_proj": (KVH * D, C),
            "self_attn.v_proj": (KVH * D, C), "self_attn.o_proj": (C, H * D),
            "mlp.gate_proj": (I, C), "mlp.up_proj": (I, C), "mlp.down_proj": (C, I),
            "self_attn.qkv_proj": ((H + 2 * KVH) * D, C), "mlp.gate_up_proj": (2 * I, C)}


def to_file_dtype(weights, weights_dtype):
    if weights_dtype == "bfloat16":
        return {k: v.to(torch.bfloat16) for k, v in weights.items()}
    return weights


def build_model(cfg, file_weights, case, adapters=None, dtype=torch.float64):
    m = tm.DecoderLM(cfg, file_weights, compute_dtype=dtype, bf16_mode="emulate")
    if case["fine_tune_type"] == "full":
        m.set_full(case["num_layers"])
    else:
        lo = case["lora"]
        m.set_lora(case["num_layers"], lo["keys"], lo["rank"], lo["scale"], adapters=adapters,
                   dora=case["fine_tune_type"] == "dora")
    return m


def finite_difference_check(name, model, tokens, lengths, offsets):
    """Central difference on the largest-gradient element of one trainable
    tensor, float64, bf16 input rounding switched off (it is piecewise constant)."""
    saved = model.round_inputs
    model.round_inputs = False
    # DoRA: MLX stops the gradient through the row norm, so autograd's dA, dB
    # are not the true derivative; m enters only as a factor, check it instead.
    names = sorted(model.trainable)
    pname = next((n for n in names if n.endswith(".m")), names[0])
    p = model.trainable[pname]
    loss, _, _ = tm.forward_loss(model, tokens, lengths, offsets)
    (g,) = torch.autograd.grad(loss, [p])
    idx = int(g.abs().flatten().argmax())
    h = 1e-6
    with torch.no_grad():
        flat = p.view(-1)
        orig = flat[idx].item()
        flat[idx] = orig + h
        lp = tm.forward_loss(model, tokens, lengths, offsets)[0].item()
        flat[idx] = orig - h
        lm = tm.forward_loss(model, tokens, lengths, offsets)[0].item()
        flat[idx] = orig
    fd = (lp - lm) / (2 * h)
    ad = g.flatten()[idx].item()
    rel = abs(fd - ad) / max(abs(ad), 1e-30)
    print(f"  [{name}] finite difference d loss/d {pname}[{idx}]: fd={fd:.10e} autograd={ad:.10e} rel.err={rel:.2e}")
    model.round_inputs = saved
    assert rel < 1e-6, "finite differences disagree with autograd"
    return rel


def fp32_deviation(name, cfg, file_weights, case, adapters, inputs, expected):
    """The same computation in float32 (what an exact fp32 engine would get),
    compared with the float64 reference: a guide for test tolerances.
    grad_max_rel = max|a - b| / max|b|, grad_norm_rel = ||a - b|| / ||b||,
    each the worst over the grad.* tensors."""
    m32 = build_model(cfg, file_weights, case, adapters, dtype=torch.float32)
    loss, _, logits = tm.forward_loss(m32, inputs["tokens"], inputs["lengths"], inputs["offsets"])
    names = sorted(m32.trainable)
    grads = torch.autograd.grad(loss, [m32.trainable[n] for n in names])

    def rel(a, b):
        return (a.float() - b).abs().max().item() / max(b.abs().max().item(), 1e-30)

    dev = {"loss_abs": abs(loss.item() - expected["loss"].item()),
           "logits_max_abs": (logits.detach().float() - expected["logits"]).abs().max().item(),
           "logits_rms_abs": (logits.detach().float() - expected["logits"]).pow(2).mean().sqrt().item(),
           "grad_max_rel": max(rel(g, expected["grad." + n]) for n, g in zip(names, grads)),
           "grad_norm_rel": max(((g.float() - expected["grad." + n]).norm() / expected["grad." + n].norm()).item()
                                for n, g in zip(names, grads))}
    print(f"  [{name}] float32 vs float64: " + " ".join(f"{k}={v:.2e}" for k, v in dev.items()))
    return {k: float(f"{v:.3e}") for k, v in dev.items()}


def unrounded_expected(model, inputs):
    """bf16 cases: the same computation without rounding the inputs of the
    bf16 products (round_inputs off): what an engine computes in fp32
    products on the bf16 weights (lmtune's --weights-dtype f32 on a bf16
    file). Written as fp32_expected.safetensors."""
    saved = model.round_inputs
    model.round_inputs = False
    loss, ntok, logits = tm.forward_loss(model, inputs["tokens"], inputs["lengths"], inputs["offsets"])
    names = sorted(model.trainable)
    grads = torch.autograd.grad(loss, [model.trainable[n] for n in names])
    model.round_inputs = saved
    out = {"loss": torch.tensor([loss.item()], dtype=torch.float32),
           "ntokens": torch.tensor([ntok], dtype=torch.int32),
           "logits": logits.detach().float()}
    for n, g in zip(names, grads):
        out["grad." + n] = g.float()
    return out


def write_case_dir(name, cfg, file_weights, case, inputs, expected, fp32_expected=None):
    d = os.path.join(DATA, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=2)
        f.write("\n")
    save_safetensors(os.path.join(d, "model.safetensors"), file_weights)
    save_safetensors(os.path.join(d, "inputs.safetensors"), inputs)
    save_safetensors(os.path.join(d, "expected.safetensors"), expected)
    files = [("model", file_weights), ("inputs", inputs), ("expected", expected)]
    if fp32_expected is not None:
        save_safetensors(os.path.join(d, "fp32_expected.safetensors"), fp32_expected)
        files.append(("fp32_expected", fp32_expected))
    # read back: the writer and reader agree bit for bit
    for fn, ref in files:
        back = load_safetensors(os.path.join(d, fn + ".safetensors"))
        assert set(back) == set(ref)
        for k in ref:
            assert back[k].dtype == ref[k].dtype and torch.equal(back[k], ref[k]), (fn, k)
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"  wrote {d} ({size / 1024:.0f} KB)")


# ---- the cases --------------------------------------------------------------
def grad_case(name, seed, cfg, case, B, W, lengths, offsets, description):
    gen = torch.Generator().manual_seed(seed)
    base = make_weights(cfg, gen)
    file_weights = to_file_dtype(base, case["weights_dtype"])
    tokens, lens, offs = make_batch(gen, B, W, tm.text_config(cfg)[0]["vocab_size"], lengths, offsets)
    inputs = {"tokens": tokens, "lengths": lens, "offsets": offs}
    adapters = None
    if case["fine_tune_type"] in ("lora", "dora"):
        lo = case["lora"]
        adapters = make_adapters(cfg, gen, case["num_layers"], lo["keys"], lo["rank"])
        if case["fine_tune_type"] == "dora":
            add_dora_magnitudes(adapters, base, gen)
        inputs.update(adapters)
    case = dict(case, batch=B, width=W, description=description)
    model = build_model(cfg, file_weights, case, adapters)
    loss, ntok, logits = tm.forward_loss(model, tokens, lens, offs)
    names = sorted(model.trainable)
    grads = torch.autograd.grad(loss, [model.trainable[n] for n in names])
    expected = {"loss": torch.tensor([loss.item()], dtype=torch.float32),
                "ntokens": torch.tensor([ntok], dtype=torch.int32),
                "logits": logits.detach().float()}
    for n, g in zip(names, grads):
        expected["grad." + n] = g.float()
    print(f"{name}: loss={loss.item():.6f} ntokens={ntok} trainable tensors={len(names)}")
    finite_difference_check(name, model, tokens, lens, offs)
    case["fp32_deviation"] = fp32_deviation(name, cfg, file_weights, case, adapters, inputs, expected)
    fp32x = unrounded_expected(model, inputs) if case["weights_dtype"] == "bfloat16" else None
    write_case_dir(name, cfg, file_weights, case, inputs, expected, fp32x)
    return model, inputs, expected


def trajectory_case(name, seed, optimizer, lr, momentum):
    cfg = hf_config("llama", 32, 2, 4, 2, 64, 128, tied=True)
    gen = torch.Generator().manual_seed(seed)
    base = make_weights(cfg, gen)
    keys = ["self_attn.q_proj", "self_attn.v_proj"]
    lora = {"rank": 4, "scale": 2.0, "dropout": 0.0, "keys": keys}
    inputs = {}
    batches = []
    for j, (lengths, offsets) in enumerate((([17, 12], [0, 3]), ([15, 17], [4, 0]))):
        t, l, o = make_batch(gen, 2, 17, cfg["vocab_size"], lengths, offsets)
        inputs.update({f"tokens_{j}": t, f"lengths_{j}": l, f"offsets_{j}": o})
        batches.append((t, l, o))
    adapters = make_adapters(cfg, gen, 2, keys, 4)
    inputs.update(adapters)
    updates = 10
    order = [k % 2 for k in range(updates)]
    case = {"fine_tune_type": "lora", "num_layers": 2, "lora": lora, "weights_dtype": "float32",
            "batch": 2, "width": 17,
            "optimizer": optimizer, "learning_rate": lr, "updates": updates, "batch_order": order,
            "description": f"{updates} {optimizer} updates (MLX semantics) on alternating batches "
                           "tokens_0/tokens_1; losses[k] is the loss before update k"}
    if optimizer == "adam":
        case["optimizer_config"] = {"betas": [0.9, 0.999], "eps": 1e-8, "bias_correction": False}
    else:
        case["optimizer_config"] = {"momentum": momentum, "dampening": 0.0, "nesterov": False,
                                    "weight_decay": 0.0}

    def run(dtype):
        model = build_model(cfg, base, case, adapters, dtype=dtype)
        names = sorted(model.trainable)
        params = [model.trainable[n] for n in names]
        opt = tm.AdamMLX(params, lr) if optimizer == "adam" else tm.SGDMLX(params, lr, momentum)
        losses = []
        for k in range(updates):
            t, l, o = batches[order[k]]
            loss, _, _ = tm.forward_loss(model, t, l, o)
            grads = torch.autograd.grad(loss, params)
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
            losses.append(loss.item())
        return losses, {n: model.trainable[n].detach().float() for n in names}

    losses, final = run(torch.float64)
    expected = {"losses": torch.tensor(losses, dtype=torch.float32)}
    expected.update(final)
    print(f"{name}: losses " + " ".join(f"{x:.5f}" for x in losses))
    losses32, final32 = run(torch.float32)
    dev = {"losses_max_abs": max(abs(a - b) for a, b in zip(losses, losses32)),
           "weights_max_rel": max(((final32[n] - final[n]).abs().max() / final[n].abs().max()).item()
                                  for n in final)}
    print(f"  [{name}] float32 vs float64: " + " ".join(f"{k}={v:.2e}" for k, v in dev.items()))
    case["fp32_deviation"] = {k: float(f"{v:.3e}") for k, v in dev.items()}
    write_case_dir(name, cfg, base, case, inputs, expected)


def peft_case():
    name = "peft_export"
    cfg = hf_config("llama", 32, 2, 4, 2, 64, 128, tied=False)
    keys = ALL_KEYS
    rank, scale = 4, 2.5
    case = {"fine_tune_type": "lora", "num_layers": 1, "weights_dtype": "float32",
            "lora": {"rank": rank, "scale": scale, "dropout": 0.0, "keys": keys}}
    desc = ("MLX adapter (inputs) and its PEFT export (expected): lora_A.weight = lora_a^T (r,in), "
            "lora_B.weight = lora_b^T (out,r), lora_alpha = scale*r; logits (MLX convention) "
            "and logits_peft (W x + alpha/r B A x) agree")
    model, inputs, expected = grad_case(name, 606, cfg, case, 2, 17, [17, 11], [2, 0], desc)
    peft = {}
    for n, t in inputs.items():
        if n.endswith(".lora_a"):
            base = n[:-len(".lora_a")]
            peft[f"base_model.model.{base}.lora_A.weight"] = t.t().contiguous()
            peft[f"base_model.model.{base}.lora_B.weight"] = inputs[base + ".lora_b"].t().contiguous()
    alpha = scale * rank
    d = os.path.join(DATA, name)
    file_weights = load_safetensors(os.path.join(d, "model.safetensors"))
    pm = tm.DecoderLM(cfg, file_weights, compute_dtype=torch.float64)
    pm.set_lora_peft(peft, alpha, rank)
    with torch.no_grad():
        logits_peft = pm.logits(inputs["tokens"].long()[:, :-1])
    diff = (logits_peft.float() - expected["logits"]).abs().max().item()
    print(f"  [{name}] max |logits_peft - logits| = {diff:.2e}")
    assert diff < 1e-5
    expected = dict(expected)
    expected.update(peft)
    expected["logits_peft"] = logits_peft.float()
    L = cfg["num_hidden_layers"]
    case = json.load(open(os.path.join(d, "case.json")))
    case["peft"] = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "lora_dropout": 0.0,
                    "bias": "none", "task_type": "CAUSAL_LM",
                    "target_modules": sorted(k.split(".")[-1] for k in keys),
                    "layers_to_transform": list(range(L - case["num_layers"], L))}
    write_case_dir(name, cfg, file_weights, case, inputs, expected)


def lora(keys, rank, scale):
    return {"rank": rank, "scale": scale, "dropout": 0.0, "keys": list(keys)}


GEMMA3_TEXT_BASE = {
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128, "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 24,
    "rope_theta": 10000.0, "rope_local_base_freq": 100.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    "sliding_window": 5, "attention_bias": False, "attn_logit_softcapping": None,
    "final_logit_softcapping": None, "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": 1,
    "torch_dtype": "float32",
}


def gemma3_text_config(**kw):
    c = dict(GEMMA3_TEXT_BASE)
    c.update(kw)
    return c


def family_cases():
    """gemma2, gemma3 (text and multimodal), phi3 and smollm3: windows shorter
    than the sequence (T = 16), partial rotary and longrope on both sides of
    original_max_position_embeddings, NoPE layers between RoPE layers."""
    gemma_keys = list(tm.LINEAR_KEYS)
    grad_case("gemma3_text_lora", 1101,
              gemma3_text_config(layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                              "sliding_attention"]),
              {"fine_tune_type": "lora", "num_layers": -1, "lora": lora(gemma_keys, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 12], [3, 0],
              "gemma3_text: 1 + w norms, sandwich norms, q/k norms, GeGLU, embeddings times sqrt(32), scale "
              "24^-1/2, layer_types [s, s, f, s] with window 5 < T = 16, local RoPE base 100 on sliding "
              "layers and base 10000 with linear factor 2 on the full one; LoRA on all 7 keys of all blocks")
    grad_case("gemma3_text_full_bf16", 1102,
              gemma3_text_config(sliding_window_pattern=3, torch_dtype="bfloat16"),
              {"fine_tune_type": "full", "num_layers": 2, "lora": None, "weights_dtype": "bfloat16"},
              2, 17, [17, 15], [0, 4],
              "gemma3_text with sliding_window_pattern 3 (layers 0, 1, 3 slide), bf16 weights (embedding "
              "scale rounded to bf16: sqrt(32) = 5.65685 -> 5.65625), full fine-tuning of the last 2 blocks "
              "(the zero-centred norms are trained as stored)")
    grad_case("gemma3_text_full", 1104,
              gemma3_text_config(layer_types=["full_attention", "sliding_attention", "sliding_attention",
                                              "full_attention"], sliding_window=3),
              {"fine_tune_type": "full", "num_layers": -1, "lora": None, "weights_dtype": "float32"},
              2, 17, [17, 13], [0, 1],
              "gemma3_text in fp32, layer_types [f, s, s, f] with window 3, full fine-tuning of every block "
              "(the 1 + w norms, the q/k norms and the four block norms are trained)")
    mm_text = {k: v for k, v in gemma3_text_config(sliding_window=4).items()
               if k not in ("architectures", "tie_word_embeddings", "torch_dtype", "bos_token_id", "eos_token_id")}
    mm_text["num_hidden_layers"] = 2
    mm = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": mm_text,
          "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 8}, "mm_tokens_per_image": 4,
          "tie_word_embeddings": True, "bos_token_id": 2, "eos_token_id": [1, 106], "torch_dtype": "float32"}
    grad_case("gemma3_mm_lora", 1103, mm,
              {"fine_tune_type": "lora", "num_layers": 1, "lora": lora(
                  ["self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj"], 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 9], [0, 2],
              "multimodal gemma3 config (text_config nested, default pattern 6: both layers slide, window 4), "
              "weights and adapter keys under language_model.model., vision tensors present and ignored; "
              "LoRA on q,v,o,down of the last block")
    gemma2 = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
              "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 128, "max_position_embeddings": 256,
              "rms_norm_eps": 1e-6, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 12,
              "rope_theta": 10000.0, "sliding_window": 5, "attn_logit_softcapping": 3.0,
              "final_logit_softcapping": 4.0, "tie_word_embeddings": True, "attention_bias": False,
              "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "float32"}
    grad_case("gemma2_softcap_lora", 1201, gemma2,
              {"fine_tune_type": "lora", "num_layers": 2, "lora": lora(gemma_keys, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 13], [2, 0],
              "gemma2: attention scores and final logits soft-capped (3 and 4, small enough to bend), even "
              "layers slide (window 5 < T), one RoPE base; LoRA on all 7 keys of the last 2 blocks")
    grad_case("gemma2_full", 1202, dict(gemma2, num_hidden_layers=3),
              {"fine_tune_type": "full", "num_layers": 2, "lora": None, "weights_dtype": "float32"},
              2, 17, [17, 16], [0, 3],
              "gemma2 (soft-capped attention and logits, window 5 on layers 0 and 2), full fine-tuning of the "
              "last 2 of 3 blocks")
    fused = list(tm.FUSED_KEYS)

    def phi3(orig, tied, **kw):
        c = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
             "hidden_size": 48, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 3,
             "num_key_value_heads": 1, "vocab_size": 128, "max_position_embeddings": 64,
             "original_max_position_embeddings": orig, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-5,
             "hidden_act": "silu", "rope_theta": 10000.0,
             "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.2, 1.5, 2.0],
                              "long_factor": [1.0, 2.5, 4.0, 9.0]},
             "sliding_window": 12, "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2,
             "torch_dtype": "float32"}
        c.update(kw)
        return c
    grad_case("phi3_longrope_lora", 1301, phi3(8, False),
              {"fine_tune_type": "lora", "num_layers": -1, "lora": lora(fused, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 11], [0, 3],
              "phi3: fused qkv_proj and gate_up_proj, 3 query heads of 16 and 1 kv head, partial_rotary_factor "
              "0.5 (8 rotary dims), "
              "longrope with original_max_position_embeddings 8 < T = 16 (long factors, attention factor "
              "sqrt(1 + ln 8 / ln 8)), sliding window 12 on every layer, untied; LoRA on the 4 keys of all blocks")
    grad_case("phi3_short_dora", 1302, phi3(32, True),
              {"fine_tune_type": "dora", "num_layers": 1, "lora": lora(
                  ["self_attn.qkv_proj", "mlp.gate_up_proj", "mlp.down_proj"], 4, 2.0), "weights_dtype": "float32"},
              2, 17, [17, 14], [4, 0],
              "phi3 with original_max_position_embeddings 32 >= T (short factors, attention factor "
              "sqrt(1 + ln 2 / ln 32)), tied; DoRA on qkv, gate_up, down of the last block")
    grad_case("phi3_full", 1303, phi3(8, False),
              {"fine_tune_type": "full", "num_layers": 1, "lora": None, "weights_dtype": "float32"},
              2, 17, [17, 10], [0, 0],
              "phi3 (long factors), full fine-tuning of the last block: the fused matrices are trained whole")
    smol = {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3",
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 128, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
            "hidden_act": "silu", "rope_theta": 5000.0, "no_rope_layers": [1, 0, 1], "use_sliding_window": False,
            "sliding_window": None, "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False,
            "bos_token_id": None, "eos_token_id": 2, "torch_dtype": "float32"}
    grad_case("smollm3_nope_lora", 1401, smol,
              {"fine_tune_type": "lora", "num_layers": -1, "lora": lora(gemma_keys, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 12], [0, 5],
              "smollm3: no_rope_layers [1, 0, 1] (the middle layer has no RoPE), tied; LoRA on all 7 keys")
    smol_full = dict(smol)
    smol_full.pop("no_rope_layers")
    smol_full.update(num_hidden_layers=4, no_rope_layer_interval=2)
    grad_case("smollm3_nope_full", 1402, smol_full,
              {"fine_tune_type": "full", "num_layers": 3, "lora": None, "weights_dtype": "float32"},
              2, 17, [17, 16], [1, 0],
              "smollm3 with no_rope_layer_interval 2 (layers 1 and 3 without RoPE), full fine-tuning of the "
              "last 3 of 4 blocks")


def main():
    torch.set_num_threads(2)
    os.makedirs(DATA, exist_ok=True)
    qv = ["self_attn.q_proj", "self_attn.v_proj"]

    grad_case("llama_gqa_tied_lora", 101,
              hf_config("llama", 48, 3, 4, 2, 96, 128, tied=True),
              {"fine_tune_type": "lora", "num_layers": 2, "lora": lora(ALL_KEYS, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 13], [3, 0],
              "llama, GQA 4/2, tied embeddings, LoRA r4 scale 2 on all 7 projections of the last 2 of 3 blocks")

    rs = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}
    grad_case("llama3_rope_lora_bf16", 202,
              hf_config("llama", 64, 2, 4, 2, 128, 160, tied=True, rope_theta=10000.0,
                        rope_scaling=rs, dtype="bfloat16"),
              {"fine_tune_type": "lora", "num_layers": 2, "lora": lora(qv, 4, 2.0),
               "weights_dtype": "bfloat16"},
              2, 33, [33, 20], [0, 5],
              "llama with llama3 rope_scaling (original_max_position_embeddings 64 so that the "
              "low, medium and high frequency bands all occur with head_dim 16), bf16 weights, LoRA on q,v")

    grad_case("qwen2_bias_untied_full", 303,
              hf_config("qwen2", 48, 2, 4, 2, 96, 136, tied=False, rope_theta=1000000.0, eps=1e-6),
              {"fine_tune_type": "full", "num_layers": 1, "lora": None, "weights_dtype": "float32"},
              3, 17, [17, 9, 14], [0, 4, 2],
              "qwen2: q/k/v bias, untied lm_head, full fine-tuning of the last 1 of 2 blocks")

    grad_case("qwen3_qknorm_lora", 404,
              hf_config("qwen3", 48, 2, 4, 2, 96, 128, tied=True, head_dim=16, rope_theta=1000000.0,
                        eps=1e-6),
              {"fine_tune_type": "lora", "num_layers": -1, "lora": lora(ALL_KEYS, 4, 2.0),
               "weights_dtype": "float32"},
              2, 17, [17, 10], [4, 0],
              "qwen3: q/k RMSNorm per head before RoPE, head_dim 16 != hidden/heads 12, "
              "LoRA on all 7 projections of all blocks (num_layers -1)")

    grad_case("qwen3_qknorm_full_bf16", 505,
              hf_config("qwen3", 48, 2, 4, 2, 96, 128, tied=True, head_dim=16, rope_theta=1000000.0,
                        eps=1e-6, dtype="bfloat16"),
              {"fine_tune_type": "full", "num_layers": 1, "lora": None, "weights_dtype": "bfloat16"},
              2, 17, [17, 12], [0, 3],
              "qwen3 with q/k norms and head_dim 16 (hidden 48, 4 heads), bf16 weights, full fine-tuning of the last 1 of 2 "
              "blocks (trainable weights start from the bf16 values, computed in full precision)")

    grad_case("mistral_lora", 707,
              hf_config("mistral", 32, 2, 4, 1, 96, 150, tied=False),
              {"fine_tune_type": "lora", "num_layers": 1, "lora": lora(
                  ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                   "mlp.down_proj"], 2, 4.0), "weights_dtype": "float32"},
              2, 17, [16, 17], [0, 6],
              "mistral, multi-query (4 heads, 1 kv head, head_dim 8), untied, vocab 150, "
              "LoRA r2 scale 4 on q,k,v,o,down of the last block")

    grad_case("llama_bias_lora_bf16", 808,
              hf_config("llama", 64, 2, 4, 4, 96, 128, tied=False, attention_bias=True, dtype="bfloat16"),
              {"fine_tune_type": "lora", "num_layers": 1, "lora": lora(
                  ["self_attn.k_proj", "mlp.gate_proj", "mlp.up_proj"], 8, 1.0), "weights_dtype": "bfloat16"},
              2, 17, [17, 8], [1, 1],
              "llama with attention_bias true, no GQA (4/4), untied, bf16 weights, "
              "LoRA r8 scale 1 on k,gate,up of the last block")

    grad_case("qwen2_dora", 1010,
              hf_config("qwen2", 48, 2, 4, 2, 96, 128, tied=True, rope_theta=1000000.0, eps=1e-6),
              {"fine_tune_type": "dora", "num_layers": 1, "lora": lora(
                  ["self_attn.q_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                   "mlp.down_proj"], 4, 2.0), "weights_dtype": "float32"},
              2, 17, [17, 14], [5, 0],
              "qwen2 (q/v bias: added after the DoRA rescaling), tied, DoRA r4 scale 2 on q,v,o,gate,down "
              "of the last block; m given in inputs (row norms of W times 1 + 0.1 N(0,1))")

    trajectory_case("train_adam", 909, "adam", 1e-2, None)
    trajectory_case("train_sgd", 910, "sgd", 0.1, 0.9)
    peft_case()
    family_cases()

    import gen_qwen35_refs  # the Qwen3.5 cases (qwen35_*), same format
    gen_qwen35_refs.main(sys.modules[__name__])


if __name__ == "__main__":
    main()
