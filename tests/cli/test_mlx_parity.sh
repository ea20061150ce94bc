#!/usr/bin/env bash
# test_mlx_parity.sh: what an MLX-LM user meets in the first hour, black-box
# through the CLI, item by item of issue 13 (MLX-LM's behaviour read from
# mlx_lm/lora.py, tuner/*.py, generate.py, sample_utils.py, utils.py):
#  1 `--test` without `--train` evaluates the adapter of --adapter-path
#    (its adapter_config.json wins over --num-layers) and writes nothing;
#  4 the data keys prompt_feature, completion_feature, text_feature,
#    chat_feature; 6 generation (stop ids from generation_config.json,
#    --extra-eos-token, the stop token counted, "No text generated", fresh
#    seeds, --verbose, --prefill-response, --chat-template-config and
#    enable_thinking, --max-kv-size, --top-k; a tokenizer without EOS takes
#    config.json's for text data); 7 MLX-LM's log lines and [WARNING]s on
#    stdout, It/sec of a short last window; 8 report_to / project_name /
#    clear_cache_threshold noted the same on the command line and in YAML,
#    --trust-remote-code refused; 9 adapter_config.json with MLX-LM's keys;
#    10 repo ids from a Hugging Face cache laid out in a temp dir; 11 silent
#    mismatches made loud; 12 a flag value that is the next flag.
set -u
. tests/shell_setup.sh
test_setup mlx_parity
PY=/usr/bin/python3
listing() { (cd "$1" && find . -type f | sort | xargs md5sum); }

"$BIN" init --preset tiny --layers 2 --out "$T/m" --tokenizer-text demo/data/train.jsonl --vocab-size 300 --seed 3 \
  --init fan-in >/dev/null || { echo "init failed"; exit 1; }
mkdir -p "$T/d"
head -n 12 demo/data/train.jsonl > "$T/d/train.jsonl"
head -n 4 demo/data/valid.jsonl > "$T/d/valid.jsonl"
head -n 6 demo/data/test.jsonl > "$T/d/test.jsonl"
common=(--batch-size 2 --max-seq-length 64 --threads 1)
tr=("${common[@]}" --num-layers -1)   # train's: the model has 2 blocks, MLX-LM's default is 16

# ---- 1. --test without --train ----
"$BIN" train --model "$T/m" --data "$T/d" --adapter-path "$T/a" --train --iters 4 --num-layers -1 \
  --steps-per-eval 4 "${common[@]}" > "$T/train.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "train --train: $(tail -1 "$T/train.log")"
listing "$T/a" > "$T/before.txt"
"$BIN" train --model "$T/m" --adapter-path "$T/a" --data "$T/d" --test "${common[@]}" > "$T/test.log" 2> "$T/test.err"
rc=$?
ok '[ $rc -eq 0 ] && grep -Eq "^Test loss [0-9.]+, Test ppl [0-9.]+\.$" "$T/test.log"' \
   "LORA.md's evaluate command: $(cat "$T/test.err")"
ok '! grep -q "^Iter\|^Starting training\|^Trainable parameters\|^Training$" "$T/test.log"' \
   "--test alone trains nothing"
ok 'listing "$T/a" | cmp -s - "$T/before.txt"' "--test alone writes nothing in the adapter directory"
ok '[ "$(grep -c . "$T/test.log")" -eq 4 ] && [ "$(sed -n 1p "$T/test.log")" = "Loading pretrained model" ] &&
    [ "$(sed -n 2p "$T/test.log")" = "Loading datasets" ] && [ "$(sed -n 3p "$T/test.log")" = "Testing" ]' \
   "MLX-LM's lines of an evaluation: $(tr '\n' '|' < "$T/test.log")"
"$BIN" eval --model "$T/m" --adapter-path "$T/a" --data "$T/d" "${common[@]}" > "$T/eval.log" 2>&1
ok '[ "$(grep "^Test loss" "$T/eval.log")" = "$(grep "^Test loss" "$T/test.log")" ]' \
   "train --test equals eval with the adapter"
# adapter_config.json's num_layers (-1: both blocks) wins over the command line's --num-layers
"$BIN" train --model "$T/m" --adapter-path "$T/a" --data "$T/d" --test --num-layers 1 "${common[@]}" > "$T/nl.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ "$(grep "^Test loss" "$T/nl.log")" = "$(grep "^Test loss" "$T/test.log")" ]' \
   "--num-layers does not override the adapter's: $(tail -1 "$T/nl.log")"
printf 'train: false\ntest: true\nbatch_size: 2\nmax_seq_length: 64\n' > "$T/evaluate.yaml"
"$BIN" train --model "$T/m" --adapter-path "$T/a" --data "$T/d" -c "$T/evaluate.yaml" > "$T/yaml_test.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ "$(grep "^Test loss" "$T/yaml_test.log")" = "$(grep "^Test loss" "$T/test.log")" ] &&
    listing "$T/a" | cmp -s - "$T/before.txt"' \
   "YAML train: false, test: true evaluates, writes nothing"
ok 'grep -q "\"train\": true" "$T/a/adapter_config.json"' "adapter_config.json still says train: true"
# an empty --adapter-path tests the base model (lora.py: "Allow testing without LoRA layers")
"$BIN" train --model "$T/m" --adapter-path "" --data "$T/d" --test "${common[@]}" > "$T/base_test.log" 2>&1
"$BIN" eval --model "$T/m" --data "$T/d" "${common[@]}" > "$T/base_eval.log" 2>&1
ok '[ "$(grep "^Test loss" "$T/base_test.log")" = "$(grep "^Test loss" "$T/base_eval.log")" ] &&
    [ -n "$(grep "^Test loss" "$T/base_eval.log")" ]' \
   "--adapter-path \"\" --test: the base model"
printf 'train: false\n' > "$T/neither.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/neither.yaml" > "$T/neither.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "Must provide at least one of --train or --test" "$T/neither.log"' \
   "neither train nor test: MLX-LM's error"
"$BIN" train --model "$T/m" --adapter-path "$T/nope" --data "$T/d" --test "${common[@]}" > "$T/noad.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "The adapter path does not exist: $T/nope" "$T/noad.log"' \
   "a missing adapter: MLX-LM's message"
"$BIN" plan --model "$T/m" --adapter-path "$T/a" --data "$T/d" --test "${common[@]}" > "$T/plan_test.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Evaluation only" "$T/plan_test.log" && grep -q "^Planned peak" "$T/plan_test.log"' \
   "plan of an evaluation-only run"

# ---- 4. data keys ----
mkdir -p "$T/dq" "$T/dt" "$T/dc"
$PY - "$T" <<'PY'
import json, sys
root = sys.argv[1]
src = [json.loads(l) for l in open("demo/data/train.jsonl")][:8]
with open(root + "/dq/train.jsonl", "w") as f:
    for d in src:
        f.write(json.dumps({"question": d["prompt"], "answer": d["completion"]}) + "\n")
with open(root + "/dt/train.jsonl", "w") as f:
    for d in src:
        f.write(json.dumps({"body": d["prompt"] + " " + d["completion"]}) + "\n")
with open(root + "/dc/train.jsonl", "w") as f:
    for d in src:
        f.write(json.dumps({"conv": [{"role": "user", "content": d["prompt"]},
                                     {"role": "assistant", "content": d["completion"]}]}) + "\n")
PY
printf 'prompt_feature: question\ncompletion_feature: answer\n' > "$T/keys.yaml"
"$BIN" train --model "$T/m" --data "$T/dq" -c "$T/keys.yaml" --iters 2 --adapter-path "$T/aq" "${tr[@]}" \
  > "$T/dq.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "^Iter 2: Train loss" "$T/dq.log"' \
   "YAML prompt_feature / completion_feature: $(tail -1 "$T/dq.log")"
ok 'grep -q "\"prompt_feature\": \"question\"" "$T/aq/adapter_config.json"' \
   "the data keys are written to adapter_config.json"
"$BIN" train --model "$T/m" --data "$T/dq" --iters 2 --adapter-path "$T/aq2" "${tr[@]}" > "$T/dq2.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "Unsupported data format" "$T/dq2.log"' \
   "without the keys: MLX-LM's unsupported-format error"
"$BIN" train --model "$T/m" --data "$T/dt" --text-feature body --iters 2 --adapter-path "$T/at" "${tr[@]}" \
  > "$T/dt.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "--text-feature: $(tail -1 "$T/dt.log")"
printf 'chat_feature: conv\n' > "$T/chat.yaml"
"$BIN" train --model "$T/m" --data "$T/dc" -c "$T/chat.yaml" --iters 2 --adapter-path "$T/ac" "${tr[@]}" \
  > "$T/dc.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "YAML chat_feature: $(tail -1 "$T/dc.log")"

# ---- 5. --optimizer muon (the numerics: tests/train/test_optimizer.c against PyTorch) ----
printf 'optimizer: muon\nlearning_rate: 0.02\noptimizer_config:\n  muon:\n    momentum: 0.9\n' > "$T/muon.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/muon.yaml" --iters 8 --steps-per-eval 8 --adapter-path "$T/mu" \
  "${tr[@]}" > "$T/muon.log" 2>&1
rc=$?
v1=$(sed -n 's/^Iter 1: Val loss \([0-9.]*\),.*/\1/p' "$T/muon.log")
v8=$(sed -n 's/^Iter 8: Val loss \([0-9.]*\),.*/\1/p' "$T/muon.log")
ok '[ $rc -eq 0 ] && [ -n "$v1" ] && [ -n "$v8" ] && awk -v a="$v1" -v b="$v8" "BEGIN { exit !(b < a) }"' \
   "muon trains: validation loss $v1 -> $v8 ($(tail -1 "$T/muon.log"))"
ok 'grep -q "\"muon\": {" "$T/mu/adapter_config.json" && grep -q "\"momentum\": 0.9" "$T/mu/adapter_config.json"' \
   "optimizer_config.muon in adapter_config.json as given"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/muon.yaml" --iters 4 --steps-per-eval 8 --adapter-path "$T/mu2" \
  "${tr[@]}" > /dev/null 2>&1
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/muon.yaml" --iters 8 --steps-per-eval 8 --adapter-path "$T/mu2" \
  --resume "${tr[@]}" > "$T/muon_resume.log" 2>&1
ok 'cmp -s "$T/mu/adapters.safetensors" "$T/mu2/adapters.safetensors"' \
   "muon: 4 iterations + --resume give the bytes of 8 ($(tail -1 "$T/muon_resume.log"))"

# ---- 7. log lines and warnings on stdout ----
mkdir -p "$T/dn"; cp "$T/d/train.jsonl" "$T/dn/"   # no valid.jsonl
printf 'learning_rate: 1e-4\n' > "$T/lr.yaml"
"$BIN" train --model "$T/m" --data "$T/dn" -c "$T/lr.yaml" --iters 5 --steps-per-report 2 --max-seq-length 20 \
  --batch-size 2 --threads 1 --adapter-path "$T/a7" --resume-adapter-file "$T/a/adapters.safetensors" --num-layers -1 \
  > "$T/out7.log" 2> "$T/err7.log"
rc=$?
ok '[ $rc -eq 0 ] && [ ! -s "$T/err7.log" ]' "nothing on stderr: $(cat "$T/err7.log")"
for line in "Loading configuration file $T/lr.yaml" "Loading pretrained model" "Loading datasets" \
            "Warning: Validation set not found or empty. Training will proceed without validation." "Training" \
            "Loading fine-tuned weights from $T/a/adapters.safetensors"; do
  ok 'grep -qxF "$line" "$T/out7.log"' "stdout lacks \"$line\""
done
trunc="^\[WARNING\] Some sequences are longer than 20 tokens. The longest sentence [0-9]* will be truncated to 20."
trunc="$trunc Consider pre-splitting your data to save memory.\$"
ok 'grep -q "$trunc" "$T/out7.log"' \
   "the truncation [WARNING] on stdout"
at() { grep -n "$1" "$T/out7.log" | head -1 | cut -d: -f1; }
ok '[ "$(at "^Loading pretrained model$")" -lt "$(at "^Loading datasets$")" ] &&
    [ "$(at "^Loading datasets$")" -lt "$(at "^Training$")" ] &&
    [ "$(at "^Training$")" -lt "$(at "^Starting training")" ]' \
   "the lines in MLX-LM's order"
# It/sec of the short last window (iteration 5, one step) follows MLX: steps_per_report / time,
# so Tokens/sec / It/sec = the window's tokens / steps_per_report
$PY - "$T/out7.log" > "$T/itsec.txt" <<'PY'
import re, sys
rows = [tuple(map(float, m.groups())) for m in
        re.finditer(r"^Iter (\d+): Train loss [\d.]+, Learning Rate [\d.e+-]+, It/sec ([\d.]+), "
                    r"Tokens/sec ([\d.]+), Trained Tokens (\d+)",
                    open(sys.argv[1]).read(), re.M)]
it, its, toks, trained = rows[-1]
window = trained - rows[-2][3]
print("ok" if it == 5 and abs(toks / its - window / 2) <= 0.01 * window else "bad %r window %d" % (rows[-1], window))
PY
ok 'grep -qx ok "$T/itsec.txt"' "It/sec of the last window: $(cat "$T/itsec.txt")"

# ---- 8. MLX-only options, the same note from the command line and YAML; remote code refused ----
notes="^\[WARNING\] \(report_to\|project_name\|clear_cache\)"
"$BIN" train --model "$T/m" --data "$T/d" --iters 1 --adapter-path "$T/a8" "${tr[@]}" --report-to wandb \
  --project-name proj --clear-cache-threshold 1GB > "$T/cli8.log" 2>&1
rc_cli=$?
printf 'report_to: wandb\nproject_name: proj\nclear_cache_threshold: 1GB\n' > "$T/mlx_only.yaml"
"$BIN" train --model "$T/m" --data "$T/d" --iters 1 --adapter-path "$T/a8y" "${tr[@]}" -c "$T/mlx_only.yaml" \
  > "$T/yaml8.log" 2>&1
rc_yaml=$?
ok '[ $rc_cli -eq 0 ] && [ $rc_yaml -eq 0 ]' "accepted on the command line and in YAML ($(tail -1 "$T/cli8.log"))"
ok '[ "$(grep -c "^\[WARNING\] \(report_to\|project_name\|clear_cache_threshold\) " "$T/cli8.log")" -eq 3 ] &&
    [ "$(grep "$notes" "$T/cli8.log")" = "$(grep "$notes" "$T/yaml8.log")" ]' \
   "one note each, the same in both places"
ok 'grep -q "report_to wandb: lmtune reports to no service; the adapter directory gets the training report" \
      "$T/cli8.log" && grep -q "(report.html) and its history (metrics.jsonl)" "$T/cli8.log" &&
    grep -q -- "--metrics-file FILE appends" "$T/cli8.log"' \
   "the note says what lmtune does instead"
for cmd in "train --data $T/d" "plan --data $T/d" "eval --data $T/d" "generate" "fuse --adapter-path $T/a" \
           "convert --mlx-path $T/trc_out"; do
  "$BIN" $cmd --model "$T/m" --trust-remote-code > "$T/trc.log" 2>&1
  rc=$?
  ok '[ $rc -eq 1 ] && grep -q "lmtune runs no model code" "$T/trc.log" && [ "$(wc -l < "$T/trc.log")" -eq 1 ]' \
     "--trust-remote-code refused by ${cmd%% *}: $(cat "$T/trc.log")"
done
printf 'trust_remote_code: true\n' > "$T/trc.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/trc.yaml" > "$T/trc.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "lmtune runs no model code" "$T/trc.log"' "trust_remote_code: true refused in YAML"

# ---- 9. adapter_config.json: MLX-LM's keys, sorted, then lmtune's ----
$PY - "$T/a/adapter_config.json" > "$T/keys9.txt" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text)
keys = list(d)
mlx = ["adapter_path", "batch_size", "clear_cache_threshold", "config", "data", "fine_tune_type",
       "grad_accumulation_steps", "grad_checkpoint", "iters", "learning_rate", "lora_parameters", "lr_schedule",
       "mask_prompt", "max_seq_length", "model", "num_layers", "optimizer", "optimizer_config", "project_name",
       "report_to", "resume_adapter_file", "save_every", "seed", "steps_per_eval", "steps_per_report", "test",
       "test_batches", "train", "trust_remote_code", "val_batches"]
ours = keys[len(mlx):]
problems = []
if keys[:len(mlx)] != mlx: problems.append("MLX-LM keys: %r" % keys[:len(mlx)])
if ours != sorted(ours) or not ours: problems.append("lmtune's keys: %r" % ours)
if d["optimizer_config"] != {"adam": {}, "adamw": {}, "muon": {}, "sgd": {}, "adafactor": {}}:
    problems.append("optimizer_config")
if d["lora_parameters"] != {"rank": 8, "dropout": 0.0, "scale": 20.0}: problems.append("lora_parameters")
if d["train"] is not True or d["report_to"] is not None or d["clear_cache_threshold"] != 0: problems.append("values")
if not text.startswith('{\n    "adapter_path"'): problems.append("4-space indent")
print("ok" if not problems else "; ".join(problems))
PY
ok 'grep -qx ok "$T/keys9.txt"' "adapter_config.json: $(cat "$T/keys9.txt")"
printf 'optimizer: adamw\noptimizer_config:\n  adamw:\n    weight_decay: 0.05\n' > "$T/opt.yaml"
printf 'lr_schedule:\n  name: cosine_decay\n  warmup: 2\n  arguments: [1e-4, 10]\n' >> "$T/opt.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/opt.yaml" --iters 1 --adapter-path "$T/a9" "${tr[@]}" \
  > "$T/a9.log" 2>&1
$PY -c "
import json, sys; d = json.load(open(sys.argv[1]))
print('ok' if d['optimizer_config'] == {'adamw': {'weight_decay': 0.05}} and
      d['lr_schedule'] == {'name': 'cosine_decay', 'warmup': 2, 'arguments': [1e-4, 10]} and
      d['clear_cache_threshold'] == 0 else d)" "$T/a9/adapter_config.json" > "$T/opt9.txt"
ok 'grep -qx ok "$T/opt9.txt"' "optimizer_config and lr_schedule as the YAML gave them: $(cat "$T/opt9.txt")"
# an adapter_config.json as MLX-LM HEAD writes it works as a -c config file
cat > "$T/mlx_written.json" <<JSON
{"adapter_path": "$T/a9b", "batch_size": 2, "clear_cache_threshold": 0, "config": null, "data": "$T/d",
 "fine_tune_type": "lora", "grad_accumulation_steps": 1, "grad_checkpoint": false, "iters": 1, "learning_rate": 1e-05,
 "lora_parameters": {"rank": 8, "dropout": 0.0, "scale": 20.0}, "lr_schedule": null, "mask_prompt": false,
 "max_seq_length": 64, "model": "$T/m", "num_layers": 16, "optimizer": "adam",
 "optimizer_config": {"adam": {}, "adamw": {}, "muon": {}, "sgd": {}, "adafactor": {}}, "project_name": null,
 "report_to": null, "resume_adapter_file": null, "save_every": 100, "seed": 0, "steps_per_eval": 200,
 "steps_per_report": 10, "test": false, "test_batches": 500, "train": true, "trust_remote_code": false,
 "val_batches": 25}
JSON
"$BIN" train --model "$T/m" -c "$T/mlx_written.json" --num-layers 2 --threads 1 > "$T/mlxc.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ -f "$T/a9b/adapters.safetensors" ] && ! grep -q "WARNING" "$T/mlxc.log"' \
   "MLX-LM's adapter_config.json as the config file: $(tail -1 "$T/mlxc.log")"

# ---- 10. repo ids from the Hugging Face cache ----
snap="$T/hf/hub/models--TestOrg--Tiny-LM/snapshots/0123456789abcdef"
mkdir -p "$snap" "$T/hf/hub/models--TestOrg--Tiny-LM/refs"
cp "$T/m"/* "$snap/"
printf '0123456789abcdef' > "$T/hf/hub/models--TestOrg--Tiny-LM/refs/main"
"$BIN" generate --model "$T/m" -m 4 --verbose False > "$T/gen_dir.txt" 2>&1
HF_HOME="$T/hf" "$BIN" generate --model TestOrg/Tiny-LM -m 4 --verbose False > "$T/gen_hf_home.txt" 2>&1
ok 'cmp -s "$T/gen_dir.txt" "$T/gen_hf_home.txt"' "HF_HOME/hub: $(cat "$T/gen_hf_home.txt")"
HF_HOME=/nonexistent HF_HUB_CACHE="$T/hf/hub" "$BIN" generate --model TestOrg/Tiny-LM -m 4 --verbose False \
  > "$T/gen_hub_cache.txt" 2>&1
ok 'cmp -s "$T/gen_dir.txt" "$T/gen_hub_cache.txt"' "HF_HUB_CACHE wins: $(cat "$T/gen_hub_cache.txt")"
mkdir -p "$T/home/.cache/huggingface"; ln -s "$T/hf/hub" "$T/home/.cache/huggingface/hub"
(unset HF_HOME HF_HUB_CACHE; HOME="$T/home" "$BIN" generate --model TestOrg/Tiny-LM -m 4 --verbose False) \
  > "$T/gen_home.txt" 2>&1
ok 'cmp -s "$T/gen_dir.txt" "$T/gen_home.txt"' "~/.cache/huggingface/hub: $(cat "$T/gen_home.txt")"
HF_HOME="$T/hf" "$BIN" train --model TestOrg/Tiny-LM --data "$T/d" --iters 1 --adapter-path "$T/a10" "${tr[@]}" \
  > "$T/hf_train.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && grep -q "\"model\": \"TestOrg/Tiny-LM\"" "$T/a10/adapter_config.json"' \
   "train --model ORG/NAME; adapter_config.json keeps the name: $(tail -1 "$T/hf_train.log")"
HF_HOME="$T/hf" "$BIN" eval --model TestOrg/Tiny-LM --data "$T/d" "${common[@]}" > "$T/hf_eval.log" 2>&1
ok '[ "$(grep "^Test loss" "$T/hf_eval.log")" = "$(grep "^Test loss" "$T/base_eval.log")" ]' "eval --model ORG/NAME"
HF_HOME="$T/hf" "$BIN" fuse --model TestOrg/Tiny-LM --adapter-path "$T/a10" --save-path "$T/f10" > "$T/hf_fuse.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ -f "$T/f10/model.safetensors" ]' "fuse --model ORG/NAME: $(tail -1 "$T/hf_fuse.log")"
HF_HOME="$T/hf" "$BIN" generate --model TestOrg/Missing -m 4 > "$T/missing.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && [ "$(wc -l < "$T/missing.log")" -eq 1 ] &&
    grep -q "TestOrg/Missing: not a local directory, and not in the Hugging Face cache" "$T/missing.log" &&
    grep -q "hf download TestOrg/Missing" "$T/missing.log"' \
   "a repo id not in the cache: $(cat "$T/missing.log")"
"$BIN" train --model "$T/m" --data mlx-community/WikiSQL --iters 1 > "$T/hfdata.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "must be exported first" "$T/hfdata.log"' "--data ORG/NAME: $(cat "$T/hfdata.log")"
printf 'hf_dataset:\n  path: mlx-community/WikiSQL\n' > "$T/hfds.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/hfds.yaml" > "$T/hfds.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "hf_dataset: lmtune reads local JSONL files only; export" "$T/hfds.log"' \
   "YAML hf_dataset: $(cat "$T/hfds.log")"

# ---- 11. silent mismatches ----
$PY - "$T/m/config.json" "$T/q3config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["model_type"] = "qwen3"; c["architectures"] = ["Qwen3ForCausalLM"]
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
"$BIN" init --config "$T/q3config.json" --out "$T/q3" --tokenizer-text demo/data/train.jsonl \
  --vocab-size 300 >/dev/null 2>&1
cp -r "$T/q3" "$T/q3_as_mistral"
$PY -c "
import json, sys; p = sys.argv[1]; c = json.load(open(p))
c['model_type'] = 'mistral'; c['architectures'] = ['MistralForCausalLM']
json.dump(c, open(p, 'w'), indent=2)" "$T/q3_as_mistral/config.json"
"$BIN" train --model "$T/q3_as_mistral" --data "$T/d" --iters 1 --adapter-path "$T/a11" "${tr[@]}" > "$T/q3m.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] &&
    grep -q "tensor \"model.layers.0.self_attn.k_norm.weight\" has no place in a mistral model" "$T/q3m.log"' \
   "a qwen3 checkpoint labelled mistral is refused: $(tail -1 "$T/q3m.log")"
"$BIN" train --model "$T/q3" --data "$T/d" --iters 1 --adapter-path "$T/a11q" "${tr[@]}" > "$T/q3.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "the same checkpoint as qwen3 trains: $(tail -1 "$T/q3.log")"
printf 'lora_parameters:\n  keys: []\n' > "$T/nokeys.yaml"
"$BIN" train --model "$T/m" --data "$T/d" -c "$T/nokeys.yaml" > "$T/nokeys.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "lora_parameters.keys: an empty list puts LoRA on no layer" "$T/nokeys.log"' \
   "keys: [] refused: $(cat "$T/nokeys.log")"
mkdir -p "$T/dl"
$PY - "$T/dl/train.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(4):
        f.write(json.dumps({"prompt": "a long prompt " * 20 + str(i), "completion": "done"}) + "\n")
    for i in range(2):
        f.write(json.dumps({"prompt": "hi", "completion": "short " + str(i)}) + "\n")
PY
"$BIN" train --model "$T/m" --data "$T/dl" --mask-prompt --max-seq-length 24 --iters 1 --batch-size 2 --threads 1 \
  --adapter-path "$T/a11m" > "$T/mask.log" 2>&1
lost="^\[WARNING\] $T/dl/train.jsonl: 4 of 6 examples have no target left:"
lost="$lost their prompt is at least --max-seq-length 24 tokens"
ok 'grep -q "$lost" "$T/mask.log"' \
   "--mask-prompt with completions cut away warns: $(grep WARNING "$T/mask.log" | head -2)"
"$BIN" train --model "$T/m" --data "$T/d" --resume-adapter-file "$T/a" --iters 1 "${tr[@]}" > "$T/radir.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] &&
    grep -q "resume-adapter-file $T/a: is a directory; it must be an adapter file such as $T/a/" "$T/radir.log"' \
   "--resume-adapter-file DIR: $(cat "$T/radir.log")"

# ---- 12. a flag value that is the next flag ----
want12="lmtune: error: --export-gguf-adapter: expected a value, got the flag --no-fuse"
want12="$want12 (write --export-gguf-adapter=--no-fuse for a value that starts with --)"
(cd "$T" && "$BIN" fuse --model "$T/m" --adapter-path "$T/a" --export-gguf-adapter --no-fuse) > "$T/f12.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && [ ! -e "$T/--no-fuse" ] &&
    grep -qx "$want12" "$T/f12.log"' \
   "--export-gguf-adapter --no-fuse: $(cat "$T/f12.log")"
"$BIN" train --model "$T/m" --data "$T/d" --adapter-path --iters 1 > "$T/t12.log" 2>&1
rc=$?
ok '[ $rc -eq 1 ] && grep -q "adapter-path: expected a value, got the flag --iters" "$T/t12.log"' \
   "train --adapter-path --iters"
(cd "$T" && "$BIN" train --model "$T/m" --data "$T/d" --adapter-path=--odd --iters 1 "${tr[@]}") > "$T/t12b.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ] && [ -f "$T/--odd/adapters.safetensors" ]' "--adapter-path=--odd is a value: $(tail -1 "$T/t12b.log")"
"$BIN" train --model "$T/m" --data "$T/d" --num-layers -1 --iters 1 --adapter-path "$T/a12" "${tr[@]}" \
  > "$T/t12c.log" 2>&1
rc=$?
ok '[ $rc -eq 0 ]' "a negative number is a value: $(tail -1 "$T/t12c.log")"

echo "summary cli/mlx_parity: $checks checks, $fail failed"
[ $fail -eq 0 ]
