#!/usr/bin/env bash
# test_qwen35_quant.sh: Qwen3.5 on a 4-bit base (the QLoRA case of issue 16),
# end to end through the CLI on the tiny-qwen3.5 preset: `convert -q`
# quantizes every linear of the Gated DeltaNet blocks (in_proj_qkv/z/b/a,
# out_proj) and leaves conv1d, A_log and dt_bias as they are; LoRA trains on
# the packed base; its test loss and greedy text equal those of the same
# adapter on the dequantized base (`convert -d`: the very values the packed
# products expand to); fuse works, and --export-gguf (no qwen35 mapping yet)
# is refused before anything is written.
set -euo pipefail
BIN=${LMTUNE_BIN:-./lmtune}
T=$(mktemp -d /tmp/lmtune-q35q-XXXXXX); trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$BIN" init --preset tiny-qwen3.5 --out "$T/base" --vocab-size 300 --tokenizer-text demo/data/train.jsonl \
  --seed 5 --init fan-in >/dev/null
"$BIN" convert --hf-path "$T/base" --mlx-path "$T/q4" -q --q-bits 4 --q-group-size 32 >/dev/null
python3 - "$T/q4/model.safetensors" <<'PYEOF' || fail "the quantized tensors are not the expected ones"
import json, struct, sys
d = open(sys.argv[1], "rb").read()
h = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])
L = "model.language_model.layers.0.linear_attn."
for p in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"):
    assert h[L + p + ".weight"]["dtype"] == "U32" and L + p + ".scales" in h, p
for t in ("conv1d.weight", "A_log", "dt_bias"):
    assert h[L + t]["dtype"] == "F32" and not any(k.startswith(L + t.split(".")[0] + ".scales") for k in h), t
PYEOF
"$BIN" convert --hf-path "$T/q4" --mlx-path "$T/deq" -d >/dev/null
mkdir -p "$T/data"
head -n 16 demo/data/train.jsonl >"$T/data/train.jsonl"
head -n 4 demo/data/valid.jsonl >"$T/data/valid.jsonl"
cp "$T/data/valid.jsonl" "$T/data/test.jsonl"
"$BIN" train --model "$T/q4" --data "$T/data" --iters 3 --batch-size 1 --max-seq-length 64 --num-layers 4 \
  --learning-rate 1e-3 --adapter-path "$T/ad" >"$T/train.log" 2>&1 \
  || fail "train on the 4-bit base: $(tail -3 "$T/train.log")"
grep -q "Saved final weights" "$T/train.log" || fail "no adapter saved"

ev() {
  "$BIN" eval --model "$1" --data "$T/data" --adapter-path "$T/ad" --max-seq-length 64 2>/dev/null | grep '^Test loss'
}
lq=$(ev "$T/q4")
ld=$(ev "$T/deq")
echo "4-bit base: $lq; dequantized base: $ld"
[ -n "$lq" ] && [ "$lq" = "$ld" ] || fail "test loss on the 4-bit base '$lq' differs from the dequantized base '$ld'"
gen() { "$BIN" generate --model "$1" --adapter-path "$T/ad" --prompt "Hello there" --max-tokens 16 --quiet; }
gen "$T/q4" >"$T/gq"
gen "$T/deq" >"$T/gd"
cmp -s "$T/gq" "$T/gd" || fail "greedy text on the 4-bit base differs from the dequantized base"

"$BIN" fuse --model "$T/q4" --adapter-path "$T/ad" --save-path "$T/fused" >/dev/null || fail "fuse on the 4-bit base"
[ -f "$T/fused/model.safetensors" ] || fail "fuse wrote no model"
if "$BIN" fuse --model "$T/q4" --adapter-path "$T/ad" --save-path "$T/fg" --export-gguf 2>"$T/err"; then
  fail "--export-gguf of a Qwen3.5 model succeeded"
fi
grep -q "GGUF export of qwen3_5" "$T/err" || fail "unclear refusal: $(cat "$T/err")"
[ ! -e "$T/fg" ] || fail "a refused --export-gguf left $T/fg behind"
echo "summary cli/qwen35_quant: all checks passed"
