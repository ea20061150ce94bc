#!/usr/bin/python3
"""Writes the Gated DeltaNet kernel cases of tests/ref/gdn/<case>/ from the
float64 recurrent reference gdn_ref.py (no chunking anywhere).

Run with Debian's python (torch 1.13): /usr/bin/python3 tests/ref/gen_gdn_refs.py
Deterministic (fixed seed per case). Per case it prints a float64 finite
difference check of every input's gradient against autograd, and how far a
float32 run of the same reference lands from the float64 values.

Files of a case (safetensors, F32, written by gen_refs.save_safetensors):
  case.json           {"B", "T", "Hk", "Hv", "Dk", "Dv", "K", "eps", "l2_eps", "description",
                       "fp32_deviation": {name: max|f32 - f64| / max|f64|}}
  inputs.safetensors  qkv (B, T, 2 Hk Dk + Hv Dv), z (B, T, Hv Dv), a, b (B, T, Hv),
                      conv_w (C, K), A_log (Hv), dt_bias (Hv), norm_w (Dv),
                      dy (B, T, Hv Dv): the probe, L = sum(y * dy)
  expected.safetensors
      forward:  conv (B, T, C) after SiLU; q, k (B, T, Hk, Dk) normalised (q scaled);
                v (B, T, Hv, Dv); g, beta (B, T, Hv); core (B, T, Hv, Dv) the rule's
                output; y (B, T, Hv Dv); final_state (B, Hv, Dk, Dv) (HF's (Dk, Dv) layout)
      backward: grad.<input> for every input but dy; grad.q, grad.k, grad.v, grad.g,
                grad.beta, grad.core: dL/d of those intermediates
"""

import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gdn_ref  # noqa: E402
from gen_refs import save_safetensors  # noqa: E402

OUT = os.environ.get("LMTUNE_GDN_REF_OUT") or os.path.join(HERE, "gdn")
INPUTS = ("qkv", "z", "a", "b", "conv_w", "A_log", "dt_bias", "norm_w")
INTERMEDIATE_GRADS = ("q", "k", "v", "g", "beta", "core")


def make_inputs(seed, B, T, Hk, Hv, Dk, Dv, K, strong_decay=False):
    gen = torch.Generator().manual_seed(seed)

    def n(*shape, s=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * s

    C = 2 * Hk * Dk + Hv * Dv
    x = {
        "qkv": n(B, T, C),
        "z": n(B, T, Hv * Dv),
        "a": n(B, T, Hv),
        "b": n(B, T, Hv),
        "conv_w": (torch.rand(C, K, generator=gen, dtype=torch.float64) - 0.5),
        # transformers' init: A ~ U(0.01, 16), dt_bias = 1
        "A_log": torch.log(0.01 + 15.99 * torch.rand(Hv, generator=gen, dtype=torch.float64)),
        "dt_bias": 1.0 + n(Hv, s=0.2),
        "norm_w": 1.0 + n(Dv, s=0.1),
        "dy": n(B, T, Hv * Dv),
    }
    if strong_decay:  # decays down to e^-60 per step: a chunk's cumulated decay underflows
        x["A_log"] = torch.full((Hv,), 2.7, dtype=torch.float64) + n(Hv, s=0.1)
        x["a"] = x["a"] + 3.0
        x["b"] = x["b"] + 3.0
    # inputs are stored as F32: the reference starts from exactly those values
    return {k: v.float().double() for k, v in x.items()}


def run(x, dims, dtype):
    leaves = {k: x[k].to(dtype).clone().requires_grad_(True) for k in INPUTS}
    keep = {}
    y = gdn_ref.mixer(*(leaves[k] for k in INPUTS), dims["Hk"], dims["Hv"], dims["Dk"], dims["Dv"],
                      dims["eps"], dims["l2_eps"], keep=keep)
    loss = (y * x["dy"].to(dtype)).sum()
    loss.backward()
    out = {"y": y.detach(), "final_state": keep["final_state"].detach()}
    for name in ("conv", "q", "k", "v", "g", "beta", "core"):
        out[name] = keep[name].detach()
    for name in INPUTS:
        out["grad." + name] = leaves[name].grad.detach()
    for name in INTERMEDIATE_GRADS:
        out["grad." + name] = keep[name].grad.detach()
    return out


def fd_check(x, dims):
    """Central differences in float64 of L on a few entries of every input."""
    def loss_of(vals):
        y = gdn_ref.mixer(*(vals[k] for k in INPUTS), dims["Hk"], dims["Hv"], dims["Dk"], dims["Dv"],
                          dims["eps"], dims["l2_eps"])
        return (y * x["dy"]).sum().item()
    ref = run(x, dims, torch.float64)
    worst = 0.0
    gen = torch.Generator().manual_seed(7)
    for name in INPUTS:
        grad = ref["grad." + name].reshape(-1)
        scale = max(grad.abs().max().item(), 1e-12)
        for _ in range(4):
            i = int(torch.randint(grad.numel(), (1,), generator=gen))
            vals = {k: x[k].clone() for k in INPUTS}
            h = 1e-6
            vals[name].view(-1)[i] += h
            lp = loss_of(vals)
            vals[name].view(-1)[i] -= 2 * h
            lm = loss_of(vals)
            fd = (lp - lm) / (2 * h)
            worst = max(worst, abs(fd - grad[i].item()) / scale)
    return worst


def write_case(name, seed, B, T, Hk, Hv, Dk, Dv, description, strong_decay=False):
    dims = {"B": B, "T": T, "Hk": Hk, "Hv": Hv, "Dk": Dk, "Dv": Dv, "K": 4, "eps": 1e-6, "l2_eps": 1e-6}
    x = make_inputs(seed, B, T, Hk, Hv, Dk, Dv, 4, strong_decay)
    ref = run(x, dims, torch.float64)
    f32 = run(x, dims, torch.float32)
    dev = {}
    for k in ref:
        a, b = f32[k].double(), ref[k]
        dev[k] = float((a - b).abs().max() / max(b.abs().max().item(), 1e-30))
    fd = fd_check(x, dims)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    case = dict(dims, description=description, fp32_deviation=dev)
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(case, f, indent=1, sort_keys=True)
        f.write("\n")
    save_safetensors(os.path.join(d, "inputs.safetensors"), {k: v.float() for k, v in x.items()})
    save_safetensors(os.path.join(d, "expected.safetensors"), {k: v.float().contiguous() for k, v in ref.items()})
    print(f"{name}: |y| max {ref['y'].abs().max().item():.3f}, finite differences vs autograd {fd:.2e}, "
          f"float32 worst {max(dev.values()):.2e} ({max(dev, key=dev.get)})")


def main():
    torch.set_num_threads(1)
    write_case("gdn_basic", 1601, B=2, T=37, Hk=2, Hv=2, Dk=16, Dv=16,
               description="two rows, T not a multiple of any chunk size the test uses")
    write_case("gdn_gqa", 1602, B=1, T=70, Hk=2, Hv=4, Dk=16, Dv=24,
               description="value heads twice the key heads, Dk != Dv, more than one 64-chunk")
    write_case("gdn_strong_decay", 1603, B=1, T=40, Hk=1, Hv=2, Dk=8, Dv=8, strong_decay=True,
               description="decays near e^-60 per step: cumulated chunk decays underflow float32")


if __name__ == "__main__":
    main()
