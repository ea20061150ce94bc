#!/usr/bin/env bash
# test_generate_mlx.sh: `lmtune generate` as mlx_lm.generate behaves
# (generate.py main/generate/stream_generate, utils.load_config,
# tokenizer_utils), black-box on a tiny random model: the stop ids come from
# generation_config.json (a list; a file that is not JSON is ignored), else
# config.json; --extra-eos-token (an id or a token string); the sampled stop
# token is counted in "Generation: N tokens"; an empty answer prints "No
# text generated for this prompt"; without --seed each run draws a fresh
# seed; --verbose False prints the text only; \n in --prompt is a newline;
# --prefill-response continues the assistant message (transformers'
# continue_final_message); --chat-template-config passes template variables
# and enable_thinking defaults to whether the vocabulary has <think>;
# --max-kv-size at least the positions changes nothing; top-k 1 is greedy.
# And text data: a tokenizer without tokenizer_config.json (no EOS) takes
# config.json's eos_token_id, as the examples' token counts show.
set -u
. tests/shell_setup.sh
test_setup generate_mlx
PY=/usr/bin/python3

"$BIN" init --preset tiny --layers 2 --out "$T/m" --tokenizer-text demo/data/train.jsonl --vocab-size 300 --seed 3 \
  --init fan-in >/dev/null || { echo "init failed"; exit 1; }
P="What is the capital of France?"
gen() { "$BIN" generate --model "$T/m" --prompt "$P" "$@"; }
# The id of a generated token, from its text (byte-level BPE: tokenizer.json's
# vocabulary through GPT-2's byte map); "?" when not exactly one id.
token_id() {
  $PY - "$T/m/tokenizer.json" "$1" <<'PY'
import json, sys
vocab = json.load(open(sys.argv[1]))["model"]["vocab"]
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1))
bs += list(range(ord("\xae"), ord("\xff") + 1))
cs = bs[:]
n = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
dec = {chr(c): b for b, c in zip(bs, cs)}
want = open(sys.argv[2], "rb").read()[:-1]   # the text, less print's newline
ids = [i for t, i in vocab.items() if bytes(dec[ch] for ch in t) == want]
print(ids[0] if len(ids) == 1 else "?")
PY
}
gen -m 1 --verbose False > "$T/first.txt"
gen -m 2 --verbose False > "$T/two.txt"
first=$(token_id "$T/first.txt")
$PY -c "import sys; b = open(sys.argv[1], 'rb').read(); a = open(sys.argv[2], 'rb').read()
open(sys.argv[3], 'wb').write(b[len(a) - 1:])" \
  "$T/two.txt" "$T/first.txt" "$T/second.txt"
second=$(token_id "$T/second.txt")
ok '[ "$first" != "?" ] && [ "$second" != "?" ] && [ "$first" != "$second" ]' \
   "the first two greedy tokens have known ids ($first, $second)"

# generation_config.json's eos_token_id list replaces config.json's (utils.load_config)
cp -r "$T/m" "$T/g"
printf '{"eos_token_id": [7, %s]}\n' "$first" > "$T/g/generation_config.json"
"$BIN" generate --model "$T/g" --prompt "$P" -m 8 > "$T/g.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ "$(sed -n 3p "$T/g.log")" = "==========" ] &&
    grep -qx "No text generated for this prompt" "$T/g.log" && ! grep -q "^Prompt:" "$T/g.log"' \
   "stop at generation_config.json's first id: $(tr '\n' '|' < "$T/g.log")"
printf '{"eos_token_id": [%s, 7]}\n' "$second" > "$T/g/generation_config.json"
"$BIN" generate --model "$T/g" --prompt "$P" -m 8 > "$T/g2.log" 2>&1
ok 'grep -q "^Generation: 2 tokens, " "$T/g2.log"' \
   "the stop token is counted (1 token of text + the stop): $(grep Generation "$T/g2.log")"
printf '{"eos_token_id": [%s, 7' "$first" > "$T/g/generation_config.json"   # not JSON: ignored
"$BIN" generate --model "$T/g" --prompt "$P" -m 8 > "$T/g3.log" 2>&1
ok 'grep -q "^Generation: 8 tokens, " "$T/g3.log"' "a generation_config.json that is not JSON is ignored"
gen -m 8 --extra-eos-token 7 "$first" > "$T/x1.log" 2>&1
ok 'grep -qx "No text generated for this prompt" "$T/x1.log"' "--extra-eos-token ID (nargs: two values)"
gen -m 8 --extra-eos-token "<|im_start|>" > "$T/x2.log" 2>&1
ok 'grep -q "^Generation: 8 tokens" "$T/x2.log"' "--extra-eos-token TOKEN"
gen -m 8 --extra-eos-token "no-such-token" > "$T/x3.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "'"'"'no-such-token'"'"' is not a token for this tokenizer" "$T/x3.log"' \
   "an unknown --extra-eos-token: $(cat "$T/x3.log")"

# no --seed: a fresh seed every run (MLX's default); --seed: the same text
for i in 1 2 3 4; do gen -m 12 --temp 1.0 --verbose False > "$T/r$i.txt"; done
distinct=$(md5sum "$T"/r?.txt | cut -d' ' -f1 | sort -u | wc -l)
ok '[ "$distinct" -gt 1 ]' "four runs without --seed at temp 1 differ ($distinct distinct)"
gen -m 12 --temp 1.0 --seed 5 --verbose False > "$T/s1.txt"; gen -m 12 --temp 1.0 --seed 5 --verbose False > "$T/s2.txt"
ok 'cmp -s "$T/s1.txt" "$T/s2.txt"' "--seed 5 twice: the same text"

# --verbose: True by default (rules and stats), False: the text only
gen -m 4 > "$T/v.log"; gen -m 4 --verbose False > "$T/q.log"; gen -m 4 --verbose=f > "$T/q2.log"
ok '[ "$(grep -c "^==========$" "$T/v.log")" -eq 2 ] && ! grep -q "==========\|^Prompt:" "$T/q.log" &&
    cmp -s "$T/q.log" "$T/q2.log"' \
   "--verbose True / False"
ok '[ "$(sed -n 2p "$T/v.log")" = "$(head -c -1 "$T/q.log" | head -1)" ]' "the text is the same either way"

# --prompt: \n is a newline (generate.py replaces it), raw prompts compared through their token counts
"$BIN" generate --model "$T/m" --ignore-chat-template --prompt 'a\nb' -m 1 > "$T/n1.log"
"$BIN" generate --model "$T/m" --ignore-chat-template --prompt "a
b" -m 1 > "$T/n2.log"
ok '[ "$(grep ^Prompt: "$T/n1.log" | cut -d, -f1)" = "$(grep ^Prompt: "$T/n2.log" | cut -d, -f1)" ]' "\\n in --prompt"

# a template that shows what it was given
cat > "$T/show.jinja" <<'JINJA'
{%- if enable_thinking is defined and enable_thinking is false %}NO-THINKING {% endif -%}
{%- if greeting is defined %}{{ greeting }} {% endif -%}
{%- for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor -%}
{%- if add_generation_prompt %}<assistant>{% endif -%}
JINJA
count() { grep ^Prompt: "$1" | sed 's/Prompt: \([0-9]*\) tokens.*/\1/'; }
raw() { "$BIN" generate --model "$T/m" --ignore-chat-template --prompt "$1" -m 1 > "$T/raw.log"; count "$T/raw.log"; }
"$BIN" generate --model "$T/m" --chat-template "$T/show.jinja" --prompt Q -m 1 > "$T/t1.log"
ok '[ "$(count "$T/t1.log")" = "$(raw "NO-THINKING <user>Q</user><assistant>")" ]' \
   "enable_thinking is false for a vocabulary without <think>"
"$BIN" generate --model "$T/m" --chat-template "$T/show.jinja" --prompt Q -m 1 \
  --chat-template-config '{"enable_thinking": true, "greeting": "Hello there"}' > "$T/t2.log"
ok '[ "$(count "$T/t2.log")" = "$(raw "Hello there <user>Q</user><assistant>")" ]' "--chat-template-config variables"
"$BIN" generate --model "$T/m" --chat-template "$T/show.jinja" --prompt Q -m 1 --prefill-response "Paris is" \
  --chat-template-config '{"enable_thinking": true}' > "$T/t3.log"
ok '[ "$(count "$T/t3.log")" = "$(raw "<user>Q</user><assistant>Paris is")" ]' \
   "--prefill-response: continue_final_message"
"$BIN" generate --model "$T/m" --prompt Q -m 1 --chat-template-config '[1]' > "$T/t4.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "chat-template-config: expected a JSON object" "$T/t4.log"' \
   "--chat-template-config must be an object"

# --max-kv-size at least the positions: the same text; smaller: the cache rotates and it still runs
gen -m 12 --verbose False > "$T/k0.txt"
gen -m 12 --verbose False --max-kv-size 4096 > "$T/k1.txt"
ok 'cmp -s "$T/k0.txt" "$T/k1.txt"' "--max-kv-size above the positions changes nothing"
gen -m 24 --max-kv-size 8 > "$T/k2.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Generation: 24 tokens" "$T/k2.log"' \
   "--max-kv-size 8 with a longer prompt: $(tail -3 "$T/k2.log" | head -1)"
gen -m 12 --verbose False --temp 1 --top-k 1 --seed 9 > "$T/k3.txt"
ok 'cmp -s "$T/k0.txt" "$T/k3.txt"' "--top-k 1 is greedy"
gen -m 4 --top-k 300 > "$T/k4.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "top_k. has to be an integer in the (0, 300) interval, but is 300." "$T/k4.log"' \
   "top-k >= vocab: MLX's error"

# text data: the EOS of a tokenizer without tokenizer_config.json comes from config.json
cp -r "$T/m" "$T/noconf"; rm "$T/noconf/tokenizer_config.json"
cp -r "$T/noconf" "$T/noeos"
$PY -c "
import json, sys; p = sys.argv[1]; c = json.load(open(p)); c['eos_token_id'] = None
json.dump(c, open(p, 'w'))" "$T/noeos/config.json"
mkdir -p "$T/d"
for i in 1 2 3 4; do echo "{\"text\": \"The capital of France is Paris number $i\"}"; done > "$T/d/train.jsonl"
for m in m noconf noeos; do
  "$BIN" train --model "$T/$m" --data "$T/d" --iters 1 --batch-size 4 --num-layers -1 --threads 1 \
    --adapter-path "$T/a_$m" > "$T/eos_$m.log" 2>&1
done
tok() { sed -n 's/.*Trained Tokens \([0-9]*\),.*/\1/p' "$1"; }
ok '[ -n "$(tok "$T/eos_m.log")" ] && [ "$(tok "$T/eos_m.log")" = "$(tok "$T/eos_noconf.log")" ]' \
   "no tokenizer_config.json: config.json's EOS is appended ($(tok "$T/eos_m.log") vs $(tok "$T/eos_noconf.log"))"
ok '[ "$(tok "$T/eos_noeos.log")" -eq $(( $(tok "$T/eos_m.log") - 4 )) ]' \
   "and without any EOS, one token less per example ($(tok "$T/eos_noeos.log"))"

echo "summary cli/generate_mlx: $checks checks, $fail failed"
[ $fail -eq 0 ]
