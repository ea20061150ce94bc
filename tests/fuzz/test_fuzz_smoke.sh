#!/usr/bin/env bash
# Builds the libFuzzer targets (make fuzz-build: clang, ASan+UBSan) and replays
# every seed corpus, then fuzzes each target for FUZZ_SMOKE_SECONDS (default 3).
# Skipped, with a message, when clang is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null; then echo "summary fuzz: skipped (clang is not installed)"; exit 0; fi
MAKEFLAGS= MAKELEVEL= make -s -j2 --no-print-directory fuzz-build >build/fuzz-build.log 2>&1 || { tail -20 build/fuzz-build.log; exit 1; }
tests/fuzz/run.sh 0
tests/fuzz/run.sh "${FUZZ_SMOKE_SECONDS:-3}"
echo "summary fuzz: $(ls tests/fuzz/fuzz_*.c | wc -l) targets, seed corpora replayed and fuzzed ${FUZZ_SMOKE_SECONDS:-3} s each"
