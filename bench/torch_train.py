#!/usr/bin/python3
"""PyTorch baseline for the training benchmark: the same model code as the
references (tests/ref/torch_model.py), random weights of a real model's shape,
one MLX-style Adam step per iteration, timed. Prints one JSON line:

  {"tokens_per_s": ..., "s_per_step": <median>, "peak_rss_bytes": ru_maxrss*1024, ...}

cpu_s_per_step (median process CPU time, all threads) helps to read a run on a
busy machine: wall time inflates with other load, CPU time much less.
tokens_per_s counts the loss tokens of a step (B * (W-1), no padding in the
random batch) divided by the median step time.

Usage (Debian's python, torch 1.13):
  /usr/bin/python3 bench/torch_train.py --model smollm2-135m --mode lora-qv16 \
      [--weights fp32|bf16] [--compute fp32|bf16] [--grad-checkpoint] [--steps 3] \
      [--warmup 3] [--untuned] [--openblas-coretype NAME] [--blas-dir DIR]

Models: smollm2-135m (llama: hidden 576, 30 layers, 9 heads, 3 kv heads,
intermediate 1536, vocab 49152, tied), qwen2.5-0.5b (qwen2 with q/k/v bias:
hidden 896, 24 layers, 14 heads, 2 kv, intermediate 4864, vocab 151936, tied)
and llama-3.2-1b (hidden 2048, 16 layers, 32 heads, 8 kv, intermediate 8192,
vocab 128256, tied, llama3 RoPE scaling).
Modes: lora-qv16 (rank 8, scale 20, q and v of the last 16 blocks), lora-all
(rank 8 on the 7 linears of every block), full4 (every parameter of the last 4
blocks). Batch 4 x 512 input tokens (rows of 513), Adam lr 1e-5 (no bias
correction, as MLX).

Numerics: compute is always fp32. With --weights bf16 the frozen base weights
stay bf16 in memory and are upcast per matmul on the fly (forward and backward,
torch_model._FrozenBF16Linear), so no fp32 copy of a frozen weight lives beyond
one matmul; trainable weights (full4) are fp32 masters. We do not use PyTorch's
bf16 matmul: the comparison is with fp32 compute.

Tuned (the default; --untuned for plain PyTorch): what a careful user runs on a
CPU. The script re-executes itself once with
  - LD_PRELOAD of tcmalloc (libtcmalloc-minimal4, `install-deps.sh --bench`):
    glibc's malloc returns freed activations to the kernel every step and
    page faults cost ~10 us on these VMs: PyTorch is 20-30% slower without it;
  - ATEN_CPU_CAPABILITY=avx512 where the CPU has AVX-512 (F, BW, VL, DQ),
    else avx2: ATen's vectorised element-wise kernels;
  - OpenBLAS (Debian's torch 1.13 is built with BLAS_INFO=generic: fp32
    products go to whatever libblas.so.3 the loader finds; the netlib
    reference BLAS would be a meaningless baseline): the OpenMP build,
    libopenblas0-openmp, which shares torch's OpenMP pool, from --blas-dir or
    the system alternative; OPENBLAS_CORETYPE set from the CPU's
    instruction sets (AVX-512 with AVX512_BF16: Cooperlake, AVX-512:
    SkylakeX, AVX2: Haswell) unless --openblas-coretype says otherwise:
    OpenBLAS's own choice goes by the CPU model, and on a model newer than
    its table (an Emerald Rapids Xeon) falls back to Prescott's SSE3
    kernels, 4.7x slower;
  - OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = --threads, torch.set_num_threads;
  - timing after --warmup steps (3 by default: the allocator grows over the
    first steps).
The JSON line and a line on stderr say what was used: the BLAS library and its
kernel family (openblas_get_corename), the allocator, ATen's CPU capability.

--compute bf16 ("pure bf16"): every tensor bf16 (weights, activations, LoRA
parameters, optimizer), products through PyTorch's oneDNN bf16 kernels; the
fastest PyTorch bf16 configuration on CPUs with AVX512_BF16.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

MODELS = {
    "smollm2-135m": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=576,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                         intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                         rms_norm_eps=1e-5, rope_theta=100000.0, rope_scaling=None),
    "qwen2.5-0.5b": dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], hidden_size=896,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         intermediate_size=4864, vocab_size=151936, tie_word_embeddings=True,
                         rms_norm_eps=1e-6, rope_theta=1000000.0, rope_scaling=None),
    "llama-3.2-1b": dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=2048,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True,
                         rms_norm_eps=1e-5, rope_theta=500000.0,
                         rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=8192)),
}

TCMALLOC = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")


def parse_args():
    ap = argparse.ArgumentParser(description="PyTorch fine-tuning baseline (fp32 compute)")
    ap.add_argument("--model", choices=sorted(MODELS), default="smollm2-135m")
    ap.add_argument("--mode", choices=["lora-qv16", "lora-all", "full4"], default="lora-qv16")
    ap.add_argument("--weights", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--grad-checkpoint", action="store_true")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512, help="input tokens per row (rows hold seq+1)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-dir", default=None,
                    help="a Hugging Face model directory (config.json, model.safetensors; e.g. from lmtune init): "
                         "train these weights instead of --model's random ones (any family torch_model knows)")
    ap.add_argument("--num-layers", type=int, default=16, help="lora-all with --model-dir: the last N blocks")
    ap.add_argument("--compute", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: pure bf16 (weights, activations and trainables bf16; needs --weights bf16)")
    ap.add_argument("--untuned", action="store_true", help="plain PyTorch: glibc malloc, default ATen capability")
    ap.add_argument("--openblas-coretype", default=None, help="OPENBLAS_CORETYPE (default: the best family for the CPU's flags; see openblas_coretype_for_cpu)")
    ap.add_argument("--blas-dir", default=os.environ.get("LMTUNE_BLAS_DIR"),
                    help="directory holding an optimized libblas.so.3 (e.g. OpenBLAS), put first on LD_LIBRARY_PATH")
    args = ap.parse_args()
    if args.compute == "bf16" and args.weights != "bf16":
        ap.error("--compute bf16 needs --weights bf16")
    return args


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def openblas_coretype_for_cpu():
    """OpenBLAS's best kernel family for this CPU's instruction sets. OpenBLAS
    picks its kernels from the CPU model, and a model newer than its table
    falls back to the oldest ones: Debian's 0.3.21 takes an Intel Xeon of
    model 207 (Emerald Rapids, AVX-512 + AVX512_BF16) for a Prescott, whose
    SSE3 kernels multiply at ~62 GFLOP/s on 2 threads there against ~290 for
    SkylakeX / Cooperlake (and 159 for Haswell). A careful user names the
    family; so does the tuned baseline."""
    f = cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= f:
        return "Cooperlake" if "avx512_bf16" in f else "SkylakeX"
    if {"avx2", "fma"} <= f:
        return "Haswell"
    return None


def find_tcmalloc():
    for d in LIB_DIRS:
        for name in TCMALLOC:
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
    return None


def reexec_tuned(args):
    """The loader reads LD_PRELOAD and LD_LIBRARY_PATH at start, ATen its
    capability at import: set them and re-exec once."""
    if os.environ.get("_LMTUNE_BENCH_REEXEC"):
        return
    env = dict(os.environ)
    env["_LMTUNE_BENCH_REEXEC"] = "1"
    if args.blas_dir:
        env["LD_LIBRARY_PATH"] = args.blas_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    coretype = args.openblas_coretype or (None if args.untuned else openblas_coretype_for_cpu())
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    if not args.untuned:
        tc = find_tcmalloc()
        if not tc:
            sys.exit("torch_train.py: tcmalloc not found (scripts/install-deps.sh --bench installs "
                     "libtcmalloc-minimal4); --untuned runs without it")
        env["LD_PRELOAD"] = tc + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        avx512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags()
        env["ATEN_CPU_CAPABILITY"] = "avx512" if avx512 else "avx2"
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def loaded_libs(word):
    with open("/proc/self/maps") as f:
        libs = {line.split()[-1] for line in f if word in line.split()[-1].rsplit("/", 1)[-1]}
    return sorted(libs)


def loaded_blas():
    return loaded_libs("blas")


def blas_kernels():
    """OpenBLAS's kernel family and build, asked from the loaded library."""
    import ctypes
    for path in loaded_blas():
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode(), lib.openblas_get_config().decode()
        except (OSError, AttributeError):
            continue
    return None, None


def aten_capability(torch):
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            return line.split(":", 1)[1].strip()
    return "unknown"


def random_weights(torch, cfg, dtype, gen):
    C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    H, KVH = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    bias = cfg["model_type"] == "qwen2"

    def n(*shape, std=0.02):
        # drawn directly in the storage dtype: no fp32 temporaries that would
        # fragment the heap and inflate the peak RSS of a bf16 run
        return torch.empty(*shape, dtype=dtype).normal_(0.0, std, generator=gen)

    def ones(k):
        return torch.ones(k, dtype=dtype)

    w = {"model.embed_tokens.weight": n(V, C), "model.norm.weight": ones(C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = ones(C)
        w[p + "post_attention_layernorm.weight"] = ones(C)
        w[p + "self_attn.q_proj.weight"] = n(H * D, C)
        w[p + "self_attn.k_proj.weight"] = n(KVH * D, C)
        w[p + "self_attn.v_proj.weight"] = n(KVH * D, C)
        w[p + "self_attn.o_proj.weight"] = n(C, H * D)
        if bias:
            for k, out in (("q", H * D), ("k", KVH * D), ("v", KVH * D)):
                w[p + f"self_attn.{k}_proj.bias"] = n(out)
        w[p + "mlp.gate_proj.weight"] = n(I, C)
        w[p + "mlp.up_proj.weight"] = n(I, C)
        w[p + "mlp.down_proj.weight"] = n(C, I)
    return w


def main():
    args = parse_args()
    reexec_tuned(args)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "tests", "ref"))   # torch_model, gen_refs' safetensors reader
    import torch
    import torch_model as tm

    torch.set_num_threads(args.threads)
    corename, blas_config = blas_kernels()
    allocator = ", ".join(os.path.basename(p) for p in loaded_libs("tcmalloc")) or "glibc malloc"
    capability = aten_capability(torch)
    print(f"PyTorch {torch.__version__}: BLAS {blas_config or ', '.join(loaded_blas()) or 'none found'}"
          f" (kernels: {corename or 'unknown'}), allocator {allocator}, ATen CPU capability {capability}, "
          f"{torch.get_num_threads()} threads, compute {args.compute}", file=sys.stderr, flush=True)
    gen = torch.Generator().manual_seed(args.seed)
    if args.model_dir:
        # the model lmtune trains, weights as stored (bf16 stays bf16, streamed)
        from gen_refs import load_safetensors
        with open(os.path.join(args.model_dir, "config.json")) as f:
            cfg = json.load(f)
        weights = load_safetensors(os.path.join(args.model_dir, "model.safetensors"))
        args.model = os.path.basename(os.path.normpath(args.model_dir))
        args.weights = "bf16" if any(t.dtype == torch.bfloat16 for t in weights.values()) else "fp32"
    else:
        cfg = dict(MODELS[args.model])
        wdtype = torch.bfloat16 if args.weights == "bf16" else torch.float32
        weights = random_weights(torch, cfg, wdtype, gen)
    if args.compute == "bf16":
        # pure bf16: every weight, activation and trainable in bf16 ("emulate" rounds nothing more)
        model = tm.DecoderLM(cfg, weights, compute_dtype=torch.bfloat16, bf16_mode="emulate")
    else:
        model = tm.DecoderLM(cfg, weights, compute_dtype=torch.float32, bf16_mode="stream")
    del weights
    if args.mode == "lora-qv16":
        model.set_lora(16, ["self_attn.q_proj", "self_attn.v_proj"], 8, 20.0, generator=gen)
    elif args.mode == "lora-all" and args.model_dir:
        model.set_lora(args.num_layers, list(tm.linear_keys(cfg)), 8, 20.0, generator=gen)
    elif args.mode == "lora-all":
        model.set_lora(-1, list(tm.LINEAR_KEYS), 8, 20.0, generator=gen)
    else:
        model.set_full(4)
    model.checkpoint_blocks = args.grad_checkpoint
    params = list(model.trainable.values())
    n_trainable = sum(p.numel() for p in params)
    opt = tm.AdamMLX(params, args.lr)

    W = args.seq + 1
    tokens = torch.randint(1, tm.text_config(cfg)[0]["vocab_size"], (args.batch, W), generator=gen,
                           dtype=torch.int64)
    lengths = torch.full((args.batch,), W, dtype=torch.int64)
    offsets = torch.zeros(args.batch, dtype=torch.int64)

    times, cpu_times, losses, ntok = [], [], [], 0
    for step in range(args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss, ntok, _ = tm.forward_loss(model, tokens, lengths, offsets)
        loss.backward()
        opt.step()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        losses.append(round(loss.item(), 5))
        if step >= args.warmup:
            times.append(dt)
            cpu_times.append(cpu)
        print(f"step {step}{' (warm-up)' if step < args.warmup else ''}: loss {loss.item():.4f} {dt:.2f}s",
              file=sys.stderr, flush=True)
        del loss
    med = statistics.median(times)
    print(json.dumps({
        "tokens_per_s": round(ntok / med, 2), "s_per_step": round(med, 4),
        "cpu_s_per_step": round(statistics.median(cpu_times), 4),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "model": args.model, "mode": args.mode, "weights": args.weights,
        "grad_checkpoint": args.grad_checkpoint, "batch": args.batch, "seq": args.seq,
        "threads": args.threads, "steps": args.steps, "warmup": args.warmup,
        "trainable_params": n_trainable, "tokens_per_step": ntok, "losses": losses,
        "step_times": [round(t, 4) for t in times], "blas": loaded_blas(),
        "blas_kernels": corename, "blas_config": blas_config, "allocator": allocator,
        "aten_capability": capability, "compute": args.compute, "tuned": not args.untuned,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
