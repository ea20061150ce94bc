#!/usr/bin/env bash
# test_families_cli.sh: the command-line lifecycle of the new families on
# tiny random models made by `lmtune init --config`: a Gemma 3 (sliding
# layers shorter than the sequences, linear RoPE scaling on the global ones),
# a Phi-3 (fused projections, partial rotary, longrope crossing its original
# length inside the training rows) and a SmolLM3 (NoPE layers): train LoRA
# with checkpointing (its arena stays inside the plan), generate greedily
# (twice the same text), fuse (the fused model's test loss equals base +
# adapter's), the PEFT export (target_modules), and the GGUF export under
# llama.cpp's architecture name (fused model and LoRA adapter; run by llama.cpp
# in tests/llama/test_llama_families.c), except for this SmolLM3, whose NoPE
# layers (every 2nd) are not llama.cpp's (every 4th): refused with the reason
# before anything is written. And a tokenizer llama.cpp would split differently:
# --export-gguf refused before the fuse writes anything, the GGUF adapter written.
set -euo pipefail
BIN=${LMTUNE_BIN:-./lmtune}
T=$(mktemp -d /tmp/lmtune-fam-XXXXXX); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
PY=python3
mkdir -p "$T/data"
$PY - "$T/data" <<'PYEOF'
import json, random, sys
r = random.Random(1)
w = "the cat sat on a mat and ran to the dog who was happy".split()
for split, n in (("train", 24), ("valid", 4), ("test", 4)):
    with open(f"{sys.argv[1]}/{split}.jsonl", "w") as f:
        for _ in range(n):
            f.write(json.dumps({"text": " ".join(r.choice(w) for _ in range(25))}) + "\n")
PYEOF
cat >"$T/gemma3.json" <<'JSON'
{"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 259, "sliding_window": 8,
 "sliding_window_pattern": 2, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
JSON
cat >"$T/phi3.json" <<'JSON'
{"model_type": "phi3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 259, "rms_norm_eps": 1e-05,
 "partial_rotary_factor": 0.5, "original_max_position_embeddings": 16, "max_position_embeddings": 64,
 "rope_scaling": {"type": "longrope", "short_factor": [1, 1, 1, 1], "long_factor": [1, 2, 4, 8]},
 "tie_word_embeddings": true}
JSON
cat >"$T/smollm3.json" <<'JSON'
{"model_type": "smollm3", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 259, "no_rope_layer_interval": 2}
JSON
declare -A ARCH=([gemma3]=gemma3 [phi3]=phi3 [smollm3]=smollm3)
declare -A TARGET=([gemma3]=gate_proj [phi3]=gate_up_proj [smollm3]=q_proj)
for f in gemma3 phi3 smollm3; do
  m="$T/$f"
  "$BIN" init --config "$T/$f.json" --out "$m" --seed 5 >/dev/null
  "$BIN" train --model "$m" --data "$T/data" --iters 3 --batch-size 2 --steps-per-eval 100 --val-batches 1 \
    --num-layers -1 --grad-checkpoint --learning-rate 1e-3 --adapter-path "$m-ad" --metrics-file "$m.metrics" \
    >"$m.train" 2>&1 ||
    { cat "$m.train"; fail "$f: train"; }
  grep -q "^Iter 3: Train loss" "$m.train" || fail "$f: no Iter 3 report"
  # the run stayed inside its plan (the metrics carry the arena's high-water mark and the planned total)
  $PY - "$m.metrics" <<'PYEOF' || fail "$f: arena vs plan"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = [x for x in rows if "arena_high_water" in x]
assert r, "no arena figure in the metrics"
assert 0 < r[-1]["arena_high_water"] <= r[-1]["plan_total"], r[-1]
PYEOF
  "$BIN" generate --model "$m" --adapter-path "$m-ad" --prompt "the cat" --max-tokens 16 --temp 0 --quiet >"$m.g1"
  "$BIN" generate --model "$m" --adapter-path "$m-ad" --prompt "the cat" --max-tokens 16 --temp 0 --quiet >"$m.g2"
  cmp -s "$m.g1" "$m.g2" || fail "$f: greedy generation differs between runs"
  "$BIN" fuse --model "$m" --adapter-path "$m-ad" --save-path "$m-fused" --export-peft "$m-peft" \
    >/dev/null || fail "$f: fuse"
  if [ "$f" = smollm3 ]; then
    # llama.cpp's smollm3 has NoPE on every 4th layer only: refused before anything is written
    if "$BIN" fuse --model "$m" --adapter-path "$m-ad" --save-path "$m-gg" --export-gguf --gguf-path "$m.gguf" \
      >/dev/null 2>"$m.gerr"; then fail "$f: GGUF export accepted"; fi
    grep -q "llama.cpp's smollm3 skips RoPE on every 4th layer" "$m.gerr" || { cat "$m.gerr"; fail "$f: GGUF message"; }
    [ ! -e "$m.gguf" ] && [ ! -e "$m-gg" ] || fail "$f: a refused GGUF export wrote files"
  else
    "$BIN" fuse --model "$m" --adapter-path "$m-ad" --save-path "$m-gg" --export-gguf --gguf-path "$m.gguf" \
      --export-gguf-adapter "$m-lora.gguf" >/dev/null 2>"$m.gerr" || { cat "$m.gerr"; fail "$f: GGUF export"; }
    for g in "$m.gguf" "$m-lora.gguf"; do
      $PY - "$g" "${ARCH[$f]}" <<'PYEOF' || fail "$f: $g is not a GGUF file of architecture ${ARCH[$f]}"
import struct, sys
b = open(sys.argv[1], "rb").read(4096)
assert b[:4] == b"GGUF", b[:4]
key = b"general.architecture"
i = b.index(key) + len(key)
assert struct.unpack_from("<I", b, i)[0] == 8  # string
n = struct.unpack_from("<Q", b, i + 4)[0]
assert b[i + 12:i + 12 + n].decode() == sys.argv[2], b[i + 12:i + 12 + n]
PYEOF
    done
  fi
  a=$("$BIN" eval --model "$m" --adapter-path "$m-ad" --data "$T/data" | sed -n 's/^Test loss \([0-9.]*\),.*/\1/p')
  b=$("$BIN" eval --model "$m-fused" --data "$T/data" | sed -n 's/^Test loss \([0-9.]*\),.*/\1/p')
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$f: fused test loss '$b' vs base + adapter '$a'"
  $PY -c "import json, sys; t = json.load(open(sys.argv[1]))['target_modules']; assert sys.argv[2] in t, t" \
    "$m-peft/adapter_config.json" "${TARGET[$f]}" || fail "$f: PEFT target_modules"
  echo "$f: trained, generated '$(head -c 40 "$m.g1" | tr '\n' ' ')', fused (test loss $a), exported"
done
# a tokenizer llama.cpp would split differently: --export-gguf is refused before the fuse writes anything
# (the GGUF LoRA adapter, which carries no tokenizer, is still written)
cp -r "$T/phi3" "$T/tk"
$PY - "$T/tk/tokenizer.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
t["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{L}+|\\s+|."}, "behavior": "Isolated", "invert": False},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
json.dump(t, open(sys.argv[1], "w"))
PYEOF
if "$BIN" fuse --model "$T/tk" --adapter-path "$T/phi3-ad" --save-path "$T/tk-fused" --export-gguf \
  >/dev/null 2>"$T/tk.err"; then fail "unsplittable tokenizer: GGUF export accepted"; fi
grep -q "llama.cpp has no tokenizer that splits text as this one does" "$T/tk.err" || { cat "$T/tk.err"; fail "tk"; }
[ ! -e "$T/tk-fused" ] || fail "a refused GGUF export left a fused model"
"$BIN" fuse --model "$T/tk" --adapter-path "$T/phi3-ad" --no-fuse --export-gguf-adapter "$T/tk.gguf" >/dev/null ||
  fail "GGUF adapter of a model with an unsplittable tokenizer"
echo "summary families_cli: 3 families through train, generate, fuse, PEFT and GGUF (smollm3's NoPE layout refused)"
