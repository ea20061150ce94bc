#!/usr/bin/env bash
# Allocation failure injected at the allocation sites of loading (model,
# tokenizer, data) and of the first training step and save
# (LMTUNE_FAIL_ALLOC=n makes the nth heap allocation fail): every run either
# succeeds or exits 1 with one "lmtune: error:" line, and leaves no
# temporary file behind. Default: every STRIDE-th site (about 60 runs);
# FAULTS_FULL=1: every site.
source "$(dirname "$0")/lib.sh"
make_fixture
stride=${FAULTS_ALLOC_STRIDE:-$([ "${FAULTS_FULL:-0}" = 1 ] && echo 1 || echo 12)}
n=$(( (RANDOM % stride) + 1 )); runs=0; failures=0; successes_in_a_row=0
while [ $successes_in_a_row -lt 3 ] && [ $n -lt 100000 ]; do
  rm -rf "$SCRATCH/ad"
  rc=0; LMTUNE_FAIL_ALLOC=$n train "$SCRATCH/ad" --iters 1 --save-every 1 >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  runs=$((runs+1))
  check_clean_outcome "LMTUNE_FAIL_ALLOC=$n" "$rc" "$SCRATCH/err"
  if [ $rc = 0 ]; then successes_in_a_row=$((successes_in_a_row+1)); else successes_in_a_row=0; failures=$((failures+1)); fi
  if ls "$SCRATCH"/ad/*.tmp.* >/dev/null 2>&1; then bad "LMTUNE_FAIL_ALLOC=$n: temporary file left: $(ls "$SCRATCH"/ad/*.tmp.*)"; fi
  n=$((n+stride))
done
check "the runs reached the end of the allocation sites" [ $successes_in_a_row -ge 3 ]
# The same for eval (loading the adapters) on a saved run.
train "$SCRATCH/good" --iters 1 >/dev/null 2>&1 || bad "training the reference adapters"
n=1; successes_in_a_row=0
while [ $successes_in_a_row -lt 2 ] && [ $n -lt 100000 ]; do
  rc=0; LMTUNE_FAIL_ALLOC=$n evaluate "$SCRATCH/good" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  runs=$((runs+1))
  check_clean_outcome "eval LMTUNE_FAIL_ALLOC=$n" "$rc" "$SCRATCH/err"
  if [ $rc = 0 ]; then successes_in_a_row=$((successes_in_a_row+1)); else successes_in_a_row=0; failures=$((failures+1)); fi
  n=$((n+stride*2))
done
finish faults/alloc "$runs runs, $failures injected failures reported cleanly, stride $stride"
