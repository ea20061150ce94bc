#!/usr/bin/env bash
# test_chat_compare.sh: renders every (template x case) of
# tests/template/chat_cases.json with @huggingface/jinja (node) and with the
# C renderer, and requires byte-identical output for each ("identical: K/N").
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build/rel}
bin=$build/tests/template/test_chat_template
[ -x "$bin" ] || { echo "missing $bin (run make test)"; exit 1; }
command -v node >/dev/null || { echo "node not found"; exit 1; }
if [ ! -d tests/node/node_modules/@huggingface/jinja ]; then
  npm ci --prefix tests/node
fi
ref=$build/chat_reference.json
node tests/template/chat_reference.mjs "$ref"
"$bin" --compare "$ref"
