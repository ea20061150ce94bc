#!/usr/bin/env python3
"""GGUF bases against bf16, side by side: a llama model of 50M parameters
(hidden 768, 6 layers, so every matrix row holds whole Q4_K super-blocks;
random weights from `lmtune init --dtype bf16`), the same weights as a GGUF
file with Q4_K and with Q8_0 matrices (bench/gguf_requant.c), and for each
base the plan's frozen-weight bytes, the LoRA step (q,v of every block,
tokens/s, median over steps and runs; the bases' runs alternate so they see
the same machine) and the peak RSS of the run. GGUF products expand the
blocks tile by tile (fp32 panels: --weights-dtype f32; bf16 panels with
--weights-dtype bf16). The ratio column is GGUF / bf16 of the medians.

Usage: bench/gguf.py [--runs N] [--steps N] [--seq N] [--threads N]
Standard library only (Debian's /usr/bin/python3)."""
import argparse, json, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, LMTUNE, WORK, run, data_dir, median

REQUANT = os.environ.get("GGUF_REQUANT_BIN") or os.path.join(ROOT, "build", "rel", "bench", "gguf_requant")
CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=768, intermediate_size=2048,
              num_hidden_layers=6, num_attention_heads=12, num_key_value_heads=4, vocab_size=16384,
              max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
              torch_dtype="bfloat16")


def bases():
    d = os.path.join(WORK, "gguf-llama50m-bf16")
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        cfg = os.path.join(WORK, "gguf-llama50m.json")
        with open(cfg, "w") as f:
            json.dump(CONFIG, f)
        run([LMTUNE, "init", "--config", cfg, "--out", d, "--dtype", "bf16", "--seed", "0", "--init", "fan-in"])
    out = {"bf16 (safetensors)": (d, "bf16")}
    for q in ("q4_k", "q8_0"):
        g = os.path.join(WORK, f"gguf-llama50m-{q}.gguf")
        if not os.path.exists(g):
            run([REQUANT, d, g, q])
        if q == "q4_k":
            out[f"GGUF {q.upper()}, fp32 panels"] = (g, "f32")
        out[f"GGUF {q.upper()}, bf16 panels"] = (g, "bf16")
    return out


def train_args(md, wd, seq, batch, steps, threads):
    cfg = os.path.join(WORK, "gguf-lora-qv.yaml")
    with open(cfg, "w") as f:
        f.write('fine_tune_type: lora\nnum_layers: -1\nlora_parameters:\n  rank: 8\n  scale: 20.0\n'
                '  dropout: 0.0\n  keys: ["self_attn.q_proj", "self_attn.v_proj"]\n')
    return ["--model", md, "--data", data_dir(seq), "-c", cfg, "--batch-size", str(batch),
            "--max-seq-length", str(seq + 1), "--iters", str(steps), "--steps-per-report", "1",
            "--steps-per-eval", "1000000", "--val-batches", "1", "--save-every", "1000000",
            "--adapter-path", os.path.join(WORK, "adapters-gguf"), "--learning-rate", "1e-5",
            "--threads", str(threads), "--weights-dtype", wd]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    batch = 4
    b = bases()
    rates = {k: [] for k in b}
    rss = {k: 0 for k in b}
    for r in range(args.runs):
        for k, (md, wd) in b.items():
            out, _, _, m = run([LMTUNE, "train"] + train_args(md, wd, args.seq, batch, 2 + args.steps, args.threads),
                               env=dict(os.environ, OMP_NUM_THREADS=str(args.threads)))
            t = [float(x) for x in re.findall(r"Tokens/sec ([0-9.]+)", out)]
            rates[k].append(median(t[2:] or t))
            rss[k] = max(rss[k], m)
            print(f"  run {r + 1} {k}: {rates[k][-1]:.0f} tok/s", file=sys.stderr, flush=True)
    base = median(rates["bf16 (safetensors)"])
    print("| base | frozen weights | LoRA q,v step tok/s | vs bf16 | peak RSS |")
    print("|---|---|---|---|---|")
    for k, (md, wd) in b.items():
        out, _, _, _ = run([LMTUNE, "plan"] + train_args(md, wd, args.seq, batch, 1, args.threads))
        fw = re.search(r"^\s+frozen weights\s+(\d+)", out, re.M)
        t = median(rates[k])
        print(f"| {k} | {int(fw.group(1)) / 1e6:.1f} MB | {t:.0f} | {t / base:.2f}x | {rss[k] / 1e9:.2f} GB |")


main()
