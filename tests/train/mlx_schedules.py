#!/usr/bin/env python3
"""mlx_schedules.py: an independent implementation of MLX's learning-rate
schedules (ml-explore/mlx python/mlx/optimizers/schedulers.py, HEAD c6ef1eba)
and of MLX-LM's build_schedule warm-up join (mlx_lm/tuner/utils.py), written
from their source, not from lmtune's C code.

MLX evaluates a schedule on the optimizer's step counter (a uint64 array)
before incrementing it, so update k uses step k - 1, and the training log's
"Learning Rate" at iteration k (one update per iteration) is schedule(k - 1)
as a float32 (optimizer.learning_rate.item(), printed with {:.3e}).

The float32 arithmetic of MLX is emulated with numpy float32 at each
operation; the float64 value of the same formula is printed too.

Output, per case: a line "case NAME" and then 50 lines
"STEP FLOAT64_REPR FLOAT32_PRINTED" for steps 0..49. The cases are read by
tests/train/test_schedule.c (committed output: mlx_schedules.expected) and
tests/train/test_schedule_cli.sh (which runs this script and lmtune train).
"""
import math
import sys

import numpy as np

f32 = np.float32


def exponential_decay(init, decay_rate):
    # init * decay_rate**step
    return (lambda s: init * decay_rate ** s,
            lambda s: f32(init) * np.power(f32(decay_rate), f32(s)))


def step_decay(init, decay_rate, step_size):
    # init * (decay_rate ** (step // step_size))
    return (lambda s: init * decay_rate ** (s // step_size),
            lambda s: f32(init) * np.power(f32(decay_rate), f32(s // step_size)))


def cosine_decay(init, decay_steps, end=0.0):
    # s = minimum(step, decay_steps); decay = 0.5 * (1 + cos(pi / decay_steps * s)); end + decay * (init - end)
    def d64(s):
        s = min(s, decay_steps)
        decay = 0.5 * (1.0 + math.cos((math.pi / decay_steps) * s))
        return end + decay * (init - end)

    def d32(s):
        s = min(s, decay_steps)
        decay = f32(0.5) * (f32(1.0) + np.cos(f32(math.pi / decay_steps) * f32(s)))
        return f32(end) + decay * f32(init - end)
    return d64, d32


def linear_schedule(init, end, steps):
    # step = minimum(step, steps); step * ((end - init) / steps) + init
    return (lambda s: min(s, steps) * ((end - init) / steps) + init,
            lambda s: f32(min(s, steps)) * f32((end - init) / steps) + f32(init))


def join_schedules(schedules, boundaries):
    # output = schedules[0](step); where(step < boundary, output, schedule(step - boundary))
    def make(k):
        def run(s):
            out = schedules[0][k](s)
            for b, sch in zip(boundaries, schedules[1:]):
                out = out if s < b else sch[k](s - b)
            return out
        return run
    return make(0), make(1)


SCHEDULERS = {"exponential_decay": exponential_decay, "step_decay": step_decay,
              "cosine_decay": cosine_decay, "linear_schedule": linear_schedule}


def build_schedule(cfg):
    """mlx_lm.tuner.utils.build_schedule."""
    args = cfg["arguments"]
    main = SCHEDULERS[cfg["name"]](*args)
    warmup = cfg.get("warmup", 0)
    if warmup:
        warm = linear_schedule(cfg.get("warmup_init", 0.0), args[0], warmup)
        return join_schedules([warm, main], [warmup + 1])
    return main


# name, lr_schedule (as in a YAML file)
CASES = [
    ("cosine", {"name": "cosine_decay", "arguments": [1e-3, 40, 1e-5]}),
    ("cosine_no_end", {"name": "cosine_decay", "arguments": [1e-3, 40]}),
    ("cosine_warmup", {"name": "cosine_decay", "warmup": 10, "warmup_init": 1e-6, "arguments": [1e-3, 30, 1e-4]}),
    ("cosine_demo", {"name": "cosine_decay", "warmup": 20, "arguments": [5e-4, 180, 1e-4]}),
    ("linear", {"name": "linear_schedule", "arguments": [1e-3, 1e-5, 30]}),
    ("linear_warmup", {"name": "linear_schedule", "warmup": 5, "arguments": [2e-3, 1e-4, 25]}),
    ("exponential", {"name": "exponential_decay", "arguments": [1e-3, 0.9]}),
    ("exponential_warmup", {"name": "exponential_decay", "warmup": 5, "warmup_init": 1e-5, "arguments": [1e-3, 0.95]}),
    ("step", {"name": "step_decay", "arguments": [1e-3, 0.5, 7]}),
    ("step_warmup", {"name": "step_decay", "warmup": 8, "warmup_init": 1e-4, "arguments": [1e-3, 0.5, 6]}),
]


def yaml_of(cfg):
    lines = ["lr_schedule:", "  name: " + cfg["name"]]
    if "warmup" in cfg:
        lines.append("  warmup: %d" % cfg["warmup"])
    if "warmup_init" in cfg:
        lines.append("  warmup_init: %r" % cfg["warmup_init"])
    lines.append("  arguments: [%s]" % ", ".join(repr(a) for a in cfg["arguments"]))
    return "\n".join(lines)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--yaml":
        print(yaml_of(dict(CASES)[sys.argv[2]]))
        return
    for name, cfg in CASES:
        d64, d32 = build_schedule(cfg)
        print("case", name)
        for s in range(50):
            print(s, repr(float(d64(s))), "%.3e" % float(f32(d32(s))))


if __name__ == "__main__":
    main()
