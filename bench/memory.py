#!/usr/bin/env python3
"""Memory bench: the planned total of `lmtune plan` against the measured peak
resident set of `lmtune train` with the same flags, on a matrix of shapes the
plan has to get right (issue 20): untied heads, vocabularies far larger than
the data's token set (byte-level tokenizers on 32k-151k vocabularies, and the
real Llama-3 BPE tokenizer on its 128k vocabulary, whose ids spread over the
whole embedding), hidden sizes that are not multiples of 64, very short and
very long rows, full fine-tuning, DoRA, checkpointing all, some or automatic,
bf16 files and f32 files used as bf16, the demo's tiny model, and data-
parallel workers under mpirun. The peak is wait4's ru_maxrss of the process
(rank 0's VmHWM from the metrics file under mpirun).

Usage: bench/memory.py [--only SUBSTR] [--growth] [--torch] [--list]"""
import argparse, json, os, random, re, shutil, subprocess, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, LMTUNE, WORK, run, model_dir, data_dir

ALL_KEYS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
LLAMA3_TOK = os.path.join(ROOT, "tests", "node", "node_modules", "@lenml", "tokenizer-llama3", "models")


def config_model(name, cfg, dtype="f32", tokenizer=None):
    """A model directory from a config.json dict (lmtune init --config)."""
    d = os.path.join(WORK, f"mem-{name}-{dtype}")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return d
    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False, "torch_dtype": "float32"}
    base.update(cfg)
    path = os.path.join(WORK, f"mem-{name}.json")
    with open(path, "w") as f:
        json.dump(base, f)
    run([LMTUNE, "init", "--config", path, "--out", d, "--dtype", dtype, "--seed", "0"])
    if tokenizer:
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tokenizer, fn), os.path.join(d, fn))
    return d


def quantized(src, name):
    """An MLX 4-bit affine copy of src (lmtune convert -q), for QLoRA."""
    d = os.path.join(WORK, f"mem-{name}")
    if not os.path.exists(os.path.join(d, "config.json")):
        run([LMTUNE, "convert", "--hf-path", src, "--mlx-path", d, "-q", "--q-bits", "4", "--q-group-size", "64"])
    return d


def gguf_of(src, name):
    """A GGUF q8_0 file of src: a one-step adapter fused and exported (fuse --export-gguf)."""
    path = os.path.join(WORK, f"mem-{name}.gguf")
    if os.path.exists(path):
        return path
    ad, fused = os.path.join(WORK, f"mem-{name}-ad"), os.path.join(WORK, f"mem-{name}-fused")
    run([LMTUNE, "train", "--model", src, "--data", data_dir(64), "--num-layers", "1", "--batch-size", "2",
         "--iters", "1", "--adapter-path", ad])
    shutil.rmtree(fused, ignore_errors=True)
    run([LMTUNE, "fuse", "--model", src, "--adapter-path", ad, "--save-path", fused, "--export-gguf",
         "--gguf-type", "q8_0", "--gguf-path", path])
    return path


def rich_data(n_words, n_examples=48, name=None):
    """Text of words drawn from the Llama-3 vocabulary, so a BPE tokenizer
    reads ids spread over its whole range."""
    d = os.path.join(WORK, name or f"data-rich-{n_words}")
    if os.path.exists(os.path.join(d, "train.jsonl")):
        return d
    vocab = json.load(open(os.path.join(LLAMA3_TOK, "tokenizer.json")))["model"]["vocab"]
    words = sorted(w[1:] for w in vocab if w.startswith("\u0120") and w[1:].isalpha() and w[1:].isascii())
    rng = random.Random(1)
    pool = rng.sample(words, 3000)
    os.makedirs(d, exist_ok=True)
    for split, n in (("train", n_examples), ("valid", 8), ("test", 8)):
        with open(os.path.join(d, split + ".jsonl"), "w") as f:
            for _ in range(n):
                f.write(json.dumps({"text": " ".join(rng.choice(pool) for _ in range(n_words))}) + "\n")
    return d


def lora_yaml(keys, rank=8, ft="lora", dropout=0.0):
    path = os.path.join(WORK, f"mem-{ft}-{rank}-{len(keys)}-{dropout}.yaml")
    with open(path, "w") as f:
        f.write(f"fine_tune_type: {ft}\n")
        if ft != "full":
            f.write(f"lora_parameters:\n  rank: {rank}\n  scale: 20.0\n  dropout: {dropout}\n"
                    f"  keys: {json.dumps(keys)}\n")
    return path


def models():
    """name -> (directory, description)"""
    m = {}
    issue = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=10, num_attention_heads=6,
                 num_key_value_heads=2, vocab_size=32000, tie_word_embeddings=False)
    m["issue"] = (config_model("issue", issue), "10 x 384, V 32000 untied")
    m["issue16"] = (config_model("issue", issue, "bf16"), "10 x 384, V 32000 untied, bf16 file")
    odd = dict(hidden_size=360, intermediate_size=1000, num_hidden_layers=6, num_attention_heads=6,
               num_key_value_heads=2, head_dim=60, vocab_size=16000, tie_word_embeddings=False)
    m["odd"] = (config_model("odd", odd), "6 x 360 (D 60), V 16000 untied")
    demo = json.load(open(os.path.join(ROOT, "demo", "config.json")))
    demo = {k: v for k, v in demo.items() if k != "architectures"}
    m["demo"] = (config_model("demo", demo), "demo: 4 x 256, V 512 tied")
    qwen = dict(model_type="qwen3", hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64, vocab_size=8000, tie_word_embeddings=False,
                attention_bias=True)
    m["qwen3ish"] = (config_model("qwen3ish", qwen), "qwen3-style (q/k norms, biases) 4 x 256, V 8000")
    if os.path.exists(os.path.join(LLAMA3_TOK, "tokenizer.json")):
        l3 = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128256, tie_word_embeddings=False)
        m["llama3tok"] = (config_model("llama3tok", l3, "f32", LLAMA3_TOK), "4 x 256, V 128256 untied, Llama-3 BPE")
        m["llama3tok16"] = (config_model("llama3tok", l3, "bf16", LLAMA3_TOK),
                            "4 x 256, V 128256 untied, Llama-3 BPE, bf16 file")
    m["issue_q4"] = (quantized(m["issue"][0], "issue-q4"), "10 x 384, V 32000 untied, MLX 4-bit (group 64)")
    m["issue_gguf"] = (gguf_of(m["issue"][0], "issue-q8_0"), "10 x 384, V 32000 untied, GGUF q8_0")
    m["smollm2"] = (model_dir("smollm2-135m", "f32"), "SmolLM2-135M shape")
    m["smollm2_16"] = (model_dir("smollm2-135m", "bf16"), "SmolLM2-135M shape, bf16 file")
    m["qwen05"] = (model_dir("qwen2.5-0.5b", "bf16"), "Qwen2.5-0.5B shape (V 151936 tied), bf16 file")
    return m


def C(name, model, data, batch, seq, extra=(), iters=2, mpi=0, keys=ALL_KEYS, ft="lora", note=""):
    return dict(name=name, model=model, data=data, batch=batch, seq=seq, extra=list(extra), iters=iters, mpi=mpi,
                keys=keys, ft=ft, note=note)


QV = ["self_attn.q_proj", "self_attn.v_proj"]
MATRIX = [
    C("issue: LoRA all blocks", "issue", 512, 4, 512, ["--num-layers", "-1"]),
    C("issue: LoRA all blocks, checkpointing", "issue", 512, 4, 512, ["--num-layers", "-1", "--grad-checkpoint"]),
    C("issue: LoRA last 4 blocks, 8 x 1024", "issue", 1024, 8, 1024, ["--num-layers", "4"]),
    C("issue: full FT of 2 blocks, accumulation 4", "issue", 512, 2, 512, ["--num-layers", "2",
      "--grad-accumulation-steps", "4"], iters=4, ft="full"),
    C("issue: checkpoint auto under 450 MB", "issue", 512, 4, 512, ["--num-layers", "-1", "--grad-checkpoint", "auto",
      "--memory-limit", "450MB"]),
    C("issue: f32 file used as bf16", "issue", 512, 4, 512, ["--num-layers", "-1", "--weights-dtype", "bf16"]),
    C("issue: bf16 file, DoRA with dropout", "issue16", 512, 4, 512, ["--num-layers", "4"], ft="dora"),
    C("issue: rows of 16 tokens, batch 8", "issue", 8, 8, 16, ["--num-layers", "-1"], iters=3),
    C("issue: QLoRA, 4-bit base, LoRA all blocks", "issue_q4", 512, 4, 512, ["--num-layers", "-1"]),
    C("issue: GGUF q8_0 base, LoRA all blocks", "issue_gguf", 512, 4, 512, ["--num-layers", "-1"]),
    C("issue: GGUF q8_0 base, checkpointing", "issue_gguf", 512, 4, 512, ["--num-layers", "-1",
      "--grad-checkpoint"]),
    C("odd: LoRA all blocks", "odd", 256, 4, 256, ["--num-layers", "-1"]),
    C("odd: DoRA, checkpoint blocks 2-4", "odd", 256, 2, 256, ["--num-layers", "-1", "--grad-checkpoint", "2-4"],
      ft="dora"),
    C("odd: 1 x 4096 tokens, checkpointing", "odd", 4096, 1, 4096, ["--num-layers", "-1", "--grad-checkpoint"]),
    C("demo: LoRA rank 32, batch 8", "demo", 64, 8, 128, ["--num-layers", "-1"]),
    C("demo: full FT", "demo", 64, 8, 128, ["--num-layers", "-1"], ft="full"),
    C("qwen3-style: LoRA last block", "qwen3ish", 256, 4, 256, ["--num-layers", "1"]),
    C("Llama-3 BPE, V 128k: LoRA all", "llama3tok", "rich-200", 4, 512, ["--num-layers", "-1"]),
    C("Llama-3 BPE, V 128k, bf16 file: LoRA, checkpointing", "llama3tok16", "rich-200", 4, 512,
      ["--num-layers", "-1", "--grad-checkpoint"]),
    C("SmolLM2: LoRA q,v last 16", "smollm2", 512, 4, 512, ["--num-layers", "16"], keys=QV),
    C("SmolLM2 bf16: LoRA q,v last 16, checkpointing", "smollm2_16", 512, 4, 512, ["--num-layers", "16",
      "--grad-checkpoint"], keys=QV),
    C("SmolLM2 bf16: full FT last 4, 8 x 256, accumulation 2", "smollm2_16", 256, 8, 256, ["--num-layers", "4",
      "--grad-accumulation-steps", "2"], iters=2, ft="full"),
    C("SmolLM2 bf16: 1 x 2048, checkpointing", "smollm2_16", 2048, 1, 2048, ["--num-layers", "16",
      "--grad-checkpoint"], keys=QV),
    C("Qwen2.5-0.5B bf16: LoRA q,v last 8, 2 x 256", "qwen05", 256, 2, 256, ["--num-layers", "8"], keys=QV),
    C("issue: 2 MPI workers, LoRA all", "issue", 512, 4, 512, ["--num-layers", "-1"], mpi=2),
    C("odd: 2 MPI workers, full FT of 2 blocks", "odd", 256, 4, 256, ["--num-layers", "2"], mpi=2, ft="full"),
    C("demo: 2 MPI workers", "demo", 64, 8, 128, ["--num-layers", "-1"], mpi=2),
]


def run_flags(c):
    """The flags that decide which batches the run reads: plan and train get the same."""
    it = str(c["iters"])
    return ["--iters", it, "--steps-per-report", it, "--steps-per-eval", "1000000", "--val-batches", "1",
            "--save-every", "1000000"]


def args_for(c, mdirs):
    data = rich_data(int(c["data"].split("-")[1])) if isinstance(c["data"], str) else data_dir(c["data"])
    rank = 32 if c["model"] == "demo" and c["ft"] != "full" else 8
    a = ["--model", mdirs[c["model"]][0], "--data", data, "-c", lora_yaml(c["keys"], rank, c["ft"],
         0.1 if c["ft"] == "dora" and "dropout" in c["name"] else 0.0),
         "--batch-size", str(c["batch"]), "--max-seq-length", str(c["seq"] + 1)] + c["extra"]
    if c["mpi"]:
        a += ["--threads", "1"]
    return a + run_flags(c)


def planned(c, mdirs):
    cmd = [LMTUNE, "plan"] + args_for(c, mdirs)
    if c["mpi"]:
        # planned inside a worker, as the training run plans itself
        cmd = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(c["mpi"])] + cmd
    out, _, _, _ = run(cmd)
    m = re.search(r"Planned peak: (\d+) bytes", out)
    if not m:
        raise SystemExit("plan printed no 'Planned peak' line:\n" + out)
    return int(m.group(1))


def measured(c, mdirs):
    ad = os.path.join(WORK, "mem-adapters")
    flags = args_for(c, mdirs) + ["--adapter-path", ad]
    if not c["mpi"]:
        _, _, _, rss = run([LMTUNE, "train"] + flags)
        return rss
    metrics = os.path.join(WORK, "mem-metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run(["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(c["mpi"]), LMTUNE, "train"] + flags +
        ["--metrics-file", metrics])
    peaks = [json.loads(l)["peak_memory"] for l in open(metrics) if '"peak_memory"' in l]
    return int(round(max(peaks) * 1e9))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--growth", action="store_true", help="also the growth with sequence length and batch")
    ap.add_argument("--torch", action="store_true", help="also PyTorch's peak on the SmolLM2 LoRA step")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--skip", type=int, default=0, help="start at the configuration with this index")
    args = ap.parse_args()
    if args.list:
        for c in MATRIX:
            print(c["name"])
        return
    mdirs = models()
    print("| configuration | model | batch x tokens | plan MB | measured MB | plan - measured |")
    print("|---|---|---|---|---|---|")
    worst, n = 0.0, 0
    for c in MATRIX[args.skip:]:
        if args.only and args.only not in c["name"]:
            continue
        if c["model"] not in mdirs:
            print(f"| {c['name']} | skipped: {c['model']} needs tests/node's tokenizers (make test installs them) "
                  "| | | | |")
            continue
        if c["mpi"] and not shutil.which("mpirun"):
            continue
        p, m = planned(c, mdirs), measured(c, mdirs)
        err = (p - m) / m * 100
        worst = max(worst, abs(err))
        n += 1
        mpi = f", {c['mpi']} workers" if c["mpi"] else ""
        print(f"| {c['name']} | {mdirs[c['model']][1]} | {c['batch']} x {c['seq']}{mpi} | {p / 1e6:.2f} | "
              f"{m / 1e6:.2f} | {err:+.2f}% |", flush=True)
    print(f"\n{n} configurations; worst |plan - measured| / measured: {worst:.2f}%")
    if args.growth:
        growth(mdirs)
    if args.torch:
        torch_compare(mdirs)


def growth(mdirs):
    print("\nGrowth with sequence length (SmolLM2 bf16, batch 4, LoRA q,v last 16, checkpointing off and on):")
    print("| seq | ckpt | plan GB | measured GB |")
    print("|---|---|---|---|")
    for ckpt in (False, True):
        for seq in (256, 1024, 2048):
            c = C("growth", "smollm2_16", seq, 4, seq, ["--num-layers", "16"] + (["--grad-checkpoint"] if ckpt else []),
                  keys=QV)
            print(f"| {seq} | {'yes' if ckpt else 'no'} | {planned(c, mdirs) / 1e9:.3f} | "
                  f"{measured(c, mdirs) / 1e9:.3f} |", flush=True)


def torch_compare(mdirs):
    print("\nAgainst PyTorch (SmolLM2-135M shape, batch 4 x 512, LoRA q,v last 16, fp32):")
    print("| checkpointing | lmtune peak GB | PyTorch peak GB | ratio |")
    print("|---|---|---|---|")
    for ckpt in (False, True):
        flags = ["--num-layers", "16"] + (["--grad-checkpoint"] if ckpt else [])
        c = C("torch", "smollm2", 512, 4, 512, flags, keys=QV)
        m = measured(c, mdirs)
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_train.py"), "--model", "smollm2-135m",
               "--mode", "lora-qv16", "--weights", "fp32", "--steps", "2"]
        if ckpt:
            cmd.append("--grad-checkpoint")
        env = dict(os.environ)
        env.pop("OPENBLAS_L2_SIZE", None)
        env.pop("OPENBLAS_CORETYPE", None)
        _, _, _, t = run(cmd, env=env)
        print(f"| {'yes' if ckpt else 'no'} | {m / 1e9:.3f} | {t / 1e9:.3f} | {m / t:.2f}x |", flush=True)


main()
