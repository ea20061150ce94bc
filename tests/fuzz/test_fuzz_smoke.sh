#!/usr/bin/env bash
# Builds the libFuzzer targets (make fuzz-build: clang, ASan+UBSan) and replays
# every seed corpus, then fuzzes each target for a fixed number of executions
# with a fixed seed (FUZZ_RUNS, default 3000): the same inputs on every run, so
# `make test` is reproducible; open-ended fuzzing is `make fuzz`.
# Skipped (exit 77, a failure in strict runs) when clang is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null; then
  echo "SKIP: clang is not installed (scripts/install-deps.sh --test installs clang and libomp-dev)"
  exit 77
fi
MAKEFLAGS= MAKELEVEL= make -s -j2 --no-print-directory fuzz-build >build/fuzz-build.log 2>&1 || { tail -20 build/fuzz-build.log; exit 1; }
tests/fuzz/run.sh 0
FUZZ_RUNS=${FUZZ_RUNS:-3000} tests/fuzz/run.sh 1
echo "summary fuzz: $(ls tests/fuzz/fuzz_*.c | wc -l) targets, seed corpora replayed and ${FUZZ_RUNS:-3000} seeded executions each"
