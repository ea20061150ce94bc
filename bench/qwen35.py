#!/usr/bin/env python3
"""Qwen3.5 headline bench: on the published Qwen3.5-0.8B / -2B shapes (models
written by `lmtune init --preset qwen3.5-0.8b`, bf16, random weights), LoRA
on MLX-LM's default keys (every linear of the last 16 blocks: in_proj_qkv,
in_proj_z, in_proj_b, in_proj_a, out_proj of the Gated DeltaNet blocks,
q/k/v/o of the attention blocks, the MLP), rank 8, batch 1, at several
sequence lengths, with and without --grad-checkpoint:
  - `lmtune plan`'s total against the peak RSS (wait4 ru_maxrss) of
    `lmtune train` with the same flags;
  - wall seconds per step and tokens/s, CPU seconds of the process, and the
    Gated DeltaNet kernels' share of the step (LMTUNE_PROFILE), over the
    steps after the first when the run has at least 2 (--iters), else of the
    first step (which includes faulting in the weights and the arena).

Usage: bench/qwen35.py [--models 0.8b,2b] [--seqs 512,1024,2048,4096]
                       [--ckpt both|no|yes] [--iters N] [--iters-above SEQ:N]
                       [--max-plan-gb G]
A configuration whose plan exceeds --max-plan-gb (default 14) is planned but
not run (the machine is shared)."""
import argparse, os, re, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LMTUNE, WORK, data_dir


def run(cmd, env=None):
    """(stdout + stderr, wall seconds, peak RSS bytes, CPU seconds) of cmd."""
    with tempfile.TemporaryFile("w+") as fo:
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=fo, stderr=subprocess.STDOUT, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.time() - t0
        fo.seek(0)
        out = fo.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(f"command failed: {' '.join(cmd)}\n{out[-3000:]}\n")
        raise SystemExit(1)
    return out, dt, ru.ru_maxrss * 1024, ru.ru_utime + ru.ru_stime


def model_dir(size):
    d = os.path.join(WORK, f"qwen3.5-{size}-bf16")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        run([LMTUNE, "init", "--preset", f"qwen3.5-{size}", "--out", d, "--dtype", "bf16", "--seed", "0"])
    return d


def args_for(size, seq, ckpt):
    a = ["--model", model_dir(size), "--data", data_dir(seq), "--batch-size", "1",
         "--max-seq-length", str(seq + 1), "--num-layers", "16"]
    if ckpt:
        a.append("--grad-checkpoint")
    return a


def planned(a):
    out, _, _, _ = run([LMTUNE, "plan"] + a)
    m = re.search(r"Planned peak: (\d+) bytes", out)
    if not m:
        raise SystemExit("plan printed no 'Planned peak' line:\n" + out)
    return int(m.group(1))


def measured(a, iters):
    env = dict(os.environ, LMTUNE_PROFILE="1")
    out, wall, rss, cpu = run([LMTUNE, "train"] + a + [
        "--iters", str(iters), "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "0",
        "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "qwen35-adapters")], env)
    step = re.search(r"^\s+step\s+([0-9.]+) s", out, re.M)
    gdn = re.search(r"^\s+Gated DeltaNet.*?([0-9.]+) s\s+([0-9.]+)%", out, re.M)
    first = re.search(r"Iter 1: .*?Tokens/sec ([0-9.]+)", out)
    return dict(rss=rss, wall=wall, cpu=cpu, iters=iters,
                step=float(step.group(1)) if step and iters > 1 else None,
                gdn=float(gdn.group(2)) if gdn and iters > 1 else None,
                first_tps=float(first.group(1)) if first else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="0.8b,2b")
    ap.add_argument("--seqs", default="512,1024,2048,4096")
    ap.add_argument("--ckpt", default="both", choices=["both", "no", "yes"])
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--iters-above", default="", help="SEQ:N: N iterations for sequences longer than SEQ")
    ap.add_argument("--max-plan-gb", type=float, default=14.0)
    args = ap.parse_args()
    above = tuple(int(x) for x in args.iters_above.split(":")) if args.iters_above else None
    ckpts = {"both": (False, True), "no": (False,), "yes": (True,)}[args.ckpt]
    print(f"CPU: {os.cpu_count()} cores; load average at start {os.getloadavg()[0]:.1f}")
    print("| model | seq | ckpt | plan GB | measured GB | plan - measured | iters | s/step | tokens/s "
          "| CPU s (process) | GDN share |")
    print("|" + "---|" * 11, flush=True)
    worst = 0.0
    for size in args.models.split(","):
        for seq in (int(s) for s in args.seqs.split(",")):
            for ckpt in ckpts:
                a = args_for(size, seq, ckpt)
                p = planned(a)
                head = f"| {size} | {seq} | {'yes' if ckpt else 'no'} | {p / 1e9:.3f} |"
                if p > args.max_plan_gb * 1e9:
                    print(head + " not run (plan above --max-plan-gb) | | | | | | |", flush=True)
                    continue
                iters = above[1] if above and seq > above[0] else args.iters
                m = measured(a, iters)
                err = (p - m["rss"]) / m["rss"]
                worst = max(worst, abs(err))
                if m["step"]:
                    step = f"{m['step']:.1f}"
                    tps = f"{seq / m['step']:.1f}"
                    gdn = f"{m['gdn']:.1f}%"
                else:
                    step = "(first step)"
                    tps = f"{m['first_tps']:.1f} (first step)" if m["first_tps"] else "?"
                    gdn = "-"
                print(head + f" {m['rss'] / 1e9:.3f} | {100 * err:+.2f}% | {iters} | {step} | {tps} | "
                      f"{m['cpu']:.0f} | {gdn} |", flush=True)
    print(f"\nworst |plan - measured| / measured: {100 * worst:.2f}%")
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
