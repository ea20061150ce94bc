#!/usr/bin/env bash
# test_portable.sh: the portable build on the paths of a machine without
# AVX-512 (src/kernels/isa.h), twice:
#   1. natively with LMTUNE_NO_AVX512=1 (baseline kernels, oneDNN capped at
#      AVX2, so no bf16 products: bf16 weights run as fp32);
#   2. under QEMU user mode on a Haswell CPU (AVX2, FMA, no AVX-512), where
#      the CPU itself has no AVX-512: an instruction of the AVX-512 variants
#      running there would kill the process (SIGILL).
# Each runs the PyTorch reference cases (model/test_reference,
# train/test_ref_train) and the ISA checks (kernels/test_isa); part 1 runs the
# demo test (cli/test_demo_short.sh: its answers word for word), part 2 a short
# CLI run that must give the same bits as the same run in part 1. The sanitized suite
# runs part 1 only: AddressSanitizer's shadow memory does not map under
# QEMU user mode, and the plain suite runs part 2.
# test-timeout: 1200
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

# The whole CLI under QEMU (a Haswell CPU: no AVX-512, oneDNN finds AVX2 by
# itself) against the same commands natively with LMTUNE_NO_AVX512=1 (the
# same baseline kernels, oneDNN capped at AVX2): a model made by init, a few
# LoRA steps with evaluation, a greedy generation with the adapter, and the
# logged losses, the adapter file and the generated text must be the same
# bits. The full demo (above, natively) checks the answers word for word; under
# QEMU's emulation it would take many minutes, this takes seconds.
cli_same_bits() {
  local label
  for label in native-no-avx512 qemu-haswell; do
    local bin=$NOAVX
    [ $label = qemu-haswell ] && bin=$QEMU
    local d=$T/cli-$label
    mkdir -p "$d"
    {
      "$bin" init --preset tiny --out "$d/m" --tokenizer-text demo/data/train.jsonl --seed 5 &&
      "$bin" train --model "$d/m" --data demo/data --num-layers 2 --batch-size 4 --iters 6 --steps-per-report 2 \
        --steps-per-eval 3 --val-batches 2 --learning-rate 1e-3 --adapter-path "$d/a" --seed 3 &&
      "$bin" generate --model "$d/m" --adapter-path "$d/a" --prompt "What is the capital of France?" \
        --max-tokens 8 --temp 0 --seed 1
    } >"$d/log" 2>&1 || { bad "$label CLI run failed:"; tail -15 "$d/log"; return; }
  done
  checks=$((checks+1))
  local a=$T/cli-native-no-avx512 b=$T/cli-qemu-haswell
  # times, speeds and memory differ; losses, learning rates and text must not
  local keep='Val loss [0-9.]*|Train loss [0-9.]*|Learning Rate [0-9.e+-]*|Trained Tokens [0-9]*'
  if diff <(grep -oE "$keep" "$a/log") <(grep -oE "$keep" "$b/log") >/dev/null &&
     cmp -s "$a/a/adapters.safetensors" "$b/a/adapters.safetensors" &&
     diff <(sed -n '/^==========$/,/^==========$/p' "$a/log") <(sed -n '/^==========$/,/^==========$/p' "$b/log") >/dev/null &&
     [ "$(grep -cE "$keep" "$a/log")" -ge 4 ]; then
    echo "qemu-haswell CLI: init, 6 LoRA steps, generate: the same losses, adapter bytes and text as natively without AVX-512"
  else
    bad "qemu-haswell CLI differs from the native run without AVX-512:"
    diff <(grep -oE "$keep" "$a/log") <(grep -oE "$keep" "$b/log") | head
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
  cli_same_bits
fi
echo "summary cli/portable: $checks checks, $fail failed"
[ $fail -eq 0 ]
