"""png.py: a small PNG reader and writer (standard library only) for the
report tests: decodes 8-bit RGB/RGBA/grey images (what Chromium's
--screenshot writes) into rows of pixels, and writes RGB images (crops).

    python3 png.py stats FILE            width, height, distinct colours, per-channel std. deviation
    python3 png.py crop FILE X Y W H OUT a region of FILE into OUT
"""
import struct
import sys
import zlib


def read(path):
    data = open(path, 'rb').read()
    if data[:8] != b'\x89PNG\r\n\x1a\n':
        raise ValueError('%s: not a PNG file' % path)
    pos, idat, head = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if zlib.crc32(kind + body) != struct.unpack('>I', data[pos + 8 + n:pos + 12 + n])[0]:
            raise ValueError('%s: bad CRC in chunk %r' % (path, kind))
        if kind == b'IHDR':
            head = struct.unpack('>IIBBBBB', body)
        elif kind == b'IDAT':
            idat.append(body)
        elif kind == b'IEND':
            break
        pos += 12 + n
    width, height, depth, ctype, _, _, interlace = head
    if depth != 8 or interlace or ctype not in (0, 2, 4, 6):
        raise ValueError('%s: unsupported PNG (depth %d, colour type %d, interlace %d)'
                         % (path, depth, ctype, interlace))
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
    raw = zlib.decompress(b''.join(idat))
    stride = width * bpp
    rows, prev = [], bytes(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)]
        if f == 0:
            out = bytes(line)
        elif f == 2:
            out = bytes([(x + p) & 255 for x, p in zip(line, prev)])
        else:
            out = bytearray(line)
            for i in range(stride):
                a = out[i - bpp] if i >= bpp else 0
                if f == 1:
                    out[i] = (out[i] + a) & 255
                elif f == 3:
                    out[i] = (out[i] + ((a + prev[i]) >> 1)) & 255
                elif f == 4:
                    b = prev[i]
                    c = prev[i - bpp] if i >= bpp else 0
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
                else:
                    raise ValueError('%s: bad filter type %d in row %d' % (path, f, y))
            out = bytes(out)
        rows.append(out)
        prev = out
    # to RGB tuples
    pixels = []
    for line in rows:
        if ctype in (2, 6):
            r, g, b = line[0::bpp], line[1::bpp], line[2::bpp]
            pixels.append(list(zip(r, g, b)))
        else:
            pixels.append([(v, v, v) for v in line[::bpp]])
    return width, height, pixels


def write(path, pixels):
    height, width = len(pixels), len(pixels[0])
    raw = b''.join(b'\x00' + bytes(c for p in row for c in p) for row in pixels)

    def chunk(kind, body):
        return struct.pack('>I', len(body)) + kind + body + struct.pack('>I', zlib.crc32(kind + body))
    png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0))
    png += chunk(b'IDAT', zlib.compress(raw, 9)) + chunk(b'IEND', b'')
    open(path, 'wb').write(png)


def stats(pixels):
    colours, n, s, s2 = set(), 0, [0, 0, 0], [0, 0, 0]
    for row in pixels:
        for p in row:
            colours.add(p)
            n += 1
            for k in range(3):
                s[k] += p[k]
                s2[k] += p[k] * p[k]
    std = [max(0.0, s2[k] / n - (s[k] / n) ** 2) ** 0.5 for k in range(3)]
    return len(colours), std


if __name__ == '__main__':
    if sys.argv[1] == 'stats':
        w, h, px = read(sys.argv[2])
        ncol, std = stats(px)
        print(w, h, ncol, ' '.join('%.2f' % v for v in std))
    elif sys.argv[1] == 'crop':
        w, h, px = read(sys.argv[2])
        x, y, cw, ch = map(int, sys.argv[3:7])
        write(sys.argv[7], [row[x:x + cw] for row in px[y:y + ch]])
