#!/usr/bin/env python3
"""Reference values of brrr's randn for tests/tensor/test_normal.cpp, computed independently of
the C++ code: cuRAND's Philox4x32-10 word layout written again here, and the Box-Muller
transform of ops/normal_math.hpp evaluated in 40-digit arithmetic (mpmath), from the same
uniforms:
  f32/f16/bf16: pair j of a draw uses words 2j, 2j + 1 (a, b) of the draw;
                u = (a + 1/2) 2^-32 rounded to f32 the way the C++ rounds it (a to f32, then
                one fused multiply-add), theta = 2 pi b / 2^32;
  f64:          pair j uses words 4j .. 4j + 3; u = 1 - k 2^-53 with k the top 53 bits of
                (w0, w1), theta = 2 pi k' / 2^53 with k' those of (w2, w3);
  z_2j = sqrt(-2 ln u) cos(theta), z_2j+1 = sqrt(-2 ln u) sin(theta).
Prints the C++ initialisers pasted into the test. Usage: python3 make_normal_reference.py
"""
import struct

import mpmath

mpmath.mp.dps = 40
MASK = 0xFFFFFFFF


def philox(c, k0, k1):
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & MASK, p1 & MASK, ((p0 >> 32) ^ c[3] ^ k1) & MASK, p0 & MASK]
    return c


def word(seed, w):
    b = w // 4
    hi = b >> 16
    return philox([hi & MASK, hi >> 32, b & 0xFFFF, 0], seed & MASK, seed >> 32)[w % 4]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def pair_f32(a, b):
    u = f32(f32(float(a)) * 2.0**-32 + 2.0**-33)  # the sum is exact in double: one rounding
    r = mpmath.sqrt(-2 * mpmath.log(mpmath.mpf(u)))
    th = 2 * mpmath.pi * b / mpmath.mpf(2) ** 32
    return r * mpmath.cos(th), r * mpmath.sin(th)


def pair_f64(w0, w1, w2, w3):
    ka, kb = ((w0 << 32) | w1) >> 11, ((w2 << 32) | w3) >> 11
    u = 1 - mpmath.mpf(ka) / mpmath.mpf(2) ** 53
    r = mpmath.sqrt(-2 * mpmath.log(u))
    th = 2 * mpmath.pi * kb / mpmath.mpf(2) ** 53
    return r * mpmath.cos(th), r * mpmath.sin(th)


def draw(seed, offset, n, f64):
    out = []
    for j in range((n + 1) // 2):
        if f64:
            out += pair_f64(*(word(seed, offset + 4 * j + k) for k in range(4)))
        else:
            out += pair_f32(word(seed, offset + 2 * j), word(seed, offset + 2 * j + 1))
    return out[:n]


def show(name, values):
    print(f"const double {name}[] = {{" + ", ".join(mpmath.nstr(v, 17, min_fixed=-1, max_fixed=1) for v in values) + "};")


# manual_seed(2024); randn({7}); randn({3}, f64): offsets 0 and 8 (a draw advances by whole blocks).
show("seed2024_f32", draw(2024, 0, 7, False))
show("seed2024_f64", draw(2024, 8, 3, True))
# manual_seed(7); randn({300000}): elements 262140 .. 262147 (blocks 65535 .. 65536: the counter's
# high word changes there).
show("seed7_f32_at_262140", draw(7, 262140, 8, False))
