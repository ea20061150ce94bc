#!/usr/bin/env python3
"""Quantized bases against bf16, side by side: for the SmolLM2-135M and
Qwen2.5-0.5B shapes (random weights from `lmtune init --dtype bf16`, then
`lmtune convert -q --q-bits 4|8 --q-group-size 64`), the bytes of the frozen
weights (the plan's "frozen weights" line), the LoRA training step
(tokens/s, median over steps and runs; the runs of the three bases
alternate, so they see the same machine) and greedy decoding (generation
tokens/s). The ratio column is quantized / bf16 of the medians.

With --cpu-time (for a machine shared with other work): one thread, and
the step's cost is CPU seconds (the process's user + system time of a run
of 1 + S steps minus that of a run of 1 step, over S), so a load that
steals wall time does not enter; tokens per CPU second stand for tokens/s.

Usage: bench/quant.py [--runs N] [--steps N] [--only SUBSTR] [--seq N] [--cpu-time]
Standard library only (Debian's /usr/bin/python3)."""
import argparse, os, re, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import has_weights, ROOT, LMTUNE, WORK, SHAPES, run, model_dir, data_dir, median

KEYS = '["self_attn.q_proj", "self_attn.v_proj"]'


def quantized_dir(shape, bits):
    src = model_dir(shape, "bf16")
    d = os.path.join(WORK, f"{shape}-q{bits}")
    if not has_weights(d):
        run([LMTUNE, "convert", "--hf-path", src, "--mlx-path", d, "-q", "--q-bits", str(bits),
             "--q-group-size", "64"])
    return d


def config_file():
    path = os.path.join(WORK, "quant-lora-qv16.yaml")
    with open(path, "w") as f:
        f.write(f"fine_tune_type: lora\nnum_layers: 16\nlora_parameters:\n  rank: 8\n  scale: 20.0\n"
                f"  dropout: 0.0\n  keys: {KEYS}\n")
    return path


def train_args(md, seq, batch, steps, threads=2):
    return ["--model", md, "--data", data_dir(seq), "-c", config_file(), "--batch-size", str(batch),
            "--max-seq-length", str(seq + 1), "--iters", str(steps), "--steps-per-report", "1",
            "--steps-per-eval", "1000000", "--val-batches", "1", "--save-every", "1000000",
            "--adapter-path", os.path.join(WORK, "adapters-quant"), "--learning-rate", "1e-5", "--threads", str(threads)]


def cpu_seconds(cmd, env):
    """Runs cmd; returns the child's user + system CPU seconds and peak RSS."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{p.stderr.read().decode()[-2000:]}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def train_rate_cpu(md, seq, batch, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    one = [LMTUNE, "train"] + train_args(md, seq, batch, 1, threads=1)
    more = [LMTUNE, "train"] + train_args(md, seq, batch, 1 + steps, threads=1)
    c1, _ = cpu_seconds(one, env)
    c2, rss = cpu_seconds(more, env)
    return batch * seq * steps / max(c2 - c1, 1e-9), rss


def frozen_bytes(md, seq, batch):
    out, _, _, _ = run([LMTUNE, "plan"] + train_args(md, seq, batch, 1))
    m = re.search(r"^\s+frozen weights\s+(\d+)", out, re.M)
    return int(m.group(1)) if m else float("nan")


def train_rate(md, seq, batch, steps):
    out, _, _, rss = run([LMTUNE, "train"] + train_args(md, seq, batch, 2 + steps),
                         env=dict(os.environ, OMP_NUM_THREADS="2"))
    rates = [float(x) for x in re.findall(r"Tokens/sec ([0-9.]+)", out)]
    return median(rates[2:] or rates), rss


def decode_rate(md, tokens, cpu=False):
    """Greedy decoding through the KV cache (bench/decode_speed.c: token ids,
    no tokenizer, as the init models' byte tokenizers do not cover their vocab)."""
    exe = os.environ.get("DECODE_SPEED_BIN") or os.path.join(ROOT, "build", "rel", "bench", "decode_speed")
    out, _, _, _ = run([exe, md, "16", str(tokens)], env=dict(os.environ, OMP_NUM_THREADS="1"))
    m = re.search(r"generated tokens ([0-9.]+) tok/s \(([0-9.]+) per CPU second\)", out)
    return float(m.group(2 if cpu else 1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--only", default="")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--no-decode", action="store_true")
    args = ap.parse_args()
    batch = args.batch
    unit = "tokens per CPU second (1 thread)" if args.cpu_time else "tok/s"
    dunit = "tokens per CPU second" if args.cpu_time else "tok/s"
    print(f"| model | base | frozen weights | LoRA q,v step, {unit} | vs bf16 | peak RSS | decode, {dunit} | vs bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in [s for s in SHAPES if args.only in s]:
        dirs = {"bf16": model_dir(shape, "bf16"), "4-bit g64": quantized_dir(shape, 4),
                "8-bit g64": quantized_dir(shape, 8)}
        rates = {k: [] for k in dirs}
        rss = {k: 0 for k in dirs}
        dec = {k: [] for k in dirs}
        for r in range(args.runs):
            for k, md in dirs.items():   # alternating: every base sees the same machine
                rate = train_rate_cpu if args.cpu_time else train_rate
                t, m = rate(md, args.seq, batch, args.steps)
                rates[k].append(t)
                rss[k] = max(rss[k], m)
                dec[k].append(float("nan") if args.no_decode else decode_rate(md, args.decode_tokens, args.cpu_time))
                print(f"  run {r + 1} {shape} {k}: {t:.0f} tok/s, decode {dec[k][-1]:.1f} tok/s",
                      file=sys.stderr, flush=True)
        base_t, base_d = median(rates["bf16"]), median(dec["bf16"])
        for k, md in dirs.items():
            t, d = median(rates[k]), median(dec[k])
            print(f"| {shape} | {k} | {frozen_bytes(md, args.seq, batch) / 1e6:.1f} MB | {t:.0f} | "
                  f"{t / base_t:.2f}x | {rss[k] / 1e9:.2f} GB | {d:.1f} | {d / base_d:.2f}x |", flush=True)


main()
