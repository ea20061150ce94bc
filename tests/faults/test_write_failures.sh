#!/usr/bin/env bash
# Faults while saving: an injected EIO at each atomic write of a run
# (LMTUNE_FAIL_WRITE=n), a disk that fills up (a small tmpfs), a read-only
# output directory and an output path under a file. Each must stop the run
# with one clear error and leave the previous adapters and training state
# intact and loadable (the resume continues from them), with no temporary
# file behind. The tmpfs cases need mount: as root, or else in a user and
# mount namespace of their own (unshare -rm); without either they are
# skipped (exit 77, a failure in strict runs).
if [ "$(id -u)" != 0 ] && [ -z "${LMTUNE_IN_UNSHARE:-}" ] && unshare -rm true 2>/dev/null; then
  LMTUNE_IN_UNSHARE=1 exec unshare -rm bash "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"
skip_reason=""
make_fixture
# A first complete run: the "previous" checkpoint.
train "$SCRATCH/base" --iters 2 --save-every 1 >/dev/null 2>&1 || bad "the reference run failed"
saves_per_iter=3   # adapters.safetensors, NNNNNNN_adapters.safetensors, training_state.safetensors
for n in 1 2 3 4 5 6 7; do
  rm -rf "$SCRATCH/ad"; cp -r "$SCRATCH/base" "$SCRATCH/ad"
  before=$(md5sum <"$SCRATCH/ad/training_state.safetensors")
  rc=0; LMTUNE_FAIL_WRITE=$n train "$SCRATCH/ad" --iters 4 --save-every 1 --resume >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check_clean_outcome "LMTUNE_FAIL_WRITE=$n" "$rc" "$SCRATCH/err"
  check "LMTUNE_FAIL_WRITE=$n: the run fails" [ "$rc" = 1 ]
  check "LMTUNE_FAIL_WRITE=$n: the error names the write" grep -q "write failed: Input/output error (the previous file, if any, is unchanged)" "$SCRATCH/err"
  if ls "$SCRATCH"/ad/*.tmp.* >/dev/null 2>&1; then bad "LMTUNE_FAIL_WRITE=$n: temporary file left"; else ok; fi
  # The first failing save is at iteration 3 + (n-1)/3: what is on disk is
  # either the previous checkpoint or a newer complete one, and it loads.
  evaluate "$SCRATCH/ad" >/dev/null 2>"$SCRATCH/err" || bad "LMTUNE_FAIL_WRITE=$n: the adapters do not load: $(tail -1 "$SCRATCH/err")"
  # The state is written last: a failure in the first save leaves the previous one.
  [ $n -le $saves_per_iter ] && check "LMTUNE_FAIL_WRITE=$n: the first save failed, the previous state is unchanged" \
    [ "$before" = "$(md5sum <"$SCRATCH/ad/training_state.safetensors")" ]
  rc=0; train "$SCRATCH/ad" --iters 5 --save-every 1 --resume >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check "LMTUNE_FAIL_WRITE=$n: resume after the failure: $(tail -1 "$SCRATCH/err")" [ "$rc" = 0 ]
done

# Disk full: the adapter directory on a small tmpfs; saves of every
# iteration accumulate numbered copies until the disk is full.
mnt=$SCRATCH/mnt_full; mkdir -p "$mnt"
if mount -t tmpfs -o size=1200k tmpfs "$mnt" 2>/dev/null; then
  rc=0; train "$mnt/ad" --iters 100 --save-every 1 >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check_clean_outcome "disk full" "$rc" "$SCRATCH/err"
  check "disk full: the run fails with ENOSPC: $(tail -1 "$SCRATCH/err")" grep -q "No space left on device" "$SCRATCH/err"
  if ls "$mnt"/ad/*.tmp.* >/dev/null 2>&1; then bad "disk full: temporary file left"; else ok; fi
  evaluate "$mnt/ad" >/dev/null 2>"$SCRATCH/err2" || bad "disk full: the last adapters do not load: $(tail -1 "$SCRATCH/err2")"
  # The training state left on the full disk resumes elsewhere.
  cp -r "$mnt/ad" "$SCRATCH/after_full"; umount "$mnt"
  last=$(ls "$SCRATCH"/after_full/*_adapters.safetensors | tail -1 | sed 's|.*/0*||; s|_.*||')
  rc=0; train "$SCRATCH/after_full" --iters $((last + 2)) --save-every 1 --resume >"$SCRATCH/out" 2>"$SCRATCH/err" || rc=$?
  check "disk full: resume from the last complete state: $(tail -1 "$SCRATCH/err")" [ "$rc" = 0 ]
  check "disk full: resume starts after the last complete save (iteration >= $((last - 1)))" \
    grep -qE "Resuming from .* at iteration ($((last - 1))|$last) " "$SCRATCH/out"
  disk_note="disk full at iteration $last"
else
  echo "note: tmpfs not mountable here, disk-full case skipped"; disk_note="disk full skipped"
  skip_reason="cannot mount a tmpfs (neither root nor unshare -rm): the disk-full and read-only cases did not run"
fi

# Read-only output directory (a read-only tmpfs: root ignores permissions).
ro=$SCRATCH/mnt_ro; mkdir -p "$ro"
if mount -t tmpfs -o ro,size=64k tmpfs "$ro" 2>/dev/null; then
  expect_error "read-only dir" "$ro/ad: cannot create directory: Read-only file system" train "$ro/ad" --iters 1
  umount "$ro"
else
  echo "note: read-only tmpfs not mountable, read-only case skipped"
  skip_reason=${skip_reason:-"cannot mount a read-only tmpfs: the read-only case did not run"}
fi
# An output path under a regular file, and a missing parent (created).
expect_error "adapter path under a file" "train.jsonl: exists and is not a directory" train "$SCRATCH/data/train.jsonl/ad" --iters 1
check "a missing output directory is created" train "$SCRATCH/new/deeper/ad" --iters 1 >/dev/null 2>&1
check "...and holds the adapters" [ -f "$SCRATCH/new/deeper/ad/adapters.safetensors" ]
expect_error "eval of a missing adapter dir" "The adapter path does not exist" evaluate "$SCRATCH/nowhere"
finish faults/writes "$disk_note" || exit 1
if [ -n "$skip_reason" ]; then
  echo "SKIP: $skip_reason"
  exit 77
fi
