#!/usr/bin/env python3
"""Attention's share of a training step: `lmtune train` on SmolLM2-135M (a model
made by `lmtune init`, as bench/run.py makes it) with LMTUNE_PROFILE=cpu, the
step's CPU seconds by kernel class (mean of the steps after the first), and
attention forward + backward over the step. CPU time, not wall: steady on a
shared machine; bench/run.py's attention column is the same ratio.

Usage: bench/attn_share.py [--seq 4096] [--batch 1] [--iters 3] [--mode lora-qv16|lora-all]
                           [--dtype bf16|f32] [--shape smollm2-135m] [--wall]
--wall times wall seconds instead (LMTUNE_PROFILE=1): what a thread left idle costs shows there only, since
an idle OpenMP thread waits passively and spends no CPU time.
The lmtune binary is LMTUNE_BIN (default ./lmtune). Batch 1 x 4096 tokens has
the per-token costs of bench/run.py's 4 x 4096 row at a quarter of the time."""
import argparse, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LMTUNE, WORK, run, model_dir, data_dir

KEYS = {
    "lora-qv16": (16, '["self_attn.q_proj", "self_attn.v_proj"]'),
    "lora-all": (-1, '["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", '
                     '"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]'),
}

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--mode", default="lora-qv16", choices=sorted(KEYS))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--wall", action="store_true")
    a = ap.parse_args()
    nl, keys = KEYS[a.mode]
    cfg = os.path.join(WORK, f"attn-share-{a.mode}.yaml")   # as bench/run.py's config_file
    with open(cfg, "w") as f:
        f.write(f"fine_tune_type: lora\nnum_layers: {nl}\n"
                f"lora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n  keys: {keys}\n")
    cmd = [LMTUNE, "train", "--model", model_dir(a.shape, a.dtype), "--data", data_dir(a.seq), "-c", cfg,
           "--batch-size", str(a.batch), "--max-seq-length", str(a.seq + 1), "--iters", str(a.iters),
           "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "1",
           "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "attn-share-adapters"),
           "--learning-rate", "1e-5", "--threads", "2", "--weights-dtype", a.dtype]
    out, _, wall, rss = run(cmd, env=dict(os.environ, OMP_NUM_THREADS="2", LMTUNE_PROFILE="1" if a.wall else "cpu"))
    prof = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^  (\S.*?)\s+(-?[0-9.]+) s", out, re.M)}
    fwd, bwd, step = prof.get("attention forward", 0.0), prof.get("attention backward", 0.0), prof["step"]
    print(" ".join(cmd))
    for k, v in prof.items():
        print(f"  {k:50s} {v:8.3f} s")
    print(f"{a.shape} {a.mode} {a.dtype} {a.batch} x {a.seq}: attention {100 * (fwd + bwd) / step:.1f}% of the "
          f"step's {'wall' if a.wall else 'CPU'} time (forward {fwd:.2f} s, backward {bwd:.2f} s, step {step:.2f} s); "
          f"run {wall:.0f} s wall, peak RSS {rss / 1e9:.2f} GB")

main()
