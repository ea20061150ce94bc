#!/usr/bin/env bash
# Runs every test binary given on the command line and every tests/**/test_*.sh
# script, one line each, and ends with "N passed, N failed, N skipped".
# A test passes with exit status 0, is skipped with 77 (it printed
# "SKIP: reason": something it needs is not installed) and fails otherwise,
# also when it runs past its time limit.
# Env: LMTUNE_BIN (the CLI under test), TEST_FILTER (substring to select),
#      TEST_EXCLUDE (space-separated substrings to leave out; not counted),
#      LMTUNE_TEST_STRICT=1 (a skipped test fails the run: .ci/run, make test),
#      LMTUNE_TEST_TIMEOUT (seconds per test; default 600, 1800 under
#      SANITIZE=1; a test may ask for more with a "test-timeout: N" line near
#      its top, scaled the same way),
#      LMTUNE_TEST_SEED (the seed of every random choice the tests make;
#      default: a new one each run, printed first so a failure can be replayed).
set -u
cd "$(dirname "$0")/.."
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Tests are not benchmarks: threads that wait sleep instead of spinning. On a
# machine shared with other jobs, OpenMP's spinning barriers made a finite-
# difference test take 96 s instead of 6 s (tests/kernels/test_ops_fd, load 25).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export LMTUNE_TEST_SEED=${LMTUNE_TEST_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
strict=${LMTUNE_TEST_STRICT:-0}
# Generous: on a loaded machine OpenMP's spinning barriers make a test that
# takes a second on a quiet one take minutes (seen at a load average of 30).
base_limit=${LMTUNE_TEST_TIMEOUT:-600}
scale=1
if [ "${SANITIZE:-0}" = 1 ]; then
  scale=3
fi
pass=0
fail=0
skip=0
failed=()
skipped=()
logdir=${BUILD:-build/rel}/test-logs
mkdir -p "$logdir"
echo "test seed $LMTUNE_TEST_SEED (LMTUNE_TEST_SEED=$LMTUNE_TEST_SEED replays it); strict=$strict"

# The time limit of a test: "test-timeout: N" in the first 30 lines of its
# source (tests/NAME.c for a binary, the script itself), else the default.
limit_of() {
  local src=$1 n
  n=$(head -n 30 "$src" 2>/dev/null | grep -m1 -oE 'test-timeout: [0-9]+' | grep -oE '[0-9]+')
  echo $(( ${n:-$base_limit} * scale ))
}

elapsed() {
  echo "$(date +%s.%N) - $1" | bc
}

run_one() {
  local name=$1 src=$2
  shift 2
  if [ -n "${TEST_FILTER:-}" ] && [[ "$name" != *"$TEST_FILTER"* ]]; then
    return
  fi
  local x
  for x in ${TEST_EXCLUDE:-}; do
    if [[ "$name" == *"$x"* ]]; then
      return
    fi
  done
  local log t0 limit rc=0
  log="$logdir/$(echo "$name" | tr '/' '_').log"
  t0=$(date +%s.%N)
  limit=$(limit_of "$src")
  # timeout puts the test in its own process group and kills all of it.
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then
    pass=$((pass+1))
    printf 'PASS  %-48s %6.2fs  %s\n' "$name" "$(elapsed "$t0")" "$(grep -E '^(summary|worst)' "$log" | tail -1)"
  elif [ $rc -eq 77 ]; then
    skip=$((skip+1))
    skipped+=("$name")
    printf 'SKIP  %-48s %6.2fs  %s\n' "$name" "$(elapsed "$t0")" "$(grep -m1 '^SKIP: ' "$log" || echo 'SKIP: (no reason given)')"
  else
    fail=$((fail+1))
    failed+=("$name")
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      printf 'FAIL  %s: killed after its time limit of %ss\n' "$name" "$limit"
    else
      printf 'FAIL  %s (exit status %d)\n' "$name" "$rc"
    fi
    tail -n 30 "$log" | sed 's/^/      /'
  fi
}

for bin in "$@"; do
  name=${bin#*tests/}
  run_one "$name" "tests/$name.c" "$bin"
done
for sh in $(find tests -name 'test_*.sh' -not -path '*/node_modules/*' | sort); do
  run_one "${sh#tests/}" "$sh" bash "$sh"
done
echo
if [ $fail -gt 0 ]; then
  echo "failed: ${failed[*]}"
fi
if [ $skip -gt 0 ]; then
  echo "skipped: ${skipped[*]} (scripts/install-deps.sh --test installs what they need)"
fi
echo "$pass passed, $fail failed, $skip skipped"
if [ $((pass + fail + skip)) -eq 0 ]; then
  echo "no test ran (TEST_FILTER=${TEST_FILTER:-} TEST_EXCLUDE=${TEST_EXCLUDE:-})"
  exit 1
fi
if [ $skip -gt 0 ] && [ "$strict" = 1 ]; then
  echo "strict mode (LMTUNE_TEST_STRICT=1): a skipped test fails the run"
  exit 1
fi
[ $fail -eq 0 ]
