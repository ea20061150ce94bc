"""Shared helpers of the benchmark scripts: building models with `lmtune init`,
making data sets of a given token length, running commands and reading peak
RSS, medians. Standard library only (run with Debian's /usr/bin/python3)."""
import json, os, random, re, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LMTUNE = os.environ.get("LMTUNE_BIN", os.path.join(ROOT, "lmtune"))
WORK = os.environ.get("BENCH_WORK", os.path.join(ROOT, "build", "bench"))
os.makedirs(WORK, exist_ok=True)

SHAPES = {
    "smollm2-135m": dict(preset="smollm2-135m", hidden=576, layers=30, heads=9, kv=3, inter=1536, vocab=49152, head_dim=64),
    "qwen2.5-0.5b": dict(preset="qwen2.5-0.5b", hidden=896, layers=24, heads=14, kv=2, inter=4864, vocab=151936, head_dim=64),
    "llama-3.2-1b": dict(preset="llama-3.2-1b", hidden=2048, layers=16, heads=32, kv=8, inter=8192, vocab=128256, head_dim=64),
}

class RunFailed(Exception):
    """A command of run(..., check=False) that exited non-zero: .code, .err (its stderr's tail)."""
    def __init__(self, code, err):
        super().__init__(f"exit {code}")
        self.code, self.err = code, err

def run(cmd, env=None, check=True, max_address_space=None):
    """Runs cmd; returns (stdout, stderr, seconds, peak RSS bytes of that child
    alone, from wait4's rusage). On failure exits the bench, or with
    check=False raises RunFailed. max_address_space (bytes): RLIMIT_AS of the
    child, so that a run that would not fit fails with an allocation error
    instead of pushing the machine into swap or the OOM killer."""
    import resource, tempfile
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (max_address_space, max_address_space))
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env,
                             preexec_fn=limit if max_address_space else None)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.time() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0); fe.seek(0)
        out, err = fo.read(), fe.read()
    if p.returncode != 0:
        if not check:
            raise RunFailed(p.returncode, err[-3000:])
        sys.stderr.write(f"command failed ({p.returncode}): {' '.join(cmd)}\n{err[-3000:]}\n")
        raise SystemExit(1)
    return out, err, dt, ru.ru_maxrss * 1024

def has_weights(d):
    """A model directory that `lmtune init` or `convert` finished: one file, or shards with their index."""
    return any(os.path.exists(os.path.join(d, f)) for f in ("model.safetensors", "model.safetensors.index.json"))

def model_dir(shape, dtype):
    d = os.path.join(WORK, f"{shape}-{dtype}")
    if not has_weights(d):
        run([LMTUNE, "init", "--preset", SHAPES[shape]["preset"], "--out", d, "--dtype", dtype, "--seed", "0"])
    return d

def data_dir(n_tokens, n_examples=64, name=None):
    """Text data whose examples are at least n_tokens long with the byte-level
    init tokenizer (one token per byte at worst: no merges learned)."""
    d = os.path.join(WORK, name or f"data-{n_tokens}")
    if not os.path.exists(os.path.join(d, "train.jsonl")):
        os.makedirs(d, exist_ok=True)
        rng = random.Random(0)
        words = "the of and to in is was for on that with as by at from his her an which it be are this had not".split()
        for split, n in (("train", n_examples), ("valid", 8), ("test", 8)):
            with open(os.path.join(d, split + ".jsonl"), "w") as f:
                for _ in range(n):
                    text = " ".join(rng.choice(words) for _ in range(n_tokens))
                    f.write(json.dumps({"text": text}) + "\n")
    return d

def median(xs):
    return statistics.median(xs) if xs else float("nan")
