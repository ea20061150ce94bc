#!/usr/bin/env bash
# Builds the JSONL libFuzzer target with clang (ASan + UBSan) from the library
# sources and runs it on a copy of the seed corpus for N seconds (default 60).
set -euo pipefail
cd "$(dirname "$0")/../../.."
secs=${1:-60}
out=build/fuzz; mkdir -p "$out/corpus_jsonl"
srcs=$(find src -name '*.c' -not -path 'src/cli/*' | sort)
clang -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc -Itests \
  -o "$out/fuzz_jsonl" tests/data/fuzz/fuzz_jsonl.c $srcs -ldnnl -ljansson -lpcre2-8 -lyaml -lm -fopenmp
cp tests/data/fuzz/corpus_jsonl/* "$out/corpus_jsonl/"
ASAN_OPTIONS=detect_leaks=1 "$out/fuzz_jsonl" -max_total_time="$secs" -max_len=4096 "$out/corpus_jsonl"
