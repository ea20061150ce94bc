#!/usr/bin/env python3
"""The cost of the portable build: CPU seconds of the same short training run
(SmolLM2-135M shape, batch 4, LoRA q,v of the last 16 blocks, 1 thread, a few
iterations) for several lmtune binaries, run side by side (alternating) and
reported as medians. CPU time, not wall time: on a loaded shared machine it is
the steadier of the two. A binary may carry environment settings after colons.

Usage: bench/isa.py NAME=BINARY[:VAR=VALUE...],... REPS SEQ ITERS DTYPES
  e.g. bench/isa.py native=build/rel-mpi-native/lmtune,portable=build/rel-mpi/lmtune,\
       no-avx512=build/rel-mpi/lmtune:LMTUNE_NO_AVX512=1 3 256 3 f32,bf16"""
import os, sys, json, statistics, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common
configs = [c.split("=", 1) for c in sys.argv[1].split(",")]   # name=binary[:ENV=VAL]
reps = int(sys.argv[2]); seq = int(sys.argv[3]); iters = int(sys.argv[4]); dtypes = sys.argv[5].split(",")
yaml = os.path.join(common.WORK, "lora-qv16.yaml")
open(yaml, "w").write('fine_tune_type: lora\nnum_layers: 16\nlora_parameters:\n  rank: 8\n  scale: 20.0\n  dropout: 0.0\n  keys: ["self_attn.q_proj", "self_attn.v_proj"]\n')
res = {}
for r in range(reps):
    for dt in dtypes:
        common.LMTUNE = configs[0][1].split(":")[0]
        md = common.model_dir("smollm2-135m", dt); dd = common.data_dir(seq)
        for name, spec in configs:
            b, *envs = spec.split(":")
            env = dict(os.environ, OMP_NUM_THREADS="1", OMP_WAIT_POLICY="passive")
            for e in envs: k, v = e.split("="); env[k] = v
            cmd = [b, "train", "--model", md, "--data", dd, "-c", yaml, "--batch-size", "4", "--max-seq-length", str(seq + 1),
                   "--iters", str(iters), "--steps-per-report", "1", "--steps-per-eval", "1000000", "--val-batches", "1",
                   "--save-every", "1000000", "--adapter-path", os.path.join(common.WORK, "ad-" + name), "--threads", "1"]
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
            _, st, ru = os.wait4(p.pid, 0)
            if st != 0: print("FAILED", name, p.stderr.read()[-500:]); sys.exit(1)
            cpu = ru.ru_utime + ru.ru_stime
            res.setdefault(dt, {}).setdefault(name, []).append(cpu)
            print(f"rep {r} {dt} {name}: {cpu:.2f} s CPU", flush=True)
json.dump(res, open(os.path.join(common.WORK, "cpu_bench.json"), "w"))
for dt, by in res.items():
    base = statistics.median(list(by.values())[0])
    for name, xs in by.items():
        print(f"{dt} {name:14s} median {statistics.median(xs):7.2f} s CPU  ratio {statistics.median(xs)/base:.3f}  {['%.2f' % x for x in xs]}")
