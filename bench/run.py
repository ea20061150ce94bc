#!/usr/bin/env python3
"""`make bench`: training throughput of lmtune against plain PyTorch in the same
run, with model FLOPs utilisation against the GEMM peak measured in this run.

For each configuration: a model made by `lmtune init` (random weights of the
real shape), a data set of rows longer than the sequence (truncated to it),
`lmtune train` for warm-up + timed iterations with a report every iteration,
and bench/torch_train.py on the same shape and step, alternating with lmtune's
runs. Tokens/s is the median over the timed iterations (and over --runs) of
tokens per iteration / seconds per iteration. PyTorch is timed after 3
warm-up steps: its first steps are 30% slower (the allocator growing to 7 GB),
so fewer would flatter the ratio. The attention share is from lmtune's own
step profile (LMTUNE_PROFILE=1: attention forward + backward wall time over
the step's wall time).

PyTorch is tuned (bench/torch_train.py: tcmalloc, ATen AVX-512, OpenBLAS's
own kernels); rows with bf16 weights compare with PyTorch in pure bf16
(oneDNN bf16 products), f32 rows with PyTorch in fp32. --quick: the
SmolLM2-135M rows at 512 tokens, LoRA on every linear (MLX-LM's default, the
headline) and LoRA q,v of the last 16 blocks, f32 and bf16 weights (lmtune:
--weights-dtype auto). The line under the table says which BLAS kernels and
allocator PyTorch used.

Usage: bench/run.py [--quick] [--runs N] [--only SUBSTR] [--no-torch] [--steps N] [--cpu-time]
Writes the table to stdout and to build/bench/results.md."""
import argparse, json, os, re, subprocess, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, LMTUNE, WORK, SHAPES, run, model_dir, data_dir, median

def flops_per_token(shape, mode, seq):
    s = SHAPES[shape]
    C, L, H, KV, F, V, D = s["hidden"], s["layers"], s["heads"], s["kv"], s["inter"], s["vocab"], s["head_dim"]
    p_layer = C * H * D + 2 * C * KV * D + H * D * C + 3 * C * F
    attn_fwd = 2 * H * D * (seq + 1)              # causal: QK^T and PV over (T+1)/2 keys on average, 2 FLOPs each
    n_bwd = {"lora-qv16": 16, "lora-all": L, "full4": 4}[mode]
    fwd = 2 * (L * p_layer + V * C) + L * attn_fwd
    bwd = 2 * V * C + n_bwd * (2 * p_layer + 2 * attn_fwd)   # dinput of every matrix above the lowest trainable block
    if mode == "full4":
        bwd += n_bwd * 2 * p_layer                               # dweight of trainable matrices
    else:
        r = 8
        dims = [(C, H * D), (C, KV * D), (C, KV * D), (H * D, C), (C, F), (C, F), (F, C)]
        keys = dims if mode == "lora-all" else [dims[0], dims[2]]
        lora = sum(2 * (i * r + r * o) for i, o in keys)
        fwd += (L if mode == "lora-all" else 16) * lora
        bwd += n_bwd * 2 * lora
    return fwd + bwd

LORA_YAML = {
    "lora-qv16": ("lora", 16, '["self_attn.q_proj", "self_attn.v_proj"]'),
    "lora-all": ("lora", -1, '["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]'),
    "full4": ("full", 4, None),
}

def config_file(mode):
    ft, nl, keys = LORA_YAML[mode]
    path = os.path.join(WORK, f"{mode}.yaml")
    with open(path, "w") as f:
        f.write(f"fine_tune_type: {ft}\nnum_layers: {nl}\n")
        if keys:
            f.write(f"lora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n  keys: {keys}\n")
    return path

def gemm_peak(threads):
    exe = os.environ.get("GEMM_PEAK_BIN") or os.path.join(ROOT, "build", "rel", "bench", "gemm_peak")
    # one thread count per process: oneDNN sizes its thread pool when it creates
    # a primitive, so a 1-thread table first would cap the 2-thread one
    # a chip shared with other machines: one probe in a run once measured a
    # 2-thread peak of a single core's; the best of three probes is the peak
    best = {"f32": 0.0, "bf16": 0.0}
    for _ in range(3):
        out, _, _, _ = run([exe, "3", str(threads)], env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        for line in out.splitlines():
            m = re.match(r"\S+\s+(f32|bf16)\s+([0-9.]+)", line)
            if m: best[m.group(1)] = max(best[m.group(1)], float(m.group(2)))
    return best

def lmtune_tokens_per_s(shape, mode, dtype, ckpt, seq, batch, threads, warmup, steps, cpu_time=False, extra=(),
                        info=None):
    """Median tokens/s of the timed iterations, peak RSS, attention share, step seconds (CPU seconds with
    cpu_time). info (a dict), if given, receives the log's "Frozen products:" line (what auto chose)."""
    md = model_dir(shape, dtype)
    dd = data_dir(seq)
    cmd = [LMTUNE, "train", "--model", md, "--data", dd, "-c", config_file(mode),
           "--batch-size", str(batch), "--max-seq-length", str(seq + 1), "--iters", str(warmup + steps),
           "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "1",
           "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "adapters"),
           "--learning-rate", "1e-5", "--threads", str(threads)]
    if ckpt: cmd.append("--grad-checkpoint")
    cmd += list(extra)
    # LMTUNE_PROFILE: the step's wall (cpu: CPU) time by kernel class (steps after the first)
    out, err, _, rss = run(cmd, env=dict(os.environ, OMP_NUM_THREADS=str(threads),
                                         LMTUNE_PROFILE="cpu" if cpu_time else "1"))
    rates = [float(m) for m in re.findall(r"Tokens/sec ([0-9.]+)", out)]
    timed = rates[warmup:] or rates
    prof = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^  (\S.*?)\s+(-?[0-9.]+) s", out, re.M)}
    attn = prof.get("attention forward", 0.0) + prof.get("attention backward", 0.0)
    share = attn / prof["step"] if prof.get("step") else float("nan")
    if info is not None:
        m = re.search(r"^Frozen products: (.*)$", out, re.M)
        info["products"] = m.group(1) if m else ""
    return median(timed), rss, share, prof.get("step", float("nan"))

def torch_tokens_per_s(shape, mode, dtype, ckpt, seq, batch, threads, steps, warmup=3, check=True,
                       max_address_space=None):
    """Tuned PyTorch (bench/torch_train.py): tokens/s, peak RSS, CPU seconds per step (medians of steps)."""
    bf16 = dtype == "bf16"
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_train.py"), "--model", shape, "--mode", mode,
           "--weights", "bf16" if bf16 else "fp32", "--compute", "bf16" if bf16 else "fp32", "--batch", str(batch),
           "--seq", str(seq), "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)]
    if ckpt: cmd.append("--grad-checkpoint")
    env = dict(os.environ)
    env.pop("OPENBLAS_L2_SIZE", None)
    env.pop("OPENBLAS_CORETYPE", None)     # torch_train.py sets it from the CPU's flags (AVX-512 kernels),
                                           # PyTorch's best setting here (the machine's default pins older ones)
    out, _, _, rss = run(cmd, env=env, check=check, max_address_space=max_address_space)
    res = json.loads(out.strip().splitlines()[-1])
    TORCH_SETUP.add(f"PyTorch {res['torch']}: BLAS kernels {res['blas_kernels']}, allocator {res['allocator']}, "
                    f"ATen {res['aten_capability']}, compute {res['compute']}")
    return res["tokens_per_s"], rss, res["cpu_s_per_step"]

TORCH_SETUP = set()

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the bar configurations only")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cpu-time", action="store_true",
                    help="also CPU seconds per step of both (process CPU time, all threads): on a loaded machine "
                         "steadier than wall time; the attention share is then of CPU time")
    args = ap.parse_args()
    configs = [  # shape, mode, dtype, ckpt, seq, threads
        ("smollm2-135m", "lora-all", "f32", False, 512, 2),
        ("smollm2-135m", "lora-all", "bf16", False, 512, 2),
        ("smollm2-135m", "lora-qv16", "f32", False, 512, 2),
        ("smollm2-135m", "lora-qv16", "bf16", False, 512, 2),
        ("smollm2-135m", "lora-qv16", "f32", True, 512, 2),
        ("smollm2-135m", "lora-qv16", "bf16", True, 512, 2),
        ("smollm2-135m", "full4", "f32", False, 512, 2),
        ("smollm2-135m", "lora-qv16", "f32", False, 512, 1),
        ("smollm2-135m", "lora-qv16", "bf16", False, 256, 2),
        ("smollm2-135m", "lora-qv16", "bf16", False, 1024, 2),
        ("smollm2-135m", "lora-qv16", "bf16", False, 2048, 2),
        ("smollm2-135m", "lora-qv16", "bf16", False, 4096, 2),
        ("smollm2-135m", "lora-qv16", "bf16", True, 4096, 2),
        ("qwen2.5-0.5b", "lora-qv16", "bf16", False, 512, 2),
    ]
    if args.quick:
        configs = [c for c in configs if c[4] == 512 and c[0] == "smollm2-135m" and c[1] != "full4" and not c[3]
                   and c[5] == 2]
    configs = [c for c in configs if args.only in " ".join(map(str, c))]
    peaks = {t: gemm_peak(t) for t in sorted({c[5] for c in configs})}
    rows = []
    hdr = ("| model | mode | weights | ckpt | seq | threads | lmtune tok/s | s/step | peak RSS | MFU | attention share "
           "| PyTorch tok/s | PyTorch RSS | ratio | RSS ratio |")
    if args.cpu_time:
        hdr += " lmtune CPU s/step | PyTorch CPU s/step | CPU ratio |"
    print(hdr); print("|" + "---|" * (hdr.count("|") - 1))
    for shape, mode, dtype, ckpt, seq, threads in configs:
        batch = 4
        # PyTorch on every 2-thread LoRA row at 512 tokens, checkpointed rows too (its checkpoint of every
        # block: the RSS ratio with checkpointing is one of the bars)
        with_torch = (not args.no_torch and threads == 2 and seq == 512 and mode != "full4"
                      and shape == "smollm2-135m")
        # lmtune and PyTorch runs alternate, so that both see the same
        # machine (shared and noisy): the ratio is of medians taken side by side
        tps, rss, shares, ts, trs, lc, tc = [], [], [], [], [], [], []
        chosen = set()   # the frozen products' dtype each run took (bf16 weights: auto measures)
        for i in range(args.runs):
            info = {}
            t, r, a, c = lmtune_tokens_per_s(shape, mode, dtype, ckpt, seq, batch, threads, 2, args.steps,
                                             args.cpu_time, info=info)
            chosen.add("bf16" if info.get("products", "").startswith("bf16") else "f32")
            tps.append(t); rss.append(r); shares.append(a); lc.append(c)
            if with_torch:
                a, b, c2 = torch_tokens_per_s(shape, mode, dtype, ckpt, seq, batch, threads, args.steps)
                ts.append(a); trs.append(b); tc.append(c2)
            print(f"  run {i + 1}: lmtune {t:.0f} tok/s ({c:.2f} CPU s/step)" +
                  (f", PyTorch {a:.0f} tok/s ({c2:.2f} CPU s/step)" if with_torch else ""),
                  file=sys.stderr, flush=True)
        t = median(tps)
        # MFU against the probe of the products the run multiplied in: on an Intel Xeon without AMX, auto
        # takes fp32 products for bf16 weights (bf16 runs at ~0.55x there), and the bf16 probe would read >100%
        products = "bf16" if chosen == {"bf16"} else "f32" if chosen == {"f32"} else None
        peak = (peaks[threads][products] if products else max(peaks[threads].values())) * 1e9
        mfu = flops_per_token(shape, mode, seq) * t / peak if peak else float("nan")
        tt, trss = (median(ts), max(trs)) if ts else (float("nan"), float("nan"))
        label = dtype if products in (None, dtype) else f"{dtype} ({products} products)"
        row = (f"| {shape} | {mode} | {label} | {'yes' if ckpt else 'no'} | {seq} | {threads} | {t:.0f} | "
               f"{batch * seq / t:.2f} | {max(rss) / 1e9:.3f} GB | {100 * mfu:.0f}% | {100 * median(shares):.1f}% | "
               f"{tt:.0f} | {trss / 1e9:.3f} GB | {t / tt:.2f}x | {max(rss) / trss:.3f}x |")
        if args.cpu_time:
            row += f" {median(lc):.2f} | {median(tc):.2f} | {median(tc) / median(lc):.2f}x |"
        print(row, flush=True)
        rows.append(row)
    for line in sorted(TORCH_SETUP):
        print(line)
    print(f"\nGEMM peak measured in this run (GFLOP/s): " + ", ".join(f"{t} threads: f32 {p['f32']:.0f}, bf16 {p['bf16']:.0f}" for t, p in peaks.items()))
    with open(os.path.join(WORK, "results.md"), "w") as f:
        f.write(hdr + "\n" + "\n".join(rows) + "\n")

if __name__ == "__main__":
    main()
