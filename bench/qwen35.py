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

Usage: bench/qwen35.py [--models 0.8b,2b,4b-q4,4b-q4-zeros] [--seqs 512,1024,2048,4096]
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


# The published Qwen3.5-4B text config where it differs from the 0.8B one
# (what `lmtune init --preset qwen3.5-4b` writes).
SIZE_4B = dict(hidden_size=2560, intermediate_size=9216, num_hidden_layers=32, num_attention_heads=16,
               num_key_value_heads=4, linear_num_value_heads=32,
               layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)])


def zero_q4_dir():
    """The Qwen3.5-4B shape as MLX's 4-bit model (group 64, bf16 scales and
    biases, A_log fp32, every linear and the tied embedding quantized, as
    `lmtune convert -q` writes it), all weights zero: written directly (a
    sparse file) instead of initialising 9 GB of random bf16 and quantizing
    it, which takes most of an hour on a loaded 2-core machine. Zeros cost
    the products and the plan exactly what random codes do."""
    import json, shutil, struct
    d = os.path.join(WORK, "qwen3.5-4b-q4-zeros")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return d
    src = model_dir("0.8b")
    os.makedirs(d, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), d)
    cfg = json.load(open(os.path.join(src, "config.json")))
    tc = cfg["text_config"]
    tc.update(SIZE_4B)
    cfg["quantization"] = cfg["quantization_config"] = {"group_size": 64, "bits": 4}
    C, F, V = tc["hidden_size"], tc["intermediate_size"], tc["vocab_size"]
    H, KV, D = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]
    Hk, Hv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
    Dk, Dv, K = tc["linear_key_head_dim"], tc["linear_value_head_dim"], tc["linear_conv_kernel_dim"]
    CC = 2 * Hk * Dk + Hv * Dv
    ts = []   # (name, dtype, shape)

    def lin(name, out, inp):
        ts.append((name + ".weight", "U32", [out, inp // 8]))
        ts.append((name + ".scales", "BF16", [out, inp // 64]))
        ts.append((name + ".biases", "BF16", [out, inp // 64]))
    P = "model.language_model."
    lin(P + "embed_tokens", V, C)
    ts.append((P + "norm.weight", "BF16", [C]))
    for l, kind in enumerate(tc["layer_types"]):
        b = f"{P}layers.{l}."
        ts.append((b + "input_layernorm.weight", "BF16", [C]))
        ts.append((b + "post_attention_layernorm.weight", "BF16", [C]))
        lin(b + "mlp.gate_proj", F, C)
        lin(b + "mlp.up_proj", F, C)
        lin(b + "mlp.down_proj", C, F)
        if kind == "linear_attention":
            a = b + "linear_attn."
            lin(a + "in_proj_qkv", CC, C)
            lin(a + "in_proj_z", Hv * Dv, C)
            lin(a + "in_proj_b", Hv, C)
            lin(a + "in_proj_a", Hv, C)
            lin(a + "out_proj", C, Hv * Dv)
            ts.append((a + "conv1d.weight", "BF16", [CC, 1, K]))
            ts.append((a + "A_log", "F32", [Hv]))
            ts.append((a + "dt_bias", "BF16", [Hv]))
            ts.append((a + "norm.weight", "BF16", [Dv]))
        else:
            a = b + "self_attn."
            lin(a + "q_proj", 2 * H * D, C)
            lin(a + "k_proj", KV * D, C)
            lin(a + "v_proj", KV * D, C)
            lin(a + "o_proj", C, H * D)
            ts.append((a + "q_norm.weight", "BF16", [D]))
            ts.append((a + "k_norm.weight", "BF16", [D]))
    size = {"U32": 4, "BF16": 2, "F32": 4}
    header, off = {"__metadata__": {"format": "mlx"}}, 0
    for name, dt, shape in ts:
        n = size[dt]
        for x in shape:
            n *= x
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    tmp = os.path.join(d, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + off)
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
    os.rename(tmp, os.path.join(d, "model.safetensors"))
    return d


def model_dir(size):
    """SIZE (0.8b, 2b, 4b): the preset in bf16; SIZE-q4 (4b-q4): that model
    quantized by `lmtune convert -q` (4 bits, group 64: mlx_lm.convert's
    defaults), the base of a QLoRA run."""
    if size == "4b-q4-zeros":
        return zero_q4_dir()
    if size.endswith("-q4"):
        d = os.path.join(WORK, f"qwen3.5-{size}")
        if not os.path.exists(os.path.join(d, "config.json")):
            run([LMTUNE, "convert", "--hf-path", model_dir(size[:-3]), "--mlx-path", d, "-q", "--q-bits", "4",
                 "--q-group-size", "64"])
        return d
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
