#!/usr/bin/env python3
"""Generates tests/tensor/dtype_fixtures.inc: f32 -> f16 and f32 -> bf16 reference roundings.

Each row is {f32 bits, f16 bits, bf16 bits}. The f16 column comes from NumPy
(np.float32(x).astype(np.float16), IEEE round-to-nearest-even, subnormals included) and is
cross-checked against an exact rational computation; the bf16 column (NumPy has no bf16) comes
from the same exact computation: the two neighbouring representable values are compared with
Fractions and a tie goes to the even significand. Inputs: special values, hand-picked ties and
boundaries, and random bit patterns whose exponents span f16 underflow, subnormals, normals and
overflow. NaNs are left out (tested by hand: every NaN must stay NaN).

The C++ test only reads the generated file; Python is needed only to regenerate it:
    python3 tests/tensor/make_fixtures.py    (needs numpy; deterministic, seed 20240611)
"""
import os
import random
import struct
from fractions import Fraction

import numpy as np

SEED = 20240611
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "dtype_fixtures.inc")


def f32_from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def exact_value(bits, exp_bits, mant_bits):
    """Exact value of a binary float with the given field widths; an all-ones exponent
    with a zero significand (infinity) is treated as the next power of two, as IEEE's
    'unbounded exponent' rounding rule does."""
    sign = -1 if bits >> (exp_bits + mant_bits) else 1
    e = (bits >> mant_bits) & ((1 << exp_bits) - 1)
    m = bits & ((1 << mant_bits) - 1)
    bias = (1 << (exp_bits - 1)) - 1
    if e == 0:
        v = Fraction(m, 1 << mant_bits) * Fraction(2) ** (1 - bias)
    else:
        v = (1 + Fraction(m, 1 << mant_bits)) * Fraction(2) ** (e - bias)
    return sign * v


def round_exact(x, neg, exp_bits, mant_bits):
    """Round the exact value x (a Fraction, or +-inf; `neg` is its sign bit, so that -0
    keeps it) to the nearest (ties to even) binary float with the given field widths, by
    comparing it with its two representable neighbours."""
    sign_bit = 1 << (exp_bits + mant_bits)
    inf_bits = ((1 << exp_bits) - 1) << mant_bits
    if x == float("inf"):
        return inf_bits
    if x == float("-inf"):
        return sign_bit | inf_bits
    a = -x if x < 0 else x
    # binary search the largest non-negative bit pattern <= inf_bits whose value <= a
    lo, hi = 0, inf_bits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if exact_value(mid, exp_bits, mant_bits) <= a:
            lo = mid
        else:
            hi = mid - 1
    down = lo
    if down == inf_bits or exact_value(down, exp_bits, mant_bits) == a:
        r = down
    else:
        up = down + 1
        dd = a - exact_value(down, exp_bits, mant_bits)
        du = exact_value(up, exp_bits, mant_bits) - a
        if dd < du:
            r = down
        elif du < dd:
            r = up
        else:
            r = down if down % 2 == 0 else up
    return (sign_bit | r) if neg else r


def exact_of_f32(u):
    if (u & 0x7FFFFFFF) == 0x7F800000:
        return float("-inf") if u >> 31 else float("inf")
    return exact_value(u, 8, 23)


def inputs(rng):
    xs = [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x3F800000, 0xBF800000,  # +-1
        0x3F808000,  # 1 + 2^-8: bf16 tie -> 1.0 (even)
        0x3F818000,  # 1 + 3*2^-8: bf16 tie -> 1 + 2^-6 (even)
        0x3F80C000,  # 1 + 3*2^-9: bf16 above half -> 1 + 2^-7
        0x3F800001,  # 1 + 2^-23: both round down
        0x3F801000,  # 1 + 2^-11: f16 tie -> 1.0
        0x3F803000,  # 1 + 3*2^-11: f16 tie -> 1 + 2^-9 (even)
        0x477FE000,  # 65504 (f16 max)
        0x477FEFFF,  # just below 65520: 65504
        0x477FF000,  # 65520: f16 tie at the top -> inf
        0x7F7FFFFF,  # FLT_MAX: f16 inf, bf16 inf
        0x7F7F7FFF,  # bf16 max after rounding down
        0x33800000,  # 2^-24: smallest f16 subnormal
        0x33000000,  # 2^-25: f16 tie between 0 and 2^-24 -> 0
        0x33400000,  # 1.5*2^-25: -> 2^-24
        0x33C00000,  # 1.5*2^-24: tie between 1 and 2 units -> 2 units (even)
        0x387FC000,  # 2^-14 - 2^-24: the largest f16 subnormal, exact
        0x387FE000,  # 2^-14 - 2^-25: tie -> 2^-14 (the smallest normal, even)
        0x38800000,  # 2^-14: smallest f16 normal
        0x00000001,  # smallest f32 subnormal
        0x007FFFFF,  # largest f32 subnormal
        0x00800000,  # smallest f32 normal
    ]
    xs += [x | 0x80000000 for x in list(xs)]
    for _ in range(3000):
        e = rng.randint(127 - 30, 127 + 20)  # f16 underflow .. overflow
        m = rng.getrandbits(23)
        kind = rng.random()
        if kind < 0.15:
            m = (m & ~0x1FFF) | 0x1000  # exact f16 tie in the normal range
        elif kind < 0.30:
            m = (m & ~0xFFFF) | 0x8000  # exact bf16 tie
        xs.append((rng.getrandbits(1) << 31) | (e << 23) | m)
    for _ in range(500):
        u = rng.getrandbits(32)
        if (u & 0x7F800000) != 0x7F800000:  # no NaN / inf
            xs.append(u)
    seen, out = set(), []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def main():
    rng = random.Random(SEED)
    rows = []
    for u in inputs(rng):
        x = exact_of_f32(u)
        with np.errstate(over="ignore"):  # overflow to inf is the point of some rows
            h_np = int(np.array([f32_from_bits(u)], dtype=np.float32).astype(np.float16).view(np.uint16)[0])
        neg = bool(u >> 31)
        h_exact = round_exact(x, neg, 5, 10)
        if h_np != h_exact:
            raise SystemExit(f"numpy and the exact rounding disagree on f16 for {u:#010x}: {h_np:#06x} vs {h_exact:#06x}")
        b = round_exact(x, neg, 8, 7)
        rows.append((u, h_np, b))
    with open(OUT, "w") as f:
        f.write("// Generated by tests/tensor/make_fixtures.py (numpy %s, seed %d). Do not edit.\n" % (np.__version__, SEED))
        f.write("// {f32 bits, f16 bits (round to nearest even), bf16 bits (round to nearest even)}\n")
        for u, h, b in rows:
            f.write("{0x%08xu, 0x%04xu, 0x%04xu},\n" % (u, h, b))
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
