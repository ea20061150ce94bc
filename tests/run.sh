#!/usr/bin/env bash
# Runs every test binary given on the command line and every tests/**/test_*.sh
# script, one line each, and ends with "N passed, N failed".
# Env: LMTUNE_BIN (the CLI under test), TEST_FILTER (substring to select).
set -u
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
pass=0; fail=0; failed=()
logdir=${BUILD:-build/rel}/test-logs; mkdir -p "$logdir"
run_one() {
  local name=$1; shift
  [ -n "${TEST_FILTER:-}" ] && [[ "$name" != *"$TEST_FILTER"* ]] && return
  local log="$logdir/$(echo "$name" | tr '/' '_').log" t0=$(date +%s.%N)
  if "$@" >"$log" 2>&1; then
    pass=$((pass+1)); printf 'PASS  %-48s %6.2fs  %s\n' "$name" "$(echo "$(date +%s.%N) - $t0" | bc)" "$(grep -E '^(summary|worst)' "$log" | tail -1)"
  else
    fail=$((fail+1)); failed+=("$name"); printf 'FAIL  %s\n' "$name"; tail -n 30 "$log" | sed 's/^/      /'
  fi
}
for bin in "$@"; do run_one "${bin#*tests/}" "$bin"; done
for sh in $(find tests -name 'test_*.sh' -not -path '*/node_modules/*' | sort); do run_one "${sh#tests/}" bash "$sh"; done
echo
[ $fail -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
