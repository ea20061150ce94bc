#!/usr/bin/env bash
# Regenerates the quantization references into a temporary folder and checks
# that the committed tests/quant/data matches them: every file bit for bit
# except the expected.safetensors of the model cases, whose float64 sums may
# round differently with another BLAS (within 1e-6 relative), and the
# fp32_deviation guide of case.json (a float32 run's gap, CPU-dependent). Catches an edit
# of gen_quant_refs.py / mlx_affine.py without a regeneration.
set -eu
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
if ! $PY -c "import torch, numpy" 2>/dev/null; then echo "SKIP: no torch/numpy at $PY"; exit 77; fi
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
LMTUNE_QUANT_OUT="$out" $PY tests/quant/gen_quant_refs.py > "$out/log.txt"
$PY - "$out" <<'PYEOF'
import json, os, sys
sys.path.insert(0, "tests/ref")
from gen_refs import load_safetensors
new_root, old_root = sys.argv[1], "tests/quant/data"
def files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs
                  if f != "log.txt")
assert files(new_root) == files(old_root), f"file lists differ: {files(new_root)} vs {files(old_root)}"
worst = 0.0
for f in files(new_root):
    a = open(os.path.join(new_root, f), "rb").read()
    b = open(os.path.join(old_root, f), "rb").read()
    if a == b:
        continue
    if f.endswith("case.json"):
        # fp32_deviation is a guide (a float32 run's gap to float64), which
        # moves with the CPU's BLAS kernels: everything else is exact
        ja, jb = json.loads(a), json.loads(b)
        ja.pop("fp32_deviation", None); jb.pop("fp32_deviation", None)
        assert ja == jb, f"{f} differs from a fresh generation (beyond fp32_deviation)"
        continue
    assert f.endswith("expected.safetensors"), f"{f} differs from a fresh generation"
    ea, eb = load_safetensors(os.path.join(new_root, f)), load_safetensors(os.path.join(old_root, f))
    for k in ea:
        x, y = ea[k].double(), eb[k].double()
        rel = ((x - y).abs().max() / max(y.abs().max().item(), 1e-30)).item() if x.numel() else 0.0
        worst = max(worst, rel)
        assert rel <= 1e-6, f"{f}/{k}: relative difference {rel:.2e}"
print(f"summary quant/regen: {len(files(new_root))} files regenerated, worst relative difference {worst:.2e}")
PYEOF
