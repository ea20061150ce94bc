# lib.sh: shared setup of the fault tests (sourced): a tiny model and data
# set in a scratch directory, the check helpers and the pass/fail counters.
# Env: LMTUNE_BIN (the CLI under test, default ./lmtune), FAULTS_FULL=1 for
# the exhaustive variants (every allocation site, more kill -9 trials).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${LMTUNE_BIN:-$PWD/lmtune}
export OMP_NUM_THREADS=1   # a deterministic allocation order
export LMTUNE_CHAT_DATE="26 Jul 2024"
SCRATCH=$(mktemp -d /tmp/lmtune_faults.XXXXXX)
trap 'umount "$SCRATCH"/mnt_* 2>/dev/null; rm -rf "$SCRATCH"' EXIT
checks=0; failed=0

ok() { checks=$((checks+1)); }
bad() { checks=$((checks+1)); failed=$((failed+1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@" >/dev/null; then ok; else bad "$what"; fi; }

# The outcome of a run that may fail: exit 0, or exit 1 with exactly one
# "lmtune: error:" line, never a signal or a sanitizer report. $1: label,
# $2: exit status, $3: stderr file.
check_clean_outcome() {
  local label=$1 rc=$2 err=$3
  if grep -qE 'Sanitizer|runtime error|Segmentation|core dumped|Aborted' "$err"; then
    bad "$label: sanitizer report or crash: $(grep -m1 -E 'Sanitizer|runtime error|Segmentation|Aborted' "$err")"; return 1; fi
  if [ "$rc" = 0 ]; then ok; return 0; fi
  if [ "$rc" != 1 ]; then bad "$label: exit status $rc (expected 0 or 1): $(tail -1 "$err")"; return 1; fi
  local n; n=$(grep -c '^lmtune: error: ' "$err")
  if [ "$n" != 1 ]; then bad "$label: $n 'lmtune: error:' lines: $(tail -2 "$err" | tr '\n' '|')"; return 1; fi
  ok; return 0
}

# expect_error LABEL SUBSTRING CMD...: the command exits 1 with one
# "lmtune: error:" line containing SUBSTRING.
expect_error() {
  local label=$1 want=$2; shift 2
  local err=$SCRATCH/err.$$ rc=0
  "$@" >"$SCRATCH/out.$$" 2>"$err" || rc=$?
  if [ "$rc" != 1 ]; then bad "$label: exit $rc, expected 1 ($(tail -1 "$err"))"; return 1; fi
  if ! grep -q "^lmtune: error: .*$want" "$err"; then bad "$label: error lacks '$want': $(tail -2 "$err" | tr '\n' '|')"; return 1; fi
  check_clean_outcome "$label" "$rc" "$err"
}

# A tiny model (2 layers, hidden 64) and a small data set.
make_fixture() {
  "$BIN" init --preset tiny --out "$SCRATCH/model" >/dev/null || { echo "init failed"; exit 1; }
  mkdir -p "$SCRATCH/data"
  for i in $(seq 1 24); do echo "{\"text\": \"the quick brown fox number $i jumps over the lazy dog\"}"; done >"$SCRATCH/data/train.jsonl"
  head -4 "$SCRATCH/data/train.jsonl" >"$SCRATCH/data/valid.jsonl"
  head -4 "$SCRATCH/data/train.jsonl" >"$SCRATCH/data/test.jsonl"
}
# train ADAPTER_DIR [flags]: a small LoRA run on the fixture.
train() {
  local dir=$1; shift
  "$BIN" train --model "$SCRATCH/model" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 \
    --val-batches 1 --steps-per-eval 1000 --adapter-path "$dir" "$@"
}
# evaluate ADAPTER_DIR: loads the adapters (exit 0 iff they load and evaluate).
evaluate() {
  "$BIN" eval --model "$SCRATCH/model" --data "$SCRATCH/data" --test-batches 1 --batch-size 2 --adapter-path "$1"
}
finish() {
  echo "summary $1: $checks checks, $failed failed${2:+ ($2)}"
  [ "$failed" = 0 ]
}
# seed_random: seeds bash's $RANDOM from LMTUNE_TEST_SEED (the runner sets
# it; default 1) and prints the seed, so a failing choice can be replayed.
seed_random() {
  LMTUNE_TEST_SEED=${LMTUNE_TEST_SEED:-1}
  RANDOM=$LMTUNE_TEST_SEED
  echo "seed $LMTUNE_TEST_SEED (LMTUNE_TEST_SEED=$LMTUNE_TEST_SEED replays it)"
}
