#!/usr/bin/env python3
"""gen_muon.py: reference trajectories of MLX's Muon optimizer, from an
independent PyTorch implementation written from MLX's source
(ml-explore/mlx python/mlx/optimizers/optimizers.py, class Muon, HEAD
b3f1e1e8), not from lmtune's C code.

MLX's Muon.apply_single, per parameter:
    g = g + weight_decay * w                      (when weight_decay != 0)
    v = momentum * v + (1 - momentum) * g
    u = g * (1 - momentum) + v * momentum         (nesterov) else v
    if u.ndim >= 2: u = reshape(u, (shape[0], -1)); u = newton_schulz5(u, ns_steps);
                    reshape back; lr *= max(1, shape[-2] / shape[-1]) ** 0.5
    w = w - lr * u
newton_schulz5(X): (a, b, c) = (3.4445, -4.7750, 2.0315); transpose when
rows > cols; X /= (||X||_F + 1e-7); steps x { A = X X^T; B = b A + c A A;
X = a X + B X }; transpose back. Defaults: momentum 0.95, weight_decay 0.01,
nesterov True, ns_steps 5.

Problem: four tensors, a tall (6, 4) matrix (orthogonalised transposed,
rate scaled by sqrt(6/4)), a wide (3, 8) one, a square (4, 4) one and a
(5,) vector (the plain momentum update), each with the loss
sum(c * (w - t)^2), gradient 2 c (w - t); 10 updates at lr 0.02, for five
settings. Written to tests/ref/muon.json: the inputs (w0, c, t per tensor,
float32 values), and per setting the float64 weights after updates 1, 5
and 10; the float32 run of the same reference is printed as its gap to
float64 (what an exact float32 engine can be expected to reach).

Run: /usr/bin/python3 tests/ref/gen_muon.py [OUT.json]  (deterministic; ~1 s)
"""
import json
import os
import sys

import torch

A_, B_, C_ = 3.4445, -4.7750, 2.0315


def newton_schulz5(X, steps):
    transpose = X.shape[-2] > X.shape[-1]
    if transpose:
        X = X.T
    X = X / (torch.linalg.norm(X) + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        B = B_ * A + C_ * (A @ A)
        X = A_ * X + B @ X
    if transpose:
        X = X.T
    return X


def muon_apply(w, g, v, lr, momentum, weight_decay, nesterov, ns_steps):
    if weight_decay != 0:
        g = g + weight_decay * w
    v = momentum * v + (1 - momentum) * g
    u = g * (1 - momentum) + v * momentum if nesterov else v
    if u.ndim >= 2:
        shape = u.shape
        u = newton_schulz5(u.reshape(shape[0], -1), ns_steps).reshape(shape)
        lr = lr * max(1, shape[-2] / shape[-1]) ** 0.5
    return w - lr * u, v


SHAPES = {"tall": (6, 4), "wide": (3, 8), "square": (4, 4), "vector": (5,)}
SETTINGS = [
    {"name": "defaults", "momentum": 0.95, "weight_decay": 0.01, "nesterov": True, "ns_steps": 5},
    {"name": "no_nesterov", "momentum": 0.95, "weight_decay": 0.01, "nesterov": False, "ns_steps": 5},
    {"name": "no_decay", "momentum": 0.95, "weight_decay": 0.0, "nesterov": True, "ns_steps": 5},
    {"name": "three_steps", "momentum": 0.9, "weight_decay": 0.05, "nesterov": True, "ns_steps": 3},
    {"name": "no_orthogonalisation", "momentum": 0.8, "weight_decay": 0.01, "nesterov": True, "ns_steps": 0},
]
LR, UPDATES = 0.02, 10


def problem():
    gen = torch.Generator().manual_seed(7)
    out = {}
    for name, shape in SHAPES.items():
        w0 = torch.randn(shape, generator=gen, dtype=torch.float64)
        c = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64)
        t = torch.randn(shape, generator=gen, dtype=torch.float64)
        # the engine's inputs are float32: start both references from the float32 values
        out[name] = [x.float().double() for x in (w0, c, t)]
    return out


def trajectory(prob, s, dtype):
    w = {k: v[0].to(dtype) for k, v in prob.items()}
    vel = {k: torch.zeros_like(v) for k, v in w.items()}
    steps = []
    for _ in range(UPDATES):
        for k in w:
            c, t = prob[k][1].to(dtype), prob[k][2].to(dtype)
            g = 2 * c * (w[k] - t)
            w[k], vel[k] = muon_apply(w[k], g, vel[k], LR, s["momentum"], s["weight_decay"], s["nesterov"],
                                      s["ns_steps"])
        steps.append({k: w[k].reshape(-1).tolist() for k in w})
    return steps


KEPT = (1, 5, 10)   # updates whose weights are written


def main():
    prob = problem()
    doc = {"source": "tests/ref/gen_muon.py", "lr": LR, "updates": UPDATES,
           "tensors": {k: {"shape": list(SHAPES[k]), "w0": v[0].reshape(-1).tolist(),
                           "c": v[1].reshape(-1).tolist(), "t": v[2].reshape(-1).tolist()}
                       for k, v in prob.items()},
           "settings": []}
    for s in SETTINGS:
        f32 = trajectory(prob, s, torch.float32)
        f64 = trajectory(prob, s, torch.float64)
        gap = max(abs(a - b) for st32, st64 in zip(f32, f64) for k in st32 for a, b in zip(st32[k], st64[k]))
        print(f"{s['name']}: float32 vs float64 max abs gap over {UPDATES} updates {gap:.2e}")
        doc["settings"].append(dict(s, float32_gap=float("%.3g" % gap),
                                    after={str(u): f64[u - 1] for u in KEPT}))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "muon.json")
    with open(out, "w") as f:
        json.dump(doc, f)
        f.write("\n")


if __name__ == "__main__":
    main()
