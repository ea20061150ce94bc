# shell_setup.sh: what the shell tests share (sourced by a test after it has
# cd'ed to the repository root):
#   test_setup NAME   BIN (LMTUNE_BIN, else ./lmtune), T (a scratch directory
#                     /tmp/lmtune_NAME.XXXXXX, removed at exit unless KEEP is
#                     set) and the counters fail, checks;
#   ok 'CONDITION' 'MESSAGE'   one check: CONDITION is evaluated in a
#                     subshell (an error in it, an unset variable under
#                     set -u, fails the check instead of ending the script;
#                     files it writes stay, variables it sets do not),
#                     MESSAGE printed after "FAIL: " when it is false;
#   tiny_model [N]    $T/model (`lmtune init --preset tiny`, a 300-token
#                     vocabulary trained on the demo data) and $T/data (the
#                     first N (40) training and 8 validation lines of
#                     demo/data); exits 1 when init fails.
test_setup() {
  BIN=${LMTUNE_BIN:-$PWD/lmtune}
  T=$(mktemp -d "/tmp/lmtune_$1.XXXXXX")
  trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
  fail=0; checks=0
}
ok() { checks=$((checks+1)); if ! (eval "$1"); then fail=$((fail+1)); echo "FAIL: $2"; fi; }
tiny_model() {
  "$BIN" init --preset tiny --out "$T/model" --tokenizer-text demo/data/train.jsonl --vocab-size 300 >/dev/null ||
    { echo "init failed"; exit 1; }
  mkdir -p "$T/data"
  head -n "${1:-40}" demo/data/train.jsonl > "$T/data/train.jsonl"
  head -n 8 demo/data/valid.jsonl > "$T/data/valid.jsonl"
}
