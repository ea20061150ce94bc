#!/usr/bin/env bash
# test_dtype_labels.sh: the safetensors headers, not config.json's label, say
# how the weights are stored. Every command (train, plan, eval, generate,
# fuse, and generate on the fused model) runs on every pair of stored dtype
# (F32, BF16, F16) and label (torch_dtype float32 / bfloat16 / float16, no
# label, and the newer `dtype` key), and for a given stored dtype the results
# do not depend on the label: the same adapter bytes, test loss, generated
# text, fused weights and planned arena. (A label that disagreed with the
# weights crashed generate and eval: "memory plan too small".) The same for
# an MLX-quantized model (4-bit codes, bf16 scales) under three labels, and
# every command on a GGUF base (no label: the file's tensors say it all).
set -u
. tests/shell_setup.sh
test_setup dtype_labels
PY=/usr/bin/python3
# --weights-dtype auto times bf16 against fp32 products at start-up: near a tie
# the choice follows the machine's load, not the label. The first label of each
# stored dtype trains under auto; its choice is then given to every later run of
# that dtype (the same products whatever the label), to every plan and eval.
WD=()
products_of() { sed -n 's/^Frozen products: \(bf16\|fp32\).*/\1/p' "$1" | head -1 | sed 's/fp32/f32/'; }

"$BIN" init --preset tiny --layers 1 --out "$T/base" --tokenizer-text demo/data/train.jsonl --vocab-size 300 --seed 5 \
  --init fan-in >/dev/null || { echo "init failed"; exit 1; }
mkdir -p "$T/data"
head -n 8 demo/data/train.jsonl > "$T/data/train.jsonl"
head -n 4 demo/data/valid.jsonl > "$T/data/valid.jsonl"
head -n 4 demo/data/test.jsonl > "$T/data/test.jsonl"

# model directories: stored dtype x label
"$PY" - "$T" <<'PY'
import json, os, shutil, struct, sys
import numpy as np
root = sys.argv[1]
b = open(os.path.join(root, "base", "model.safetensors"), "rb").read()
n = struct.unpack("<Q", b[:8])[0]
header = json.loads(b[8:8 + n])
meta = header.pop("__metadata__", None)
data = b[8 + n:]
def convert(kind):
    out, chunks, off = {}, [], 0
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        e = header[name]
        a = np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], dtype="<f4")
        if kind == "F32":
            raw = a.tobytes()
        elif kind == "F16":
            raw = a.astype("<f2").tobytes()
        else:  # BF16, round to nearest even
            u = a.view("<u4").astype(np.uint64)
            raw = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")).tobytes()
        out[name] = {"dtype": kind, "shape": e["shape"], "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if meta is not None:
        out["__metadata__"] = meta
    h = json.dumps(out).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)
cfg = json.load(open(os.path.join(root, "base", "config.json")))
cfg.pop("torch_dtype", None); cfg.pop("dtype", None)
labels = {"tf32": ("torch_dtype", "float32"), "tbf16": ("torch_dtype", "bfloat16"), "tf16": ("torch_dtype", "float16"),
          "none": None, "dbf16": ("dtype", "bfloat16"), "df32": ("dtype", "float32")}
for kind in ("F32", "BF16", "F16"):
    weights = convert(kind)
    for lab, kv in labels.items():
        d = os.path.join(root, "m_%s_%s" % (kind, lab))
        os.makedirs(d)
        for f in os.listdir(os.path.join(root, "base")):
            if f not in ("model.safetensors", "config.json"):
                shutil.copy(os.path.join(root, "base", f), d)
        open(os.path.join(d, "model.safetensors"), "wb").write(weights)
        c = dict(cfg)
        if kv:
            c[kv[0]] = kv[1]
        json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
PY
[ $? -eq 0 ] || { echo "could not write the model variants"; exit 1; }

P="What is the capital of France?"
# with the adapter $2/ad on model $1, described as $3: eval (a test loss), train --test
# (the same test loss) and generate, their outputs in $2
eval_test_generate() {
  local m=$1 o=$2 what=$3 rc
  "$BIN" eval --model "$m" --data "$T/data" --adapter-path "$o/ad" --batch-size 2 --max-seq-length 48 --threads 1 \
    "${WD[@]}" > "$o/eval.log" 2>&1
  rc=$?; ok '[ $rc -eq 0 ] && grep -q "^Test loss" "$o/eval.log"' "eval, $what: $(tail -1 "$o/eval.log")"
  # eval measures its own products under auto (as train does): it says which it took,
  # and its loss is that of the same products asked for by name
  "$BIN" eval --model "$m" --data "$T/data" --adapter-path "$o/ad" --batch-size 2 --max-seq-length 48 --threads 1 \
    > "$o/eval_auto.log" 2>&1
  local chosen; chosen=$(products_of "$o/eval_auto.log")
  ok '[ "$chosen" = bf16 ] || [ "$chosen" = f32 ]' "eval, $what: no 'Frozen products:' line under auto"
  "$BIN" eval --model "$m" --data "$T/data" --adapter-path "$o/ad" --batch-size 2 --max-seq-length 48 --threads 1 \
    --weights-dtype "${chosen:-f32}" > "$o/eval_named.log" 2>&1
  ok '[ -n "$(grep "^Test loss" "$o/eval_auto.log")" ] && [ "$(grep "^Test loss" "$o/eval_auto.log")" = "$(grep "^Test loss" "$o/eval_named.log")" ]' \
    "eval, $what: auto ($chosen) and --weights-dtype ${chosen:-f32} disagree"
  "$BIN" train --model "$m" --data "$T/data" --adapter-path "$o/ad" --test --batch-size 2 --max-seq-length 48 \
    --threads 1 "${WD[@]}" > "$o/test.log" 2>&1
  rc=$?; ok '[ $rc -eq 0 ] && [ "$(grep "^Test loss" "$o/test.log")" = "$(grep "^Test loss" "$o/eval.log")" ]' \
    "train --test (evaluation only), $what: $(tail -1 "$o/test.log")"
  "$BIN" generate --model "$m" --adapter-path "$o/ad" --prompt "$P" --max-tokens 6 --verbose False \
    > "$o/gen.txt" 2> "$o/gen.err"
  rc=$?; ok '[ $rc -eq 0 ]' "generate, $what: $(tail -1 "$o/gen.err")"
}
# every command on model $1, products in $2, described as $3: train (the first run of a
# series under auto, the later ones under its choice, WD), plan, eval, train --test,
# generate with the adapter, fuse
run_commands() {
  local m=$1 o=$2 what=$3 rc
  mkdir -p "$o"
  "$BIN" train --model "$m" --data "$T/data" --iters 2 --batch-size 2 --num-layers 1 --max-seq-length 48 \
    --steps-per-eval 2 --adapter-path "$o/ad" --threads 1 "${WD[@]}" > "$o/train.log" 2>&1
  rc=$?; ok '[ $rc -eq 0 ]' "train, $what: $(tail -1 "$o/train.log")"
  [ ${#WD[@]} -gt 0 ] || WD=(--weights-dtype "$(products_of "$o/train.log")")
  ok '[ "${WD[1]}" = bf16 ] || [ "${WD[1]}" = f32 ]' "train, $what: no 'Frozen products:' line"
  "$BIN" plan --model "$m" --data "$T/data" --batch-size 2 --num-layers 1 --max-seq-length 48 "${WD[@]}" \
    > "$o/plan.log" 2>&1
  rc=$?; ok '[ $rc -eq 0 ]' "plan, $what: $(tail -1 "$o/plan.log")"
  grep "^  arena" "$o/plan.log" > "$o/arena.txt"
  eval_test_generate "$m" "$o" "$what"
  "$BIN" fuse --model "$m" --adapter-path "$o/ad" --save-path "$o/fused" > "$o/fuse.log" 2>&1
  rc=$?; ok '[ $rc -eq 0 ]' "fuse, $what: $(tail -1 "$o/fuse.log")"
}
# the label changes nothing: the outputs under $1 (a prefix) for each label after the
# first equal the first label's ($2: what the model is; $3...: the labels)
same_as_first_label() {
  local pre=$1 what=$2; shift 2
  local r="$pre$1" lab o; shift
  for lab in "$@"; do
    o="$pre$lab"
    ok 'cmp -s "$r/ad/adapters.safetensors" "$o/ad/adapters.safetensors"' "$what: trained adapter differs with label $lab"
    ok 'cmp -s "$r/arena.txt" "$o/arena.txt"' "$what: planned arena differs with label $lab ($(cat "$o/arena.txt"))"
    ok '[ "$(grep "^Test loss" "$r/eval.log")" = "$(grep "^Test loss" "$o/eval.log")" ]' \
       "$what: test loss differs with label $lab"
    ok 'cmp -s "$r/gen.txt" "$o/gen.txt"' "$what: generated text differs with label $lab"
    ok 'cmp -s "$r/fused/model.safetensors" "$o/fused/model.safetensors"' "$what: fused weights differ with label $lab"
    [ ! -e "$r/gen_fused.txt" ] || ok 'cmp -s "$r/gen_fused.txt" "$o/gen_fused.txt"' \
       "$what: text generated by the fused model differs with label $lab"
  done
}

LABELS=(tf32 tbf16 tf16 none dbf16 df32)
for kind in F32 BF16 F16; do
  WD=()
  for lab in "${LABELS[@]}"; do
    o="$T/o_${kind}_$lab"; what="$kind weights labelled $lab"
    run_commands "$T/m_${kind}_$lab" "$o" "$what"
    "$BIN" generate --model "$o/fused" --prompt "$P" --max-tokens 6 --verbose False > "$o/gen_fused.txt" \
      2> "$o/genf.err"
    rc=$?; ok '[ $rc -eq 0 ]' "generate on the fused model, $what: $(tail -1 "$o/genf.err")"
  done
  same_as_first_label "$T/o_${kind}_" "$kind" "${LABELS[@]}"
done

# ---- an MLX-quantized model: planned from its codes and scales, whatever the label ----
"$BIN" convert --hf-path "$T/m_F32_tf32" --mlx-path "$T/q" --dtype bfloat16 -q --q-bits 4 --q-group-size 32 \
  > "$T/convert.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ]' "convert -q: $(tail -1 "$T/convert.log")"
"$PY" - "$T" <<'PY'
import json, os, shutil, sys
root = sys.argv[1]
src = os.path.join(root, "q")
for lab, kv in {"tf32": ("torch_dtype", "float32"), "tbf16": ("torch_dtype", "bfloat16"), "none": None}.items():
    d = os.path.join(root, "q_" + lab)
    shutil.copytree(src, d)
    c = json.load(open(os.path.join(src, "config.json")))
    c.pop("torch_dtype", None); c.pop("dtype", None)
    if kv:
        c[kv[0]] = kv[1]
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
PY
WD=()
for lab in tf32 tbf16 none; do
  run_commands "$T/q_$lab" "$T/oq_$lab" "4-bit model (bf16 scales) labelled $lab"
done
same_as_first_label "$T/oq_" "4-bit" tf32 tbf16 none

# ---- a GGUF base (Q8_0 blocks): every command plans from the file's tensors ----
"$BIN" fuse --model "$T/m_F32_tf32" --adapter-path "$T/o_F32_tf32/ad" --save-path "$T/gf" --export-gguf \
  --gguf-type q8_0 > "$T/gf.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ]' "fuse --export-gguf --gguf-type q8_0: $(tail -1 "$T/gf.log")"
G="$T/gf/ggml-model-f16.gguf"; o="$T/og"; mkdir -p "$o"
"$BIN" train --model "$G" --data "$T/data" --iters 2 --batch-size 2 --num-layers 1 --max-seq-length 48 \
  --steps-per-eval 2 --adapter-path "$o/ad" --threads 1 > "$o/train.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ]' "train on a GGUF base: $(tail -1 "$o/train.log")"
"$BIN" plan --model "$G" --data "$T/data" --batch-size 2 --num-layers 1 --max-seq-length 48 > "$o/plan.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ] && grep -q "^  arena" "$o/plan.log"' "plan on a GGUF base: $(tail -1 "$o/plan.log")"
"$BIN" plan --model "$G" --data "$T/data" --adapter-path "$o/ad" --test --batch-size 2 --max-seq-length 48 \
  > "$o/plan_test.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ] && grep -q "^Evaluation only" "$o/plan_test.log"' \
  "plan --test (evaluation only) on a GGUF base: $(tail -1 "$o/plan_test.log")"
eval_test_generate "$G" "$o" "a GGUF base"
"$BIN" fuse --model "$G" --adapter-path "$o/ad" --save-path "$o/fused" --gguf-type f32 --memory-limit 8GB \
  > "$o/fuse.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ] && [ -s "$o/fused/ggml-model-f16.gguf" ]' "fuse on a GGUF base: $(tail -1 "$o/fuse.log")"
"$BIN" eval --model "$o/fused/ggml-model-f16.gguf" --data "$T/data" --batch-size 2 --max-seq-length 48 --threads 1 \
  > "$o/eval_fused.log" 2>&1
rc=$?; ok '[ $rc -eq 0 ] && [ "$(grep "^Test loss" "$o/eval_fused.log")" = "$(grep "^Test loss" "$o/eval.log")" ]' \
  "eval of the fused GGUF (f32) = eval of the GGUF base + adapter: $(tail -1 "$o/eval_fused.log")"
echo "summary cli/dtype_labels: $checks checks, $fail failed (3 stored dtypes x 6 labels x 7 commands; a 4-bit model" \
  "x 3 labels x 6 commands; a GGUF base x 7 commands)"
[ $fail -eq 0 ]
