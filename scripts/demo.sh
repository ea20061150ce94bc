#!/usr/bin/env bash
# `make demo`: the whole adapter lifecycle on the embedded default, on 2 cores
# in a few minutes: make a small model and its tokenizer, plan the memory,
# evaluate, train a LoRA adapter, evaluate again, generate with and without
# the adapter, fuse it, and generate from the fused model.
# DEMO_ITERS shortens the run (the test suite uses a short variant).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-demo_out}
ITERS=${DEMO_ITERS:-300}
BIN=${LMTUNE_BIN:-./lmtune}
rm -rf "$OUT"; mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "1. A small Llama-style model and a byte-level BPE tokenizer learned from the data"
"$BIN" init --config demo/config.json --out "$OUT/model" --vocab-size 512 \
  --tokenizer-text demo/data/train.jsonl --tokenizer-text demo/data/valid.jsonl --seed 0

step "2. The memory plan, before any weight is loaded"
"$BIN" plan --model "$OUT/model" --data demo/data -c demo/lora.yaml --iters "$ITERS"

step "3. Test loss before training"
"$BIN" eval --model "$OUT/model" --data demo/data

step "4. Train a LoRA adapter"
"$BIN" train --model "$OUT/model" --data demo/data -c demo/lora.yaml --iters "$ITERS" \
  --adapter-path "$OUT/adapters" --test

for q in "What is the capital of France?" "What is the capital of Japan?"; do
  step "5. Generate: \"$q\" without the adapter"
  "$BIN" generate --model "$OUT/model" --prompt "$q" --max-tokens 24
  step "   ... and with the adapter"
  "$BIN" generate --model "$OUT/model" --adapter-path "$OUT/adapters" --prompt "$q" --max-tokens 24
done

step "6. Fuse the adapter into the model, export it for PEFT and llama.cpp"
"$BIN" fuse --model "$OUT/model" --adapter-path "$OUT/adapters" --save-path "$OUT/fused" \
  --export-peft "$OUT/peft" --export-gguf "$OUT/adapter.gguf"
"$BIN" generate --model "$OUT/fused" --prompt "What is the capital of France?" --max-tokens 24
