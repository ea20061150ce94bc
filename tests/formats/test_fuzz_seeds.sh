#!/usr/bin/env bash
# Replays the formats fuzzers' seed corpora (every crafted bad file of the
# tests) under the libFuzzer build, plus FUZZ_SECONDS (default 5) of fuzzing
# per target; skipped when clang's libFuzzer is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null; then echo "summary formats/fuzz: skipped (no clang)"; exit 0; fi
tests/formats/fuzz/run.sh 0
tests/formats/fuzz/run.sh "${FUZZ_SECONDS:-5}"
echo "summary formats/fuzz: seed corpora replayed and fuzzed ${FUZZ_SECONDS:-5}s per target"
