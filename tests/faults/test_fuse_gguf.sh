#!/usr/bin/env bash
# lmtune fuse on a GGUF base (--model FILE.gguf), the inputs it must refuse
# and the faults it must survive: each refusal is one "lmtune: error:" line
# naming the file and the reason, given before anything is written (no
# output folder, no file, no temporary file); a write that fails (an
# injected EIO, an output path under a file) leaves no fused file and no
# temporary file behind. Also what works beside the fuse: --export-peft,
# --export-gguf-adapter with --no-fuse, an absolute --gguf-path, the
# tokenizer files beside the base copied beside the fused file.
source "$(dirname "$0")/lib.sh"
make_fixture
G=$SCRATCH/g; mkdir -p "$G"
# a q8_0 GGUF base: the fixture exported through a one-step adapter
train "$SCRATCH/a0" --iters 1 >/dev/null 2>&1 || bad "fixture: train failed"
"$BIN" fuse --model "$SCRATCH/model" --adapter-path "$SCRATCH/a0" --save-path "$SCRATCH/f0" --export-gguf \
  --gguf-type q8_0 --gguf-path "$G/base.gguf" >/dev/null 2>&1 || bad "fixture: GGUF export failed"
BASE=$G/base.gguf
gtrain() {
  local dir=$1; shift
  "$BIN" train --model "$BASE" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 --val-batches 1 \
    --steps-per-eval 1000 --adapter-path "$dir" --iters 2 "$@"
}
gtrain "$SCRATCH/ga" >/dev/null 2>&1 || bad "train on the GGUF base failed"

# nothing_written LABEL DIR: no output folder at all
nothing_written() { check "$1: nothing written" [ ! -e "$2" ]; }
no_tmp() { if ls "$2"/*.tmp.* >/dev/null 2>&1; then bad "$1: temporary file left"; else ok; fi; }

# --- refusals, before anything is written ---
expect_error "--dequantize" "$BASE: --dequantize applies to MLX-quantized models" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o1" --dequantize
nothing_written "--dequantize" "$SCRATCH/o1"
expect_error "--max-shard-size" "$BASE: --max-shard-size applies to safetensors shards" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o2" --max-shard-size 1GB
nothing_written "--max-shard-size" "$SCRATCH/o2"
# a full fine-tune's adapter (lmtune trains none on a GGUF base; a hand-made one)
cp -r "$SCRATCH/ga" "$SCRATCH/gfull"
sed -i 's/"fine_tune_type": *"lora"/"fine_tune_type": "full"/' "$SCRATCH/gfull/adapter_config.json"
expect_error "full fine-tune" "$SCRATCH/gfull: a full fine-tune cannot be fused into the GGUF base $BASE" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/gfull" --save-path "$SCRATCH/o3"
nothing_written "full fine-tune" "$SCRATCH/o3"
# the rank of adapter_config.json is not the tensors'
cp -r "$SCRATCH/ga" "$SCRATCH/grank"
sed -i 's/"rank": *8/"rank": 4/' "$SCRATCH/grank/adapter_config.json"
expect_error "rank mismatch" "adapter shape does not match model parameter shape" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/grank" --save-path "$SCRATCH/o4"
nothing_written "rank mismatch" "$SCRATCH/o4"
# an adapter of a deeper model: its third block is no matrix of this file
"$BIN" init --preset tiny --layers 3 --out "$SCRATCH/model3" >/dev/null || bad "init of the 3-layer model failed"
"$BIN" train --model "$SCRATCH/model3" --data "$SCRATCH/data" --num-layers 3 --batch-size 2 --val-batches 1 \
  --steps-per-eval 1000 --adapter-path "$SCRATCH/g3" --iters 1 >/dev/null 2>&1 || bad "train of the 3-layer model failed"
expect_error "foreign adapter" "Adapter at $SCRATCH/g3 contains incompatible tensors:" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/g3" --save-path "$SCRATCH/o5"
nothing_written "foreign adapter" "$SCRATCH/o5"
expect_error "missing adapter" "The adapter path does not exist: $SCRATCH/nope" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/nope" --save-path "$SCRATCH/o6"
nothing_written "missing adapter" "$SCRATCH/o6"
# a damaged base: cut in half, and not a GGUF at all
head -c $(( $(stat -c %s "$BASE") / 2 )) "$BASE" >"$G/cut.gguf"
expect_error "truncated base" "$G/cut.gguf" \
  "$BIN" fuse --model "$G/cut.gguf" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o7"
nothing_written "truncated base" "$SCRATCH/o7"
echo "not a gguf" >"$G/text.gguf"
expect_error "not a GGUF" "$G/text.gguf" \
  "$BIN" fuse --model "$G/text.gguf" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o8"
nothing_written "not a GGUF" "$SCRATCH/o8"
# an architecture lmtune does not read from GGUF (as a qwen35 file): named, refused
LC_ALL=C sed 's/llama/mamba/g' "$BASE" >"$G/mamba.gguf"
expect_error "unsupported architecture" "$G/mamba.gguf: general.architecture \"mamba\" is not supported" \
  "$BIN" fuse --model "$G/mamba.gguf" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o10"
nothing_written "unsupported architecture" "$SCRATCH/o10"
expect_error "memory limit" "the run needs .* but --memory-limit is 1 B" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/o9" --memory-limit 1B
nothing_written "memory limit" "$SCRATCH/o9"

# --- write faults: no fused file, no temporary file ---
rc=0; LMTUNE_FAIL_WRITE=1 "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/w1" \
  >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
check_clean_outcome "LMTUNE_FAIL_WRITE=1" "$rc" "$SCRATCH/err"
check "LMTUNE_FAIL_WRITE=1: the fuse fails" [ "$rc" = 1 ]
check "LMTUNE_FAIL_WRITE=1: the error names the file" grep -q "$SCRATCH/w1/ggml-model-f16.gguf.*write failed" "$SCRATCH/err"
check "LMTUNE_FAIL_WRITE=1: no fused file" [ ! -e "$SCRATCH/w1/ggml-model-f16.gguf" ]
no_tmp "LMTUNE_FAIL_WRITE=1" "$SCRATCH/w1"
# an allocation failure at every allocation site of the fuse (LMTUNE_FAIL_ALLOC=n),
# the merge's fp32 matrix and the writer's buffer among them, until three runs in a row
# succeed: a failed run leaves no fused file, or (a failure after the rename, copying the
# tokenizer files) the complete one, the same bytes as an undisturbed run's
"$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/ref" >/dev/null 2>&1 \
  || bad "the reference fuse failed"
n=1; in_a_row=0; runs=0; fails=0
while [ $in_a_row -lt 3 ] && [ $n -lt 5000 ]; do
  rm -rf "$SCRATCH/m"
  rc=0; LMTUNE_FAIL_ALLOC=$n "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/m" \
    >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  runs=$((runs+1))
  check_clean_outcome "LMTUNE_FAIL_ALLOC=$n" "$rc" "$SCRATCH/err"
  if [ $rc = 0 ]; then
    in_a_row=$((in_a_row+1))
    check "LMTUNE_FAIL_ALLOC=$n: succeeded, the file is there" [ -s "$SCRATCH/m/ggml-model-f16.gguf" ]
  else
    in_a_row=0; fails=$((fails+1))
    check "LMTUNE_FAIL_ALLOC=$n: reports the injected failure" grep -q "out of memory allocating" "$SCRATCH/err"
    if [ -e "$SCRATCH/m/ggml-model-f16.gguf" ]; then
      check "LMTUNE_FAIL_ALLOC=$n: no fused file, or a complete one" \
        cmp "$SCRATCH/m/ggml-model-f16.gguf" "$SCRATCH/ref/ggml-model-f16.gguf"
    else ok; fi
  fi
  no_tmp "LMTUNE_FAIL_ALLOC=$n" "$SCRATCH/m"
  n=$((n+1))
done
echo "allocation failures: $runs runs, $fails failed cleanly"
check "allocation failures: the injector fired" [ $fails -gt 10 ]
echo "a file" >"$SCRATCH/afile"
expect_error "output under a file" "$SCRATCH/afile" \
  "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/afile/out"

# --- what works ---
rc=0; "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --save-path "$SCRATCH/ok" --export-gguf \
  --export-peft "$SCRATCH/peft" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
check "fuse on the GGUF base: $(tail -1 "$SCRATCH/err")" [ "$rc" = 0 ]
check "the fused file is SAVE_PATH/ggml-model-f16.gguf" [ -s "$SCRATCH/ok/ggml-model-f16.gguf" ]
check "it says where" grep -q "^Fused model saved to $SCRATCH/ok/ggml-model-f16.gguf$" "$SCRATCH/out"
check "only the fused file is written (no safetensors)" [ "$(ls "$SCRATCH/ok")" = "ggml-model-f16.gguf" ]
no_tmp "fuse" "$SCRATCH/ok"
check "--export-peft on a GGUF base" [ -s "$SCRATCH/peft/adapter_model.safetensors" ] && [ -s "$SCRATCH/peft/adapter_config.json" ]
"$BIN" eval --model "$SCRATCH/ok/ggml-model-f16.gguf" --data "$SCRATCH/data" --test-batches 1 --batch-size 2 \
  >/dev/null 2>"$SCRATCH/err" || bad "the fused file does not evaluate: $(tail -1 "$SCRATCH/err")"
ok
rc=0; "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --no-fuse --export-gguf-adapter "$SCRATCH/lora.gguf" \
  --save-path "$SCRATCH/nofuse" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
check "--no-fuse --export-gguf-adapter on a GGUF base: $(tail -1 "$SCRATCH/err")" [ "$rc" = 0 ]
check "--no-fuse: the adapter written" [ -s "$SCRATCH/lora.gguf" ]
nothing_written "--no-fuse" "$SCRATCH/nofuse"
# an absolute --gguf-path stands alone; a tokenizer.json beside the base goes beside the fused file
cp "$SCRATCH/model/tokenizer.json" "$SCRATCH/model/tokenizer_config.json" "$G/"
rc=0; "$BIN" fuse --model "$BASE" --adapter-path "$SCRATCH/ga" --gguf-path "$SCRATCH/abs/fused.gguf" \
  --gguf-type q8_0 --save-path "$SCRATCH/unused" >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
check "absolute --gguf-path: $(tail -1 "$SCRATCH/err")" [ "$rc" = 0 ]
check "absolute --gguf-path: written there" [ -s "$SCRATCH/abs/fused.gguf" ]
check "absolute --gguf-path: --save-path unused" [ ! -e "$SCRATCH/unused" ]
check "the tokenizer files beside the base are copied beside the fused file" \
  cmp "$G/tokenizer.json" "$SCRATCH/abs/tokenizer.json"
finish "faults/fuse_gguf"
