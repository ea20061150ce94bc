#!/usr/bin/env bash
# test_schedule_cli.sh: the "Learning Rate" of every report of `lmtune train`
# (50 iterations, one update each) equals, to the printed digits, what MLX
# prints for the same lr_schedule: the {:.3e} of MLX's float32 value from an
# independent Python implementation of mlx/optimizers/schedulers.py and
# MLX-LM's warm-up join (tests/train/mlx_schedules.py, run here; its output
# must also equal the committed tests/train/mlx_schedules.expected that
# test_schedule.c reads). Ten schedules: each kind with and without warm-up.
set -u
. tests/shell_setup.sh
test_setup schedule_cli
PY=/usr/bin/python3
if ! "$PY" -c "import numpy" 2>/dev/null; then
  echo "SKIP: $PY with numpy is needed (scripts/install-deps.sh)"
  exit 77
fi

"$PY" tests/train/mlx_schedules.py > "$T/expected" || { echo "mlx_schedules.py failed"; exit 1; }
ok 'cmp -s "$T/expected" tests/train/mlx_schedules.expected' \
   "mlx_schedules.py output equals the committed mlx_schedules.expected"

"$BIN" init --preset tiny --layers 1 --out "$T/model" --tokenizer-text demo/data/train.jsonl \
  --vocab-size 300 >/dev/null \
  || { echo "init failed"; exit 1; }
mkdir -p "$T/data"
head -n 8 demo/data/train.jsonl > "$T/data/train.jsonl"
cases=$(grep '^case ' "$T/expected" | cut -d' ' -f2)
n=0
for c in $cases; do
  n=$((n+1))
  "$PY" tests/train/mlx_schedules.py --yaml "$c" > "$T/$c.yaml"
  "$BIN" train --model "$T/model" --data "$T/data" -c "$T/$c.yaml" --iters 50 --steps-per-report 1 \
    --batch-size 1 --max-seq-length 16 --num-layers 1 --threads 1 --adapter-path "$T/ad_$c" > "$T/$c.log" 2>&1
  rc=$?
  ok '[ $rc -eq 0 ]' "$c: train exit status $rc ($(tail -1 "$T/$c.log"))"
  # iteration k reports the rate of update k, schedule(k - 1)
  sed -n 's/^Iter \([0-9]*\): Train loss .*Learning Rate \([^,]*\),.*/\1 \2/p' "$T/$c.log" \
    | awk '{print $1 - 1, $2}' > "$T/$c.got"
  awk -v c="$c" '$1 == "case" {on = ($2 == c); next} on {print $1, $3}' "$T/expected" > "$T/$c.want"
  ok '[ "$(wc -l < "$T/$c.got")" -eq 50 ] && cmp -s "$T/$c.got" "$T/$c.want"' \
     "$c: learning rates differ from MLX's: $(diff "$T/$c.got" "$T/$c.want" | head -4 | tr '\n' ' ')"
done
ok '[ $n -eq 10 ]' "ten schedules (got $n)"
echo "summary train/schedule_cli: $checks checks, $fail failed ($n schedules x 50 iterations)"
[ $fail -eq 0 ]
