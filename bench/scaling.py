#!/usr/bin/env python3
"""How cost grows: tokens/s and peak RSS of a LoRA step against sequence
length (256 to 8192 tokens) and model size (SmolLM2-135M, Qwen2.5-0.5B,
Llama-3.2-1B shapes), lmtune against tuned PyTorch (bench/torch_train.py) in
the same run, the two alternating.

The configuration is the bench's headline: LoRA rank 8 on every linear of
every block (MLX-LM's default keys), Adam. A step holds 2048 tokens up to
2048-token rows (batch 2048 / seq) and one row beyond, so that the rows
compare cost per token at equal work per step. lmtune runs as a user runs
it (--weights-dtype auto: the log's choice is in the table); PyTorch runs in
the same precision (pure bf16 on a bf16 model, fp32 on an f32 one).

Memory: lmtune's plan decides first. When a run's plan exceeds --limit
(default 20 GB: a 24 GiB machine with room for the rest), both lmtune and
PyTorch run with checkpointing (lmtune --grad-checkpoint, PyTorch's
checkpoint of every block); when that does not fit either, the row says so.
PyTorch runs under an address-space limit of --limit, so a configuration it
cannot hold ends in its allocation error ("out of memory") instead of the
OOM killer.

Timing: one warm-up step and --steps timed steps per run (PyTorch: two
warm-up steps, its allocator grows over the first); tokens/s is the median
of the timed steps, and with --runs N the median of the runs. Also CPU
seconds per step of both (process CPU time, all threads), the steadier
measure on a shared machine, and their ratio.

Usage: bench/scaling.py [--dtype bf16|f32] [--only SUBSTR] [--runs N] [--steps N] [--limit GB] [--no-torch]
Writes the table to stdout and to build/bench/scaling.md."""
import argparse, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LMTUNE, WORK, RunFailed, run, model_dir, data_dir, median
from run import TORCH_SETUP, config_file, lmtune_tokens_per_s, torch_tokens_per_s

SEQS = [256, 512, 1024, 2048, 4096, 8192]
MODELS = ["smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b"]
MODE = "lora-all"
THREADS = 2

def planned_peak(shape, dtype, seq, batch, ckpt):
    """lmtune plan's planned peak in bytes for this row."""
    cmd = [LMTUNE, "plan", "--model", model_dir(shape, dtype), "--data", data_dir(seq), "-c", config_file(MODE),
           "--batch-size", str(batch), "--max-seq-length", str(seq + 1)]
    if ckpt: cmd.append("--grad-checkpoint")
    out, _, _, _ = run(cmd)
    return int(re.search(r"^Planned peak: (\d+) bytes", out, re.M).group(1))

def products_label(line):
    """'bf16' or 'fp32' from the log's "Frozen products:" line."""
    return "bf16" if line.startswith("bf16") else "fp32" if line.startswith("fp32") else "?"

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16", help="the model file's dtype")
    ap.add_argument("--only", default="", help="rows whose 'model seq' contains this")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--limit", type=float, default=20.0, help="GB: above it, checkpointing; PyTorch's address space")
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    limit = int(args.limit * 1e9)
    hdr = ("| model | seq x batch | ckpt | lmtune plan | lmtune peak RSS | lmtune products | lmtune tok/s "
           "| lmtune CPU s/step | PyTorch tok/s | PyTorch CPU s/step | PyTorch peak RSS | ratio (wall) | ratio (CPU) "
           "| RSS ratio | attention share |")
    rows = [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    print("\n".join(rows), flush=True)
    for shape in MODELS:
        for seq in SEQS:
            if args.only not in f"{shape} {seq}":
                continue
            batch = max(1, 2048 // seq)
            ckpt = False
            plan = planned_peak(shape, args.dtype, seq, batch, False)
            if plan > limit:
                ckpt = True
                plan = planned_peak(shape, args.dtype, seq, batch, True)
            lead = f"| {shape} | {seq} x {batch} | {'yes' if ckpt else 'no'} | {plan / 1e9:.2f} GB |"
            if plan > limit:
                row = lead + f" does not fit {args.limit:g} GB even with checkpointing |" + " |" * 10
                rows.append(row); print(row, flush=True)
                continue
            tps, rss, cpus, shares, ttps, trss, tcpus, info, torch_err = [], [], [], [], [], [], [], {}, ""
            for i in range(args.runs):
                t, r, a, c = lmtune_tokens_per_s(shape, MODE, args.dtype, ckpt, seq, batch, THREADS, 1, args.steps,
                                                 cpu_time=True, info=info)
                tps.append(t); rss.append(r); shares.append(a); cpus.append(c)
                if not args.no_torch and not torch_err:
                    try:
                        a2, b2, c2 = torch_tokens_per_s(shape, MODE, args.dtype, ckpt, seq, batch, THREADS,
                                                        args.steps, warmup=2, check=False,
                                                        max_address_space=limit)
                        ttps.append(a2); trss.append(b2); tcpus.append(c2)
                    except RunFailed as e:
                        oom = "out of memory" in e.err or "MemoryError" in e.err or "can't allocate" in e.err
                        torch_err = (f"out of memory at {args.limit:g} GB" if oom else
                                     f"failed (exit {e.code}): {e.err.strip().splitlines()[-1][:80]}")
                print(f"  {shape} {seq}x{batch} run {i + 1}: lmtune {t:.1f} tok/s ({c:.2f} CPU s/step, "
                      f"{r / 1e9:.2f} GB)" + (f", PyTorch {ttps[-1]:.1f} tok/s ({tcpus[-1]:.2f} CPU s/step, "
                      f"{trss[-1] / 1e9:.2f} GB)" if ttps and len(ttps) == i + 1 else
                      f", PyTorch {torch_err}" if torch_err else ""), file=sys.stderr, flush=True)
            t, c, r = median(tps), median(cpus), max(rss)
            row = (lead + f" {r / 1e9:.2f} GB | {products_label(info.get('products', ''))} | {t:.1f} | {c:.2f} |")
            if ttps:
                tt, tc, tr = median(ttps), median(tcpus), max(trss)
                row += (f" {tt:.1f} | {tc:.2f} | {tr / 1e9:.2f} GB | {t / tt:.2f}x | {tc / c:.2f}x | "
                        f"{r / tr:.2f}x |")
            else:
                row += f" {torch_err or 'not run'} | | | | | |"
            row += f" {100 * median(shares):.1f}% |"
            rows.append(row); print(row, flush=True)
    for line in sorted(TORCH_SETUP):
        print(line)
    with open(os.path.join(WORK, "scaling.md"), "w") as f:
        f.write("\n".join(rows) + "\n")

main()
