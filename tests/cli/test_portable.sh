#!/usr/bin/env bash
# test_portable.sh: the portable build on the paths of a machine without
# AVX-512 (src/kernels/isa.h), twice:
#   1. natively with LMTUNE_NO_AVX512=1 (baseline kernels, oneDNN capped at
#      AVX2, so no bf16 products: bf16 weights run as fp32);
#   2. under QEMU user mode on a Haswell CPU (AVX2, FMA, no AVX-512), where
#      the CPU itself has no AVX-512: an instruction of the AVX-512 variants
#      running there would kill the process (SIGILL).
# Each runs the PyTorch reference cases (model/test_reference,
# train/test_ref_train), the ISA checks (kernels/test_isa) and the demo test
# (cli/test_demo_short.sh: its answers word for word). The sanitized suite
# runs part 1 only: AddressSanitizer's shadow memory does not map under
# QEMU user mode, and the plain suite runs part 2.
# test-timeout: 2400
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/rel}
BIN=${LMTUNE_BIN:-./lmtune}
QEMU_CPU="Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm"
fail=0
checks=0
bad() {
  fail=$((fail+1))
  echo "FAIL: $*"
}
if ! "$BUILD/tests/kernels/test_isa" --describe | grep -q '^x86-64-v3'; then
  echo "SKIP: $BUILD is not the portable build (make NATIVE=1 or another CPU): nothing to choose at start-up"
  exit 77
fi
if ! command -v qemu-x86_64 >/dev/null; then
  echo "SKIP: no qemu-x86_64 (scripts/install-deps.sh --test installs qemu-user)"
  exit 77
fi

# run LABEL PREFIX... -- the reference binaries, each must pass.
run_refs() {
  local label=$1
  shift
  for t in kernels/test_isa model/test_reference train/test_ref_train; do
    checks=$((checks+1))
    local log=$BUILD/test-logs/portable_${label}_$(basename $t).log
    if "$@" "$BUILD/tests/$t" >"$log" 2>&1; then
      echo "$label $t: $(grep -m1 '^kernels:' "$log" || true) | $(grep '^summary' "$log")"
    else
      bad "$label $t (log $log):"
      tail -15 "$log"
    fi
  done
}

demo() {
  local label=$1 bin=$2
  checks=$((checks+1))
  local log=$BUILD/test-logs/portable_${label}_demo.log
  local t0=$SECONDS
  if LMTUNE_BIN=$bin bash tests/cli/test_demo_short.sh >"$log" 2>&1; then
    echo "$label demo: $(grep '^answers:' "$log") ($((SECONDS - t0)) s)"
  else
    bad "$label demo (log $log):"
    tail -15 "$log"
  fi
}

mkdir -p "$BUILD/test-logs"
run_refs no-avx512 env LMTUNE_NO_AVX512=1
T=$(mktemp -d /tmp/lmtune-portable.XXXXXX)
trap 'rm -rf "$T"' EXIT
NOAVX=$T/lmtune-no-avx512
QEMU=$T/lmtune-haswell
printf '#!/bin/sh\nLMTUNE_NO_AVX512=1 exec "%s" "$@"\n' "$(realpath "$BIN")" >"$NOAVX"
printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s "%s" "$@"\n' "$QEMU_CPU" "$(realpath "$BIN")" >"$QEMU"
chmod +x "$NOAVX" "$QEMU"
demo no-avx512 "$NOAVX"

if [ "${SANITIZE:-0}" = 1 ]; then
  echo "qemu-haswell: in the plain suite only (ASan's shadow memory does not map under QEMU user mode)"
else
  run_refs qemu-haswell qemu-x86_64 -cpu "$QEMU_CPU"
  demo qemu-haswell "$QEMU"
fi
echo "summary cli/portable: $checks checks, $fail failed"
[ $fail -eq 0 ]
