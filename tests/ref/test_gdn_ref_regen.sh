#!/usr/bin/env bash
# Regenerates the Gated DeltaNet kernel cases (gen_gdn_refs.py) into a
# temporary folder and checks that the committed tests/ref/gdn matches:
# inputs bit for bit, expected tensors within 1e-6 relative, case.json equal
# apart from the fp32_deviation guide. Catches an edit of gdn_ref.py or
# gen_gdn_refs.py without a regeneration.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c "import torch" 2>/dev/null; then echo "SKIP: no torch at $PY (scripts/install-deps.sh --bench)"; exit 77; fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
LMTUNE_GDN_REF_OUT="$out" $PY tests/ref/gen_gdn_refs.py > "$out/log.txt"
$PY - "$out" <<'PYEOF'
import json, os, sys
sys.path.insert(0, "tests/ref")
from gen_refs import load_safetensors
new_root, old_root = sys.argv[1], "tests/ref/gdn"
cases = sorted(d for d in os.listdir(new_root) if os.path.isdir(os.path.join(new_root, d)))
assert cases == sorted(os.listdir(old_root)), f"case lists differ: {cases} vs {sorted(os.listdir(old_root))}"
worst = 0.0
for c in cases:
    a = open(os.path.join(new_root, c, "inputs.safetensors"), "rb").read()
    b = open(os.path.join(old_root, c, "inputs.safetensors"), "rb").read()
    assert a == b, f"{c}/inputs.safetensors differs from a fresh generation"
    ja = json.load(open(os.path.join(new_root, c, "case.json")))
    jb = json.load(open(os.path.join(old_root, c, "case.json")))
    ja.pop("fp32_deviation", None)
    jb.pop("fp32_deviation", None)
    assert ja == jb, f"{c}/case.json differs"
    ea = load_safetensors(os.path.join(new_root, c, "expected.safetensors"))
    eb = load_safetensors(os.path.join(old_root, c, "expected.safetensors"))
    assert set(ea) == set(eb), f"{c}: expected tensor names differ"
    for k in ea:
        assert ea[k].shape == eb[k].shape, f"{c}/{k}: shape"
        x, y = ea[k].double(), eb[k].double()
        rel = ((x - y).abs().max() / max(y.abs().max().item(), 1e-30)).item() if x.numel() else 0.0
        worst = max(worst, rel)
        assert rel <= 1e-6, f"{c}/{k}: relative difference {rel:.2e}"
print(f"summary: {len(cases)} GDN cases regenerated, worst relative difference {worst:.2e}")
PYEOF
