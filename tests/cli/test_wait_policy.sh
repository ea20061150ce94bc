#!/usr/bin/env bash
# test_wait_policy.sh: OpenMP's waiting. With neither OMP_WAIT_POLICY nor
# GOMP_SPINCOUNT set, lmtune executes itself again with
# OMP_WAIT_POLICY=passive (libgomp reads the policy before main), and the
# run record says so; a policy the user set is kept, GOMP_SPINCOUNT alone
# too. The executed-again process runs the same job: its losses equal those
# of a run given the policy by the user. Under mpirun (an MPI build) both
# workers do the same and the run succeeds.
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup wait

tiny_model 24
F="--model $T/model --data $T/data --num-layers -1 --iters 4 --batch-size 2 --max-seq-length 48 --val-batches 1
   --steps-per-report 1 --steps-per-eval 4 --learning-rate 1e-3 --threads 2 --seed 3"
policy() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["omp_wait_policy"])' "$1/run.json"; }
losses() { grep -o 'Train loss [0-9.]*' "$1" | tr '\n' ' '; }

env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$BIN" train $F --adapter-path "$T/unset" > "$T/unset.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "no policy set: the run fails: $(tail -1 "$T/unset.log")"
ok '[ "$(policy "$T/unset")" = passive ]' "no policy set: run.json says $(policy "$T/unset"), not passive"
env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$BIN" train $F --adapter-path "$T/active" > "$T/active.log" 2>&1
ok '[ "$(policy "$T/active")" = active ]' "OMP_WAIT_POLICY=active kept: run.json says $(policy "$T/active")"
env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 "$BIN" train $F --adapter-path "$T/spin" > "$T/spin.log" 2>&1
ok '[ "$(policy "$T/spin")" = None ]' "GOMP_SPINCOUNT alone kept (no policy added): run.json says $(policy "$T/spin")"
ok '[ -n "$(losses "$T/unset.log")" ] && [ "$(losses "$T/unset.log")" = "$(losses "$T/active.log")" ]' \
  "the executed-again run trains the same: $(losses "$T/unset.log") against $(losses "$T/active.log")"
ok '[ "$(grep -c "^Iter 4: Train loss" "$T/unset.log")" = 1 ]' "one run's log, not two: $(grep -c "^Iter 4: Train loss" "$T/unset.log")"

if ldd "$BIN" 2>/dev/null | grep -q libmpi && command -v mpirun >/dev/null; then
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT mpirun --oversubscribe --allow-run-as-root -np 2 "$BIN" train $F \
    --threads 1 --adapter-path "$T/mpi" > "$T/mpi.log" 2>&1
  rc=$?
  ok '[ $rc -eq 0 ]' "2 workers under mpirun, no policy set: $(tail -1 "$T/mpi.log")"
  ok '[ "$(policy "$T/mpi")" = passive ] && grep -q "\"world\": 2" "$T/mpi/run.json"' \
    "2 workers: run.json says $(policy "$T/mpi"), world 2"
else
  echo "(not an MPI build: the mpirun case is left out)"
fi
echo "summary cli/wait_policy: $checks checks, $fail failed"
[ $fail -eq 0 ]
