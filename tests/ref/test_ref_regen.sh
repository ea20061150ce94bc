#!/usr/bin/env bash
# Regenerates the reference cases into a temporary folder and checks that the
# committed tests/ref/data matches them: model and input files bit for bit,
# expected tensors within 1e-6 relative (float64 sums may round differently
# with another BLAS), case.json equal apart from the fp32_deviation guide.
# Catches an edit of gen_refs.py / torch_model.py without a regeneration.
# Also regenerates tests/ref/muon.json (gen_muon.py: inputs exact, float64
# weights within 1e-12) and tests/ref/kv_rotating (gen_kv_rotating.py: the
# same bytes).
# Skipped (exit 77, a failure in strict runs) when Debian's python has no torch.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c "import torch" 2>/dev/null; then
  echo "SKIP: no torch at $PY (scripts/install-deps.sh --test installs python3-torch)"
  exit 77
fi
out=$(mktemp -d); extra=$(mktemp -d); trap 'rm -rf "$out" "$extra"' EXIT
LMTUNE_REF_OUT="$out" $PY tests/ref/gen_refs.py > "$out/log.txt"
$PY tests/ref/gen_muon.py "$extra/muon.json" > /dev/null
# muon.json: the inputs and settings exactly; the float64 weights within
# 1e-12 of their tensor's largest value (another CPU's BLAS kernels sum the
# Newton-Schulz products in another order: 1e-15 apart measured on an Intel
# Xeon against the AMD-made file); float32_gap is a guide (a float32 run's
# gap, which moves with the CPU's kernels too), as fp32_deviation below.
$PY - "$extra/muon.json" tests/ref/muon.json <<'PYEOF'
import json, sys
new, old = (json.load(open(f)) for f in sys.argv[1:3])
def same(a, b, path, float64=False):
    assert type(a) == type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            if k != "float32_gap":
                same(a[k], b[k], f"{path}/{k}", float64 or k == "after")
    elif isinstance(a, list) and float64 and all(isinstance(x, float) for x in a + b):
        assert len(a) == len(b), f"{path}: {len(a)} vs {len(b)} values"
        scale = max([abs(x) for x in b] + [1e-30])
        worst = max([abs(x - y) for x, y in zip(a, b)] + [0.0])
        assert worst <= 1e-12 * scale, f"{path}: differs by {worst / scale:.2e} of its largest value"
    elif isinstance(a, list):
        assert len(a) == len(b), f"{path}: {len(a)} vs {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]", float64)
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"
try:
    same(new, old, "muon.json")
except AssertionError as e:
    sys.exit(f"tests/ref/muon.json differs from a fresh gen_muon.py: {e}")
PYEOF
$PY tests/ref/gen_kv_rotating.py "$extra/kv_rotating" > /dev/null
for f in config.json case.json model.safetensors inputs.safetensors expected.safetensors; do
  if ! cmp -s "$extra/kv_rotating/$f" "tests/ref/kv_rotating/$f"; then
    echo "tests/ref/kv_rotating/$f differs from a fresh gen_kv_rotating.py"; exit 1
  fi
done
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
