#!/usr/bin/env bash
# test_train_cli.sh: `lmtune train` and `lmtune eval` end to end on a tiny
# model: MLX-LM's log lines and files, exact resume (a run stopped by --iters
# and one stopped by SIGTERM, each continued with --resume, give the same
# adapter bytes as a run never stopped, with dropout and accumulation), the
# non-finite guard, flag errors, and eval printing what train --test prints.
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup train_cli
tiny_model
head -n 8 demo/data/test.jsonl > "$T/data/test.jsonl"
cat > "$T/cfg.yaml" <<'YAML'
num_layers: -1
batch_size: 2
max_seq_length: 48
val_batches: 1
steps_per_report: 2
steps_per_eval: 4
save_every: 4
grad_accumulation_steps: 2
learning_rate: 1e-3
threads: 1
lora_parameters:
  rank: 4
  scale: 4.0
  dropout: 0.1
YAML
run() { "$BIN" train --model "$T/model" --data "$T/data" -c "$T/cfg.yaml" "$@"; }

# Straight run, with --train --test (mlx_lm.lora: --test alone only evaluates).
run --iters 10 --adapter-path "$T/straight" --metrics-file "$T/m.jsonl" --train --test > "$T/straight.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "straight run exit status"
ok 'grep -q "^Trainable parameters: [0-9.]*% ([0-9.]*M/[0-9.]*M)$" "$T/straight.log"' "trainable parameters line"
ok 'grep -q "^Starting training..., iters: 10$" "$T/straight.log"' "starting line"
ok 'grep -q "^Effective batch size: 2 x 2 x 1 = 4$" "$T/straight.log"' "effective batch line"
ok 'grep -Eq "^Iter 1: Val loss [0-9]+\.[0-9]{3}, Val took [0-9]+\.[0-9]{3}s$" "$T/straight.log"' "val line"
ok 'grep -Eq "^Iter 2: Train loss [0-9]+\.[0-9]{3}, Learning Rate 1\.000e-03, It/sec [0-9]+\.[0-9]{3}, Tokens/sec [0-9]+\.[0-9]{3}, Trained Tokens [0-9]+, Peak mem [0-9]+\.[0-9]{3} GB$" "$T/straight.log"' "train line"
ok 'grep -q "^Iter 4: Saved adapter weights to $T/straight/adapters.safetensors and $T/straight/0000004_adapters.safetensors.$" "$T/straight.log"' "save line"
ok 'grep -q "^Saved final weights to $T/straight/adapters.safetensors.$" "$T/straight.log"' "final save line"
ok 'grep -Eq "^Test loss [0-9]+\.[0-9]{3}, Test ppl [0-9]+\.[0-9]{3}\.$" "$T/straight.log"' "test line"
ok '[ -f "$T/straight/adapter_config.json" ] && [ -f "$T/straight/0000008_adapters.safetensors" ] && [ -f "$T/straight/training_state.safetensors" ]' "files"
ok 'grep -q "\"fine_tune_type\": \"lora\"" "$T/straight/adapter_config.json" && grep -q "^    \"lora_parameters\": {" "$T/straight/adapter_config.json"' "adapter_config.json keys and indent"
ok '[ $(grep -c "\"train_loss\"" "$T/m.jsonl") -eq 5 ] && [ $(grep -c "\"val_loss\"" "$T/m.jsonl") -eq 4 ]' "metrics lines"

# Adapter file: MLX-LM's keys, shapes, dtype and metadata for this model
# (2 blocks, hidden 64, 4 heads x 16, 2 kv heads, intermediate 128, rank 4).
/usr/bin/python3 - "$T/straight/adapters.safetensors" > "$T/keys.txt" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
print("meta", json.dumps(h.pop("__metadata__", None), sort_keys=True))
for k in sorted(h): print(k, h[k]["dtype"], h[k]["shape"])
PY
ok 'grep -q "^meta {\"format\": \"mlx\"}$" "$T/keys.txt"' "metadata format mlx"
ok '[ $(grep -c " F32 " "$T/keys.txt") -eq 28 ] && [ $(grep -vc "^meta" "$T/keys.txt") -eq 28 ]' "28 F32 tensors (2 blocks x 7 projections x A, B)"
ok 'grep -q "^model.layers.0.self_attn.q_proj.lora_a F32 \[64, 4\]$" "$T/keys.txt" && grep -q "^model.layers.1.self_attn.k_proj.lora_b F32 \[4, 32\]$" "$T/keys.txt"' "attention shapes"
ok 'grep -q "^model.layers.1.mlp.down_proj.lora_a F32 \[128, 4\]$" "$T/keys.txt" && grep -q "^model.layers.0.mlp.gate_proj.lora_b F32 \[4, 128\]$" "$T/keys.txt"' "MLP shapes"

# An MLX-LM adapter (these keys, written by another tool) starts a run: --resume-adapter-file.
run --iters 2 --adapter-path "$T/from_mlx" --resume-adapter-file "$T/straight/0000004_adapters.safetensors" > "$T/from_mlx.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "--resume-adapter-file loads an adapter"
sed 's/rank: 4/rank: 8/' "$T/cfg.yaml" > "$T/rank8.yaml"
"$BIN" train --model "$T/model" --data "$T/data" -c "$T/rank8.yaml" --iters 2 --adapter-path "$T/r8" --resume-adapter-file "$T/straight/adapters.safetensors" > "$T/r8.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "contains incompatible tensors:" "$T/r8.log" && grep -q "adapter shape (64, 4) does not match model parameter shape (64, 8)" "$T/r8.log"' "incompatible adapter refused with MLX-LM's message"

# eval prints what train --test printed.
"$BIN" eval --model "$T/model" --adapter-path "$T/straight" --data "$T/data" --batch-size 2 --max-seq-length 48 --threads 1 > "$T/eval.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ "$(grep "^Test loss" "$T/eval.log")" = "$(grep "^Test loss" "$T/straight.log")" ]' "eval equals train --test ($(grep "^Test loss" "$T/eval.log") vs $(grep "^Test loss" "$T/straight.log"))"

# Stopped by --iters 5 (mid-accumulation), then --resume.
run --iters 5 --adapter-path "$T/split" > /dev/null 2>&1
run --iters 10 --adapter-path "$T/split" --resume > "$T/resume.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Resuming from .* at iteration 5 (2 updates)$" "$T/resume.log"' "resume line"
ok 'cmp -s "$T/straight/adapters.safetensors" "$T/split/adapters.safetensors"' "--iters 5 + --resume: identical adapter bytes"
ok 'cmp -s "$T/straight/0000008_adapters.safetensors" "$T/split/0000008_adapters.safetensors"' "numbered checkpoint identical"

# Stopped by SIGTERM, then --resume.
LMTUNE_TEST_STEP_DELAY_MS=200 "$BIN" train --model "$T/model" --data "$T/data" -c "$T/cfg.yaml" --iters 10 --adapter-path "$T/sig" > "$T/sig.log" 2>&1 &
pid=$!
for i in $(seq 1 600); do grep -q "^Iter 2: Train loss" "$T/sig.log" 2>/dev/null && break; sleep 0.05; done
kill -TERM $pid
wait $pid
status=$?
ok '[ $status -eq 143 ]' "SIGTERM exit status 143 (got $status)"
ok 'grep -q "stopped by signal 15" "$T/sig.log"' "signal line"
if grep -q "^Saved final weights" "$T/sig.log" && ! grep -q "stopped by signal" "$T/sig.log"; then echo "note: the run ended before the signal"; fi
run --iters 10 --adapter-path "$T/sig" --resume > /dev/null 2>&1
rc=$?
ok '[ $rc -eq 0 ] && cmp -s "$T/straight/adapters.safetensors" "$T/sig/adapters.safetensors"' "SIGTERM + --resume: identical adapter bytes"

# A flipped byte in the newest state: detected, the previous state resumes, same bytes in the end.
run --iters 7 --adapter-path "$T/flip" > /dev/null 2>&1
/usr/bin/python3 -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[-7] ^= 0x40; open(p, 'wb').write(b)" "$T/flip/training_state.safetensors"
run --iters 10 --adapter-path "$T/flip" --resume > "$T/flip.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "damaged (content hash mismatch); resuming from the previous state" "$T/flip.log" && grep -q "at iteration 4 " "$T/flip.log"' "damaged state falls back to the previous one"
ok 'cmp -s "$T/straight/adapters.safetensors" "$T/flip/adapters.safetensors"' "after the fallback: identical adapter bytes"

# With 2 threads: straight and --iters 5 + --resume give the same bytes.
run --iters 10 --threads 2 --adapter-path "$T/t2a" > /dev/null 2>&1
run --iters 5 --threads 2 --adapter-path "$T/t2b" > /dev/null 2>&1
run --iters 10 --threads 2 --adapter-path "$T/t2b" --resume > /dev/null 2>&1
ok 'cmp -s "$T/t2a/adapters.safetensors" "$T/t2b/adapters.safetensors"' "2 threads: --resume identical adapter bytes"

# An output directory that cannot be created: one error before any training.
run --iters 2 --adapter-path /dev/null/adapters > "$T/ro.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: .*/dev/null" "$T/ro.log" && ! grep -q "^Iter" "$T/ro.log"' "unwritable --adapter-path"

# A state from another configuration is refused.
run --iters 10 --adapter-path "$T/sig" --resume --grad-accumulation-steps 1 > "$T/other.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "belongs to another run" "$T/other.log"' "foreign state refused"

# Non-finite guard.
LMTUNE_INJECT_NAN_AT_STEP=1-20 run --iters 20 --grad-accumulation-steps 1 --adapter-path "$T/nan" > "$T/nan.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "5 updates in a row had a non-finite loss or gradient" "$T/nan.log"' "NaN guard stops after 5 in a row"
ok 'grep -q "^Iter 1: non-finite loss, update skipped (1 in a row, 1 in total)$" "$T/nan.log"' "NaN skip line"

# --epochs: sugar for the iterations of N passes (n examples / batch 2 =
# ceil(n/2) batches, the remainder included; half an epoch rounds up).
n_ex=$(grep -c . "$T/data/train.jsonl"); n_b=$(( (n_ex + 1) / 2 )); n_it=$(( (n_b + 1) / 2 ))
run --epochs 0.5 --adapter-path "$T/epochs" > "$T/epochs.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Epochs: 0.5 x $n_b batches = $n_it iterations$" "$T/epochs.log" && grep -q "^Starting training..., iters: $n_it$" "$T/epochs.log"' "--epochs"

# SIGINT: same path, exit 130.
LMTUNE_TEST_STEP_DELAY_MS=200 "$BIN" train --model "$T/model" --data "$T/data" -c "$T/cfg.yaml" --iters 10 --adapter-path "$T/int" > "$T/int.log" 2>&1 &
pid=$!
for i in $(seq 1 600); do grep -q "^Iter 2: Train loss" "$T/int.log" 2>/dev/null && break; sleep 0.05; done
kill -INT $pid
wait $pid
status=$?
ok '[ $status -eq 130 ] && grep -q "stopped by signal 2" "$T/int.log" && [ -f "$T/int/training_state.safetensors" ]' "SIGINT exit status 130 (got $status)"

# Flag errors: one line, exit 1.
"$BIN" train --model "$T/model" --batch-size x > "$T/err.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: --batch-size: expected a positive integer or auto, got \"x\"$" "$T/err.log"' "bad --batch-size"
"$BIN" train --model "$T/model" --grad-accumulation-steps 0 > "$T/err.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "grad_accumulation_steps must be at least 1" "$T/err.log"' "accumulation < 1"
"$BIN" train --help > "$T/help.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "\-\-grad-accumulation-steps N" "$T/help.log" && grep -q "\-\-max-grad-norm X" "$T/help.log"' "--help"

# LMTUNE_PROFILE: the step profile, and the same adapter bytes as without it
LMTUNE_PROFILE=1 run --iters 10 --adapter-path "$T/profiled" --train --test > "$T/profiled.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && cmp -s "$T/straight/adapters.safetensors" "$T/profiled/adapters.safetensors"' "profiled run: same adapters"
ok 'grep -q "^Profile: wall seconds per training step, mean of 9 steps (the first step excluded)$" "$T/profiled.log"' "profile header"
ok '[ "$(grep -cE "^  (projections|LoRA branch|attention forward|attention backward|LM head|RMSNorm|RoPE|SwiGLU|residual adds|update|other)" "$T/profiled.log")" -eq 11 ]' "profile: every kernel class"
# the classes and "other" add up to the step, and every timed class is >= 0
ok 'awk '"'"'/^Profile:/{p=1;next} p&&/^  step /{step=$(NF-1); p=0; next} p&&/ s +[-0-9.]+%$/{sum+=$(NF-2); if ($(NF-2)<0 && $1!="other") bad=1} END{d=sum-step; if (d<0) d=-d; exit !(step>0 && d<=0.0005*11 && !bad)}'"'"' "$T/profiled.log"' "profile: classes add up to the step"
ok '! grep -q "^Profile" "$T/straight.log"' "no profile without LMTUNE_PROFILE"

echo "summary train/cli: $checks checks, $fail failed"
[ $fail -eq 0 ]
