#!/usr/bin/env bash
# Runs the libFuzzer targets (built by `make fuzz-build` into build/fuzz/tests/fuzz/)
# on a scratch copy of each seed corpus (tests/fuzz/corpus/NAME/): the checked-in
# corpus is never modified; a crashing input is left in build/fuzz/findings/.
#   tests/fuzz/run.sh [SECONDS [TARGET...]]   0 = replay the seed corpora only
#   tests/fuzz/run.sh --regen                 rewrite the generated seeds
# Prints one line per target: "fuzz NAME: N execs in S s, clean" (or the finding).
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=build/fuzz/tests/fuzz
corpus=tests/fuzz/corpus
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ "${1:-}" = "--regen" ]; then
  # Seeds written by the unit tests (every crafted bad file of the checklist)
  # and by the targets themselves (valid files of each format).
  b=$(make -s print-build)
  make -s "$b/tests/formats/test_safetensors" "$b/tests/formats/test_hf_config" "$b/tests/formats/test_gguf"
  rm -rf "$corpus/safetensors" "$corpus/hf_config"; mkdir -p "$corpus/safetensors" "$corpus/hf_config"
  LMTUNE_SEED_CORPUS=$corpus/safetensors "$b/tests/formats/test_safetensors" >/dev/null
  LMTUNE_SEED_CORPUS=$corpus/hf_config "$b/tests/formats/test_hf_config" >/dev/null
  rm -f "$corpus"/gguf/bad_*.gguf
  LMTUNE_SEED_CORPUS=$corpus/gguf "$b/tests/formats/test_gguf" >/dev/null
  # Valid files of each format (found inputs and damaged variants are kept).
  for t in gguf state tokenizer; do mkdir -p "$corpus/$t"; LMTUNE_FUZZ_WRITE_SEED=$corpus/$t "$bins/fuzz_$t"; done
  rm -f "$corpus/tokenizer/tokenizer_config.json"
  exit 0
fi
secs=${1:-60}; shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=($(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||'))
mkdir -p build/fuzz/findings
status=0
for t in "${targets[@]}"; do
  bin=$bins/fuzz_$t
  log=build/fuzz/fuzz_$t.log
  scratch=$(mktemp -d)
  cp -r "$corpus/$t"/. "$scratch/"
  if [ "$secs" = 0 ]; then args=(-runs=0)
  elif [ -n "${FUZZ_RUNS:-}" ]; then args=(-runs="$FUZZ_RUNS" -seed=1)   # reproducible (make test)
  else args=(-max_total_time="$secs"); fi
  # -timeout is wall-clock: 30 s per input, so a machine shared with other
  # jobs does not turn the string_blowup seed (1 s of CPU under ASan, 12 s of
  # wall time at load 25) into a false hang; a real hang still stops there.
  if "$bin" "${args[@]}" -timeout=30 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix=build/fuzz/findings/"$t"- "$scratch" >"$log" 2>&1; then
    execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz $t: $execs execs in ${secs} s, clean ($(ls "$corpus/$t" | wc -l) seeds)"
  else
    status=1
    echo "fuzz $t: FINDING (log $log, input in build/fuzz/findings/)"
    grep -E 'ERROR|SUMMARY|runtime error|deadly signal|timeout' "$log" | head -5 | sed 's/^/  /'
  fi
  rm -rf "$scratch"
done
exit $status
