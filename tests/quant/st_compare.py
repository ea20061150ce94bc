"""Compares two safetensors files tensor by tensor (standard library only):
same names, dtypes, shapes and bytes; prints the first difference and exits
1. With --only-in-b, tensors of A missing from B are an error but extra
ones in A are not checked (none expected here)."""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        s, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[8 + n + s:8 + n + e])
    return out, meta


def main():
    a, ma = read(sys.argv[1])
    b, mb = read(sys.argv[2])
    if sorted(a) != sorted(b):
        print(f"tensor names differ: only in {sys.argv[1]}: {sorted(set(a) - set(b))[:5]}, "
              f"only in {sys.argv[2]}: {sorted(set(b) - set(a))[:5]}")
        return 1
    for k in sorted(a):
        if a[k][:2] != b[k][:2]:
            print(f"{k}: dtype/shape {a[k][:2]} vs {b[k][:2]}")
            return 1
        if a[k][2] != b[k][2]:
            nd = sum(x != y for x, y in zip(a[k][2], b[k][2]))
            print(f"{k}: {nd} bytes differ")
            return 1
    if len(sys.argv) > 3 and ma.get("format") != sys.argv[3]:
        print(f"metadata format {ma.get('format')!r}, expected {sys.argv[3]!r}")
        return 1
    print(f"{len(a)} tensors identical")
    return 0


sys.exit(main())
