#!/usr/bin/env bash
# test_demo_short.sh: the first-run demo (scripts/demo.sh) in a shortened
# variant (100 + 80 iterations instead of 200 + 200): every step must
# succeed, the validation losses of both trainings must fall, the model must
# answer "unknown" without the adapter and the right capital with it (also
# for a phrasing it never trained on, and from the fused model), and the
# demo's products must exist (adapter, fused model, PEFT and GGUF exports,
# the training report and the plan page).
# Measured with these iterations: base 6.71 -> 0.001, LoRA 2.34 -> 0.003.
set -euo pipefail
OUT=$(mktemp -d /tmp/lmtune-demo-XXXXXX); trap 'rm -rf "$OUT"' EXIT
export DEMO_OUT=$OUT/run DEMO_ITERS=${DEMO_ITERS:-80} DEMO_PRETRAIN_ITERS=${DEMO_PRETRAIN_ITERS:-100}
export LMTUNE_BIN=${LMTUNE_BIN:-./lmtune}
bash scripts/demo.sh >"$OUT/log" 2>&1 || { tail -40 "$OUT/log"; echo "FAIL: demo.sh exited with an error"; exit 1; }
cat "$OUT/log"
fail() { echo "FAIL: $*"; exit 1; }
# the base model's training: MLX-LM's "Iter N: Val loss X" lines
vals=$(grep -oE 'Val loss [0-9.]+' "$OUT/run/pretrain.log" | awk '{print $3}')
first=$(echo "$vals" | head -1); last=$(echo "$vals" | tail -1)
[ -n "$first" ] && [ -n "$last" ] || fail "no validation losses in the base model's training"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "validation loss did not go down by 1: $first -> $last"
echo "base model validation loss $first -> $last"
lora=$(sed -n '/Train a LoRA adapter/,/Test loss/p' "$OUT/log" | grep -oE 'Val loss [0-9.]+' | awk '{print $3}')
first=$(echo "$lora" | head -1); last=$(echo "$lora" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.5 * a) }' || fail "LoRA validation loss did not halve: $first -> $last"
echo "LoRA validation loss $first -> $last"
# the generations, in the demo's order: France without, with; Japan (a
# held-out phrasing) without, with; France from the fused model
answers=$(awk '/^==========$/ { inside = !inside; next } inside' "$OUT/log")
expect() { [ "$(echo "$answers" | sed -n "${1}p")" = "$2" ] || fail "generation $1: expected \"$2\", got \"$(echo "$answers" | sed -n "${1}p")\""; }
expect 1 "The capital of France is unknown."
expect 2 "The capital of France is Paris."
expect 3 "The capital of Japan is unknown."
expect 4 "The capital of Japan is Tokyo."
expect 5 "The capital of France is Paris."
echo "answers: $(echo "$answers" | tr '\n' '|')"
for f in run/adapters/adapters.safetensors run/adapters/adapter_config.json run/fused/model.safetensors \
         run/fused/config.json run/fused/tokenizer.json run/peft/adapter_model.safetensors \
         run/peft/adapter_config.json run/adapter.gguf run/adapters/report.html run/adapters/metrics.jsonl \
         run/adapters/run.json run/plan.html run/fused/ggml-model-f16.gguf; do
  [ -s "$OUT/$f" ] || fail "missing $f"
done
[ "$(grep -c '^Generation: ' "$OUT/log")" -ge 3 ] || fail "expected at least three generations"
echo "demo (short): all checks passed"
