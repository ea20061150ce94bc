#!/usr/bin/env bash
# test_mpi.sh: data parallelism. With an MPI build of the CLI (make MPI=1),
# 2 workers with --batch-size 4 and 1 process with --batch-size 4 give the
# same adapters after several updates (relative 1e-6), with and without
# gradient accumulation, under --loss-normalization tokens (token-weighted
# over the global batch, so the split does not change the objective).
# Without an MPI build or mpirun: skipped (exit 77, a failure in strict runs).
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup mpi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (scripts/install-deps.sh installs openmpi-bin)"
  exit 77
fi
if ! ldd "$BIN" 2>/dev/null | grep -q libmpi; then
  echo "SKIP: $BIN is built without MPI (make MPI=1)"
  exit 77
fi
tiny_model
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
for A in 1 2; do
  F="--model $T/model --data $T/data --num-layers -1 --iters 8 --batch-size 4 --max-seq-length 48 --val-batches 1
     --learning-rate 1e-2 --optimizer sgd --loss-normalization tokens --threads 1 --grad-accumulation-steps $A"
  $MPIRUN -np 1 "$BIN" train $F --adapter-path "$T/one$A" > "$T/one$A.log" 2>&1
  $MPIRUN -np 2 "$BIN" train $F --adapter-path "$T/two$A" > "$T/two$A.log" 2>&1
  rel=$(/usr/bin/python3 - "$T/one$A/adapters.safetensors" "$T/two$A/adapters.safetensors" <<'PY'
import json, struct, sys, array
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: array.array('f', d[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items() if k != '__metadata__'}
a, b = load(sys.argv[1]), load(sys.argv[2])
worst = 0.0
for k in a:
    scale = max(max(abs(x) for x in a[k]), 1e-30)
    worst = max(worst, max(abs(x - y) for x, y in zip(a[k], b[k])) / scale)
print(worst if a.keys() == b.keys() else 1.0)
PY
)
  checks=$((checks+1))
  echo "accumulation $A: 2 workers vs 1 process: rel diff $rel"
  if ! /usr/bin/python3 -c "import sys; sys.exit(0 if float('$rel') <= 1e-6 else 1)"; then fail=$((fail+1)); echo "FAIL: A=$A rel $rel"; fi
  checks=$((checks+1))
  grep -q "^Effective batch size: 2 x $A x 2 = $((4*A))$" "$T/two$A.log" || { fail=$((fail+1)); echo "FAIL: effective batch line"; }
done
echo "summary train/mpi: $checks checks, $fail failed"
[ $fail -eq 0 ]
