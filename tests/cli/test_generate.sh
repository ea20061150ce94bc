#!/usr/bin/env bash
# test_generate.sh: `lmtune generate` end to end on a tiny random model: a
# fixed seed gives the same text twice at --temp 0.8 (and another seed,
# other text), top-p 1e-6 equals greedy, `--prompt -` reads stdin, the
# final lines are MLX-LM's (Prompt / Generation tokens-per-sec, Peak
# memory), --max-tokens bounds the output, bad flags are refused, and ids a
# model samples beyond its tokenizer are left out of the text.
set -euo pipefail
BIN=${LMTUNE_BIN:-./lmtune}
T=$(mktemp -d /tmp/lmtune-gen-XXXXXX); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" init --preset tiny --out "$T/m" --vocab-size 300 --tokenizer-text demo/data/train.jsonl --seed 3 >/dev/null
gen() { "$BIN" generate --model "$T/m" --max-tokens 12 "$@"; }
P="What is the capital of France?"

# outputs go to files (the text of a random model may be newlines only)
gen --prompt "$P" --temp 0.8 --seed 11 --quiet >"$T/a"
gen --prompt "$P" --temp 0.8 --seed 11 --quiet >"$T/b"
cmp -s "$T/a" "$T/b" || fail "same seed, different text: '$(cat "$T/a")' vs '$(cat "$T/b")'"
gen --prompt "$P" --temp 0.8 --seed 12 --quiet >"$T/c"; gen --prompt "$P" --temp 0.8 --seed 13 --quiet >"$T/d"
! cmp -s "$T/a" "$T/c" || ! cmp -s "$T/a" "$T/d" || fail "seeds 11, 12, 13 give the same text"

gen --prompt "$P" --quiet >"$T/g"
[ "$(wc -c <"$T/g")" -gt 1 ] || fail "greedy generated nothing"
gen --prompt "$P" --temp 0.8 --top-p 1e-6 --seed 5 --quiet >"$T/h"
cmp -s "$T/g" "$T/h" || fail "top-p 1e-6 '$(cat "$T/h")' differs from greedy '$(cat "$T/g")'"
gen --prompt "$P" --temp 1.0 --min-p 0.999 --seed 5 --quiet >"$T/m1"
cmp -s "$T/g" "$T/m1" || fail "min-p 0.999 differs from greedy"
gen --prompt "$P" --temp 0.8 --quiet >"$T/t"
cmp -s "$T/g" "$T/t" && fail "temp 0.8 equals greedy over 12 tokens of a random model"

printf '%s' "$P" | gen --prompt - --quiet >"$T/s"
cmp -s "$T/s" "$T/g" || fail "--prompt - differs from --prompt TEXT"

out=$(gen --prompt "$P" --max-tokens 5)
echo "$out"
echo "$out" | grep -qE '^Prompt: [0-9]+ tokens, [0-9.]+ tokens-per-sec$' || fail "no Prompt line"
echo "$out" | grep -qE '^Generation: [1-5] tokens, [0-9.]+ tokens-per-sec$' || fail "no Generation line (or more than 5 tokens)"
echo "$out" | grep -qE '^Peak memory: [0-9.]+ GB$' || fail "no Peak memory line"
[ "$(echo "$out" | grep -c '^==========$')" = 2 ] || fail "expected two ========== rules"

gen --prompt "$P" --ignore-chat-template --quiet >"$T/r" || fail "--ignore-chat-template failed"

for bad in "--temp -1" "--top-p -0.1" "--top-p 1.5" "--min-p 1.5" "--max-tokens 0" "--seed x" "--top-k -1" \
           "--xtc-threshold 0.6" "--xtc-probability 2" "--min-tokens-to-keep 0" "--max-kv-size 4" "--verbose maybe"; do
  if gen --prompt "$P" $bad >"$T/err" 2>&1; then fail "accepted $bad"; fi
  grep -q -- "${bad%% *}" "$T/err" || fail "error for $bad does not name the flag: $(cat "$T/err")"
done
if "$BIN" generate --model "$T/nope" --prompt x >"$T/err" 2>&1; then fail "accepted a missing model"; fi

# a model wider than its tokenizer (a preset's 49152 rows over 259 byte tokens, as Qwen2.5 pads 151665 tokens to
# 151936 rows): a sampled id without text is left out of the text, said once on stderr, and counted
"$BIN" init --preset smollm2-135m --layers 1 --out "$T/wide" --seed 3 >/dev/null
"$BIN" generate --model "$T/wide" --prompt "$P" --max-tokens 6 --temp 1.0 --seed 2 >"$T/w_out" 2>"$T/w_err" ||
  fail "generate on a model wider than its tokenizer failed: $(cat "$T/w_err")"
[ "$(grep -c '^\[WARNING\] Token id [0-9]* has no entry in the tokenizer (259 ids; the model has 49152): left out' \
    "$T/w_err")" = 1 ] || fail "expected one warning on stderr, got: $(cat "$T/w_err")"
! grep -q WARNING "$T/w_out" || fail "the warning went to stdout"
grep -qx "No text generated for this prompt" "$T/w_out" || grep -qE '^Generation: 6 tokens' "$T/w_out" ||
  fail "no summary: $(cat "$T/w_out")"
echo "generate: all checks passed"
