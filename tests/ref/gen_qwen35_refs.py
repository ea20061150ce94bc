"""The Qwen3.5 reference cases of tests/ref/data/ (qwen35_*), written by
gen_refs.py's main through main() here, in the same case format (README.md).

The model (qwen35_model.Qwen35LM) computes on canonical names; a case's
layout says how they appear in the files:
  nested  config.json has text_config (model_type qwen3_5, architectures
          Qwen3_5ForConditionalGeneration); text weights under
          "model.language_model."; vision tower "model.visual.*" and
          multi-token-prediction "mtp.*" tensors are present and must be
          ignored; LoRA adapter keys "language_model.model.layers.N.<key>"
          (MLX-LM's module paths)
  flat    a text-only config (model_type qwen3_5_text, Qwen3_5ForCausalLM),
          weights "model.*", adapter keys "model.layers.N.<key>"
  mlx     the nested model as mlx_lm.convert writes it: weights under
          "language_model.model." (head "language_model.lm_head.weight"),
          conv1d weights (C, K, 1) and the zero-centred norms stored as 1 + w
          (MLX-LM's sanitize); same numbers as the nested case it copies
Full fine-tuning trains the tensors under their names in the file (the HF
names and layouts: conv1d (C, 1, K), norms zero-centred); the grad.* tensors
are the gradients of those.
Random weights: as gen_refs.make_weights, zero-centred norms 0.1 N(0,1),
the gated norm 1 + 0.1 N(0,1), conv1d U(-0.5, 0.5), A_log = log U(0.01, 16)
(transformers' init), dt_bias 1 + 0.2 N(0,1).
"""

import copy
import os

import torch

import qwen35_model as qm
import torch_model as tm

PREFIX = {"nested": "model.language_model.", "flat": "model.", "mlx": "language_model.model."}
ADAPTER_PREFIX = {"nested": "language_model.model.", "flat": "model.", "mlx": "language_model.model."}
ZERO_CENTRED = ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_norm.weight",
                "self_attn.k_norm.weight")


def text_config(hidden, layers, heads, kv_heads, head_dim, inter, vocab, hk, hv, dk, dv, tied,
                layer_types=None, interval=None):
    tc = {"model_type": "qwen3_5_text", "hidden_size": hidden, "num_hidden_layers": layers,
          "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
          "intermediate_size": inter, "vocab_size": vocab, "hidden_act": "silu",
          "max_position_embeddings": 1024, "rms_norm_eps": 1e-6, "attention_bias": False,
          "attn_output_gate": True, "linear_conv_kernel_dim": 4, "linear_key_head_dim": dk,
          "linear_value_head_dim": dv, "linear_num_key_heads": hk, "linear_num_value_heads": hv,
          "tie_word_embeddings": tied, "dtype": "float32", "mamba_ssm_dtype": "float32",
          "mtp_num_hidden_layers": 1, "eos_token_id": 2,
          "rope_parameters": {"mrope_interleaved": True, "mrope_section": [1, 1, 0], "rope_type": "default",
                              "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}}
    if layer_types is not None:
        tc["layer_types"] = layer_types
    if interval is not None:
        tc["full_attention_interval"] = interval
    return tc


def file_config(tc, layout):
    if layout == "flat":
        return dict(tc, architectures=["Qwen3_5ForCausalLM"])
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "text_config": dict(tc), "tie_word_embeddings": tc["tie_word_embeddings"],
            "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
            "vision_end_token_id": 248054,
            "vision_config": {"model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 8, "num_heads": 2,
                              "intermediate_size": 16, "out_hidden_size": tc["hidden_size"]}}


def make_weights(tc, gen):
    """Canonical names, HF conventions (norms zero-centred, conv (C, 1, K))."""
    C, V, I = tc["hidden_size"], tc["vocab_size"], tc["intermediate_size"]
    H, KVH, D = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    hk, hv, dk, dv = (tc["linear_num_key_heads"], tc["linear_num_value_heads"], tc["linear_key_head_dim"],
                      tc["linear_value_head_dim"])
    K = tc["linear_conv_kernel_dim"]
    CC = 2 * hk * dk + hv * dv

    def n(*shape, std=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64).float() * std

    def lin(out_f, in_f):
        return n(out_f, in_f, std=0.7 / in_f ** 0.5)

    w = {"model.embed_tokens.weight": n(V, C, std=1.5 / C ** 0.5), "model.norm.weight": n(C, std=0.1)}
    if not tc["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(V, C)
    for i, kind in enumerate(qm.layer_types(tc)):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = n(C, std=0.1)
        w[p + "post_attention_layernorm.weight"] = n(C, std=0.1)
        if kind == "full_attention":
            w[p + "self_attn.q_proj.weight"] = lin(2 * H * D, C)
            w[p + "self_attn.k_proj.weight"] = lin(KVH * D, C)
            w[p + "self_attn.v_proj.weight"] = lin(KVH * D, C)
            w[p + "self_attn.o_proj.weight"] = lin(C, H * D)
            w[p + "self_attn.q_norm.weight"] = n(D, std=0.1)
            w[p + "self_attn.k_norm.weight"] = n(D, std=0.1)
        else:
            q = p + "linear_attn."
            w[q + "in_proj_qkv.weight"] = lin(CC, C)
            w[q + "in_proj_z.weight"] = lin(hv * dv, C)
            w[q + "in_proj_b.weight"] = lin(hv, C)
            w[q + "in_proj_a.weight"] = lin(hv, C)
            w[q + "conv1d.weight"] = (torch.rand(CC, 1, K, generator=gen, dtype=torch.float64) - 0.5).float()
            w[q + "A_log"] = torch.log(0.01 + 15.99 * torch.rand(hv, generator=gen, dtype=torch.float64)).float()
            w[q + "dt_bias"] = 1 + n(hv, std=0.2)
            w[q + "norm.weight"] = 1 + n(dv, std=0.1)
            w[q + "out_proj.weight"] = lin(C, hv * dv)
        w[p + "mlp.gate_proj.weight"] = lin(I, C)
        w[p + "mlp.up_proj.weight"] = lin(I, C)
        w[p + "mlp.down_proj.weight"] = lin(C, I)
    return w


def rename(canon, prefix):
    return prefix + canon[len("model."):] if canon.startswith("model.") else canon


def to_file(weights, tc, layout, gen):
    """File names and conventions of a layout, plus the tensors a loader must skip."""
    out = {}
    for name, t in weights.items():
        if name == "lm_head.weight":
            out["language_model.lm_head.weight" if layout == "mlx" else name] = t
            continue
        fname = rename(name, PREFIX[layout])
        if layout == "mlx":
            if name.endswith("conv1d.weight"):
                t = t.permute(0, 2, 1).contiguous()          # (C, 1, K) -> (C, K, 1)
            if name == "model.norm.weight" or name.endswith(ZERO_CENTRED):
                t = (t.double() + 1.0).float()                # MLX-LM stores 1 + w
        out[fname] = t
    if layout == "nested":
        out["model.visual.patch_embed.proj.weight"] = torch.randn(8, 3, 2, 4, 4, generator=gen).float()
        out["model.visual.merger.linear_fc2.weight"] = torch.randn(tc["hidden_size"], 8, generator=gen).float()
    if layout in ("nested", "flat"):
        out["mtp.fc.weight"] = torch.randn(tc["hidden_size"], 2 * tc["hidden_size"], generator=gen).float()
        out["mtp.norm.weight"] = torch.randn(tc["hidden_size"], generator=gen).float()
    return out


def adapter_shapes(weights):
    return {name[:-len(".weight")]: tuple(t.shape) for name, t in weights.items() if t.dim() == 2}


def make_adapters(weights, gen, lowest, L, keys, rank, dora):
    """MLX layouts, canonical names: lora_a (in, r) U(+-1/sqrt(in)), lora_b (r, out) 0.02 N(0,1);
    DoRA m = row norms of W times 1 + 0.1 N(0,1)."""
    shapes = adapter_shapes(weights)
    ad = {}
    for i in range(lowest, L):
        for key in keys:
            base = f"model.layers.{i}.{key}"
            if base not in shapes:
                continue
            out_f, in_f = shapes[base]
            bound = 1.0 / in_f ** 0.5
            ad[base + ".lora_a"] = ((torch.rand(in_f, rank, generator=gen, dtype=torch.float64) * 2 - 1)
                                    * bound).float()
            ad[base + ".lora_b"] = (torch.randn(rank, out_f, generator=gen, dtype=torch.float64) * 0.02).float()
            if dora:
                W = weights[base + ".weight"].double()
                noise = 1 + 0.1 * torch.randn(out_f, generator=gen, dtype=torch.float64)
                ad[base + ".m"] = (W.norm(dim=1) * noise).float()
    return ad


def build(tc, weights, case, adapters, dtype):
    m = qm.Qwen35LM(tc, weights, compute_dtype=dtype)
    if case["fine_tune_type"] == "full":
        m.set_full(case["num_layers"])
    else:
        lo = case["lora"]
        m.set_lora(case["num_layers"], lo["keys"], lo["rank"], lo["scale"], adapters=adapters,
                   dora=case["fine_tune_type"] == "dora")
    return m


def trainable_file_name(canon, case, layout):
    """Adapter tensors: MLX module paths; full fine-tuning: the file's names."""
    if case["fine_tune_type"] == "full":
        return rename(canon, PREFIX[layout])
    return rename(canon, ADAPTER_PREFIX[layout])


def qwen35_case(name, seed, tc, layout, case, B, W, lengths, offsets, description, g):
    gen = torch.Generator().manual_seed(seed)
    weights = make_weights(tc, gen)
    tokens, lens, offs = g.make_batch(gen, B, W, tc["vocab_size"], lengths, offsets)
    L = tc["num_hidden_layers"]
    lowest = L - (L if case["num_layers"] <= 0 else case["num_layers"])
    adapters = None
    inputs = {"tokens": tokens, "lengths": lens, "offsets": offs}
    if case["fine_tune_type"] in ("lora", "dora"):
        lo = case["lora"]
        adapters = make_adapters(weights, gen, lowest, L, lo["keys"], lo["rank"], case["fine_tune_type"] == "dora")
        for k, v in adapters.items():
            inputs[trainable_file_name(k, case, layout)] = v
    file_weights = to_file(weights, tc, layout, gen)
    case = dict(case, batch=B, width=W, layout=layout, description=description)
    expected, dev = run_case(name, tc, weights, case, adapters, tokens, lens, offs, layout)
    case["fp32_deviation"] = dev
    g.write_case_dir(name, file_config(tc, layout), file_weights, case, inputs, expected)
    return tc, weights, case, inputs, expected


def run_case(name, tc, weights, case, adapters, tokens, lens, offs, layout):
    model = build(tc, weights, case, adapters, torch.float64)
    loss, ntok, logits = tm.forward_loss(model, tokens, lens, offs)
    names = sorted(model.trainable)
    grads = torch.autograd.grad(loss, [model.trainable[n] for n in names])
    expected = {"loss": torch.tensor([loss.item()], dtype=torch.float32),
                "ntokens": torch.tensor([ntok], dtype=torch.int32),
                "logits": logits.detach().float()}
    for n, gr in zip(names, grads):
        expected["grad." + trainable_file_name(n, case, layout)] = gr.float()
    print(f"{name}: loss={loss.item():.6f} ntokens={ntok} trainable tensors={len(names)}")
    fd_check(name, model, tokens, lens, offs)
    m32 = build(tc, weights, case, adapters, torch.float32)
    loss32, _, logits32 = tm.forward_loss(m32, tokens, lens, offs)
    g32 = torch.autograd.grad(loss32, [m32.trainable[n] for n in names])
    rel = max((a.float() - b).abs().max().item() / max(b.abs().max().item(), 1e-30)
              for a, b in zip(g32, grads))
    dev = {"loss_abs": abs(loss32.item() - loss.item()),
           "logits_max_abs": (logits32.detach().double() - logits.detach()).abs().max().item(),
           "grad_max_rel": rel}
    dev["weight_halfulp_grad_rel"] = sensitivity(tc, weights, case, adapters, tokens, lens, offs, grads, names)
    print(f"  [{name}] float32 vs float64: " + " ".join(f"{k}={v:.2e}" for k, v in dev.items()))
    assert dev["weight_halfulp_grad_rel"] <= SENSITIVITY_BOUND, (
        f"{name}: ill-conditioned draw (a half-ulp change of the weights moves a gradient by "
        f"{dev['weight_halfulp_grad_rel']:.2e}); the engine's fp32 bar of 1e-4 would test the case, not the engine")
    return expected, {k: float(f"{v:.3e}") for k, v in dev.items()}


# The engine's fp32 gradients must be within 1e-4 (max|a-b| / max|ref|) of
# these references. A case is only a test of the engine if the exact
# gradient itself moves much less than that when the weights move by the
# rounding every fp32 computation makes: relative 6e-8 (half an ulp), in
# float64. Random draws vary a lot here (the DoRA case's first seed, 1503,
# moved by up to 1.7e-4; seeds 1504-1507 by 6e-6 to 3.3e-5), so every case
# is checked: at most half the bar.
SENSITIVITY_BOUND = 5e-5


def sensitivity(tc, weights, case, adapters, tokens, lens, offs, grads, names, trials=3):
    """Worst relative change (max|a-b| / max|ref| over the trainable tensors)
    of the float64 gradients when every weight is multiplied by
    (1 + 6e-8 N(0, 1)), over a few draws."""
    gen = torch.Generator().manual_seed(7)
    worst = 0.0
    for _ in range(trials):
        wp = {n: w.double() * (1 + 6e-8 * torch.randn(w.shape, generator=gen, dtype=torch.float64))
              for n, w in weights.items()}
        m = build(tc, wp, case, adapters, torch.float64)
        loss, _, _ = tm.forward_loss(m, tokens, lens, offs)
        gp = torch.autograd.grad(loss, [m.trainable[n] for n in names])
        for a, b in zip(gp, grads):
            worst = max(worst, (a - b).abs().max().item() / max(b.abs().max().item(), 1e-30))
    return worst


def fd_check(name, model, tokens, lens, offs):
    """Central differences in float64 on the largest-gradient element of three
    trainable tensors (a DeltaNet one among them when trained)."""
    names = sorted(model.trainable)
    if model.dora_m:  # MLX stops the gradient through DoRA's row norm: only m's is the true derivative
        names = [n for n in names if n.endswith(".m")]
    picks = [n for n in names if "linear_attn" in n][:1] + [n for n in names if "self_attn" in n][:1] + names[-1:]
    worst = 0.0
    for pname in dict.fromkeys(picks):
        p = model.trainable[pname]
        loss, _, _ = tm.forward_loss(model, tokens, lens, offs)
        (gr,) = torch.autograd.grad(loss, [p])
        idx = int(gr.abs().flatten().argmax())
        h = 1e-6
        with torch.no_grad():
            flat = p.view(-1)
            orig = flat[idx].item()
            flat[idx] = orig + h
            lp = tm.forward_loss(model, tokens, lens, offs)[0].item()
            flat[idx] = orig - h
            lm = tm.forward_loss(model, tokens, lens, offs)[0].item()
            flat[idx] = orig
        ad = gr.flatten()[idx].item()
        rel = abs((lp - lm) / (2 * h) - ad) / max(abs(ad), 1e-30)
        worst = max(worst, rel)
    print(f"  [{name}] finite differences vs autograd on {len(set(picks))} tensors: worst rel.err {worst:.2e}")
    assert worst < 1e-6, "finite differences disagree with autograd"


def mlx_copy(name, src, g):
    """The model of case src, stored as MLX-LM writes it; the same expected values."""
    tc, weights, case, inputs, expected = src
    gen = torch.Generator().manual_seed(4242)
    file_weights = to_file(weights, tc, "mlx", gen)
    inputs = dict(inputs)
    expected = dict(expected)
    case = dict(copy.deepcopy(case), layout="mlx",
                description="the model of " + case["description"].split(";")[0] +
                " stored as mlx_lm.convert writes it (language_model.model.*, conv1d (C, K, 1), "
                "norms as 1 + w); expected values identical")
    cfg = file_config(tc, "mlx")
    g.write_case_dir(name, cfg, file_weights, case, inputs, expected)


def main(g):
    """g: the gen_refs module (batch maker, case writer)."""
    all_keys = list(qm.ALL_KEYS)
    lo = {"rank": 4, "scale": 2.0, "dropout": 0.0, "keys": all_keys}
    nested = qwen35_case(
        "qwen35_nested_tied_lora", 1501,
        text_config(32, 4, 4, 2, 16, 64, 96, hk=2, hv=4, dk=16, dv=16, tied=True),
        "nested", {"fine_tune_type": "lora", "num_layers": 3, "lora": lo, "weights_dtype": "float32"},
        2, 33, [33, 21], [4, 0],
        "nested multimodal layout (vision and mtp tensors ignored), tied, blocks DeltaNet x3 + gated "
        "attention (interval 4), attention GQA 4/2 head_dim 16 rotary 4, DeltaNet heads 2 key / 4 value, "
        "LoRA r4 scale 2 on every linear (MLX-LM's default keys) of the last 3 blocks", g)
    qwen35_case(
        "qwen35_flat_untied_full", 1502,
        text_config(32, 3, 2, 2, 16, 64, 96, hk=2, hv=2, dk=8, dv=12, tied=False,
                    layer_types=["linear_attention", "full_attention", "linear_attention"]),
        "flat", {"fine_tune_type": "full", "num_layers": 2, "lora": None, "weights_dtype": "float32"},
        2, 33, [33, 26], [0, 7],
        "flat text-only layout (qwen3_5_text, layer_types given), untied lm_head, attention without GQA, "
        "DeltaNet Dk 8 != Dv 12; full fine-tuning of the last 2 of 3 blocks (conv1d, A_log, dt_bias, gated "
        "norm, q/k norms and every projection)", g)
    qwen35_case(
        "qwen35_nested_dora", 1504,
        text_config(32, 4, 4, 1, 8, 64, 112, hk=1, hv=2, dk=16, dv=8, tied=False, interval=2),
        "nested", {"fine_tune_type": "dora", "num_layers": -1, "weights_dtype": "float32",
                   "lora": {"rank": 4, "scale": 1.5, "dropout": 0.0,
                            "keys": ["linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
                                     "linear_attn.out_proj", "self_attn.q_proj", "self_attn.o_proj",
                                     "mlp.down_proj"]}},
        2, 17, [17, 12], [2, 0],
        "nested, untied, full_attention_interval 2, multi-query attention (4/1), DoRA r4 scale 1.5 on "
        "in_proj_qkv, in_proj_z, in_proj_b, out_proj, q_proj, o_proj, down_proj of every block", g)
    mlx_copy("qwen35_mlx_layout_lora", nested, g)
