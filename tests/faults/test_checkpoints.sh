#!/usr/bin/env bash
# Damaged and foreign checkpoints: a flipped byte in the data or the header
# of the training state, a truncated state or adapters file, a state from a
# different base model or trainable layout: each is refused on --resume (or
# on eval) with an error naming the file, and nothing is overwritten.
source "$(dirname "$0")/lib.sh"
make_fixture
train "$SCRATCH/good" --iters 2 --save-every 1 >/dev/null 2>&1 || bad "the reference run failed"
damaged() {  # damaged NAME FILE PYTHON-EXPR-ON-d: a copy of good/ with FILE altered
  rm -rf "$SCRATCH/$1"; cp -r "$SCRATCH/good" "$SCRATCH/$1"
  python3 -c "import sys; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); $3; open(p,'wb').write(d)" "$SCRATCH/$1/$2"
}
state=training_state.safetensors
damaged flip_data $state "d[-5] ^= 0x01"
expect_error "flipped byte in the state's data" "$state: checksum mismatch" train "$SCRATCH/flip_data" --iters 4 --resume
differs() { ! cmp -s "$1" "$2"; }
check "the damaged state is left as it was (not overwritten)" differs "$SCRATCH/flip_data/$state" "$SCRATCH/good/$state"
damaged flip_head $state "i = d.index(b'\"iteration\":\"') + 13; d[i] = ord('x')"
expect_error "damaged number in the state's header" "metadata \"iteration\" is not an unsigned integer" train "$SCRATCH/flip_head" --iters 4 --resume
damaged flip_json $state "d[8] = ord('[')"
expect_error "damaged JSON of the state's header" "$state" train "$SCRATCH/flip_json" --iters 4 --resume
damaged trunc_state $state "del d[len(d)//2:]"
expect_error "truncated state" "$state: the data should end at byte .* (file is truncated)" train "$SCRATCH/trunc_state" --iters 4 --resume
damaged trunc_state1 $state "del d[-1:]"
expect_error "state short by one byte" "$state" train "$SCRATCH/trunc_state1" --iters 4 --resume
damaged empty_state $state "del d[:]"
expect_error "empty state" "$state" train "$SCRATCH/empty_state" --iters 4 --resume
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
