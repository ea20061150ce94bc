#!/usr/bin/env bash
# Installs the real llama.cpp that the GGUF tests run (tests/llama/node_modules):
# node-llama-cpp and its prebuilt Linux x64 CPU build, both pinned by
# package-lock.json. --omit=optional leaves out the CUDA/Vulkan builds that
# node-llama-cpp lists as optional (~85 MB instead of ~700 MB); the x64 build
# is a direct dependency, so it stays. `npm install` with the lock, not
# `npm ci`: the registry these machines reach lacks the 3.22.1 builds for
# macOS, Windows and riscv64, so the lock cannot list them and `npm ci`
# refuses it as out of sync; `npm install` installs the locked versions and
# leaves the lock as it is. --ignore-scripts: node-llama-cpp's
# postinstall would try to download or build llama.cpp, which the prebuilt
# binary makes unnecessary. Idempotent: nothing happens when the pinned
# versions are already there. Called by scripts/install-deps.sh and by the
# tests that need it.
set -euo pipefail
cd "$(dirname "$0")"
want=$(node -p 'require("./package.json").dependencies["node-llama-cpp"]')
have=$(node -p 'try { require("./node_modules/node-llama-cpp/package.json").version } catch { "" }' 2>/dev/null || true)
if [ "$have" = "$want" ] && [ -f node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node ]; then
  exit 0
fi
echo "installing llama.cpp for the tests (npm install --omit=optional in tests/llama)" >&2
npm install --omit=optional --ignore-scripts --no-audit --no-fund >&2
