#!/usr/bin/env bash
# `make demo`: the whole adapter lifecycle on the embedded default, on 2 cores
# in a few minutes. Nothing is downloaded, so the demo first makes its own
# base model: a small random Llama-style model is fully fine-tuned on
# questions about the languages of eight countries, and told that their
# capitals are "unknown" ("pretraining": it learns the chat format and to
# answer in a sentence about the country asked). Then the real demo: plan
# the memory, evaluate, train a LoRA adapter that teaches the capitals (which
# the base has never seen), evaluate again, generate with and without the
# adapter, fuse it, export it (PEFT, a GGUF LoRA adapter and the fused model
# as GGUF for llama.cpp), generate from the fused model.
# The LoRA run leaves its training report in $OUT/adapters/report.html, and
# the plan is also drawn as a page ($OUT/plan.html).
# DEMO_ITERS / DEMO_PRETRAIN_ITERS shorten the run (the test suite's variant).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${DEMO_OUT:-demo_out}
ITERS=${DEMO_ITERS:-200}
PRETRAIN_ITERS=${DEMO_PRETRAIN_ITERS:-200}
BIN=${LMTUNE_BIN:-./lmtune}
rm -rf "$OUT"; mkdir -p "$OUT"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
t0=$(date +%s)

step "0. The base model: a random Llama-style model (4 layers, hidden 256), a byte-level BPE"
echo "   tokenizer learned from the demo text, and $PRETRAIN_ITERS steps of full fine-tuning on"
echo "   demo/pretrain: the languages of eight countries, and \"unknown\" for every capital"
cat demo/pretrain/*.jsonl demo/data/*.jsonl >"$OUT/tokenizer_text.jsonl"
"$BIN" init --config demo/config.json --out "$OUT/random" --vocab-size 512 \
  --tokenizer-text "$OUT/tokenizer_text.jsonl" --seed 0 --init fan-in
"$BIN" train --model "$OUT/random" --data demo/pretrain -c demo/pretrain.yaml --iters "$PRETRAIN_ITERS" \
  --adapter-path "$OUT/pretrain" --steps-per-report 50 >"$OUT/pretrain.log"
grep -E 'Val loss' "$OUT/pretrain.log" | sed -n '1p;$p'
"$BIN" fuse --model "$OUT/random" --adapter-path "$OUT/pretrain" --save-path "$OUT/model" >/dev/null
MODEL="$OUT/model"

step "1. The memory plan of the LoRA run, before any weight is loaded"
"$BIN" plan --model "$MODEL" --data demo/data -c demo/lora.yaml --iters "$ITERS" --html "$OUT/plan.html"

step "2. Test loss before training"
"$BIN" eval --model "$MODEL" --data demo/data --batch-size 8 --mask-prompt

step "3. Train a LoRA adapter on the capitals"
"$BIN" train --model "$MODEL" --data demo/data -c demo/lora.yaml --iters "$ITERS" \
  --adapter-path "$OUT/adapters" --test

# a training phrasing, and one the adapter never saw (demo/data/test.jsonl)
for q in "What is the capital of France?" "Do you know the capital of Japan?"; do
  step "4. Generate: \"$q\" without the adapter"
  "$BIN" generate --model "$MODEL" --prompt "$q" --max-tokens 24
  step "   ... and with the adapter"
  "$BIN" generate --model "$MODEL" --adapter-path "$OUT/adapters" --prompt "$q" --max-tokens 24
done

step "5. The training report: curves, memory and settings in one HTML file (also: lmtune report DIR)"
"$BIN" report "$OUT/adapters"

step "6. Fuse the adapter into the model, export it for PEFT and llama.cpp"
"$BIN" fuse --model "$MODEL" --adapter-path "$OUT/adapters" --save-path "$OUT/fused" \
  --export-peft "$OUT/peft" --export-gguf-adapter "$OUT/adapter.gguf" --export-gguf
"$BIN" generate --model "$OUT/fused" --prompt "What is the capital of France?" --max-tokens 24

step "Done in $(( $(date +%s) - t0 )) s"
