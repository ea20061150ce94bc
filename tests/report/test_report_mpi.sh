#!/usr/bin/env bash
# test_report_mpi.sh: the report of a data-parallel run (2 workers under
# mpirun): rank 0 alone writes the history, the run record and the page;
# the polylines equal the metrics file's values (check_report.py); the
# history and the page carry the workers and the all-reduce time; the
# trained tokens are counted over both workers (the same as one process
# training the same global batches). Not an MPI build: SKIP (77).
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup report_mpi
if ! ldd "$BIN" 2>/dev/null | grep -q libmpi || ! command -v mpirun >/dev/null; then
  echo "SKIP: not an MPI build (Open MPI is installed by scripts/install-deps.sh; make MPI=1)"; exit 77
fi
tiny_model
F="--model $T/model --data $T/data --num-layers -1 --iters 12 --batch-size 4 --max-seq-length 48 --val-batches 1
   --steps-per-report 2 --steps-per-eval 4 --learning-rate 1e-2 --optimizer sgd --loss-normalization tokens --threads 1
   --max-grad-norm 1"
mpirun --oversubscribe --allow-run-as-root -np 2 "$BIN" train $F --adapter-path "$T/two" > "$T/two.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "2 workers: $(tail -1 "$T/two.log")"
"$BIN" train $F --adapter-path "$T/one" > "$T/one.log" 2>&1
ok '[ -s "$T/two/report.html" ] && [ -s "$T/two/run.json" ]' "report.html and run.json"
checks=$((checks+1))
python3 tests/report/check_report.py "$T/two/report.html" "$T/two/metrics.jsonl" --resumes 0 --skips 0 || {
  fail=$((fail+1)); echo "FAIL: check_report"; }
ok 'head -1 "$T/two/metrics.jsonl" | grep -q "\"world\": 2"' "the start event names 2 workers"
ok '[ "$(grep -c "\"allreduce_seconds\"" "$T/two/metrics.jsonl")" = 7 ]' \
  "the 6 report records and the end record carry the all-reduce time"
ok 'grep -q ">2 workers<" "$T/two/report.html" && grep -q "ms per update" "$T/two/report.html"' \
  "the page shows the workers and the all-reduce time per update"
ok 'grep -q "\"world\": 2" "$T/two/run.json" && grep -q "\"effective_batch_size\": 4" "$T/two/run.json"' \
  "run.json: 2 workers, effective batch 4"
tokens() { grep -o '"trained_tokens": [0-9]*' "$1" | tr '\n' ' '; }
ok '[ "$(tokens "$T/two/metrics.jsonl")" = "$(tokens "$T/one/metrics.jsonl")" ]' \
  "trained tokens over both workers equal one process's: $(tokens "$T/two/metrics.jsonl")"
echo "summary report/mpi: $checks checks, $fail failed"
[ $fail -eq 0 ]
