// Loop helpers shared by CPU kernel files (plain header: no module interface change). The
// pairwise sums (error O(log n) ulps instead of O(n): Higham, "The accuracy of floating point
// summation", SIAM J. Sci. Comput. 14(4), 1993) are in ops/cpu/isa/kernels.inc, compiled
// per CPU capability.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/contract.hpp"

namespace brrr::backend::cpu {

/// True when o's elements lie row-major without gaps (dims of size 1 ignored).
inline bool is_contiguous(const Operand& o) {
  std::int64_t expect = 1;
  for (int d = o.ndim - 1; d >= 0; --d) {
    if (o.sizes[d] != 1 && o.strides[d] != expect) return false;
    expect *= o.sizes[d];
  }
  return true;
}

/// exp for f32, the definition the vector kernels of ops/cpu/isa/kernels.inc repeat lane by
/// lane (same operations, same bits): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
/// Cephes' expf polynomial for exp(r) (S. L. Moshier, Cephes Math Library, expf.c) in
/// explicit fused multiply-adds, and 2^n applied as two normal factors so subnormal results
/// stay right. Within 1 ulp of float64's exp rounded to f32 (all 2^32 inputs compared,
/// docs/benchmarks.md, issue 18); exp(NaN) = NaN, exp(x) = inf above 88.7228, 0 below
/// -103.98. std::fma is one instruction at the avx2/avx512 levels and glibc's correctly
/// rounded fmaf in baseline code (slow: the strided exp op goes through the vector kernels).
inline float exp_f32(float x) {
  const float hi = 88.72283935546875f, lo = -103.97208404541016f;
  // x is clamped to [lo, hi], where the arithmetic below gives inf at hi and +0 at lo.
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = xc != xc ? 0.0f : xc;  // NaN: a finite stand-in (converting NaN to int is undefined)
  const float magic = 12582912.0f;  // 1.5 * 2^23: xc log2(e) + magic rounds to an integer
  const float n = std::fma(xc, 1.44269504088896341f, magic) - magic;
  float r = std::fma(n, -0.693359375f, xc);  // ln 2 in two parts (Cody-Waite)
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  const std::int32_t ni = static_cast<std::int32_t>(n);
  const std::int32_t e1 = ni >> 1, e2 = ni - e1;  // both in [-75, 64]: normal powers of two
  const float s1 = std::bit_cast<float>((e1 + 127) << 23), s2 = std::bit_cast<float>((e2 + 127) << 23);
  const float y = p * s1 * s2;
  return x != x ? x : y;
}

/// Elementwise work per parallel chunk (elements).
inline constexpr std::int64_t elementwise_grain = std::int64_t{1} << 15;

}  // namespace brrr::backend::cpu
