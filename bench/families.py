#!/usr/bin/env python3
"""The new families' bench: for each `lmtune init` preset of Gemma 3, Phi-4-mini
and SmolLM3 (random weights of the published shape, bf16), LoRA with MLX-LM's
defaults (rank 8, every linear of the last 16 blocks), the training throughput
and peak RSS of lmtune, and PyTorch's (bench/torch_train.py on the very same
weights and step) where it runs in reasonable time; then the memory plan of
`lmtune plan` against the measured peak RSS of `lmtune train` for the
gemma-3-1b and phi-4-mini shapes at 512 and 2048 tokens.

Tokens/s is the median over the timed iterations of tokens per iteration /
seconds per iteration (lmtune's report lines; PyTorch after its warm-up);
runs alternate lmtune and PyTorch. Peak RSS is wait4's ru_maxrss of each run.

--only SUBSTR selects rows whose label ("gemma-3-1b 1x2048 ckpt") contains it.
Usage: bench/families.py [--only SUBSTR] [--no-torch] [--no-memory] [--no-speed]
                         [--runs N] [--threads N]"""
import argparse, json, os, re, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import has_weights, ROOT, LMTUNE, WORK, run, data_dir, median

YAML = os.path.join(WORK, "families-lora.yaml")

def config_file():
    with open(YAML, "w") as f:
        f.write("fine_tune_type: lora\nnum_layers: 16\nlora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n")
    return YAML

def preset_dir(preset):
    d = os.path.join(WORK, f"{preset}-bf16")
    if not has_weights(d):
        run([LMTUNE, "init", "--preset", preset, "--out", d, "--dtype", "bf16", "--seed", "0"])
    return d

def train_args(preset, batch, seq, threads, ckpt=False):
    a = ["--model", preset_dir(preset), "--data", data_dir(seq), "-c", config_file(), "--batch-size", str(batch),
         "--max-seq-length", str(seq + 1), "--threads", str(threads)]
    if ckpt: a.append("--grad-checkpoint")
    return a

def lmtune_speed(preset, batch, seq, threads, warmup, steps):
    cmd = [LMTUNE, "train"] + train_args(preset, batch, seq, threads) + [
        "--iters", str(warmup + steps), "--steps-per-report", "1", "--steps-per-eval", "1000000",
        "--val-batches", "0", "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "fam-adapters"),
        "--learning-rate", "1e-5"]
    out, err, _, rss = run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    tps = [float(m.group(1)) for m in re.finditer(r"Tokens/sec ([0-9.]+)", out)]
    return median(tps[warmup:]), rss

def torch_speed(preset, batch, seq, threads, warmup, steps):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_train.py"), "--model-dir", preset_dir(preset),
           "--mode", "lora-all", "--num-layers", "16", "--batch", str(batch), "--seq", str(seq),
           "--warmup", str(warmup), "--steps", str(steps), "--threads", str(threads)]
    blas = os.environ.get("LMTUNE_BLAS_DIR")
    if blas: cmd += ["--blas-dir", blas]
    out, _, _, rss = run(cmd)
    j = json.loads(out.strip().splitlines()[-1])
    return j["tokens_per_s"], rss

def measured(preset, batch, seq, threads, ckpt):
    """Peak RSS (wait4's ru_maxrss) of one training step, and the peaks of its two parts sampled every 50 ms
    from /proc/PID/status: RssAnon (the arena, the heap, oneDNN's scratch) and RssFile (the mapped weights;
    the kernel may drop clean pages of these under memory pressure, then the peak RSS falls short of the
    plan, which counts the whole mapped file as resident)."""
    cmd = [LMTUNE, "train"] + train_args(preset, batch, seq, threads, ckpt) + [
        "--iters", "1", "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "0",
        "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "fam-adapters")]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = {"RssAnon": 0, "RssFile": 0}
    while True:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    k = line.split(":")[0]
                    if k in peak: peak[k] = max(peak[k], int(line.split()[1]) * 1024)
        except OSError:
            pass
        r = os.wait4(p.pid, os.WNOHANG)
        if r[0] == p.pid: break
        time.sleep(0.05)
    err = p.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(r[1]) != 0: raise SystemExit(f"train failed: {' '.join(cmd)}\n{err[-3000:]}")
    return r[2].ru_maxrss * 1024, peak["RssAnon"], peak["RssFile"]

def planned_parts(preset, batch, seq, threads, ckpt):
    """(total, mapped file bytes) of the plan: --verbose lists the mapped weights as '(mapped file' lines."""
    out, _, _, _ = run([LMTUNE, "plan", "--verbose"] + train_args(preset, batch, seq, threads, ckpt))
    total = int(re.search(r"Planned peak: (\d+) bytes", out).group(1))
    mapped = sum(int(m.group(1)) for m in re.finditer(r"\(mapped file[^)]*\)\s+(\d+)", out))
    return total, mapped

# (preset, batch, seq, PyTorch too)
SPEED = [("gemma-3-270m", 4, 512, True), ("gemma-3-1b", 1, 512, True), ("smollm3-3b", 1, 512, False),
         ("phi-4-mini", 1, 512, False)]
# (preset, batch, seq, checkpointing)
MEMORY = [("gemma-3-1b", 1, 512, False), ("gemma-3-1b", 1, 2048, False), ("gemma-3-1b", 1, 2048, True),
          ("phi-4-mini", 1, 512, False), ("phi-4-mini", 1, 2048, False), ("phi-4-mini", 1, 2048, True)]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    if not a.no_speed:
        print("| preset | batch x seq | lmtune tokens/s | lmtune peak GB | PyTorch tokens/s | PyTorch peak GB "
              "| ratio |")
        print("|---|---|---|---|---|---|---|")
        for preset, b, seq, with_torch in SPEED:
            if a.only and a.only not in f"{preset} {b}x{seq}": continue
            ours, theirs = [], []
            for _ in range(a.runs):
                ours.append(lmtune_speed(preset, b, seq, a.threads, a.warmup, a.steps))
                if with_torch and not a.no_torch:
                    theirs.append(torch_speed(preset, b, seq, a.threads, a.warmup, a.steps))
            t = median([x[0] for x in ours])
            r = max(x[1] for x in ours)
            if theirs:
                pt, pr = median([x[0] for x in theirs]), max(x[1] for x in theirs)
                print(f"| {preset} | {b} x {seq} | {t:.1f} | {r / 1e9:.2f} | {pt:.1f} | {pr / 1e9:.2f} "
                      f"| {t / pt:.2f}x |", flush=True)
            else:
                print(f"| {preset} | {b} x {seq} | {t:.1f} | {r / 1e9:.2f} | | | |", flush=True)
    if not a.no_memory:
        print("\n| preset | batch x seq | checkpointing | plan GB | measured GB | plan - measured "
              "| plan less mapped GB | peak RssAnon GB | peak RssFile GB |")
        print("|---|---|---|---|---|---|---|---|---|")
        for preset, b, seq, ckpt in MEMORY:
            label = f"{preset} {b}x{seq}" + (" ckpt" if ckpt else "")
            if a.only and a.only not in label: continue
            (p, mapped), (m, anon, fil) = planned_parts(preset, b, seq, a.threads, ckpt), \
                measured(preset, b, seq, a.threads, ckpt)
            print(f"| {preset} | {b} x {seq} | {'yes' if ckpt else 'no'} | {p / 1e9:.3f} | {m / 1e9:.3f} "
                  f"| {(p - m) / m * 100:+.1f}% | {(p - mapped) / 1e9:.3f} | {anon / 1e9:.3f} | {fil / 1e9:.3f} |",
                  flush=True)

main()
