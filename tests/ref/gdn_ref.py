"""Gated DeltaNet token mixer of Qwen3.5, written from the published equations
in the plain recurrent form (one token at a time), in any float dtype.

Independent of lmtune's chunked algorithm: no chunks, no triangular solves.
The equations, as read in transformers models/qwen3_5/modeling_qwen3_5.py
(Qwen3_5GatedDeltaNet, torch_recurrent_gated_delta_rule, l2norm,
Qwen3_5RMSNormGated) and MLX-LM mlx_lm/models/qwen3_5.py + gated_delta.py:

  c = silu(depthwise causal conv1d(qkv)), weight (C, K), zero left padding
  q, k, v = split(c, [Hk*Dk, Hk*Dk, Hv*Dv]) into heads
  q = q / sqrt(sum(q^2) + l2_eps) / sqrt(Dk);  k = k / sqrt(sum(k^2) + l2_eps)
  beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)
  value head h uses key head h // (Hv // Hk)
  S (Dk, Dv) = 0;  per t: S = exp(g) S;  S = S + k (beta (v - S^T k))^T;  o = S^T q
  y = norm_w * o / sqrt(mean(o^2) + eps) * silu(z)     (per value head)
"""

import torch
import torch.nn.functional as F


def causal_conv_silu(x, w):
    """x (B, T, C), w (C, K): out[t, c] = silu(sum_j w[c, j] x[t - K + 1 + j, c])."""
    B, T, C = x.shape
    K = w.shape[1]
    xp = torch.cat([torch.zeros(B, K - 1, C, dtype=x.dtype), x], dim=1)
    pre = torch.zeros_like(x)
    for j in range(K):
        pre = pre + w[:, j] * xp[:, j:j + T, :]
    return pre * torch.sigmoid(pre)


def l2norm(x, eps):
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def gates(a, b, A_log, dt_bias):
    beta = torch.sigmoid(b)
    g = -torch.exp(A_log) * F.softplus(a + dt_bias)
    return g, beta


def delta_rule_recurrent(q, k, v, g, beta, state=None):
    """q, k (B, T, Hk, Dk) (q already scaled), v (B, T, Hv, Dv), g, beta (B, T, Hv).
    Returns o (B, T, Hv, Dv) and the final state (B, Hv, Dk, Dv)."""
    B, T, Hk, Dk = q.shape
    Hv, Dv = v.shape[2], v.shape[3]
    rep = Hv // Hk
    q = q.repeat_interleave(rep, dim=2)
    k = k.repeat_interleave(rep, dim=2)
    S = torch.zeros(B, Hv, Dk, Dv, dtype=q.dtype) if state is None else state
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[:, :, None, None]
        kt, vt, qt = k[:, t], v[:, t], q[:, t]
        kv = torch.einsum("bhkv,bhk->bhv", S, kt)
        u = beta[:, t][:, :, None] * (vt - kv)
        S = S + kt[:, :, :, None] * u[:, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, qt))
    return torch.stack(outs, dim=1), S


def gated_rmsnorm(x, z, w, eps):
    n = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return w * n * (z * torch.sigmoid(z))


def mixer(qkv, z, a, b, conv_w, A_log, dt_bias, norm_w, Hk, Hv, Dk, Dv, eps, l2_eps=1e-6, keep=None):
    """The whole mixer after the four input projections. qkv (B, T, 2 Hk Dk + Hv Dv),
    z (B, T, Hv Dv), a, b (B, T, Hv). Returns y (B, T, Hv Dv). When keep is a dict,
    the intermediates are stored in it (with retain_grad where they require grad)."""
    B, T, _ = qkv.shape
    c = causal_conv_silu(qkv, conv_w)
    kd = Hk * Dk
    q = c[..., :kd].reshape(B, T, Hk, Dk)
    k = c[..., kd:2 * kd].reshape(B, T, Hk, Dk)
    v = c[..., 2 * kd:].reshape(B, T, Hv, Dv)
    qn = l2norm(q, l2_eps) * Dk ** -0.5
    kn = l2norm(k, l2_eps)
    g, beta = gates(a, b, A_log, dt_bias)
    o, S = delta_rule_recurrent(qn, kn, v, g, beta)
    y = gated_rmsnorm(o, z.reshape(B, T, Hv, Dv), norm_w, eps).reshape(B, T, Hv * Dv)
    if keep is not None:
        for name, t in (("conv", c), ("q", qn), ("k", kn), ("v", v), ("g", g), ("beta", beta),
                        ("core", o)):
            if t.requires_grad:
                t.retain_grad()
            keep[name] = t
        keep["final_state"] = S
    return y
