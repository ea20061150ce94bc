#!/usr/bin/env bash
# test_report_browser.sh: a real browser opens the report. Headless Chromium
# (Debian's chromium, installed by scripts/install-deps.sh) renders the
# report.html of a short run (with clipped and skipped updates and a memory
# limit) to a 1200 x 2000 PNG: the browser logs no console error (an SVG
# attribute it cannot parse is one), the PNG has the window's size, it is not
# blank (colours and spread of the pixels, decoded with tests/report/png.py),
# and the charts' colours are on it: the train and validation curves, a
# skipped-update line and the memory plan's bar. No chromium: SKIP (77).
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup browser
if ! command -v chromium >/dev/null; then
  echo "SKIP: chromium is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
tiny_model
# a limit 20% above the plan, so the plan bar has its limit line (the plan's
# own figure: under AddressSanitizer the baseline alone is above 30 MB)
planned=$("$BIN" plan --model "$T/model" --data "$T/data" --num-layers -1 --batch-size 2 --max-seq-length 48 \
  --val-batches 1 --threads 1 2>/dev/null | sed -n 's/^Planned peak: \([0-9]*\) bytes.*/\1/p')
limit=$(( ${planned:-0} * 12 / 10 ))
LMTUNE_INJECT_NAN_AT_STEP=9 "$BIN" train --model "$T/model" --data "$T/data" --num-layers -1 --batch-size 2 \
  --max-seq-length 48 --val-batches 1 --steps-per-report 2 --steps-per-eval 4 --learning-rate 1e-3 --threads 1 \
  --iters 24 --max-grad-norm 3 --memory-limit "$limit" --adapter-path "$T/ad" > "$T/train.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ -s "$T/ad/report.html" ]' "a short run writes its report"

timeout 180 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$T/profile" \
  --enable-logging=stderr --v=0 --screenshot="$T/report.png" --window-size=1200,2000 \
  "file://$T/ad/report.html" > "$T/chromium.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "bytes written to file $T/report.png" "$T/chromium.log"' \
  "chromium renders the report (exit $rc): $(tail -1 "$T/chromium.log")"
ok '! grep -q "CONSOLE" "$T/chromium.log"' "no console message: $(grep -m1 CONSOLE "$T/chromium.log")"

/usr/bin/python3 - "$T/report.png" <<'PY'
import sys
sys.path.insert(0, 'tests/report')
import png
width, height, pixels = png.read(sys.argv[1])
colours, std = png.stats(pixels)
flat = b''.join(bytes(c for p in row for c in p) for row in pixels)
def count(hex_colour):  # pixels of exactly this colour (the chart's stroke or fill)
    return flat.count(bytes.fromhex(hex_colour))
want = {'1f77b4': 500, 'ff7f0e': 300, 'd62728': 20, 'a5a5a5': 500}   # train, validation, skip line, plan class
got = {c: count(c) for c in want}
bad = []
if (width, height) != (1200, 2000):
    bad.append('size %dx%d, expected 1200x2000' % (width, height))
if colours < 100 or min(std) < 15:
    bad.append('a blank-looking image: %d colours, channel spreads %s' % (colours, std))
for c, n in want.items():
    if got[c] < n:
        bad.append('#%s: %d pixels, expected at least %d' % (c, got[c], n))
for b in bad:
    print('FAIL:', b)
print('screenshot %dx%d: %d colours, channel spreads %.1f %.1f %.1f; pixels of the chart colours %s' % (
    width, height, colours, std[0], std[1], std[2], got))
sys.exit(1 if bad else 0)
PY
rc=$?
ok '[ $rc -eq 0 ]' "the screenshot"
echo "summary report/browser: $checks checks, $fail failed"
[ $fail -eq 0 ]
