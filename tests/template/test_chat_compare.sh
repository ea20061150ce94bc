#!/usr/bin/env bash
# test_chat_compare.sh: renders every (template x case) of
# tests/template/chat_cases.json with @huggingface/jinja (node) and with the
# C renderer, and requires byte-identical output for each ("identical: K/N").
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build/rel}
bin=$build/tests/template/test_chat_template
[ -x "$bin" ] || { echo "missing $bin (run make test)"; exit 1; }
if ! command -v node >/dev/null || [ ! -f tests/node/node_modules/@huggingface/jinja/package.json ]; then
  echo "SKIP: node or tests/node/node_modules/@huggingface/jinja missing (scripts/install-deps.sh --test installs them)"
  exit 77
fi
ref=$build/chat_reference.json
node tests/template/chat_reference.mjs "$ref"
"$bin" --compare "$ref"
