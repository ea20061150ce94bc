#!/usr/bin/env bash
# Builds the libFuzzer targets of the formats layer with clang (ASan+UBSan)
# and runs each one for SECONDS (default 30) from its checked-in seed corpus
# (corpus_<target>/, written by the C tests with LMTUNE_SEED_CORPUS=DIR).
# New inputs go to a scratch copy, not to the checked-in corpus.
#   tests/formats/fuzz/run.sh [SECONDS]     0 = replay the seed corpus only
#   tests/formats/fuzz/run.sh --regen       rewrite the seed corpora from the tests
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=tests/formats/fuzz
out=build/fuzz
mkdir -p "$out"
if [ "${1:-}" = "--regen" ]; then
  make -s build/rel/tests/formats/test_safetensors build/rel/tests/formats/test_hf_config
  rm -rf "$here/corpus_safetensors" "$here/corpus_hf_config"
  mkdir -p "$here/corpus_safetensors" "$here/corpus_hf_config"
  LMTUNE_SEED_CORPUS=$here/corpus_safetensors build/rel/tests/formats/test_safetensors >/dev/null
  LMTUNE_SEED_CORPUS=$here/corpus_hf_config build/rel/tests/formats/test_hf_config >/dev/null
  echo "corpora: $(ls $here/corpus_safetensors | wc -l) safetensors, $(ls $here/corpus_hf_config | wc -l) configs"
  exit 0
fi
secs=${1:-30}
CC=${FUZZ_CC:-clang}
src="$(ls src/base/*.c src/formats/*.c)"
for target in safetensors hf_config; do
  bin=$out/fuzz_$target
  if [ ! -x "$bin" ] || [ -n "$(find src/base src/formats $here/fuzz_$target.c -newer "$bin" | head -1)" ]; then
    $CC -std=c11 -D_GNU_SOURCE -O1 -g -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -o "$bin" "$here/fuzz_$target.c" $src -ljansson -lm
  fi
  if [ "$secs" = 0 ]; then
    "$bin" -runs=0 "$here/corpus_$target" 2>&1 | tail -1
  else
    scratch=$(mktemp -d)
    cp "$here/corpus_$target"/* "$scratch/"
    "$bin" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 "$scratch" 2>&1 | tail -2
    rm -rf "$scratch"
  fi
done
