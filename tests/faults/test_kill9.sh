#!/usr/bin/env bash
# kill -9 at random moments of a run that saves every iteration: whatever
# the moment (inside a step, inside any of the three saves), the last
# complete checkpoint loads (lmtune eval --adapter-path), the resume
# continues from the iteration the training state records, and the resumed
# adapters are byte-identical to an uninterrupted run of the same length
# (with 1 and with 2 compute threads).
# Trials: FAULTS_KILL_TRIALS (default 8; 40 with FAULTS_FULL=1).
# The kill moments are seeded (LMTUNE_TEST_SEED, printed).
source "$(dirname "$0")/lib.sh"
make_fixture
seed_random
trials=${FAULTS_KILL_TRIALS:-$([ "${FAULTS_FULL:-0}" = 1 ] && echo 40 || echo 8)}
state_iteration() { grep -ao '"iteration":"[0-9]*"' "$1/training_state.safetensors" | grep -o '[0-9]*'; }
resumed=0; early=0; identical=0; outcomes=""; tmp_left=0
for t in $(seq 1 "$trials"); do
  d=$SCRATCH/k$t; rm -rf "$d"
  th=$(( (t + 1) % 2 + 1 ))   # alternately 2 and 1 compute threads
  # exec: $! is lmtune itself, not a subshell around it.
  ( exec "$BIN" train --model "$SCRATCH/model" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 --val-batches 1 \
      --steps-per-eval 1000 --adapter-path "$d" --iters 100000 --save-every 1 --seed 3 --threads $th >"$SCRATCH/out" 2>&1 ) &
  pid=$!
  # One trial in four from the start (it may die before the first save);
  # the others once the first save is there (slow sanitizer builds too).
  if [ $((t % 4)) != 0 ]; then
    for _ in $(seq 200); do [ -f "$d/training_state.safetensors" ] && break; sleep 0.05; done
  fi
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -9 $pid; wait $pid 2>/dev/null
  if [ ! -f "$d/training_state.safetensors" ]; then
    early=$((early+1)); outcomes="$outcomes early"; continue   # killed before the first complete save
  fi
  ls "$d"/*.tmp.* >/dev/null 2>&1 && tmp_left=$((tmp_left+1))
  it=$(state_iteration "$d")
  check "trial $t: the state records an iteration" [ -n "$it" ]
  evaluate "$d" >/dev/null 2>"$SCRATCH/err" || bad "trial $t (iteration $it): the adapters do not load: $(tail -1 "$SCRATCH/err")"
  rc=0; train "$d" --iters $((it + 2)) --save-every 1 --seed 3 --threads $th --resume >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check "trial $t: resume from iteration $it: $(tail -1 "$SCRATCH/err")" [ $rc = 0 ]
  check "trial $t: resume starts at iteration $it" grep -q "Resuming from .* at iteration $it " "$SCRATCH/out"
  check "trial $t: the resume removed the killed save's temporary files" bash -c "! ls '$d'/*.tmp.* >/dev/null 2>&1"
  resumed=$((resumed+1)); outcomes="$outcomes $it"
  # Every third trial (1 and 2 threads): byte-identical to an uninterrupted run of the same length.
  if [ $((t % 3)) = 1 ]; then
    train "$SCRATCH/straight" --iters $((it + 2)) --save-every 1 --seed 3 --threads $th >/dev/null 2>&1 || bad "trial $t: straight run"
    if cmp -s "$SCRATCH/straight/adapters.safetensors" "$d/adapters.safetensors"; then identical=$((identical+1)); ok
    else bad "trial $t ($th threads): resumed adapters differ from an uninterrupted run of $((it + 2)) iterations"; fi
    rm -rf "$SCRATCH/straight"
  fi
  rm -rf "$d"
done
echo "kill -9 trials: killed at saved iteration:$outcomes; $tmp_left left a temporary file"

# Stale temporary files: a dead writer's are removed at the next start (with
# a warning), a live process's are kept.
d=$SCRATCH/stale; mkdir -p "$d"
sleep 0 & dead=$!; wait $dead
printf x > "$d/adapters.safetensors.tmp.$dead"
printf x > "$d/training_state.safetensors.tmp.$dead"
printf x > "$d/adapters.safetensors.tmp.$$"           # this shell: alive
printf x > "$d/notes.tmp.txt"                          # not NAME.tmp.PID
train "$d" --iters 1 >"$SCRATCH/out" 2>"$SCRATCH/err" || bad "stale: train failed: $(tail -1 "$SCRATCH/err")"
check "stale: a dead writer's temporary files are removed" bash -c "[ ! -e '$d/adapters.safetensors.tmp.$dead' ] && [ ! -e '$d/training_state.safetensors.tmp.$dead' ]"
check "stale: a live process's and other files are kept" bash -c "[ -e '$d/adapters.safetensors.tmp.$$' ] && [ -e '$d/notes.tmp.txt' ]"
check "stale: the warning names the directory and the count" grep -q "^\[WARNING\] $d: removed 2 temporary files left by an interrupted save$" "$SCRATCH/err"
# the same for lmtune fuse's output folder
f=$SCRATCH/fused; mkdir -p "$f"
printf x > "$f/model.safetensors.tmp.$dead"
"$BIN" fuse --model "$SCRATCH/model" --adapter-path "$d" --save-path "$f" >"$SCRATCH/out" 2>"$SCRATCH/err" || bad "stale: fuse failed: $(tail -1 "$SCRATCH/err")"
check "stale: fuse removes a dead writer's temporary file in --save-path" bash -c "[ ! -e '$f/model.safetensors.tmp.$dead' ] && [ -s '$f/model.safetensors' ]"
check "stale: fuse warns once" grep -q "^\[WARNING\] $f: removed 1 temporary file left by an interrupted save$" "$SCRATCH/err"
finish faults/kill9 "$trials trials: $resumed resumed from their last checkpoint ($identical compared byte-identical), $early killed before the first save, seed $LMTUNE_TEST_SEED"
