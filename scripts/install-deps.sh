#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the demo need.
# Idempotent: does nothing when all are present. Called by `make` targets.
#   build:  gcc make libdnnl-dev (GEMM) libjansson-dev (JSON) libpcre2-dev (tokenizer regex)
#           libyaml-dev (-c config.yaml) libopenmpi-dev openmpi-bin (data parallelism)
#   tests:  python3 (stdlib: a few shell tests read safetensors with it), python3-numpy (the float32 of
#           tests/train/mlx_schedules.py, MLX's learning-rate schedules), bc (test timings), clang + libomp-dev
#           (libFuzzer smoke runs), python3-torch python3-numpy (--ref/--bench only), nodejs npm
#           (tokenizer / chat-template comparison against the JavaScript references)
#           clang libomp-dev (the libFuzzer targets: make fuzz, tests/fuzz/test_fuzz_smoke.sh)
#           chromium (a real browser renders the training report to PNG: tests/report/test_report_browser.sh)
set -euo pipefail
PKGS="gcc make pkg-config libdnnl-dev libjansson-dev libpcre2-dev libyaml-dev libopenmpi-dev openmpi-bin nodejs clang libomp-dev python3 python3-numpy bc"
PKGS="$PKGS chromium"   # tests: headless Chromium opens report.html (tests/report/test_report_browser.sh)
# The PyTorch baseline needs a real BLAS: Debian's torch links libblas.so.3,
# which is the slow netlib reference until OpenBLAS (OpenMP build) is installed.
if [ "${1:-}" = "--bench" ] || [ "${1:-}" = "--ref" ]; then PKGS="$PKGS python3-torch libopenblas0-openmp"; fi
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# nodejs may come from another source (nodesource): accept any working node+npm.
if command -v node >/dev/null && command -v npm >/dev/null; then missing="${missing/ nodejs/}"; else
  case "$missing" in *nodejs*) missing="$missing npm";; esac; fi
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing" >&2
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq $missing >/dev/null
