#!/usr/bin/env bash
# Damaged and foreign checkpoints: a flipped byte in the data or the header
# of the training state, a truncated or empty state (the resume falls back
# to the previous state, or is refused when there is none), a damaged
# adapters file, a state from a different base model, trainable layout or
# optimizer: each refused with an error naming the file, nothing overwritten.
source "$(dirname "$0")/lib.sh"
make_fixture
train "$SCRATCH/good" --iters 2 --save-every 1 >/dev/null 2>&1 || bad "the reference run failed"
damaged() {  # damaged NAME FILE PYTHON-EXPR-ON-d: a copy of good/ with FILE altered
  rm -rf "$SCRATCH/$1"; cp -r "$SCRATCH/good" "$SCRATCH/$1"
  python3 -c "import sys; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); $3; open(p,'wb').write(d)" "$SCRATCH/$1/$2"
}
state=training_state.safetensors
# The trainer keeps the previous state as $state.prev: a damaged newest state
# falls back to it with a warning naming the damage, and resumes from its
# iteration; with the previous one damaged or absent too, the
# resume is refused with the error naming the file.
expect_fallback() {  # LABEL DIR REASON
  local rc=0 it
  it=$(grep -ao '"iteration":"[0-9]*"' "$SCRATCH/$2/$state.prev" | grep -o '[0-9]*')
  train "$SCRATCH/$2" --iters 4 --resume >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check "$1: falls back to the previous state (exit $rc: $(tail -1 "$SCRATCH/err"))" [ $rc = 0 ]
  check "$1: the warning names the damage (on stdout, with the log)" grep -q "^\[WARNING\] .*$state: .*$3.*; resuming from the previous state .*$state.prev" "$SCRATCH/out"
  check "$1: resumes from the previous state's iteration ($it)" grep -q "Resuming from .* at iteration $it " "$SCRATCH/out"
}
damaged flip_data $state "d[-5] ^= 0x01"
expect_fallback "flipped byte in the state's data" flip_data "damaged (content hash mismatch)"
damaged flip_head $state "i = d.index(b'\"iteration\":\"') + 13; d[i] = ord('x')"
expect_fallback "damaged number in the state's header" flip_head "metadata \"iteration\" is not an unsigned integer"
damaged flip_json $state "d[8] = ord('[')"
expect_fallback "damaged JSON of the state's header" flip_json "header is not valid JSON"
damaged trunc_state $state "del d[len(d)//2:]"
expect_fallback "truncated state" trunc_state "file is truncated"
damaged trunc_state1 $state "del d[-1:]"
expect_fallback "state short by one byte" trunc_state1 "file is truncated"
damaged empty_state $state "del d[:]"
expect_fallback "empty state" empty_state "too small for the 8-byte header length"
damaged no_prev $state "d[-5] ^= 0x01"; rm -f "$SCRATCH/no_prev/$state.prev"
expect_error "flipped byte, no previous state" "$state: damaged (content hash mismatch)" train "$SCRATCH/no_prev" --iters 4 --resume
differs() { ! cmp -s "$1" "$2"; }
check "the damaged state is left as it was (not overwritten)" differs "$SCRATCH/no_prev/$state" "$SCRATCH/good/$state"
damaged both_bad $state "d[-5] ^= 0x01"
python3 -c "import sys; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); del d[-3:]; open(p,'wb').write(d)" "$SCRATCH/both_bad/$state.prev"
expect_error "both the state and the previous one damaged" "$state.prev: .*file is truncated" train "$SCRATCH/both_bad" --iters 4 --resume
damaged trunc_adapters adapters.safetensors "del d[-7:]"
expect_error "truncated adapters (eval)" "adapters.safetensors" evaluate "$SCRATCH/trunc_adapters"
damaged adapters_header adapters.safetensors "d[8:9] = b'['"
expect_error "damaged adapters header (eval)" "adapters.safetensors" evaluate "$SCRATCH/adapters_header"
rm -rf "$SCRATCH/nostate"; mkdir -p "$SCRATCH/nostate"
expect_error "resume without a state" "no training state to resume from" train "$SCRATCH/nostate" --iters 4 --resume

# A different base model: another architecture (3 layers), other weights, and
# another trainable layout (rank) are refused.
"$BIN" init --preset tiny --out "$SCRATCH/model3" --layers 3 >/dev/null
rm -rf "$SCRATCH/other"; cp -r "$SCRATCH/good" "$SCRATCH/other"
expect_error "state from a different base model" "the saved state belongs to another run" \
  "$BIN" train --model "$SCRATCH/model3" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 --val-batches 1 \
  --adapter-path "$SCRATCH/other" --iters 4 --resume
# The same architecture with other weights (another seed) is another base model.
"$BIN" init --preset tiny --out "$SCRATCH/model_seed7" --seed 7 >/dev/null
expect_error "state from the same architecture with other weights" "the saved state belongs to another run" \
  "$BIN" train --model "$SCRATCH/model_seed7" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 --val-batches 1 \
  --adapter-path "$SCRATCH/other" --iters 4 --resume
# ... while the same model copied elsewhere resumes.
cp -r "$SCRATCH/model" "$SCRATCH/model_copy"; rm -rf "$SCRATCH/copy"; cp -r "$SCRATCH/good" "$SCRATCH/copy"
check "the same base model in another directory resumes" "$BIN" train --model "$SCRATCH/model_copy" --data "$SCRATCH/data" \
  --num-layers 2 --batch-size 2 --val-batches 1 --adapter-path "$SCRATCH/copy" --iters 3 --resume
printf 'lora_parameters:\n  rank: 4\n  scale: 20.0\n  dropout: 0.0\n' >"$SCRATCH/rank4.yaml"
expect_error "state from another trainable layout (rank 4)" "the saved state belongs to another run" \
  train "$SCRATCH/other" -c "$SCRATCH/rank4.yaml" --iters 4 --resume
expect_error "state saved with another optimizer" "the saved state belongs to another run" \
  train "$SCRATCH/other" --optimizer sgd --iters 4 --resume
expect_error "adapters of another layout (eval)" "contains incompatible tensors" \
  "$BIN" eval --model "$SCRATCH/model3" --data "$SCRATCH/data" --test-batches 1 --batch-size 2 --adapter-path "$SCRATCH/good"
check "the foreign state is left as it was" cmp -s "$SCRATCH/other/$state" "$SCRATCH/good/$state"
finish faults/checkpoints
