"""MLX's affine quantization, written for the tests from MLX's own source
(ml-explore/mlx, mlx/backend/metal/kernels/quantized.h: affine_quantize,
affine_dequantize and the `dequantize` of the qmm loaders; the CUDA kernel
mlx/backend/cuda/quantized/affine_quantize.cu computes the same), in numpy,
independent of lmtune's C code.

quantize(w, bits, group) -> (packed uint8 bytes per row, scales, biases)
    per group of `group` consecutive weights of a row (float32 math):
      w_min = min(T max, values), w_max = max(0, values)   (the kernel's starts)
      scale = max((w_max - w_min) / (2^bits - 1), 1e-7)
      side  = |w_min| > |w_max|; scale = side ? scale : -scale
      edge  = side ? w_min : w_max
      q0    = round(edge / scale)            (Metal round: halves away from 0)
      scale, bias = (edge / q0, edge) if q0 != 0 else (scale, 0)
      q     = min(round((w - bias) / scale), 2^bits - 1)
    scales and biases are stored in the input dtype T (nearest even).

Packing, as the kernel writes it: 2/4/8 bits: 32/bits codes per uint32,
code k at bits [k*bits, (k+1)*bits); 3 and 6 bits: 8 (3-bit) or 4 (6-bit)
codes into 3 bytes, little-endian; 5 bits: 8 codes into 5 bytes.

dequantize(packed, scales, biases): the value the quantized products use:
(T)(float(s) * q + float(b)) for 16-bit T; for float32 T, s*q and the
addition are each rounded to float32.
"""

import numpy as np

_T_MAX = {"float32": np.finfo(np.float32).max, "float16": np.float32(65504.0),
          "bfloat16": np.float32(3.3895313892515355e38)}


def bf16_round(x):
    """float32 array -> float32 array of the nearest-even bfloat16 values."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    nan = np.isnan(x)
    r = np.where(nan, ((u >> 16) | 0x40) << 16, r)
    return r.astype(np.uint32).view(np.float32)


def to_dtype(x, dtype):
    """float32 values rounded to dtype, returned as float32."""
    if dtype == "float32":
        return np.asarray(x, dtype=np.float32)
    if dtype == "float16":
        return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)
    return bf16_round(x)


def round_half_away(x):
    """Metal's round(): halves away from zero (numpy's np.round is to even)."""
    x = np.asarray(x, dtype=np.float32)
    t = np.trunc(x)
    frac = x - t  # exact in float32
    return np.where(np.abs(frac) >= np.float32(0.5), t + np.sign(x), t).astype(np.float32)


def _pack_row(codes, bits):
    """One row's codes (ints) -> bytes, in the kernel's layout."""
    out = bytearray()
    if bits in (2, 4, 8):
        per = 32 // bits
        for i in range(0, len(codes), per):
            word = 0
            for k in range(per):
                word |= int(codes[i + k]) << (bits * k)
            out += int(word).to_bytes(4, "little")
    elif bits in (3, 6):
        per = 8 if bits == 3 else 4
        for i in range(0, len(codes), per):
            v = 0
            for k in range(per):
                v |= int(codes[i + k]) << (bits * k)
            out += int(v).to_bytes(3, "little")
    elif bits == 5:
        for i in range(0, len(codes), 8):
            v = 0
            for k in range(8):
                v |= int(codes[i + k]) << (5 * k)
            out += int(v).to_bytes(5, "little")
    else:
        raise ValueError(bits)
    return bytes(out)


def _unpack_row(row, bits, cols):
    codes = []
    if bits in (2, 4, 8):
        per = 32 // bits
        for i in range(0, len(row), 4):
            word = int.from_bytes(row[i:i + 4], "little")
            codes += [(word >> (bits * k)) & ((1 << bits) - 1) for k in range(per)]
    else:
        per, nbytes = {3: (8, 3), 6: (4, 3), 5: (8, 5)}[bits]
        for i in range(0, len(row), nbytes):
            v = int.from_bytes(row[i:i + nbytes], "little")
            codes += [(v >> (bits * k)) & ((1 << bits) - 1) for k in range(per)]
    assert len(codes) == cols
    return np.array(codes, dtype=np.float32)


def quantize(w, bits, group, dtype):
    """w: float32 (rows, cols) holding dtype values. Returns
    (packed uint8 (rows, cols*bits/8), scales, biases float32 (rows, cols/group)
    holding dtype values)."""
    assert bits in (2, 3, 4, 5, 6, 8) and group in (32, 64, 128)
    w = np.asarray(w, dtype=np.float32)
    rows, cols = w.shape
    assert cols % group == 0
    n_bins = np.float32((1 << bits) - 1)
    eps = np.float32(1e-7)
    g = w.reshape(rows, cols // group, group)
    w_min = np.minimum(_T_MAX[dtype], g.min(axis=-1))
    w_max = np.maximum(np.float32(0), g.max(axis=-1))
    scale = np.maximum((w_max - w_min) / n_bins, eps).astype(np.float32)
    side = np.abs(w_min) > np.abs(w_max)
    scale = np.where(side, scale, -scale).astype(np.float32)
    edge = np.where(side, w_min, w_max).astype(np.float32)
    q0 = round_half_away(edge / scale)
    at_zero = q0 == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(at_zero, scale, edge / np.where(at_zero, 1, q0)).astype(np.float32)
    bias = np.where(at_zero, np.float32(0), edge).astype(np.float32)
    q = np.minimum(round_half_away((g - bias[..., None]) / scale[..., None]), n_bins)
    q = np.maximum(q, 0).astype(np.int64).reshape(rows, cols)
    packed = np.frombuffer(b"".join(_pack_row(q[r], bits) for r in range(rows)), dtype=np.uint8)
    packed = packed.reshape(rows, cols * bits // 8)
    return packed, to_dtype(scale, dtype), to_dtype(bias, dtype)


def codes(packed, bits, cols):
    return np.stack([_unpack_row(bytes(packed[r]), bits, cols) for r in range(packed.shape[0])])


def dequantize(packed, scales, biases, bits, group, dtype):
    """float32 (rows, cols) of the dequantized dtype values."""
    rows = packed.shape[0]
    cols = packed.shape[1] * 8 // bits
    q = codes(packed, bits, cols).reshape(rows, cols // group, group)
    s = scales.astype(np.float32)[..., None]
    b = biases.astype(np.float32)[..., None]
    v = (s * q).astype(np.float32)  # exact for 16-bit scales; rounded once for float32
    v = (v + b).astype(np.float32)
    return to_dtype(v, dtype).reshape(rows, cols)
