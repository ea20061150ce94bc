#!/usr/bin/env bash
# A worker killed mid-run: the other exits with an error within a bounded
# time (mpirun notices the dead rank and aborts the job), no hang.
set -u
BIN=${LMTUNE_BIN:-./lmtune}
if ! command -v mpirun >/dev/null; then
  echo "SKIP: no mpirun (scripts/install-deps.sh installs openmpi-bin)"
  exit 77
fi
"$BIN" train --help 2>/dev/null | grep -q . || exit 1
if ! ldd "$BIN" | grep -q libmpi; then
  echo "SKIP: $BIN is built without MPI (make MPI=1)"
  exit 77
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
d=$(mktemp -d /tmp/lmtune-mpikill-XXXXXX); trap 'rm -rf "$d"' EXIT
"$BIN" init --preset tiny --out "$d/model" >/dev/null || exit 1
mkdir -p "$d/data"
for i in $(seq 1 16); do echo "{\"text\": \"line $i of some training text for the kill test\"}"; done > "$d/data/train.jsonl"
mpirun --oversubscribe -np 2 "$BIN" train --model "$d/model" --data "$d/data" --num-layers -1 --batch-size 4 \
  --iters 1000000 --steps-per-eval 1000000 --save-every 1000000 --adapter-path "$d/ad" >"$d/log" 2>&1 &
mp=$!
# wait until both ranks run, then kill -9 one of them
for _ in $(seq 1 100); do n=$(pgrep -f "adapter-path $d/ad" | grep -v "^$mp\$" | wc -l); [ "$n" -ge 2 ] && break; sleep 0.1; done
victim=$(pgrep -f "adapter-path $d/ad" | grep -v "^$mp\$" | tail -1)
[ -n "$victim" ] || { echo "no worker found"; kill -9 $mp; exit 1; }
sleep 1
kill -9 "$victim"
t0=$(date +%s)
for _ in $(seq 1 300); do kill -0 $mp 2>/dev/null || break; sleep 0.1; done
if kill -0 $mp 2>/dev/null; then echo "mpirun still running 30 s after a worker died"; pkill -9 -f "adapter-path $d/ad"; exit 1; fi
wait $mp; rc=$?
dt=$(( $(date +%s) - t0 ))
echo "mpirun exited with $rc ${dt}s after rank pid $victim was killed"
tail -5 "$d/log"
[ $rc -ne 0 ] || { echo "expected a non-zero exit"; exit 1; }
pgrep -f "adapter-path $d/ad" && { echo "a worker survived"; exit 1; }
echo "summary dist/mpi_kill: 1 checks, 0 failed"
