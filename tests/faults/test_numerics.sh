#!/usr/bin/env bash
# Numerical faults: an injected NaN loss and an infinite gradient are
# skipped, counted and reported; five in a row stop the run with a clear
# error (after which the last saved adapters still load); an absurd learning
# rate (1e6) runs without a crash and leaves finite adapters, bounded by
# --max-grad-norm; a learning rate of 0 leaves the adapters unchanged; a
# memory plan over --memory-limit is refused before loading any weight.
source "$(dirname "$0")/lib.sh"
make_fixture
run() { local d=$1; shift; rm -rf "$SCRATCH/$d"; train "$SCRATCH/$d" "$@" >"$SCRATCH/out" 2>"$SCRATCH/err"; }

LMTUNE_INJECT_NAN_AT_STEP=2 run nan1 --iters 4
check "one NaN loss: the run completes" [ $? = 0 ]
check "one NaN loss: skipped and reported" grep -q "^Iter 2: non-finite loss, update skipped (1 in a row, 1 in total)" "$SCRATCH/out"
LMTUNE_INJECT_INF_GRAD_AT_STEP=3 run inf1 --iters 4
check "one infinite gradient: the run completes" [ $? = 0 ]
check "one infinite gradient: skipped and reported" grep -q "^Iter 3: non-finite gradient, update skipped (1 in a row, 1 in total)" "$SCRATCH/out"
LMTUNE_INJECT_NAN_AT_STEP=2,4 LMTUNE_INJECT_INF_GRAD_AT_STEP=6 run mixed --iters 8
check "three isolated faults: counted in total" grep -q "^Iter 6: non-finite gradient, update skipped (1 in a row, 3 in total)" "$SCRATCH/out"
check "three isolated faults: the adapters are finite" python3 - "$SCRATCH/mixed/adapters.safetensors" <<'PY'
import json, math, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
vals = struct.unpack('<%df' % ((len(b) - 8 - n) // 4), b[8 + n:])
sys.exit(0 if all(math.isfinite(v) for v in vals) else 1)
PY
LMTUNE_INJECT_NAN_AT_STEP=3-20 expect_error "five NaN losses in a row" \
  "training stopped at iteration 7: 5 updates in a row had a non-finite loss or gradient" train "$SCRATCH/nan5" --iters 20 --save-every 2
check "five in a row: each is reported" grep -q "^Iter 7: non-finite loss, update skipped (5 in a row, 5 in total)" "$SCRATCH/out.$$"
check "five in a row: the last saved adapters load" evaluate "$SCRATCH/nan5"
LMTUNE_INJECT_INF_GRAD_AT_STEP=1-9 expect_error "five infinite gradients in a row" "5 updates in a row had a non-finite" \
  train "$SCRATCH/inf5" --iters 9

finite_max() {  # prints the largest |value| of an adapters file; fails on NaN/Inf
  python3 - "$1" <<'PY'
import json, math, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
vals = struct.unpack('<%df' % ((len(b) - 8 - n) // 4), b[8 + n:])
if not all(math.isfinite(v) for v in vals): sys.exit(1)
print(max(abs(v) for v in vals))
PY
}
for opt in adam sgd; do
  run "lr_$opt" --iters 10 --optimizer $opt --learning-rate 1e6
  rc=$?; check_clean_outcome "learning rate 1e6 ($opt)" $rc "$SCRATCH/err"
  [ $rc = 0 ] && check "learning rate 1e6 ($opt): finite adapters" finite_max "$SCRATCH/lr_$opt/adapters.safetensors"
done
run lr_clip --iters 10 --optimizer sgd --learning-rate 1e6 --max-grad-norm 0.001
check "learning rate 1e6 with --max-grad-norm: completes" [ $? = 0 ]
# SGD moves each weight by at most lr x max_grad_norm per update: 10 x 1e6 x 1e-3 = 1e4 (+ the initial values).
m=$(finite_max "$SCRATCH/lr_clip/adapters.safetensors")
check "clipping bounds the weights (max |w| = $m <= 1e4 + 1)" python3 -c "import sys; sys.exit(0 if $m <= 1e4 + 1 else 1)"

run lr0 --iters 3 --learning-rate 0
check "learning rate 0: completes" [ $? = 0 ]
run iters0 --iters 0
check "learning rate 0 leaves the adapters unchanged (byte-identical to the initial ones)" \
  cmp -s "$SCRATCH/lr0/adapters.safetensors" "$SCRATCH/iters0/adapters.safetensors"
# A memory plan over budget is refused before any weight is loaded (the
# weights' data is replaced by garbage: reading it would fail differently)
# and before the output directory is created.
cp -r "$SCRATCH/model" "$SCRATCH/model_garbage"
python3 -c "import sys,struct; p=sys.argv[1]; d=bytearray(open(p,'rb').read()); n=struct.unpack('<Q',d[:8])[0]; d[8+n:]=b'\xff'*(len(d)-8-n); open(p,'wb').write(d)" "$SCRATCH/model_garbage/model.safetensors"
expect_error "memory plan over --memory-limit" "the run needs .* but --memory-limit is 1.00 MB" \
  "$BIN" train --model "$SCRATCH/model_garbage" --data "$SCRATCH/data" --num-layers 2 --batch-size 2 --iters 1 \
  --memory-limit 1MB --adapter-path "$SCRATCH/over_budget"
check "over budget: no output directory" [ ! -e "$SCRATCH/over_budget" ]
finish faults/numerics
