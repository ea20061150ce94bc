#!/usr/bin/env bash
# test_command_flags.sh: the flags of `lmtune init`, `lmtune generate`,
# `lmtune fuse` and `lmtune plan`, which share train's table-driven parser: --help on stdout
# (exit 0) lists every flag, `--flag=value` does what `--flag value` does,
# store-true flags take no value, repeatable --tokenizer-text collects its
# files, and an unknown flag, a bad value or a missing required flag is one
# line on stderr naming the flag (exit 1, nothing on stdout, nothing made).
set -u
. tests/shell_setup.sh
test_setup command_flags
# Runs a command that must be refused: exit 1, stdout empty, one line on
# stderr (in $T/err).
refused() { "$@" >"$T/out" 2>"$T/err"; local rc=$?; [ $rc -eq 1 ] && [ ! -s "$T/out" ] && [ "$(wc -l <"$T/err")" -eq 1 ]; }
# Runs COMMAND --help: exit 0, stderr empty, the help in $T/help.
help_of() { "$BIN" "$1" --help >"$T/help" 2>"$T/err"; local rc=$?; [ $rc -eq 0 ] && [ ! -s "$T/err" ]; }
# Every flag name given is in $T/help.
lists() { local f; for f in "$@"; do grep -q -- "$f" "$T/help" || { echo "  --help lacks $f"; return 1; }; done; }

# ---- init ----
ok 'help_of init' "init --help: exit 0, nothing on stderr"
ok 'lists "^usage: lmtune init" "--preset NAME" "--config FILE" "--out DIR" "--dtype T" "--seed N" "--init SCALE" "--layers N" "--tokenizer-text FILE" "--vocab-size N"' "init --help lists every flag"
ok 'grep -q "^  --vocab-size N .*\[default: 512\]$" "$T/help" && grep -q "(hf|fan-in) \[default: hf\]$" "$T/help" && grep -q "(repeatable" "$T/help"' "init --help: defaults, choices, repeatable"

TEXT=demo/data/train.jsonl
"$BIN" init --preset tiny --out "$T/m_space" --vocab-size 300 --tokenizer-text "$TEXT" --seed 3 --layers 3 --dtype bf16 --init fan-in >"$T/init_space.log" 2>&1
rc_space=$?
"$BIN" init --preset=tiny --out="$T/m_eq" --vocab-size=300 --tokenizer-text="$TEXT" --seed=3 --layers=3 --dtype=bf16 --init=fan-in >"$T/init_eq.log" 2>&1
rc_eq=$?
ok '[ $rc_space -eq 0 ] && [ $rc_eq -eq 0 ]' "init with both spellings runs ($(cat "$T/init_eq.log"))"
ok 'grep -q ": 3 layers, hidden 64, vocab 300, bf16 weights (fan-in init), tokenizer vocab 300$" "$T/init_eq.log"' "init --flag=value: every value applied"
ok 'cmp -s "$T/m_space/model.safetensors" "$T/m_eq/model.safetensors" && cmp -s "$T/m_space/tokenizer.json" "$T/m_eq/tokenizer.json"' "init: --flag=value gives the bytes of --flag value"
"$BIN" init --preset tiny --out "$T/m_seed4" --vocab-size 300 --tokenizer-text "$TEXT" --seed 4 --layers 3 --dtype bf16 --init fan-in >/dev/null 2>&1
ok '! cmp -s "$T/m_space/model.safetensors" "$T/m_seed4/model.safetensors"' "init --seed changes the weights"
# --tokenizer-text is repeatable: a second file (one word, many times)
# changes the learned merges.
for i in $(seq 1 500); do echo "zqxvj zqxvj zqxvj"; done >"$T/words.txt"
"$BIN" init --preset tiny --out "$T/m_two" --vocab-size 300 --tokenizer-text "$TEXT" --tokenizer-text="$T/words.txt" --seed 3 --layers 3 --dtype bf16 --init fan-in >/dev/null 2>&1
ok '[ -f "$T/m_two/tokenizer.json" ] && ! cmp -s "$T/m_space/tokenizer.json" "$T/m_two/tokenizer.json"' "init: a second --tokenizer-text is used"
many=(); for i in $(seq 1 17); do many+=(--tokenizer-text "$TEXT"); done
ok 'refused "$BIN" init --preset tiny --out "$T/bad" "${many[@]}" && grep -q "^lmtune: error: --tokenizer-text: at most 16 values" "$T/err"' "init: 17 --tokenizer-text refused"

ok 'refused "$BIN" init --preset tiny --out "$T/bad" --bogus 1 && grep -qx "lmtune: error: unknown flag --bogus (lmtune init --help lists the flags)" "$T/err"' "init: unknown flag"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --vocab-size 5 && grep -qx "lmtune: error: --vocab-size: expected an integer in 259..1000000, got \"5\"" "$T/err"' "init: --vocab-size below the range"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --vocab-size=2000000 && grep -q "^lmtune: error: --vocab-size: .*\"2000000\"$" "$T/err"' "init: --vocab-size above the range"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --dtype f16 && grep -qx "lmtune: error: --dtype: expected one of f32,bf16, got \"f16\"" "$T/err"' "init: bad --dtype"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --init=xavier && grep -q "^lmtune: error: --init: expected one of hf,fan-in, got \"xavier\"$" "$T/err"' "init: bad --init"
ok 'refused "$BIN" init --preset huge --out "$T/bad" && grep -q "^lmtune: error: --preset: expected one of tiny,.*, got \"huge\"$" "$T/err"' "init: unknown preset"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --layers -1 && grep -q "^lmtune: error: --layers: .*\"-1\"$" "$T/err"' "init: negative --layers"
ok 'refused "$BIN" init --preset tiny --out "$T/bad" --seed x && grep -q "^lmtune: error: --seed: .*\"x\"$" "$T/err"' "init: bad --seed"
ok 'refused "$BIN" init --preset tiny && grep -q "^lmtune: error: --out is required" "$T/err"' "init: --out required"
ok 'refused "$BIN" init --out "$T/bad" && grep -q "^lmtune: error: --preset or --config is required" "$T/err"' "init: --preset or --config required"
ok 'refused "$BIN" init --preset tiny --config demo/config.json --out "$T/bad" && grep -q "^lmtune: error: --preset and --config both given" "$T/err"' "init: --preset and --config exclusive"
ok '[ ! -e "$T/bad" ]' "init: nothing created by a refused command line"

# ---- generate ---- (the model test_generate.sh uses)
"$BIN" init --preset tiny --out "$T/m" --vocab-size 300 --tokenizer-text "$TEXT" --seed 3 >/dev/null 2>&1 || { echo "init failed"; exit 1; }
P="What is the capital of France?"
ok 'help_of generate' "generate --help: exit 0, nothing on stderr"
ok 'lists "^usage: lmtune generate" "--model DIR" "--adapter-path DIR" "-p, --prompt TEXT" "-m, --max-tokens N" "--temp T" "--top-p P" "--min-p P" "--seed N" "--system-prompt TEXT" "--ignore-chat-template" "--chat-template FILE" "--quiet"' "generate --help lists every flag"
ok 'grep -q "^  -m, --max-tokens N .*\[default: 100\]$" "$T/help" && grep -q "^  --top-p P .*\[default: 1\]$" "$T/help"' "generate --help: defaults"

"$BIN" generate --model "$T/m" --prompt "$P" --max-tokens 12 --temp 0.8 --seed 11 --quiet >"$T/g_space" 2>&1; rc_space=$?
"$BIN" generate --model="$T/m" --prompt="$P" --max-tokens=12 --temp=0.8 --seed=11 --quiet >"$T/g_eq" 2>&1; rc_eq=$?
"$BIN" generate --model "$T/m" -p "$P" -m 12 --quiet >"$T/g_greedy" 2>&1
ok '[ $rc_space -eq 0 ] && [ $rc_eq -eq 0 ] && cmp -s "$T/g_space" "$T/g_eq"' "generate: --flag=value gives the text of --flag value"
ok '! cmp -s "$T/g_eq" "$T/g_greedy"' "generate: --temp=0.8 samples (differs from greedy)"
printf '%s' "$P" | "$BIN" generate --model "$T/m" --prompt=- -m 12 --quiet >"$T/g_stdin" 2>&1
ok 'cmp -s "$T/g_stdin" "$T/g_greedy"' "generate: --prompt=- reads stdin"
"$BIN" generate --model "$T/m" -p "$P" -m 3 >"$T/g_short.log" 2>&1
ok 'grep -qE "^Generation: [0-3] tokens, " "$T/g_short.log"' "generate: -m 3 bounds the tokens"
"$BIN" generate --model "$T/m" -p "$P" --max-tokens=1 --system-prompt="You answer in one word." >"$T/g_sys.log" 2>&1
"$BIN" generate --model "$T/m" -p "$P" --max-tokens=1 >"$T/g_nosys.log" 2>&1
ok '[ "$(grep "^Prompt:" "$T/g_sys.log" | cut -d" " -f2)" -gt "$(grep "^Prompt:" "$T/g_nosys.log" | cut -d" " -f2)" ]' "generate: --system-prompt=TEXT reaches the prompt"
"$BIN" generate --model "$T/m" -p "$P" --max-tokens=1 --ignore-chat-template >"$T/g_raw.log" 2>&1
ok '[ "$(grep "^Prompt:" "$T/g_raw.log" | cut -d" " -f2)" -lt "$(grep "^Prompt:" "$T/g_nosys.log" | cut -d" " -f2)" ]' "generate: --ignore-chat-template (store-true) feeds the raw text"
ok '"$BIN" generate --model "$T/m" --quiet -p "$P" -m 2 >"$T/g_q" 2>&1 && ! grep -q "^==========" "$T/g_q"' "generate: --quiet takes no value"
"$BIN" generate --model "$T/m" -p "$P" -m 2147483647 >"$T/g_huge" 2>"$T/g_huge.err"; rc_huge=$?
ok '[ $rc_huge -eq 1 ] && [ "$(wc -l < "$T/g_huge.err")" -eq 1 ] && grep -q "plus --max-tokens 2147483647 exceeds" "$T/g_huge.err"' "generate: prompt + --max-tokens past INT_MAX positions is one error"

ok 'refused "$BIN" generate --model "$T/m" -p "$P" --bogus && grep -qx "lmtune: error: unknown flag --bogus (lmtune generate --help lists the flags)" "$T/err"' "generate: unknown flag"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" --temp=-1 && grep -qx "lmtune: error: --temp: expected a number >= 0, got \"-1\"" "$T/err"' "generate: bad --temp"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" --top-p 1.5 && grep -qx "lmtune: error: --top-p: expected a number in \[0, 1\], got \"1.5\"" "$T/err"' "generate: --top-p 1.5"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" --min-p=-1 && grep -qx "lmtune: error: --min-p: expected a number in \[0, 1\], got \"-1\"" "$T/err"' "generate: --min-p -1"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" -m 0 && grep -qx "lmtune: error: --max-tokens: expected a positive integer, got \"0\"" "$T/err"' "generate: -m 0"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" --quiet=maybe && grep -q "^lmtune: error: --quiet: expected true or false" "$T/err"' "generate: bad store-true value"
ok 'refused "$BIN" generate --model "$T/m" -p && grep -qx "lmtune: error: --prompt: expected a value" "$T/err"' "generate: -p without a value"
ok 'refused "$BIN" generate -p "$P" && grep -q "^lmtune: error: --model is required" "$T/err"' "generate: --model required"
ok '"$BIN" generate --model "$T/m" -m 2 --verbose False >"$T/g_hello" 2>&1' "generate: the prompt defaults to \"hello\" (mlx_lm.generate)"
ok 'refused "$BIN" generate -p "$P" && grep -q "^lmtune: error: --model is required" "$T/err"' "generate: --model required"
ok 'refused "$BIN" generate --model "$T/m" -p "$P" stray && grep -q "^lmtune: error: unexpected argument \"stray\"" "$T/err"' "generate: stray argument"

# ---- fuse ---- (an adapter from two training steps)
mkdir -p "$T/data"
head -n 8 demo/data/train.jsonl >"$T/data/train.jsonl"; head -n 4 demo/data/valid.jsonl >"$T/data/valid.jsonl"
"$BIN" train --model "$T/m" --data "$T/data" --iters 2 --num-layers -1 --batch-size 2 --max-seq-length 32 --val-batches 1 \
  --learning-rate 1e-3 --threads 1 --adapter-path "$T/a" >/dev/null 2>&1 || { echo "train failed"; exit 1; }
ok 'help_of fuse' "fuse --help: exit 0, nothing on stderr"
ok 'lists "^usage: lmtune fuse" "--model DIR" "--adapter-path DIR" "--save-path DIR" "--max-shard-size SIZE" "--export-peft DIR" "--export-gguf " "--gguf-path FILE" "--gguf-type TYPE" "--export-gguf-adapter FILE" "--no-fuse"' "fuse --help lists every flag"
ok 'grep -q "^  --model DIR .*\[default: mlx_model\]$" "$T/help" && grep -q "^  --save-path DIR .*\[default: fused_model\]$" "$T/help"' "fuse --help: defaults"

"$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/space/fused" --max-shard-size 100KB --export-peft "$T/p_space" --export-gguf-adapter "$T/g_space.gguf" --export-gguf --gguf-type q8_0 >"$T/fuse_space.log" 2>&1; rc_space=$?
"$BIN" fuse --model="$T/m" --adapter-path="$T/a" --save-path="$T/eq/fused" --max-shard-size=100KB --export-peft="$T/p_eq" --export-gguf-adapter="$T/g_eq.gguf" --export-gguf --gguf-type=q8_0 >"$T/fuse_eq.log" 2>&1; rc_eq=$?
ok '[ $rc_space -eq 0 ] && [ $rc_eq -eq 0 ] && grep -q "^Fused model saved to $T/eq/fused$" "$T/fuse_eq.log"' "fuse with both spellings runs"
ok 'ls "$T/eq/fused" | grep -q "^model-00002-of-" && [ ! -e "$T/eq/fused/model.safetensors" ]' "fuse: --max-shard-size=100KB shards the model"
ok 'for f in $(cd "$T/space/fused" && ls); do cmp -s "$T/space/fused/$f" "$T/eq/fused/$f" || exit 1; done' "fuse: --flag=value gives the bytes of --flag value"
ok 'cmp -s "$T/p_space/adapter_model.safetensors" "$T/p_eq/adapter_model.safetensors" && cmp -s "$T/g_space.gguf" "$T/g_eq.gguf"' "fuse: the same exports with both spellings"
ok '[ -s "$T/eq/fused/ggml-model-f16.gguf" ] && grep -q "^GGUF model saved to $T/eq/fused/ggml-model-f16.gguf$" "$T/fuse_eq.log"' "fuse --export-gguf: the GGUF model at save-path/ggml-model-f16.gguf (mlx_lm.fuse's default)"
"$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_gp" --export-gguf --gguf-path "$T/abs.gguf" --gguf-type f32 >"$T/fuse_gp.log" 2>&1; rc=$?
ok '[ $rc -eq 0 ] && [ -s "$T/abs.gguf" ] && [ ! -e "$T/f_gp/ggml-model-f16.gguf" ]' "fuse --gguf-path: an absolute path stands alone"
ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --export-gguf --no-fuse && grep -q "^lmtune: error: --export-gguf writes the fused model" "$T/err"' "fuse: --export-gguf needs the fused model"
ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --export-gguf --gguf-type q4_0 && grep -q "^lmtune: error: --gguf-type" "$T/err"' "fuse: --gguf-type q4_0 is not offered"
"$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_none" --no-fuse --export-peft "$T/p_only" >"$T/fuse_nofuse.log" 2>&1; rc=$?
ok '[ $rc -eq 0 ] && [ ! -e "$T/f_none" ] && [ -f "$T/p_only/adapter_model.safetensors" ]' "fuse: --no-fuse (store-true) only exports"

ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --bogus && grep -qx "lmtune: error: unknown flag --bogus (lmtune fuse --help lists the flags)" "$T/err"' "fuse: unknown flag"
ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --max-shard-size 0 && grep -q "^lmtune: error: --max-shard-size: expected a positive size .*, got \"0\"$" "$T/err"' "fuse: --max-shard-size 0"
ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --max-shard-size=lots && grep -q "^lmtune: error: --max-shard-size: .*\"lots\"$" "$T/err"' "fuse: --max-shard-size=lots"
ok 'refused "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --save-path "$T/f_bad" --no-fuse=perhaps && grep -q "^lmtune: error: --no-fuse: expected true or false" "$T/err"' "fuse: bad store-true value"
"$BIN" fuse --model "$T/m" --adapter-path="$T/none" --save-path "$T/f_bad" >/dev/null 2>"$T/err"; rc=$?
ok '[ $rc -eq 1 ] && grep -q "^lmtune: error: .*$T/none" "$T/err"' "fuse: --adapter-path=DIR reaches the loader"
ok '[ ! -e "$T/f_bad" ]' "fuse: nothing written by a refused command line"

# ---- plan: train's table plus --verbose and --workers, through the same parser ----
ok 'help_of plan' "plan --help: exit 0, nothing on stderr"
ok 'lists "^usage: lmtune plan" "--workers N" "--verbose" "--batch-size N|auto" "--memory-limit SIZE"' "plan --help lists its own flags and train's"
"$BIN" plan --model "$T/m" --data demo/data --num-layers 2 --batch-size 4 --workers 2 >"$T/plan_space.log" 2>&1; rc_space=$?
"$BIN" plan --model="$T/m" --data=demo/data --num-layers=2 --batch-size=4 --workers=2 >"$T/plan_eq.log" 2>&1; rc_eq=$?
# the same plan (the measured process baseline, and so the total, may differ by some pages)
ok '[ $rc_space -eq 0 ] && [ $rc_eq -eq 0 ] && diff <(grep -v -e baseline -e "Planned peak" -e "^With" -e "library scratch" -e "oneDNN primitives" "$T/plan_space.log") <(grep -v -e baseline -e "Planned peak" -e "^With" -e "library scratch" -e "oneDNN primitives" "$T/plan_eq.log") >/dev/null' "plan --workers=2 is --workers 2"
ok 'grep -q "micro-batch 2 x " "$T/plan_eq.log"' "plan --workers 2 plans one worker's half of the batch"
"$BIN" plan --model "$T/m" --data demo/data --num-layers 2 --batch-size 4 -v >"$T/plan_v.log" 2>&1
ok 'grep -q "(outside the arena)" "$T/plan_v.log" && ! grep -q "(outside the arena)" "$T/plan_space.log"' "plan -v lists every buffer"
ok 'refused "$BIN" plan --model "$T/m" --data demo/data --workers=-1 && grep -q "^lmtune: error: --workers: expected a non-negative integer, got \"-1\"$" "$T/err"' "plan: bad --workers"
ok 'refused "$BIN" plan --model "$T/m" --data demo/data --verbose=maybe' "plan: bad store-true value"

echo "summary cli/command_flags: $checks checks, $fail failed"
[ $fail -eq 0 ]
