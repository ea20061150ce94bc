#!/usr/bin/env python3
"""ggml_ref.py: an independent reference for ggml's block types, written
from ggml-quants.c (dequantize_row_q4_0 ... dequantize_row_q6_K,
quantize_row_q8_0_ref) and ggml-common.h (the block layouts), in plain
Python (standard library only).

float32 arithmetic is emulated exactly: each C operation on floats is done
in double and rounded to float32 (struct), which gives the correctly
rounded float32 result for +, -, *, / (53 >= 2 * 24 + 2 bits, so double
rounding is innocuous); int * float in C converts the int to float first,
as here. fp16 is read with struct's 'e' (exact) and written by the
round-to-nearest-even routine below.

  /usr/bin/python3 tests/kernels/ggml_ref.py DIR
reads DIR/blocks_TYPE.bin (whole blocks of TYPE) and writes
DIR/deq_TYPE.bin (float32 little-endian, one per element); reads
DIR/q8_in.bin (float32, a multiple of 32) and writes DIR/q8_out.bin
(34-byte Q8_0 blocks).
"""
import math
import os
import struct
import sys

QK_K = 256


def f32(x):
    """Rounds a double to the nearest float32 (ties to even), keeping inf/nan."""
    if math.isnan(x) or math.isinf(x):
        return x
    try:
        return struct.unpack('<f', struct.pack('<f', x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def half(b, off):
    return struct.unpack_from('<e', b, off)[0]


def f32_to_f16_bits(x):
    """IEEE binary16 bits of float x, round to nearest even (as ggml's
    GGML_FP32_TO_FP16); nan -> 0x7e00 with the sign."""
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return sign | 0x7e00
    a = abs(x)
    if math.isinf(a):
        return sign | 0x7c00
    if a == 0:
        return sign
    m, e = math.frexp(a)          # a = m * 2**e, 0.5 <= m < 1
    exp = e - 1                   # a = 1.xxx * 2**exp
    if exp < -14:                 # subnormal: units of 2**-24
        q = a / 2.0 ** -24
    else:                         # normal: 11 significant bits
        q = a / 2.0 ** (exp - 10)
    r = math.floor(q)
    frac = q - r
    if frac > 0.5 or (frac == 0.5 and r % 2 == 1):
        r += 1
    if exp < -14:
        return sign | r           # r may reach 0x400: the smallest normal, same bits
    if r == 2048:                 # rounded up to the next binade
        r = 1024
        exp += 1
    if exp > 15:
        return sign | 0x7c00
    return sign | ((exp + 15) << 10) | (r - 1024)


def roundf(x):
    """C roundf: half away from zero."""
    if math.isnan(x) or math.isinf(x):
        return x
    return math.copysign(math.floor(abs(x) + 0.5), x)


def deq_q4_0(b):
    d = half(b, 0)
    qs = b[2:18]
    y = [0.0] * 32
    for j in range(16):
        y[j] = f32(((qs[j] & 0x0F) - 8) * d)
        y[j + 16] = f32(((qs[j] >> 4) - 8) * d)
    return y


def deq_q4_1(b):
    d = half(b, 0)
    m = half(b, 2)
    qs = b[4:20]
    y = [0.0] * 32
    for j in range(16):
        y[j] = f32(f32((qs[j] & 0x0F) * d) + m)
        y[j + 16] = f32(f32((qs[j] >> 4) * d) + m)
    return y


def q5_high(qh, j):
    xh_0 = ((qh >> j) << 4) & 0x10
    xh_1 = (qh >> (j + 12)) & 0x10
    return xh_0, xh_1


def deq_q5_0(b):
    d = half(b, 0)
    qh = struct.unpack_from('<I', b, 2)[0]
    qs = b[6:22]
    y = [0.0] * 32
    for j in range(16):
        h0, h1 = q5_high(qh, j)
        y[j] = f32((((qs[j] & 0x0F) | h0) - 16) * d)
        y[j + 16] = f32((((qs[j] >> 4) | h1) - 16) * d)
    return y


def deq_q5_1(b):
    d = half(b, 0)
    m = half(b, 2)
    qh = struct.unpack_from('<I', b, 4)[0]
    qs = b[8:24]
    y = [0.0] * 32
    for j in range(16):
        h0, h1 = q5_high(qh, j)
        y[j] = f32(f32(((qs[j] & 0x0F) | h0) * d) + m)
        y[j + 16] = f32(f32(((qs[j] >> 4) | h1) * d) + m)
    return y


def deq_q8_0(b):
    d = half(b, 0)
    qs = struct.unpack_from('<32b', b, 2)
    return [f32(q * d) for q in qs]


def deq_q2_K(b):
    scales = b[0:16]
    qs = b[16:80]
    d = half(b, 80)
    dmin = half(b, 82)
    y = []
    is_ = 0
    for n in range(0, QK_K, 128):
        q = qs[n // 4:n // 4 + 32]
        for shift in (0, 2, 4, 6):
            for half_ in (0, 16):
                sc = scales[is_]
                is_ += 1
                dl = f32(d * (sc & 0xF))
                ml = f32(dmin * (sc >> 4))
                for l in range(16):
                    y.append(f32(f32(dl * ((q[l + half_] >> shift) & 3)) - ml))
    return y


def q3_scales(raw):
    """The 16 6-bit scales of a Q3_K block (as the kmask1/kmask2 dance)."""
    aux = list(struct.unpack('<3I', raw))
    k1 = 0x03030303
    k2 = 0x0f0f0f0f
    tmp = aux[2]
    a2 = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4)
    a3 = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4)
    a0 = (aux[0] & k2) | (((tmp >> 0) & k1) << 4)
    a1 = (aux[1] & k2) | (((tmp >> 2) & k1) << 4)
    return struct.unpack('<16b', struct.pack('<4I', a0 & 0xffffffff, a1 & 0xffffffff, a2 & 0xffffffff,
                                               a3 & 0xffffffff))


def deq_q3_K(b):
    hm = b[0:32]
    qs = b[32:96]
    scales = q3_scales(b[96:108])
    d_all = half(b, 108)
    y = []
    is_ = 0
    m = 1
    for n in range(0, QK_K, 128):
        q = qs[n // 4:n // 4 + 32]
        for shift in (0, 2, 4, 6):
            for half_ in (0, 16):
                dl = f32(d_all * (scales[is_] - 32))
                is_ += 1
                for l in range(16):
                    v = ((q[l + half_] >> shift) & 3) - (0 if hm[l + half_] & m else 4)
                    y.append(f32(dl * v))
            m <<= 1
    return y


def scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def deq_q4_K(b):
    d = half(b, 0)
    dmin = half(b, 2)
    scales = b[4:16]
    qs = b[16:144]
    y = []
    for k in range(4):
        sc, m = scale_min_k4(2 * k, scales)
        d1, m1 = f32(d * sc), f32(dmin * m)
        sc, m = scale_min_k4(2 * k + 1, scales)
        d2, m2 = f32(d * sc), f32(dmin * m)
        q = qs[32 * k:32 * k + 32]
        y += [f32(f32(d1 * (v & 0xF)) - m1) for v in q]
        y += [f32(f32(d2 * (v >> 4)) - m2) for v in q]
    return y


def deq_q5_K(b):
    d = half(b, 0)
    dmin = half(b, 2)
    scales = b[4:16]
    qh = b[16:48]
    ql = b[48:176]
    y = []
    for k in range(4):
        u1, u2 = 1 << (2 * k), 2 << (2 * k)
        sc, m = scale_min_k4(2 * k, scales)
        d1, m1 = f32(d * sc), f32(dmin * m)
        sc, m = scale_min_k4(2 * k + 1, scales)
        d2, m2 = f32(d * sc), f32(dmin * m)
        q = ql[32 * k:32 * k + 32]
        y += [f32(f32(d1 * ((q[l] & 0xF) + (16 if qh[l] & u1 else 0))) - m1) for l in range(32)]
        y += [f32(f32(d2 * ((q[l] >> 4) + (16 if qh[l] & u2 else 0))) - m2) for l in range(32)]
    return y


def deq_q6_K(b):
    ql = b[0:128]
    qh = b[128:192]
    sc = struct.unpack_from('<16b', b, 192)
    d = half(b, 208)
    y = [0.0] * QK_K
    for n in range(2):
        L, H, S, Y = ql[64 * n:], qh[32 * n:], sc[8 * n:], 128 * n
        for l in range(32):
            is_ = l // 16
            q1 = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            y[Y + l] = f32(f32(d * S[is_]) * q1)
            y[Y + l + 32] = f32(f32(d * S[is_ + 2]) * q2)
            y[Y + l + 64] = f32(f32(d * S[is_ + 4]) * q3)
            y[Y + l + 96] = f32(f32(d * S[is_ + 6]) * q4)
    return y


def deq_f16(b):
    return [half(b, 0)]


def deq_bf16(b):
    return [struct.unpack('<f', b'\x00\x00' + b[0:2])[0]]


def deq_f32(b):
    return [struct.unpack('<f', b[0:4])[0]]


# name: (block bytes, function)
TYPES = {
    'F32': (4, deq_f32), 'F16': (2, deq_f16), 'BF16': (2, deq_bf16),
    'Q4_0': (18, deq_q4_0), 'Q4_1': (20, deq_q4_1), 'Q5_0': (22, deq_q5_0), 'Q5_1': (24, deq_q5_1),
    'Q8_0': (34, deq_q8_0), 'Q2_K': (84, deq_q2_K), 'Q3_K': (110, deq_q3_K), 'Q4_K': (144, deq_q4_K),
    'Q5_K': (176, deq_q5_K), 'Q6_K': (210, deq_q6_K),
}


def quantize_q8_0(x):
    """quantize_row_q8_0_ref."""
    out = bytearray()
    for i in range(0, len(x), 32):
        amax = 0.0
        for v in x[i:i + 32]:
            a = abs(v)
            amax = amax if amax > a else a     # MAX(a, b): ((a) > (b) ? (a) : (b))
        d = f32(amax / 127)
        ident = f32(1.0 / d) if d else 0.0
        out += struct.pack('<H', f32_to_f16_bits(d))
        for v in x[i:i + 32]:
            r = roundf(f32(v * ident))
            out += struct.pack('<b', int(r) if -128 <= r <= 127 else 0)   # NaN: 0, as x86's conversion
    return bytes(out)


def write_f32(path, values):
    with open(path, 'wb') as f:
        for v in values:
            f.write(struct.pack('<f', v) if not math.isnan(v) else struct.pack('<I', 0x7fc00000))


def main():
    d = sys.argv[1]
    for name, (size, fn) in TYPES.items():
        p = os.path.join(d, 'blocks_%s.bin' % name)
        if not os.path.exists(p):
            continue
        raw = open(p, 'rb').read()
        assert len(raw) % size == 0, p
        out = []
        for k in range(0, len(raw), size):
            out += fn(raw[k:k + size])
        write_f32(os.path.join(d, 'deq_%s.bin' % name), out)
    p = os.path.join(d, 'q8_in.bin')
    if os.path.exists(p):
        raw = open(p, 'rb').read()
        x = list(struct.unpack('<%df' % (len(raw) // 4), raw))
        open(os.path.join(d, 'q8_out.bin'), 'wb').write(quantize_q8_0(x))


if __name__ == '__main__':
    main()
