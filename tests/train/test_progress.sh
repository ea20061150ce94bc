#!/usr/bin/env bash
# test_progress.sh: the progress line of `lmtune train` on a terminal. Under
# a pseudo-terminal 60 columns wide (python3's pty module), the run draws one
# line in place (carriage return + erase) with iteration/iters, loss,
# tokens/s and ETA, never wider than 59 columns, its bar filled in proportion
# and its iterations rising; with the progress frames taken out, the log is
# MLX-LM's lines exactly as a pipe gets them (timings aside). Piped, and on
# TERM=dumb, there is no carriage return and no escape sequence at all.
set -u
cd "$(dirname "$0")/../.."
. tests/shell_setup.sh
test_setup progress

tiny_model
ARGS=(train --model "$T/model" --data "$T/data" --num-layers -1 --batch-size 2 --max-seq-length 48 --val-batches 1
      --steps-per-report 5 --steps-per-eval 10 --learning-rate 1e-3 --threads 1 --seed 1 --iters 20 --save-every 10)
# 120 ms per iteration under the terminal: the progress line (at most ten redraws a second) is drawn at
# every iteration
DELAY=LMTUNE_TEST_STEP_DELAY_MS=120

# under a pseudo-terminal of 60 columns: stdout and stderr both go to it
pty_run() {  # OUT_FILE TERM ARGS...
  /usr/bin/python3 - "$@" <<'PY'
import fcntl, os, pty, struct, sys, termios
out, term, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 60, 0, 0))
    os.environ['TERM'] = term
    os.execv(argv[0], argv)
data = b''
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
open(out, 'wb').write(data)
sys.exit(os.waitstatus_to_exitcode(status))
PY
}
pty_run "$T/tty.out" xterm /usr/bin/env $DELAY "$BIN" "${ARGS[@]}" --adapter-path "$T/a"
rc=$?
ok '[ $rc -eq 0 ]' "train under a terminal"
"$BIN" "${ARGS[@]}" --adapter-path "$T/b" > "$T/pipe.out" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "train into a pipe"
ok '! grep -qP "[\r\x1b]" "$T/pipe.out"' "piped: no carriage return, no escape sequence"
pty_run "$T/dumb.out" dumb /usr/bin/env $DELAY "$BIN" "${ARGS[@]}" --adapter-path "$T/c" --iters 4
ok '! grep -qP "\x1b|\r." "$T/dumb.out"' "TERM=dumb: no escape sequence, no carriage return but the terminal's CR LF"

/usr/bin/python3 - "$T/tty.out" "$T/pipe.out" <<'PY'
import re, sys
tty = open(sys.argv[1], 'rb').read().decode().replace('\r\n', '\n')
pipe = open(sys.argv[2], 'rb').read().decode()
frame = re.compile(r'(?:\[(=*)(>?)( *)\] )?(\d+)/(\d+)  loss (\d+\.\d{3})  (\d+) tok/s  ETA (\d+:\d\d|--:--)')
chunks = tty.split('\r\x1b[K')
log, frames, bad = [chunks[0]], [], []
for c in chunks[1:]:
    if c.endswith('\n') or c == '':
        log.append(c)                     # a log line after the progress line was erased
    elif '\n' in c:
        bad.append('a frame followed by text without an erase: %r' % c)
    else:
        frames.append(c)
for f in frames:
    m = frame.fullmatch(f)
    if not m:
        bad.append('not a progress frame: %r' % f)
        continue
    if len(f) > 59:
        bad.append('wider than 59 columns: %d: %r' % (len(f), f))
    if m.group(1) is not None:
        cells = len(m.group(1)) + len(m.group(2)) + len(m.group(3))
        it, iters = int(m.group(4)), int(m.group(5))
        if len(m.group(1)) != cells * it // iters:
            bad.append('bar %r for %d/%d' % (f, it, iters))
its = [int(frame.fullmatch(f).group(4)) for f in frames if frame.fullmatch(f)]
if its != sorted(its) or len(its) < 15 or its[-1] != 20:
    bad.append('frames at iterations %r: expected one per iteration up to 20' % its)
if not any(re.search(r'ETA \d+:\d\d', f) for f in frames):
    bad.append('no frame with an ETA')
mask = lambda s: re.sub(r'(It/sec|Tokens/sec|Val took|Peak mem) [\d.]+', r'\1 #', s)
mask_dir = lambda s: re.sub(r'/tmp/lmtune_progress\.\w+/[ab]\b', 'DIR', s)
got, want = mask_dir(mask(''.join(log))), mask_dir(mask(pipe))
if got != want:
    import difflib
    diff = difflib.unified_diff(want.split('\n'), got.split('\n'), lineterm='')
    bad.append('the log differs from the piped one:\n' + '\n'.join(diff))
for b in bad:
    print('FAIL:', b)
print('%d progress frames (iterations %s..%s), %d log lines equal to the piped run\'s' % (
    len(frames), its[0] if its else '-', its[-1] if its else '-', got.count('\n')))
sys.exit(1 if bad else 0)
PY
rc=$?
ok '[ $rc -eq 0 ]' "the terminal's frames and log"
echo "summary train/progress: $checks checks, $fail failed"
[ $fail -eq 0 ]
