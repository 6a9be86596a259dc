// Standard normals from Philox words, computed so that the CPU (any capability, any compiler)
// and the GPU produce the same bits: Box-Muller on a pair of uniforms, both halves used
// (z0 = r cos(theta), z1 = r sin(theta)), with our own log and sin/cos written only with
// IEEE operations that are correctly rounded everywhere: +, -, explicit multiplies and
// fused multiply-adds, division, sqrt, integer <-> float conversions and bit operations.
// Each product is rounded on its own (__fmul_rn on the device: nvcc may not contract it
// with an addition) and every fused one is an explicit fma (std::fma on the host: one
// instruction with FMA, a correctly rounded library call on the baseline x86-64 without it),
// so no compiler choice can change a result. No libm, libmvec or CUDA math function is
// called. Plain header, no module: included by ops/random_transform.hpp.
//
// Sources of the approximations (coefficients are theirs, the code is ours):
//  - f32 log: S. L. Moshier, Cephes Math Library, logf.c: x = 2^e m, m in [sqrt(1/2),
//    sqrt(2)), ln(m) = f - f^2/2 + f^3 P(f) with f = m - 1 and Cephes' degree-8 minimax P;
//    ln 2 split into 0.693359375 - 2.12194440e-4 (Cody-Waite).
//  - f32 sin/cos on [-pi/4, pi/4]: Cephes sinf.c / cosf.c minimax polynomials.
//  - f64 log: Sun's fdlibm e_log.c: ln(1 + f) = 2 atanh(s) with s = f / (2 + f), its
//    degree-14 even polynomial Lg1..Lg7, and ln 2 split in hi (exact times any exponent) + lo.
//  - f64 sin/cos on [-pi/4, pi/4]: fdlibm k_sin.c / k_cos.c (S1..S6, C1..C6), the cosine's
//    1 - z/2 summed as w + ((1 - w) - z/2) to keep its low bits.
// The angle needs no general range reduction: 2 pi u is reduced exactly in integers (the
// quadrant is the top two bits of the uniform's integer, rounded to nearest; the rest is a
// signed fraction of a quarter turn), so only the quarter-turn fraction times pi/2 rounds.
// Accuracy (tests/ops/test_random_normal.cpp, against float64 / long double references of
// the same uniforms): f32 within a few ulps, f64 within a few ulps.
#pragma once
#include <cmath>
#include <cstdint>
#ifndef __CUDA_ARCH__
#include <bit>
#endif

#include "backend/contract.hpp"  // BRRR_HD

// Forced inline on the host too: the CPU kernels (ops/cpu/isa) call these in loops that the
// compiler vectorises at each capability's width, which needs the body inlined.
#if defined(__CUDACC__)
#define BRRR_HD_INLINE BRRR_HD
#else
#define BRRR_HD_INLINE inline __attribute__((always_inline))
#endif

namespace brrr::random_transform {

// ---- correctly rounded operations, the same on both compilers ----------------------------

BRRR_HD_INLINE float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
BRRR_HD_INLINE double mul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
BRRR_HD_INLINE double div_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
BRRR_HD_INLINE float fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
BRRR_HD_INLINE double fma_rn(double a, double b, double c) {
#ifdef __CUDA_ARCH__
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
// std::sqrt would keep a call for errno (negative inputs) on the host and so stop the loops
// from vectorising; clang's elementwise builtin is the instruction (IEEE, correctly rounded).
BRRR_HD_INLINE float sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#elif defined(__clang__)
  return __builtin_elementwise_sqrt(a);
#else
  return std::sqrt(a);
#endif
}
BRRR_HD_INLINE double sqrt_rn(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#elif defined(__clang__)
  return __builtin_elementwise_sqrt(a);
#else
  return std::sqrt(a);
#endif
}
BRRR_HD_INLINE std::uint32_t bits_of(float a) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(a);
#else
  return std::bit_cast<std::uint32_t>(a);
#endif
}
BRRR_HD_INLINE float float_of(std::uint32_t a) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(a);
#else
  return std::bit_cast<float>(a);
#endif
}
BRRR_HD_INLINE std::uint64_t bits_of(double a) {
#ifdef __CUDA_ARCH__
  return static_cast<std::uint64_t>(__double_as_longlong(a));
#else
  return std::bit_cast<std::uint64_t>(a);
#endif
}
BRRR_HD_INLINE double double_of(std::uint64_t a) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(a));
#else
  return std::bit_cast<double>(a);
#endif
}

// ---- f32 ---------------------------------------------------------------------------------

/// ln(u) for a normal positive finite float u (the callers pass u in [2^-33, 1]).
BRRR_HD_INLINE float log_f32(float u) {
  // u = 2^e m with m in [sqrt(1/2), sqrt(2)): e is the exponent of u / sqrt(1/2), taken
  // from the bits of u less those of sqrt(1/2) (an arithmetic shift floors it), and m is u
  // with e taken out of its exponent field.
  const std::uint32_t b = bits_of(u);
  const std::int32_t e = static_cast<std::int32_t>(b - 0x3f3504f3u) >> 23;
  const float m = float_of(b - (static_cast<std::uint32_t>(e) << 23));
  const float x = m - 1.0f;  // exact (Sterbenz)
  const float z = mul_rn(x, x);
  float p = 7.0376836292e-2f;
  p = fma_rn(p, x, -1.1514610310e-1f);
  p = fma_rn(p, x, 1.1676998740e-1f);
  p = fma_rn(p, x, -1.2420140846e-1f);
  p = fma_rn(p, x, 1.4249322787e-1f);
  p = fma_rn(p, x, -1.6668057665e-1f);
  p = fma_rn(p, x, 2.0000714765e-1f);
  p = fma_rn(p, x, -2.4999993993e-1f);
  p = fma_rn(p, x, 3.3333331174e-1f);
  const float fe = static_cast<float>(e);
  float y = mul_rn(mul_rn(p, x), z);   // f^3 P(f)
  y = fma_rn(fe, -2.12194440e-4f, y);  // low part of e ln 2
  y = fma_rn(-0.5f, z, y);             // - f^2 / 2
  return fma_rn(fe, 0.693359375f, x + y);
}

/// The pair of standard normals of two words: Box-Muller (G. E. P. Box and M. E. Muller,
/// "A Note on the Generation of Random Normal Deviates", 1958) with r = sqrt(-2 ln u),
/// u = (a + 1/2) 2^-32 rounded to f32 (in [2^-33, 1], so |z| <= 6.77), and the angle
/// theta = 2 pi (b / 2^32): z0 = r cos(theta), z1 = r sin(theta).
BRRR_HD_INLINE void normal_pair_f32(std::uint32_t a, std::uint32_t b, float& z0, float& z1) {
  const float u = fma_rn(static_cast<float>(a), 0x1.0p-32f, 0x1.0p-33f);
  const float r = sqrt_rn(0.0f - mul_rn(2.0f, log_f32(u)));  // 0 - x: never -0
  // theta = q pi/2 + t with q the nearest quarter turn: b = q 2^30 + f, f in [-2^29, 2^29).
  const std::uint32_t q = (b + 0x20000000u) >> 30;
  const auto f = static_cast<std::int32_t>(b - (q << 30));
  const float t = mul_rn(static_cast<float>(f), 1.57079632679489661923f * 0x1.0p-30f);  // |t| <= pi/4
  const float z = mul_rn(t, t);
  const float ps = fma_rn(fma_rn(-1.9515295891e-4f, z, 8.3321608736e-3f), z, -1.6666654611e-1f);
  const float s = fma_rn(mul_rn(ps, z), t, t);  // sin t
  const float pc = fma_rn(fma_rn(2.443315711809948e-5f, z, -1.388731625493765e-3f), z, 4.166664568298827e-2f);
  const float c = fma_rn(mul_rn(pc, z), z, fma_rn(-0.5f, z, 1.0f));  // cos t
  // cos(theta), sin(theta) by quadrant: (c, s), (-s, c), (-c, -s), (s, -c).
  const bool odd = (q & 1u) != 0;
  const float x = odd ? s : c, y = odd ? c : s;
  const std::uint32_t neg_x = ((q + 1u) & 2u) << 30, neg_y = (q & 2u) << 30;
  z0 = mul_rn(r, float_of(bits_of(x) ^ neg_x));
  z1 = mul_rn(r, float_of(bits_of(y) ^ neg_y));
}

// ---- f64 ---------------------------------------------------------------------------------

/// ln(u) for a normal positive finite double u (the callers pass u in [2^-53, 1]).
BRRR_HD_INLINE double log_f64(double u) {
  const std::uint64_t b = bits_of(u);  // as in log_f32: u = 2^e m, m in [sqrt(1/2), sqrt(2))
  const std::int64_t e = static_cast<std::int64_t>(b - 0x3fe6a09e667f3bcdull) >> 52;
  const double m = double_of(b - (static_cast<std::uint64_t>(e) << 52));
  const double f = m - 1.0;  // exact
  const double s = div_rn(f, 2.0 + f);
  const double z = mul_rn(s, s);
  double p = 1.479819860511658591e-01;  // Lg7 .. Lg1
  p = fma_rn(p, z, 1.531383769920937332e-01);
  p = fma_rn(p, z, 1.818357216161805012e-01);
  p = fma_rn(p, z, 2.222219843214978396e-01);
  p = fma_rn(p, z, 2.857142874366239149e-01);
  p = fma_rn(p, z, 3.999999999940941908e-01);
  p = fma_rn(p, z, 6.666666666666735130e-01);
  const double rr = mul_rn(z, p);
  const double hfsq = mul_rn(mul_rn(0.5, f), f);
  const double de = static_cast<double>(e);
  const double lo = fma_rn(s, hfsq + rr, mul_rn(de, 1.90821492927058770002e-10));  // s (hfsq + R) + e ln2_lo
  return mul_rn(de, 6.93147180369123816490e-01) - ((hfsq - lo) - f);               // e ln2_hi: exact
}

/// The pair of standard normals of four words: as normal_pair_f32 in double, from 53-bit
/// uniforms: u = 1 - k 2^-53 with k the top 53 bits of (a0, a1) (in [2^-53, 1], |z| <= 8.58)
/// and theta = 2 pi (k' / 2^53) with k' those of (b0, b1).
BRRR_HD_INLINE void normal_pair_f64(std::uint32_t a0, std::uint32_t a1, std::uint32_t b0, std::uint32_t b1,
                                    double& z0, double& z1) {
  const std::uint64_t ka = ((static_cast<std::uint64_t>(a0) << 32) | a1) >> 11;
  const double u = 1.0 - mul_rn(static_cast<double>(ka), 0x1.0p-53);  // exact
  const double r = sqrt_rn(0.0 - mul_rn(2.0, log_f64(u)));
  const std::uint64_t kb = ((static_cast<std::uint64_t>(b0) << 32) | b1) >> 11;
  const std::uint64_t qq = (kb + (std::uint64_t{1} << 50)) >> 51;  // 0 .. 4: the nearest quarter turn
  const auto f = static_cast<std::int64_t>(kb) - static_cast<std::int64_t>(qq << 51);  // [-2^50, 2^50)
  const std::uint64_t q = qq & 3u;
  const double fd = static_cast<double>(f);  // exact
  // t = f (pi/2) 2^-51, pi/2 as hi + lo doubles.
  const double t = fma_rn(fd, 1.5707963267948966 * 0x1.0p-51, mul_rn(fd, 6.123233995736766e-17 * 0x1.0p-51));
  const double z = mul_rn(t, t);
  double ps = 1.58969099521155010221e-10;  // S6 .. S2
  ps = fma_rn(ps, z, -2.50507602534068634195e-08);
  ps = fma_rn(ps, z, 2.75573137070700676789e-06);
  ps = fma_rn(ps, z, -1.98412698298579493134e-04);
  ps = fma_rn(ps, z, 8.33333333332248946124e-03);
  const double s = fma_rn(mul_rn(z, t), fma_rn(z, ps, -1.66666666666666324348e-01), t);  // sin t
  double pc = -1.13596475577881948265e-11;  // C6 .. C1
  pc = fma_rn(pc, z, 2.08757232129817482790e-09);
  pc = fma_rn(pc, z, -2.75573143513906633035e-07);
  pc = fma_rn(pc, z, 2.48015872894767294178e-05);
  pc = fma_rn(pc, z, -1.38888888888741095749e-03);
  pc = fma_rn(pc, z, 4.16666666666666019037e-02);
  const double hz = mul_rn(0.5, z), w = 1.0 - hz;
  const double c = w + fma_rn(mul_rn(z, z), pc, (1.0 - w) - hz);  // cos t
  const bool odd = (q & 1u) != 0;
  const double x = odd ? s : c, y = odd ? c : s;
  const std::uint64_t neg_x = ((q + 1u) & 2u) << 62, neg_y = (q & 2u) << 62;
  z0 = mul_rn(r, double_of(bits_of(x) ^ neg_x));
  z1 = mul_rn(r, double_of(bits_of(y) ^ neg_y));
}

}  // namespace brrr::random_transform
