#!/usr/bin/env bash
# make bench: the throughput bench (bench/run.py) and the memory bench
# (bench/memory.py). GEMM_PEAK_BIN is built by the Makefile.
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 bench/run.py "$@"
/usr/bin/python3 bench/memory.py
