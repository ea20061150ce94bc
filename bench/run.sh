#!/usr/bin/env bash
# make bench: builds the GEMM peak probe and runs the throughput and memory benches.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/rel/bench
gcc -std=c11 -D_GNU_SOURCE -O2 -march=native -fopenmp -Isrc bench/gemm_peak.c build/rel/liblmtune.a -ldnnl -ljansson -lm -o build/rel/bench/gemm_peak
/usr/bin/python3 bench/run.py "$@"
/usr/bin/python3 bench/memory.py
