"""A tiny, dependency-free baseline JPEG encoder (pure Python).

Used by build.py to write edge-case JPEGs that Pillow cannot produce: every
chroma subsampling (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, 4:1:0) and restart
intervals of any length.  Output depends only on this file (no libjpeg), so
the bytes are the same on every machine.

Baseline sequential DCT, 8-bit, Huffman coded with the standard tables of
ITU-T T.81 Annex K, JFIF APP0, quant tables from Annex K scaled like
libjpeg's quality setting.  Slow (pure Python): meant for small images.
"""

import math

# --- ITU-T T.81 Annex K tables -------------------------------------------------

STD_LUMA_Q = [
    16, 11, 10, 16, 24, 40, 51, 61,
    12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77,
    24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101,
    72, 92, 95, 98, 112, 100, 103, 99,
]
STD_CHROMA_Q = [
    17, 18, 24, 47, 99, 99, 99, 99,
    18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99,
] + [99] * 32

DC_LUMA_BITS = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
DC_LUMA_VALS = list(range(12))
DC_CHROMA_BITS = [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
DC_CHROMA_VALS = list(range(12))
AC_LUMA_BITS = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7D]
AC_LUMA_VALS = [
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06,
    0x13, 0x51, 0x61, 0x07, 0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xA1, 0x08,
    0x23, 0x42, 0xB1, 0xC1, 0x15, 0x52, 0xD1, 0xF0, 0x24, 0x33, 0x62, 0x72,
    0x82, 0x09, 0x0A, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44, 0x45,
    0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59,
    0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74, 0x75,
    0x76, 0x77, 0x78, 0x79, 0x7A, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0xA2, 0xA3,
    0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6,
    0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9,
    0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA, 0xE1, 0xE2,
    0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF1, 0xF2, 0xF3, 0xF4,
    0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA,
]
AC_CHROMA_BITS = [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77]
AC_CHROMA_VALS = [
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41,
    0x51, 0x07, 0x61, 0x71, 0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91,
    0xA1, 0xB1, 0xC1, 0x09, 0x23, 0x33, 0x52, 0xF0, 0x15, 0x62, 0x72, 0xD1,
    0x0A, 0x16, 0x24, 0x34, 0xE1, 0x25, 0xF1, 0x17, 0x18, 0x19, 0x1A, 0x26,
    0x27, 0x28, 0x29, 0x2A, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3A, 0x43, 0x44,
    0x45, 0x46, 0x47, 0x48, 0x49, 0x4A, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58,
    0x59, 0x5A, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69, 0x6A, 0x73, 0x74,
    0x75, 0x76, 0x77, 0x78, 0x79, 0x7A, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8A, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A,
    0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8, 0xA9, 0xAA, 0xB2, 0xB3, 0xB4,
    0xB5, 0xB6, 0xB7, 0xB8, 0xB9, 0xBA, 0xC2, 0xC3, 0xC4, 0xC5, 0xC6, 0xC7,
    0xC8, 0xC9, 0xCA, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7, 0xD8, 0xD9, 0xDA,
    0xE2, 0xE3, 0xE4, 0xE5, 0xE6, 0xE7, 0xE8, 0xE9, 0xEA, 0xF2, 0xF3, 0xF4,
    0xF5, 0xF6, 0xF7, 0xF8, 0xF9, 0xFA,
]


def _zigzag():
    order = []
    for s in range(15):
        rows = range(max(0, s - 7), min(s, 7) + 1)
        if s % 2 == 0:
            rows = reversed(rows)  # even anti-diagonals run up and to the right
        order.extend(r * 8 + (s - r) for r in rows)
    return order


ZIGZAG = _zigzag()  # ZIGZAG[k] = natural index of the k-th zigzag coefficient


def _scaled_q(base, quality):
    quality = max(1, min(100, quality))
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return [max(1, min(255, (b * scale + 50) // 100)) for b in base]


def _huff_codes(bits, vals):
    codes = {}
    code = 0
    k = 0
    for length in range(1, 17):
        for _ in range(bits[length - 1]):
            codes[vals[k]] = (code, length)
            code += 1
            k += 1
        code <<= 1
    return codes


_C = [[(math.sqrt(0.5) if u == 0 else 1.0) * 0.5 * math.cos((2 * x + 1) * u * math.pi / 16)
       for x in range(8)] for u in range(8)]


def _fdct(block):
    """block: 64 level-shifted samples (row-major) -> 64 coefficients."""
    tmp = [0.0] * 64
    for y in range(8):
        row = block[y * 8:y * 8 + 8]
        for u in range(8):
            cu = _C[u]
            tmp[y * 8 + u] = sum(cu[x] * row[x] for x in range(8))
    out = [0.0] * 64
    for u in range(8):
        col = [tmp[y * 8 + u] for y in range(8)]
        for v in range(8):
            cv = _C[v]
            out[v * 8 + u] = sum(cv[y] * col[y] for y in range(8))
    return out


class _BitWriter:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def write(self, value, length):
        if length == 0:
            return
        self.acc = (self.acc << length) | (value & ((1 << length) - 1))
        self.n += length
        while self.n >= 8:
            self.n -= 8
            byte = (self.acc >> self.n) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0x00)
        self.acc &= (1 << self.n) - 1

    def flush(self):
        """Pad to a byte boundary with 1-bits (T.81 F.1.2.3)."""
        if self.n:
            self.write((1 << (8 - self.n)) - 1, 8 - self.n)


def _rgb_to_ycbcr(pixels):
    ys, cbs, crs = [], [], []
    for r, g, b in pixels:
        ys.append(0.299 * r + 0.587 * g + 0.114 * b)
        cbs.append(-0.168736 * r - 0.331264 * g + 0.5 * b + 128)
        crs.append(0.5 * r - 0.418688 * g - 0.081312 * b + 128)
    return ys, cbs, crs


def _plane_for(plane, w, h, fx, fy, pw, ph):
    """Box-downsample a w*h plane by (fx, fy), then edge-pad to pw*ph."""
    cw = -(-w // fx)
    ch = -(-h // fy)
    small = [0.0] * (cw * ch)
    for cy in range(ch):
        for cx in range(cw):
            acc = 0.0
            for dy in range(fy):
                y = min(cy * fy + dy, h - 1)
                for dx in range(fx):
                    x = min(cx * fx + dx, w - 1)
                    acc += plane[y * w + x]
            small[cy * cw + cx] = acc / (fx * fy)
    out = [0.0] * (pw * ph)
    for y in range(ph):
        sy = min(y, ch - 1)
        for x in range(pw):
            out[y * pw + x] = small[sy * cw + min(x, cw - 1)]
    return out


def _segment(marker, payload):
    return bytes([0xFF, marker]) + (len(payload) + 2).to_bytes(2, "big") + payload


def encode(pixels, width, height, sampling=((1, 1), (1, 1), (1, 1)), quality=90,
           restart_interval=0, gray=False, comment=None):
    """Encode an RGB image given as a list of (r, g, b) tuples, row-major.

    sampling: (h, v) factors for Y, Cb, Cr (each 1..4; Hmax/h, Vmax/v must
    be integers).  restart_interval: MCUs between RSTn markers (0 = none).
    gray: write a single-component (luma only) image.
    """
    assert len(pixels) == width * height and width > 0 and height > 0
    ys, cbs, crs = _rgb_to_ycbcr(pixels)
    planes = [ys] if gray else [ys, cbs, crs]
    samp = [(1, 1)] if gray else list(sampling)
    hmax = max(h for h, _ in samp)
    vmax = max(v for _, v in samp)
    mcux = -(-width // (8 * hmax))
    mcuy = -(-height // (8 * vmax))
    qtabs = [_scaled_q(STD_LUMA_Q, quality), _scaled_q(STD_CHROMA_Q, quality)]
    dc_codes = [_huff_codes(DC_LUMA_BITS, DC_LUMA_VALS), _huff_codes(DC_CHROMA_BITS, DC_CHROMA_VALS)]
    ac_codes = [_huff_codes(AC_LUMA_BITS, AC_LUMA_VALS), _huff_codes(AC_CHROMA_BITS, AC_CHROMA_VALS)]

    comps = []
    for ci, (plane, (h, v)) in enumerate(zip(planes, samp)):
        assert hmax % h == 0 and vmax % v == 0, "non-integer sampling ratio"
        pw, ph = mcux * h * 8, mcuy * v * 8
        comps.append({
            "id": ci + 1, "h": h, "v": v, "t": 0 if ci == 0 else 1, "pw": pw,
            "data": _plane_for(plane, width, height, hmax // h, vmax // v, pw, ph),
        })

    bw = _BitWriter()
    pred = [0] * len(comps)
    n_mcu = mcux * mcuy
    rst = 0
    for m in range(n_mcu):
        if restart_interval and m and m % restart_interval == 0:
            bw.flush()
            bw.out += bytes([0xFF, 0xD0 + rst])
            rst = (rst + 1) % 8
            pred = [0] * len(comps)
        my, mx = divmod(m, mcux)
        for ci, c in enumerate(comps):
            q = qtabs[c["t"]]
            dcc = dc_codes[c["t"]]
            acc = ac_codes[c["t"]]
            for by in range(c["v"]):
                for bx in range(c["h"]):
                    x0 = (mx * c["h"] + bx) * 8
                    y0 = (my * c["v"] + by) * 8
                    pw = c["pw"]
                    d = c["data"]
                    block = [d[(y0 + yy) * pw + x0 + xx] - 128.0 for yy in range(8) for xx in range(8)]
                    coef = _fdct(block)
                    zz = [int(round(coef[ZIGZAG[k]] / q[ZIGZAG[k]])) for k in range(64)]
                    diff = zz[0] - pred[ci]
                    pred[ci] = zz[0]
                    s = abs(diff).bit_length()
                    bw.write(*dcc[s])
                    bw.write(diff if diff >= 0 else diff + (1 << s) - 1, s)
                    run = 0
                    for k in range(1, 64):
                        a = zz[k]
                        if a == 0:
                            run += 1
                            continue
                        while run > 15:
                            bw.write(*acc[0xF0])
                            run -= 16
                        s = abs(a).bit_length()
                        bw.write(*acc[(run << 4) | s])
                        bw.write(a if a >= 0 else a + (1 << s) - 1, s)
                        run = 0
                    if run:
                        bw.write(*acc[0x00])
    bw.flush()

    out = bytearray(b"\xFF\xD8")
    out += _segment(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    if comment:
        out += _segment(0xFE, comment.encode("ascii"))
    for t in range(1 if gray else 2):
        out += _segment(0xDB, bytes([t]) + bytes(qtabs[t][ZIGZAG[k]] for k in range(64)))
    sof = bytes([8]) + height.to_bytes(2, "big") + width.to_bytes(2, "big") + bytes([len(comps)])
    for c in comps:
        sof += bytes([c["id"], (c["h"] << 4) | c["v"], c["t"]])
    out += _segment(0xC0, sof)
    tables = [(0x00, DC_LUMA_BITS, DC_LUMA_VALS), (0x10, AC_LUMA_BITS, AC_LUMA_VALS)]
    if not gray:
        tables += [(0x01, DC_CHROMA_BITS, DC_CHROMA_VALS), (0x11, AC_CHROMA_BITS, AC_CHROMA_VALS)]
    for tc, bits, vals in tables:
        out += _segment(0xC4, bytes([tc]) + bytes(bits) + bytes(vals))
    if restart_interval:
        out += _segment(0xDD, restart_interval.to_bytes(2, "big"))
    sos = bytes([len(comps)])
    for c in comps:
        sos += bytes([c["id"], (c["t"] << 4) | c["t"]])
    sos += bytes([0, 63, 0])
    out += _segment(0xDA, sos)
    out += bw.out
    out += b"\xFF\xD9"
    return bytes(out)


def test_pattern(width, height):
    """A deterministic RGB test picture: gradients, a disc, stripes, a checker."""
    px = []
    cx, cy, rad = width * 0.62, height * 0.45, min(width, height) * 0.3
    for y in range(height):
        for x in range(width):
            r = int(255 * x / max(1, width - 1))
            g = int(255 * y / max(1, height - 1))
            b = 128 + int(100 * math.sin(x / 5.0) * math.cos(y / 7.0))
            if (x - cx) ** 2 + (y - cy) ** 2 < rad * rad:
                r, g, b = 240, 200, 40
            elif x < width // 5 and (y // 4) % 2 == 0:
                r, g, b = 20, 20, 20
            elif y > height * 0.8 and ((x // 6) + (y // 6)) % 2 == 0:
                r, g, b = 250, 250, 250
            px.append((r, g, b))
    return px
