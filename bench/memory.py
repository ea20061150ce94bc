#!/usr/bin/env python3
"""Memory bench: for a matrix of configurations on the SmolLM2-135M shape,
the planned total of `lmtune plan` against the measured peak RSS of
`lmtune train` (wait4's ru_maxrss of the process) for a few steps; then how
the peak grows with sequence length and batch size, and PyTorch's peak on the
issue's LoRA configuration in the same run.

Usage: bench/memory.py [--only SUBSTR] [--no-torch]"""
import argparse, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, LMTUNE, WORK, run, model_dir, data_dir

ALL_KEYS = '["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]'

def yaml_for(ft, keys_qv):
    path = os.path.join(WORK, f"mem-{ft}-{'qv' if keys_qv else 'all'}.yaml")
    with open(path, "w") as f:
        f.write(f"fine_tune_type: {ft}\n")
        if ft == "lora":
            keys = '["self_attn.q_proj", "self_attn.v_proj"]' if keys_qv else ALL_KEYS
            f.write(f"lora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n  keys: {keys}\n")
    return path

def args_for(c):
    md = model_dir("smollm2-135m", c["dtype"])
    dd = data_dir(c["seq"])
    a = ["--model", md, "--data", dd, "-c", yaml_for(c["ft"], True), "--batch-size", str(c["batch"]),
         "--max-seq-length", str(c["seq"] + 1), "--num-layers", str(c["layers"]),
         "--grad-accumulation-steps", str(c["accum"])]
    if c["ckpt"]: a.append("--grad-checkpoint")
    return a

def planned(c):
    out, _, _, _ = run([LMTUNE, "plan"] + args_for(c))
    m = re.search(r"Planned peak: (\d+) bytes", out)
    if not m: raise SystemExit("plan printed no 'Planned peak' line:\n" + out)
    return int(m.group(1))

def measured(c):
    iters = max(2, c["accum"])
    _, _, _, rss = run([LMTUNE, "train"] + args_for(c) + ["--iters", str(iters), "--steps-per-report", "1",
                        "--steps-per-eval", "1000000", "--val-batches", "1", "--save-every", "1000000",
                        "--adapter-path", os.path.join(WORK, "mem-adapters")])
    return rss

def C(batch, seq, layers, ckpt, accum, ft, dtype):
    return dict(batch=batch, seq=seq, layers=layers, ckpt=ckpt, accum=accum, ft=ft, dtype=dtype)

MATRIX = [
    C(4, 512, 16, False, 1, "lora", "f32"), C(4, 512, 16, True, 1, "lora", "f32"),
    C(1, 256, 4, False, 1, "lora", "f32"), C(8, 256, 16, False, 1, "lora", "bf16"),
    C(4, 1024, -1, False, 1, "lora", "f32"), C(4, 1024, -1, True, 1, "lora", "f32"),
    C(1, 2048, 16, False, 8, "lora", "f32"), C(1, 2048, 16, True, 8, "lora", "bf16"),
    C(8, 256, 4, False, 8, "full", "f32"), C(4, 512, 4, True, 1, "full", "f32"),
    C(4, 512, 16, False, 1, "lora", "bf16"), C(4, 512, 16, True, 1, "lora", "bf16"),
    C(8, 1024, 16, True, 1, "lora", "bf16"),
]

def row(c, p, m):
    err = (p - m) / m * 100
    return (f"| {c['batch']} | {c['seq']} | {c['layers']} | {'yes' if c['ckpt'] else 'no'} | {c['accum']} | {c['ft']} | "
            f"{c['dtype']} | {p / 1e9:.3f} | {m / 1e9:.3f} | {err:+.1f}% |")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    hdr = "| batch | seq | layers | ckpt | accum | type | weights | plan GB | measured GB | plan - measured |"
    print(hdr); print("|" + "---|" * 10)
    worst = 0
    for c in MATRIX:
        if args.only and args.only not in str(c): continue
        p, m = planned(c), measured(c)
        worst = max(worst, abs(p - m) / m)
        print(row(c, p, m), flush=True)
    print(f"\nworst |plan - measured| / measured: {100 * worst:.1f}%\n")
    print("Growth with sequence length (batch 4, LoRA q,v last 16, bf16, checkpointing off and on):")
    print("| seq | ckpt | plan GB | measured GB |"); print("|---|---|---|---|")
    for ckpt in (False, True):
        for seq in (256, 1024, 2048):
            c = C(4, seq, 16, ckpt, 1, "lora", "bf16")
            print(f"| {seq} | {'yes' if ckpt else 'no'} | {planned(c) / 1e9:.3f} | {measured(c) / 1e9:.3f} |", flush=True)
    print("\nGrowth with batch size (seq 512, LoRA q,v last 16, f32):")
    print("| batch | plan GB | measured GB |"); print("|---|---|---|")
    for b in (1, 2, 4, 8):
        c = C(b, 512, 16, False, 1, "lora", "f32")
        print(f"| {b} | {planned(c) / 1e9:.3f} | {measured(c) / 1e9:.3f} |", flush=True)
    if not args.no_torch:
        print("\nAgainst PyTorch (SmolLM2-135M shape, batch 4 x 512, LoRA q,v last 16, fp32):")
        print("| checkpointing | lmtune peak GB | PyTorch peak GB | ratio |"); print("|---|---|---|---|")
        for ckpt in (False, True):
            c = C(4, 512, 16, ckpt, 1, "lora", "f32")
            m = measured(c)
            cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_train.py"), "--model", "smollm2-135m",
                   "--mode", "lora-qv16", "--weights", "fp32", "--steps", "2"]
            if ckpt: cmd.append("--grad-checkpoint")
            env = dict(os.environ); env.pop("OPENBLAS_L2_SIZE", None); env.pop("OPENBLAS_CORETYPE", None)
            _, _, _, t = run(cmd, env=env)
            print(f"| {'yes' if ckpt else 'no'} | {m / 1e9:.3f} | {t / 1e9:.3f} | {m / t:.2f}x |", flush=True)

main()
