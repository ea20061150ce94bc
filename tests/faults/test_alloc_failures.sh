#!/usr/bin/env bash
# Allocation failure injected at the allocation sites of loading (model,
# tokenizer, data) and of the first training step and save
# (LMTUNE_FAIL_ALLOC=n makes the nth heap allocation fail): every run either
# succeeds or exits 1 with one "lmtune: error:" line, and leaves no
# temporary file behind. Default: every STRIDE-th site (about 60 runs) from a
# seeded random start (LMTUNE_TEST_SEED, printed); FAULTS_FULL=1: every site.
# The injector must have fired: every failed run reports the injected "out of
# memory" and the runs before the last sites all fail.
source "$(dirname "$0")/lib.sh"
make_fixture
stride=${FAULTS_ALLOC_STRIDE:-$([ "${FAULTS_FULL:-0}" = 1 ] && echo 1 || echo 12)}
seed_random
n=$(( (RANDOM % stride) + 1 ))
runs=0
failures=0
successes_in_a_row=0
first_success=0
# check_injected LABEL RC: a failed run reports the injected failure.
check_injected() {
  if [ "$2" != 0 ] && ! grep -q '^lmtune: error: .*out of memory allocating' "$SCRATCH/err"; then
    bad "$1: failed without reporting the injected allocation failure: $(tail -1 "$SCRATCH/err")"
  fi
}
while [ $successes_in_a_row -lt 3 ] && [ $n -lt 100000 ]; do
  rm -rf "$SCRATCH/ad"
  rc=0; LMTUNE_FAIL_ALLOC=$n train "$SCRATCH/ad" --iters 1 --save-every 1 >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  runs=$((runs+1))
  check_clean_outcome "LMTUNE_FAIL_ALLOC=$n" "$rc" "$SCRATCH/err"
  check_injected "LMTUNE_FAIL_ALLOC=$n" "$rc"
  if [ $rc = 0 ]; then
    successes_in_a_row=$((successes_in_a_row+1))
    [ $first_success = 0 ] && first_success=$n
  else
    successes_in_a_row=0
    failures=$((failures+1))
  fi
  if ls "$SCRATCH"/ad/*.tmp.* >/dev/null 2>&1; then bad "LMTUNE_FAIL_ALLOC=$n: temporary file left: $(ls "$SCRATCH"/ad/*.tmp.*)"; fi
  n=$((n+stride))
done
check "the runs reached the end of the allocation sites" [ $successes_in_a_row -ge 3 ]
# A run of the fixture makes hundreds of allocations: the injector fired at
# every site tried before the end (a no-op injector makes the first run pass).
check "injected failures happened: $failures of $runs runs failed" [ $failures -ge 20 ]
check "every run failed until the end of the sites (first success at $first_success)" [ $failures -eq $((runs - 3)) ]
train_failures=$failures
# The same for eval (loading the adapters) on a saved run.
train "$SCRATCH/good" --iters 1 >/dev/null 2>&1 || bad "training the reference adapters"
n=1; successes_in_a_row=0
while [ $successes_in_a_row -lt 2 ] && [ $n -lt 100000 ]; do
  rc=0; LMTUNE_FAIL_ALLOC=$n evaluate "$SCRATCH/good" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  runs=$((runs+1))
  check_clean_outcome "eval LMTUNE_FAIL_ALLOC=$n" "$rc" "$SCRATCH/err"
  check_injected "eval LMTUNE_FAIL_ALLOC=$n" "$rc"
  if [ $rc = 0 ]; then
    successes_in_a_row=$((successes_in_a_row+1))
  else
    successes_in_a_row=0
    failures=$((failures+1))
  fi
  n=$((n+stride*2))
done
check "eval: injected failures happened: $((failures - train_failures))" [ $((failures - train_failures)) -ge 5 ]
finish faults/alloc "$runs runs, $failures injected failures reported cleanly, stride $stride, seed $LMTUNE_TEST_SEED"
