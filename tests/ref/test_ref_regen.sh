#!/usr/bin/env bash
# Regenerates the reference cases into a temporary folder and checks that the
# committed tests/ref/data matches them: model and input files bit for bit,
# expected tensors within 1e-6 relative (float64 sums may round differently
# with another BLAS), case.json equal apart from the fp32_deviation guide.
# Catches an edit of gen_refs.py / torch_model.py without a regeneration.
# Skipped (exit 77, a failure in strict runs) when Debian's python has no torch.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c "import torch" 2>/dev/null; then
  echo "SKIP: no torch at $PY (scripts/install-deps.sh --test installs python3-torch)"
  exit 77
fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
LMTUNE_REF_OUT="$out" $PY tests/ref/gen_refs.py > "$out/log.txt"
$PY - "$out" <<'PYEOF'
import json, os, sys
sys.path.insert(0, "tests/ref")
import torch
from gen_refs import load_safetensors
new_root, old_root = sys.argv[1], "tests/ref/data"
cases = sorted(d for d in os.listdir(new_root) if os.path.isdir(os.path.join(new_root, d)))
assert cases == sorted(os.listdir(old_root)), f"case lists differ: {cases} vs {sorted(os.listdir(old_root))}"
worst = 0.0
for c in cases:
    for f in ("model.safetensors", "inputs.safetensors", "config.json"):
        a = open(os.path.join(new_root, c, f), "rb").read()
        b = open(os.path.join(old_root, c, f), "rb").read()
        assert a == b, f"{c}/{f} differs from a fresh generation"
    ja = json.load(open(os.path.join(new_root, c, "case.json")))
    jb = json.load(open(os.path.join(old_root, c, "case.json")))
    ja.pop("fp32_deviation", None); jb.pop("fp32_deviation", None)
    assert ja == jb, f"{c}/case.json differs"
    files = sorted(f for f in os.listdir(os.path.join(new_root, c)) if f.endswith("expected.safetensors"))
    assert files == sorted(f for f in os.listdir(os.path.join(old_root, c)) if f.endswith("expected.safetensors")), c
    for f in files:
        ea = load_safetensors(os.path.join(new_root, c, f))
        eb = load_safetensors(os.path.join(old_root, c, f))
        assert set(ea) == set(eb), f"{c}/{f}: expected tensor names differ"
        for k in ea:
            assert ea[k].shape == eb[k].shape and ea[k].dtype == eb[k].dtype, f"{c}/{f}/{k}: shape/dtype"
            a, b = ea[k].double(), eb[k].double()
            rel = ((a - b).abs().max() / max(b.abs().max().item(), 1e-30)).item() if a.numel() else 0.0
            worst = max(worst, rel)
            assert rel <= 1e-6, f"{c}/{f}/{k}: relative difference {rel:.2e}"
print(f"summary: {len(cases)} cases regenerated, worst relative difference {worst:.2e}")
PYEOF
