#!/usr/bin/env bash
# test_report.sh: the training report (report.html) and the history it is
# made from (ADAPTER_DIR/metrics.jsonl, run.json). For a plain run (with
# clipping), a run with skipped non-finite updates, a resumed run and a run
# killed with kill -9 (then resumed), the SVG polylines read back equal the
# metrics file's values (check_report.py), the skipped updates, resumes,
# clipped windows and the best validation point are marked where they
# belong, a resumed history continues the uninterrupted one exactly, and
# `lmtune report` works after a kill -9 and on a torn last line; bad input
# gives one error naming the file and the line, and leaves the old report.
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup report
check_report() {  # REPORT METRICS [flags]: the polylines against the metrics file
  checks=$((checks+1))
  if ! python3 tests/report/check_report.py "$@"; then fail=$((fail+1)); echo "FAIL: check_report $*"; fi
}

tiny_model
run() {
  "$BIN" train --model "$T/model" --data "$T/data" --num-layers -1 --batch-size 2 --max-seq-length 48 \
    --val-batches 1 --steps-per-report 2 --steps-per-eval 4 --learning-rate 1e-3 --threads 1 --seed 1 "$@"
}

# 1. A plain run, clipped at a norm its first updates exceed.
run --iters 16 --adapter-path "$T/plain" --max-grad-norm 3 --memory-limit 1GB > "$T/plain.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "plain run"
ok '[ -s "$T/plain/report.html" ] && [ -s "$T/plain/run.json" ] && [ -s "$T/plain/metrics.jsonl" ]' \
  "report.html, run.json and metrics.jsonl in the adapter directory"
check_report "$T/plain/report.html" "$T/plain/metrics.jsonl" --resumes 0 --skips 0 --clips
count() { grep -c "$1" "$2"; }
ok '[ "$(count "\"train_loss\"" "$T/plain/metrics.jsonl")" = 8 ] &&
    [ "$(count "\"val_loss\"" "$T/plain/metrics.jsonl")" = 5 ]' \
  "8 report and 5 evaluation records"
start='^{"event": "start", "iteration": 0, "iters": 16, "resumed": false'
ok 'head -1 "$T/plain/metrics.jsonl" | grep -q "$start"' \
  "the history opens with a start event"
ok 'tail -1 "$T/plain/metrics.jsonl" | grep -q "^{\"event\": \"end\", \"iteration\": 16, \"status\": \"completed\""' \
  "and ends with an end event"
ok 'grep -q "completed at iteration 16" "$T/plain/report.html"' "the report says completed"
ok 'grep -q "<code>--max-grad-norm</code></td><td>3</td><td>0</td>" "$T/plain/report.html"' \
  "a flag that differs from its default is listed with its default"
ok '! grep -q "<code>--steps-per-eval</code></td><td>200" "$T/plain/report.html"' "a default flag is not listed"
ok 'grep -q "data-part=\"optimizer moments\"" "$T/plain/report.html" &&
    grep -q "data-bar=\"peak\"" "$T/plain/report.html"' \
  "the memory bars: the plan by class and the measured peak"
ok 'grep -q "\-\-memory-limit 1.000 GB" "$T/plain/report.html"' "the memory limit is drawn"
# the plan's classes in run.json add up to its total
ok '/usr/bin/python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); p=r[\"plan\"]
total = sum(c[\"bytes\"] for c in p[\"classes\"])
sys.exit(0 if total == p[\"total\"] and r[\"effective_batch_size\"] == 2 else 1)" "$T/plain/run.json"' \
  "run.json: the classes sum to the plan's total; effective batch 2"
ok '! grep -qi "<script" "$T/plain/report.html" && ! grep -Eq "(src|href)=\"(https?:)?//" "$T/plain/report.html"' \
  "no script and no external asset"
# lmtune report makes the same page (but for the time it was made)
"$BIN" report "$T/plain" --out "$T/again.html" > "$T/report.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Report written to $T/again.html$" "$T/report.log"' "lmtune report DIR --out FILE"
ok 'diff <(grep -v "^<footer>" "$T/plain/report.html") <(grep -v "^<footer>" "$T/again.html") >/dev/null' \
  "lmtune report writes what train wrote"

# 2. Skipped updates: a NaN loss at iteration 5, an infinite gradient at 9, and a whole report window of NaN
# losses (iterations 11-12) whose train loss is null: the train curve breaks there.
LMTUNE_INJECT_NAN_AT_STEP=5,11-12 LMTUNE_INJECT_INF_GRAD_AT_STEP=9 run --iters 16 --adapter-path "$T/skips" \
  > "$T/skips.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "run with skipped updates"
check_report "$T/skips/report.html" "$T/skips/metrics.jsonl" --skips 4
ok 'grep -q "\"iteration\": 12, \"train_loss\": null" "$T/skips/metrics.jsonl"' "a window of NaN losses is null"
ok '[ "$(grep -c "data-series=\"train_loss\"" "$T/skips/report.html")" = 8 ]' \
  "the train curve is cut in two at the null (two polylines in each of the four loss charts)"

# 3. Resumed: 8 iterations, then --resume to 16: one history, equal to the straight run's
# value for value (an exact resume; times and throughput aside).
same_history() {  # the values of two histories, after the resume rule
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, 'tests/report')
from check_report import history
keep = ('iteration', 'train_loss', 'learning_rate', 'trained_tokens', 'grad_norm', 'grad_norm_max',
        'clipped_updates', 'updates', 'skipped_updates', 'val_loss')
a, b = history(sys.argv[1]), history(sys.argv[2])
rows = lambda h: [{k: r.get(k) for k in keep} for r in h[0] + h[1]]
for x, y in zip(rows(a), rows(b)):
    if x != y:
        print('differ:', x, y)
        break
sys.exit(0 if rows(a) == rows(b) and rows(a) else 1)
PY
}
run --iters 16 --adapter-path "$T/straight" --save-every 3 --max-grad-norm 3 > /dev/null 2>&1
run --iters 8 --adapter-path "$T/res" --save-every 3 --max-grad-norm 3 > /dev/null 2>&1
run --iters 16 --adapter-path "$T/res" --save-every 3 --max-grad-norm 3 --resume > "$T/res.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "resumed run"
check_report "$T/res/report.html" "$T/res/metrics.jsonl" --resumes 1 --clips
ok 'same_history "$T/straight/metrics.jsonl" "$T/res/metrics.jsonl"' \
  "the resumed history equals the uninterrupted run's (losses, rates, tokens, norms, clipping)"

# 4. kill -9 in the middle of a run: the report is made from what was flushed, says the run
# was killed, and a torn last line (a kill in the middle of a write) is left out.
( exec env LMTUNE_TEST_STEP_DELAY_MS=40 "$BIN" train --model "$T/model" --data "$T/data" --num-layers -1 \
    --batch-size 2 --max-seq-length 48 --val-batches 1 --steps-per-report 2 --steps-per-eval 4 --learning-rate 1e-3 \
    --threads 1 --seed 1 --iters 100000 --save-every 3 --adapter-path "$T/killed" > "$T/killed.log" 2>&1 ) &
pid=$!
for _ in $(seq 400); do
  n=$(grep -c "\"train_loss\"" "$T/killed/metrics.jsonl" 2>/dev/null)
  [ "${n:-0}" -ge 6 ] && break
  sleep 0.05
done
kill -9 $pid; wait $pid 2>/dev/null
ok '[ "$(grep -c "\"train_loss\"" "$T/killed/metrics.jsonl")" -ge 6 ]' "the killed run had written its records"
printf '{"iteration": 99999, "train_lo' >> "$T/killed/metrics.jsonl"
rm -f "$T/killed/report.html"
"$BIN" report "$T/killed" > "$T/report.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ -s "$T/killed/report.html" ]' "lmtune report after kill -9: $(tail -1 "$T/report.log")"
ok 'grep -q "the process was killed" "$T/killed/report.html"' "the report says the process was killed"
ok 'grep -q "an incomplete last line, cut by a kill, left out" "$T/killed/report.html"' "the torn last line is noted"
head -c -29 "$T/killed/metrics.jsonl" > "$T/killed.jsonl"   # the same file without the torn line, for the checker
check_report "$T/killed/report.html" "$T/killed.jsonl"
# ... and the resume cuts the torn line off and continues one history
it=$(grep -ao '"iteration":"[0-9]*"' "$T/killed/training_state.safetensors" | grep -o '[0-9]*')
run --iters $((it + 4)) --save-every 3 --adapter-path "$T/killed" --resume > "$T/killed2.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "resume after kill -9 (from iteration $it): $(tail -1 "$T/killed2.log")"
ok '! grep -q "\"iteration\": 99999" "$T/killed/metrics.jsonl"' "the resume cut the torn line off"
ok '[ "$(grep -c "\"event\": \"start\"" "$T/killed/metrics.jsonl")" = 2 ]' "both processes' records stay in the file"
run --iters $((it + 4)) --save-every 3 --adapter-path "$T/killed_straight" > /dev/null 2>&1
ok 'same_history "$T/killed_straight/metrics.jsonl" "$T/killed/metrics.jsonl"' \
  "killed at $it, resumed: the history equals a straight run's of $((it + 4)) iterations"
check_report "$T/killed/report.html" "$T/killed/metrics.jsonl" --resumes 1
ok 'grep -q "completed at iteration $((it + 4))" "$T/killed/report.html"' "the resumed run completes the report"

# 4b. The resume rule on a history written by hand: a resume from iteration 6 supersedes the
# first process's records 7..10 (a kill after its save at 6); the page follows the rule.
mkdir -p "$T/synthetic"
/usr/bin/python3 - "$T/synthetic/metrics.jsonl" <<'PY'
import json, sys
out = open(sys.argv[1], 'w')
def w(**r): out.write(json.dumps(r) + '\n')
w(event='start', iteration=0, iters=12, resumed=False, world=1, pid=1, host='elsewhere', time=1000.0)
for it in range(1, 11):
    if it % 4 == 1: w(iteration=it, val_loss=3.0 - it / 10, val_time=0.1, trained_tokens=100 * (it - 1),
                      time=1000.0 + it)
    if it % 2 == 0: w(iteration=it, train_loss=3.5 - it / 10, learning_rate=1e-3, tokens_per_second=50.0 + it,
                      trained_tokens=100 * it, peak_memory=0.5, grad_norm=1.0 / it, grad_norm_max=2.0 / it,
                      updates=2, clipped_updates=0, skipped_updates=0, time=1000.0 + it)
w(event='skip', iteration=9, reason='loss', skipped_updates=1, time=1009.0)
w(event='start', iteration=6, iters=12, resumed=True, world=1, pid=2, host='elsewhere', time=2000.0)
for it in range(7, 13):
    if it % 4 == 1: w(iteration=it, val_loss=2.0 - it / 10, val_time=0.1, trained_tokens=100 * (it - 1),
                      time=2000.0 + it)
    if it % 2 == 0: w(iteration=it, train_loss=2.5 - it / 10, learning_rate=1e-3, tokens_per_second=60.0 + it,
                      trained_tokens=100 * it, peak_memory=0.6, grad_norm=1.0 / it, grad_norm_max=2.0 / it,
                      updates=2, clipped_updates=1, skipped_updates=0, time=2000.0 + it)
w(event='end', iteration=12, status='completed', updates=12, skipped_updates=0, time=2012.5)
PY
"$BIN" report "$T/synthetic" > "$T/report.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "report of a hand-written history: $(tail -1 "$T/report.log")"
check_report "$T/synthetic/report.html" "$T/synthetic/metrics.jsonl" --resumes 1 --skips 0 --clips
ok 'grep -q ">22.5 s<" "$T/synthetic/report.html"' \
  "wall time: each process from its start to its last record, superseded ones included (10 s + 12.5 s)"
ok 'grep -q ">2 starts (resumed)<" "$T/synthetic/report.html"' "two starts"

# 5. Bad input: one error naming the file and the line; the previous report is kept.
cp "$T/plain/metrics.jsonl" "$T/plain/metrics.good"
sed -i '3s/.*/{"iteration": 3, "train_loss": /' "$T/plain/metrics.jsonl"
before=$(md5sum < "$T/plain/report.html")
"$BIN" report "$T/plain" > "$T/out" 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && [ "$(wc -l < "$T/err")" = 1 ] &&
    grep -q "^lmtune: error: $T/plain/metrics.jsonl:3: not a JSON object: " "$T/err"' \
  "a broken record in the middle: $(cat "$T/err")"
ok '[ "$before" = "$(md5sum < "$T/plain/report.html")" ] && ! ls "$T"/plain/*.tmp.* >/dev/null 2>&1' \
  "the previous report is unchanged, no temporary file"
cp "$T/plain/metrics.good" "$T/plain/metrics.jsonl"
sed -i '2s/"iteration": 1,/"iteration": -1,/' "$T/plain/metrics.jsonl"
"$BIN" report "$T/plain" > "$T/out" 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "metrics.jsonl:2: \"iteration\" must be a non-negative integer" "$T/err"' \
  "a negative iteration: $(cat "$T/err")"
"$BIN" report "$T/nowhere" > "$T/out" 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: $T/nowhere: no such directory" "$T/err"' "a missing directory"
mkdir -p "$T/empty"
"$BIN" report "$T/empty" > "$T/out" 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: $T/empty/metrics.jsonl: no such file" "$T/err"' \
  "a directory without a history"
"$BIN" report > "$T/out" 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "an adapter directory is required" "$T/err"' "no directory given"
"$BIN" report --help > "$T/out" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^usage: lmtune report ADAPTER_DIR \[--out FILE\]" "$T/out"' "lmtune report --help"
# 6. lmtune plan --html: the plan's stacked bar and each lever's. Each bar's classes equal,
# byte for byte, the text table of `lmtune plan` run with that lever's flags (the measured
# process baseline and library scratch aside: each process measures its own baseline and
# the oneDNN primitives it creates).
P=(plan --model "$T/model" --data "$T/data" --num-layers -1 --batch-size 4 --max-seq-length 48)
"${BIN}" "${P[@]}" --memory-limit 16.5MB --html "$T/plan.html" > "$T/plan.txt" 2> "$T/plan.err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^Plan page written to $T/plan.html$" "$T/plan.txt" && [ -s "$T/plan.html" ]' \
  "plan --html over the limit: the page is written, the exit status is 1"
"${BIN}" "${P[@]}" > "$T/plan_run.txt" 2>&1
"${BIN}" "${P[@]}" --grad-checkpoint > "$T/plan_ckpt.txt" 2>&1
"${BIN}" "${P[@]}" --batch-size 2 --grad-accumulation-steps 2 > "$T/plan_half.txt" 2>&1
/usr/bin/python3 - "$T/plan.html" "$T/plan_run.txt" "$T/plan_ckpt.txt" "$T/plan_half.txt" <<'PY'
import re, sys
page = open(sys.argv[1]).read()
bars = {}
for m in re.finditer(r'<g class="bar" data-bar="\w+"><text[^>]*>(.*?)</text>(.*?)</g>', page):
    label = re.sub(r'<[^>]+>', ' ', m.group(1)).split()
    parts = dict(re.findall(r'data-part="([^"]+)" data-bytes="([0-9.e+]+)"', m.group(2)))
    bars[' '.join(label)] = {k: float(v) for k, v in parts.items()}
def table(path):   # the class rows of `lmtune plan`'s text table
    rows = re.findall(r'^  (\S.*?)\s+(\d+)\s+\S+ \S+$', open(path).read(), re.M)
    return {k: float(v) for k, v in rows if float(v) > 0 and not k.startswith('arena')}
bad = []
for label, path in (('this run', sys.argv[2]), ('--grad-checkpoint', sys.argv[3]),
                    ('--batch-size 2 --grad-accumulation-steps 2', sys.argv[4])):
    measured = ('process baseline', 'library scratch')
    want = {k: v for k, v in table(path).items() if not k.startswith(measured)}
    got = {k: v for k, v in bars.get(label, {}).items() if not k.startswith(measured)}
    if not want or got != want:
        bad.append('%s: bar %r, lmtune plan prints %r' % (label, got, want))
print('plan page: %d bars (%s); 3 compared class by class with lmtune plan' % (len(bars), ', '.join(bars)))
for b in bad: print('FAIL:', b)
sys.exit(1 if bad or len(bars) < 5 else 0)
PY
rc=$?
ok '[ $rc -eq 0 ]' "plan --html: the bars equal lmtune plan's tables"
fits_column() {  # "fits the limit" says yes exactly for the totals at or under 16.5 MB
  /usr/bin/python3 - "$1" <<'PY'
import re, sys
row = r'data-total="([0-9.e+]+)">[^<]*</td><td class="num">[^<]*</td><td>(yes|no)</td>'
rows = re.findall(row, open(sys.argv[1]).read())
print(rows)
sys.exit(0 if len(rows) >= 5 and all((float(t) <= 16.5e6) == (f == 'yes') for t, f in rows) else 1)
PY
}
ok 'fits_column "$T/plan.html" >/dev/null && grep -q "\-\-memory-limit 16.5 MB" "$T/plan.html"' \
  "the levers that fit the limit are marked (and only they), the limit drawn"
"${BIN}" "${P[@]}" --html "$T/nodir/x/plan.html" > /dev/null 2> "$T/err"
rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: $T/nodir/x/plan.html: cannot write: No such file or directory" "$T/err"' \
  "plan --html into a missing directory: $(cat "$T/err")"

echo "summary report: $checks checks, $fail failed"
[ $fail -eq 0 ]
