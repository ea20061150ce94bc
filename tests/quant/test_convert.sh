#!/usr/bin/env bash
# test_convert.sh: `lmtune convert` against what mlx_lm.convert writes for
# the same model, as computed by the independent reference quantizer
# (tests/quant/mlx_affine.py, outputs in tests/quant/data/convert_*):
# -q --q-bits 4 --q-group-size 64 and each --quant-predicate recipe give the
# same tensors byte for byte (constant, zero and extreme groups included)
# and the same quantization in config.json; -d gives the reference's
# dequantized weights; the output is MLX's layout (index file, "mlx"
# metadata, sorted config); bad requests are one clear error and leave no
# output behind.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LMTUNE_BIN:-./lmtune}
T=$(mktemp -d /tmp/lmtune-convert-XXXXXX); trap 'rm -rf "$T"' EXIT
checks=0; failed=0
ok() { checks=$((checks+1)); }
bad() { checks=$((checks+1)); failed=$((failed+1)); echo "FAIL: $*"; }
D=tests/quant/data
PY=python3
# the JSON of config key $2 of $1, keys sorted; json_of FILE: a whole file the same way
quant_of() {
  $PY -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get(sys.argv[2]), sort_keys=True))" "$1" "$2"
}
json_of() { $PY -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1])), sort_keys=True))" "$1"; }
same_tensors() {   # LABEL OUT EXPECTED [METADATA]
  if $PY tests/quant/st_compare.py "$2" "$3" ${4:-} >"$T/cmp"; then ok; else bad "$1: $(cat "$T/cmp")"; fi
}

"$BIN" convert --hf-path $D/convert_src --mlx-path "$T/q4" -q --q-bits 4 --q-group-size 64 >"$T/log1"
same_tensors "-q 4-bit g64" "$T/q4/model.safetensors" $D/convert_q4g64/model.safetensors mlx
[ "$(quant_of "$T/q4/config.json" quantization)" = "$(json_of $D/convert_q4g64/quantization.json)" ] \
  && ok || bad "quantization in config.json: $(quant_of "$T/q4/config.json" quantization)"
[ "$(quant_of "$T/q4/config.json" quantization)" = "$(quant_of "$T/q4/config.json" quantization_config)" ] \
  && ok || bad "quantization_config differs from quantization"
grep -q "Quantized model with .* bits per weight" "$T/log1" && ok || bad "no bits-per-weight line: $(cat "$T/log1")"
[ -f "$T/q4/model.safetensors.index.json" ] && ok || bad "no model.safetensors.index.json"
$PY - "$T/q4/config.json" <<'PYEOF' && ok || bad "config.json keys are not sorted"
import json, sys
keys = list(json.load(open(sys.argv[1])).keys())
sys.exit(0 if keys == sorted(keys) else 1)
PYEOF

for mixed in mixed_3_6_g32 mixed_2_6_g64 mixed_3_4_g64 mixed_4_6_g32; do
  recipe=${mixed%_g*}; group=${mixed##*_g}
  "$BIN" convert --model $D/convert_src --mlx-path "$T/$mixed" -q --quant-predicate "$recipe" --q-group-size "$group" \
    >/dev/null
  same_tensors "$recipe (group $group)" "$T/$mixed/model.safetensors" $D/convert_$mixed/model.safetensors
  [ "$(quant_of "$T/$mixed/config.json" quantization)" = "$(json_of $D/convert_$mixed/quantization.json)" ] \
    && ok || bad "$recipe (group $group): quantization in config.json differs"
done

"$BIN" convert --hf-path "$T/q4" --mlx-path "$T/deq" -d >/dev/null
same_tensors "-d" "$T/deq/model.safetensors" $D/convert_q4g64_deq/model.safetensors
[ "$(quant_of "$T/deq/config.json" quantization)" = "null" ] \
  && [ "$(quant_of "$T/deq/config.json" quantization_config)" = "null" ] \
  && ok || bad "-d left a quantization in config.json"

# dtype cast, then quantize: scales and biases in float32
"$BIN" convert --hf-path $D/convert_src --mlx-path "$T/f32" --dtype float32 -q >/dev/null
$PY - "$T/f32/model.safetensors" <<'PYEOF' && ok || bad "--dtype float32 -q: scales not F32 or norms not F32"
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
ok = h["model.layers.0.self_attn.q_proj.scales"]["dtype"] == "F32" and h["model.norm.weight"]["dtype"] == "F32" \
     and h["model.layers.0.self_attn.q_proj.weight"]["dtype"] == "U32"
sys.exit(0 if ok else 1)
PYEOF

# a group size that does not divide a module's input features leaves it in
# full precision (mlx_lm's quantize_model skips it)
"$BIN" convert --hf-path $D/convert_src --mlx-path "$T/g128" -q --q-group-size 128 >/dev/null
$PY - "$T/g128/model.safetensors" <<'PYEOF' && ok || bad "--q-group-size 128 on 64 features quantized a module"
import json, struct, sys
d = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", d[:8])[0]; h = json.loads(d[8:8 + n])
plain = h["model.layers.0.self_attn.q_proj.weight"]["dtype"] == "BF16"
sys.exit(0 if plain and not any(k.endswith(".scales") for k in h) else 1)
PYEOF

# a sharded model (init writes shards over the limit; the test lowers it):
# convert reads every shard and quantizes the same as the single file
LMTUNE_INIT_SHARD_BYTES=40000 "$BIN" init --preset tiny --out "$T/sh" --dtype bf16 --seed 4 >/dev/null
"$BIN" init --preset tiny --out "$T/one" --dtype bf16 --seed 4 >/dev/null
n=$(ls "$T/sh"/model-*-of-*.safetensors 2>/dev/null | wc -l || true)
[ "$n" -gt 1 ] && [ -f "$T/sh/model.safetensors.index.json" ] && ok || bad "init wrote $n shards, no index"
"$BIN" convert --hf-path "$T/sh" --mlx-path "$T/shq" -q --q-group-size 32 >/dev/null
"$BIN" convert --hf-path "$T/one" --mlx-path "$T/oneq" -q --q-group-size 32 >/dev/null
same_tensors "convert of a sharded model" "$T/shq/model.safetensors" "$T/oneq/model.safetensors"

# errors: one line, exit 1, no output left behind
expect_error() {
  local want=$1; shift
  local rc=0
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [ "$rc" = 1 ] && grep -q "^lmtune: error: .*$want" "$T/err" && [ "$(wc -l <"$T/err")" = 1 ]; then ok
  else bad "expected error '$want' (exit $rc): $(cat "$T/err")"; fi
}
CV=("$BIN" convert --hf-path $D/convert_src)
expect_error "Cannot save to the path $T/q4 as it already exists" "${CV[@]}" --mlx-path "$T/q4" -q
expect_error "Choose either quantize or dequantize, not both." "${CV[@]}" --mlx-path "$T/x1" -q -d
expect_error "group size 48 is not supported" "${CV[@]}" --mlx-path "$T/x2" -q --q-group-size 48
expect_error "number of bits 7 is not supported" "${CV[@]}" --mlx-path "$T/x3" -q --q-bits 7
expect_error "affine quantization only" "${CV[@]}" --mlx-path "$T/x4" -q --q-mode mxfp4
expect_error "already quantized" "$BIN" convert --hf-path "$T/q4" --mlx-path "$T/x5" -q
expect_error "hf-path (or --model) is required" "$BIN" convert --mlx-path "$T/x6" -q
expect_error "config.json" "$BIN" convert --hf-path "$T/nowhere" --mlx-path "$T/x7" -q
ls -d "$T"/x* 2>/dev/null | grep -q . && bad "a failed convert left an output: $(ls -d "$T"/x*)" || ok

echo "summary quant/convert: $checks checks, $failed failed"
[ "$failed" = 0 ]
