#!/usr/bin/env python3
"""Data-parallel bench: 2 MPI workers of 1 thread each against 1 process of 2
threads, same global batch, same model (SmolLM2-135M shape, LoRA q,v of the
last 16 blocks, batch 4 x 256), with the all-reduce time per update that the
2-worker run reports. Usage: bench/mpi.py [--steps N]"""
import argparse, os, re, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import LMTUNE, WORK, run, model_dir, data_dir, median

def main():
    ap = argparse.ArgumentParser(); ap.add_argument("--steps", type=int, default=4); ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()
    md, dd = model_dir("smollm2-135m", "f32"), data_dir(args.seq)
    yaml = os.path.join(WORK, "mpi-qv.yaml")
    with open(yaml, "w") as f:
        f.write('fine_tune_type: lora\nnum_layers: 16\nlora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n'
                '  keys: ["self_attn.q_proj", "self_attn.v_proj"]\n')
    flags = ["train", "--model", md, "--data", dd, "-c", yaml, "--batch-size", "4", "--max-seq-length", str(args.seq + 1),
             "--iters", str(2 + args.steps), "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "1",
             "--save-every", "1000000", "--adapter-path", os.path.join(WORK, "mpi-adapters")]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out1, _, _, _ = run([LMTUNE] + flags + ["--threads", "2"], env=dict(env, OMP_NUM_THREADS="2"))
    out2, _, _, _ = run(["mpirun", "--oversubscribe", "--bind-to", "core", "-np", "2", LMTUNE] + flags + ["--threads", "1"],
                        env=dict(env, OMP_NUM_THREADS="1"))
    t1 = median([float(x) for x in re.findall(r"Tokens/sec ([0-9.]+)", out1)][2:])
    t2 = median([float(x) for x in re.findall(r"Tokens/sec ([0-9.]+)", out2)][2:])
    comm = re.search(r"Gradient all-reduce: ([0-9.]+) ms per update", out2)
    print("| setup | tokens/s | all-reduce per update |")
    print("|---|---|---|")
    print(f"| 1 process x 2 threads | {t1:.0f} | - |")
    print(f"| 2 MPI workers x 1 thread | {t2:.0f} | {comm.group(1) if comm else '?'} ms |")
    print(f"\n2 workers / 1 process: {t2 / t1:.2f}x")

main()
