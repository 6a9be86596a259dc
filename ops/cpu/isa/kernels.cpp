// The CPU kernel tables of ops/cpu/isa/kernels.hpp: kernels.inc compiled once per
// capability through clang's target attribute (a function-level ISA, so the rest of this
// file and every inline function it calls outside kernels.inc stay baseline: nothing built
// for AVX-512 can be picked by the linker for baseline code), and the run-time choice.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): no level fuses a * b + c,
// so all levels give the same bits.
#include "ops/cpu/isa/kernels.hpp"

#include <math.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/loops.hpp"  // exp_f32
#include "ops/random_transform.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
// glibc's vector math library (libmvec, linked by CMakeLists.txt): log and cos of 4 / 8
// doubles, the AVX2 ("d") and AVX-512 ("e") variants of the x86-64 vector function ABI.
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_log(__m256d);
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_cos(__m256d);
extern "C" __attribute__((target("avx512f"))) __m512d _ZGVeN8v_log(__m512d);
extern "C" __attribute__((target("avx512f"))) __m512d _ZGVeN8v_cos(__m512d);
#endif

namespace brrr::backend::cpu {

namespace rt = random_transform;

namespace baseline {
#include "ops/cpu/isa/kernels.inc"
// cuRAND's Philox4x32-10 words for blocks first, first + 1, ..., first + n - 1: block b at
// counter (b / 65536 as 64 bits, b % 65536, 0) under key `seed`, its 4 words at
// words[4 (b - first) ...] (the layout of random_transform::philox_words, computed 16
// blocks at a time so the rounds vectorise; tests/ops/test_cpu_isa.cpp compares the two).
// The baseline's; avx2 and avx512 have intrinsic versions below.
void philox_blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t* words, std::int64_t n) {
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  const auto key0 = static_cast<std::uint32_t>(seed), key1 = static_cast<std::uint32_t>(seed >> 32);
  for (std::int64_t i = 0; i < n; i += 16) {
    std::uint32_t c0[16], c1[16], c2[16], c3[16];
    for (int j = 0; j < 16; ++j) {
      const std::uint64_t b = first + static_cast<std::uint64_t>(i + j), hi = b >> 16;
      c0[j] = static_cast<std::uint32_t>(hi);
      c1[j] = static_cast<std::uint32_t>(hi >> 32);
      c2[j] = static_cast<std::uint32_t>(b & 0xffffu);
      c3[j] = 0;
    }
    std::uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      if (round > 0) k0 += w0, k1 += w1;
      for (int j = 0; j < 16; ++j) {
        const std::uint64_t p0 = m0 * c0[j], p1 = m1 * c2[j];
        const std::uint32_t r0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[j] ^ k0;
        const std::uint32_t r2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
        c1[j] = static_cast<std::uint32_t>(p1);
        c3[j] = static_cast<std::uint32_t>(p0);
        c0[j] = r0;
        c2[j] = r2;
      }
    }
    const std::int64_t len = n - i < 16 ? n - i : 16;
    for (std::int64_t j = 0; j < len; ++j) {
      std::uint32_t* w = words + 4 * (i + j);
      w[0] = c0[j], w[1] = c1[j], w[2] = c2[j], w[3] = c3[j];
    }
  }
}

void normal_f64(const std::uint32_t* w, double* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = rt::normal(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}
}  // namespace baseline

#if defined(__x86_64__)
// Box-Muller as random_transform::normal, `lanes` elements at a time: the uniforms in
// plain loops (they vectorise), log and cos by libmvec, the tail by the scalar function.
#define BRRR_NORMAL_F64(LANES, VEC, LOADU, STOREU, SET1, MUL, SQRT, LOG, COS)                         \
  void normal_f64(const std::uint32_t* w, double* z, std::int64_t n) {                                \
    std::int64_t i = 0;                                                                               \
    for (; i + LANES <= n; i += LANES) {                                                              \
      double u1[LANES], u2[LANES];                                                                    \
      for (int j = 0; j < LANES; ++j) {                                                               \
        const std::uint32_t* e = w + 4 * (i + j);                                                     \
        u1[j] = 1.0 - rt::uniform53(e[0], e[1]);                                                      \
        u2[j] = 6.283185307179586476925286766559 * rt::uniform53(e[2], e[3]);                         \
      }                                                                                               \
      const VEC r = MUL(SQRT(MUL(SET1(-2.0), LOG(LOADU(u1)))), COS(LOADU(u2)));                        \
      STOREU(z + i, r);                                                                               \
    }                                                                                                 \
    for (; i < n; ++i) z[i] = rt::normal(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);         \
  }
#endif

#if defined(__x86_64__)
// Philox4x32-10 as baseline::philox_blocks, one block per 32-bit lane, in intrinsics: the
// compilers' vectorisation of the generic loop widens every lane to 64 bits around each
// multiply (60-110 cycles per block measured); here the 32x32 -> 64 products of the even and
// odd lanes (mul_epu32) are blended back into lo and hi words, about 8 cycles per block with
// AVX-512. Integer arithmetic only: the same words as the generic loop on every level.
// VEC: the vector type; LANES blocks per step; MUL, SRL, SLL, BLEND (odd lanes from b), XOR,
// SET1, LOAD, STORE: its intrinsics; TRANSPOSE(c0..c3, w): stores the 4 x LANES words of
// LANES blocks, block-major, at w.
#define BRRR_PHILOX_BLOCKS(LANES, VEC, MUL, SRL, SLL, BLEND, XOR, SET1, LOAD, TRANSPOSE)              \
  void philox_blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t* words, std::int64_t n) {  \
    const VEC m0 = SET1(static_cast<int>(0xD2511F53u)), m1 = SET1(static_cast<int>(0xCD9E8D57u));      \
    const auto key0 = static_cast<std::uint32_t>(seed), key1 = static_cast<std::uint32_t>(seed >> 32); \
    for (std::int64_t i = 0; i < n; i += LANES) {                                                      \
      alignas(64) std::uint32_t a0[LANES], a1[LANES], a2[LANES];                                       \
      for (int j = 0; j < LANES; ++j) {                                                                \
        const std::uint64_t b = first + static_cast<std::uint64_t>(i + j), hi = b >> 16;              \
        a0[j] = static_cast<std::uint32_t>(hi);                                                        \
        a1[j] = static_cast<std::uint32_t>(hi >> 32);                                                  \
        a2[j] = static_cast<std::uint32_t>(b & 0xffffu);                                               \
      }                                                                                                \
      VEC c0 = LOAD(a0), c1 = LOAD(a1), c2 = LOAD(a2), c3 = SET1(0);                                   \
      std::uint32_t k0 = key0, k1 = key1;                                                              \
      for (int round = 0; round < 10; ++round) {                                                       \
        if (round > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;                                           \
        const VEC e0 = MUL(c0, m0), o0 = MUL(SRL(c0, 32), m0); /* m0 * c0, even and odd lanes */       \
        const VEC e1 = MUL(c2, m1), o1 = MUL(SRL(c2, 32), m1);                                         \
        const VEC lo0 = BLEND(e0, SLL(o0, 32)), hi0 = BLEND(SRL(e0, 32), o0);                          \
        const VEC lo1 = BLEND(e1, SLL(o1, 32)), hi1 = BLEND(SRL(e1, 32), o1);                          \
        c0 = XOR(XOR(hi1, c1), SET1(static_cast<int>(k0)));                                            \
        c2 = XOR(XOR(hi0, c3), SET1(static_cast<int>(k1)));                                            \
        c1 = lo1;                                                                                      \
        c3 = lo0;                                                                                      \
      }                                                                                                \
      if (n - i >= LANES) {                                                                            \
        TRANSPOSE(c0, c1, c2, c3, words + 4 * i);                                                      \
      } else {                                                                                         \
        alignas(64) std::uint32_t tail[4 * LANES];                                                     \
        TRANSPOSE(c0, c1, c2, c3, tail);                                                               \
        std::memcpy(words + 4 * i, tail, static_cast<std::size_t>(4 * (n - i)) * sizeof(std::uint32_t)); \
      }                                                                                                \
    }                                                                                                  \
  }

#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
namespace avx2 {
#include "ops/cpu/isa/kernels.inc"
BRRR_NORMAL_F64(4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_mul_pd, _mm256_sqrt_pd,
                _ZGVdN4v_log, _ZGVdN4v_cos)
inline __m256i blend_odd(__m256i a, __m256i b) { return _mm256_blend_epi32(a, b, 0xAA); }
inline __m256i load8(const std::uint32_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }
// c0..c3 hold word r of blocks 0..7 (lane = block); w gets blocks 0..7, four words each.
inline void transpose8(__m256i c0, __m256i c1, __m256i c2, __m256i c3, std::uint32_t* w) {
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);  // blocks {0, 4}, {1, 5}
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);  // {2, 6}, {3, 7}
  auto* out = reinterpret_cast<__m256i*>(w);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(u0, u1, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u2, u3, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u0, u1, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u2, u3, 0x31));
}
BRRR_PHILOX_BLOCKS(8, __m256i, _mm256_mul_epu32, _mm256_srli_epi64, _mm256_slli_epi64, blend_odd, _mm256_xor_si256,
                   _mm256_set1_epi32, load8, transpose8)
}
#pragma clang attribute pop

#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl"))), \
                             apply_to = function)
namespace avx512 {
#include "ops/cpu/isa/kernels.inc"
// BRRR_NORMAL_F64's arithmetic, the uniforms made in vectors too: each element's two 64-bit
// draws (w0 << 32 | w1, w2 << 32 | w3) are its 4 words loaded as 2 qwords with their dwords
// swapped, deinterleaved across 8 elements, and converted exactly (below 2^53) by cvtepu64_pd.
void normal_f64(const std::uint32_t* w, double* z, std::int64_t n) {
  const __m512i pick_u1 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i pick_u2 = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
  const __m512d scale = _mm512_set1_pd(0x1.0p-53), one = _mm512_set1_pd(1.0), minus_two = _mm512_set1_pd(-2.0);
  const __m512d two_pi = _mm512_set1_pd(6.283185307179586476925286766559);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512i a = _mm512_shuffle_epi32(_mm512_loadu_si512(w + 4 * i), _MM_PERM_CDAB);  // elements i .. i + 3
    const __m512i b = _mm512_shuffle_epi32(_mm512_loadu_si512(w + 4 * i + 16), _MM_PERM_CDAB);
    const __m512i k1 = _mm512_srli_epi64(_mm512_permutex2var_epi64(a, pick_u1, b), 11);
    const __m512i k2 = _mm512_srli_epi64(_mm512_permutex2var_epi64(a, pick_u2, b), 11);
    const __m512d u1 = _mm512_sub_pd(one, _mm512_mul_pd(_mm512_cvtepu64_pd(k1), scale));  // (0, 1]
    const __m512d u2 = _mm512_mul_pd(two_pi, _mm512_mul_pd(_mm512_cvtepu64_pd(k2), scale));
    _mm512_storeu_pd(z + i, _mm512_mul_pd(_mm512_sqrt_pd(_mm512_mul_pd(minus_two, _ZGVeN8v_log(u1))), _ZGVeN8v_cos(u2)));
  }
  for (; i < n; ++i) z[i] = rt::normal(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}
inline __m512i blend_odd(__m512i a, __m512i b) { return _mm512_mask_blend_epi32(0xAAAA, a, b); }
inline __m512i load16(const std::uint32_t* p) { return _mm512_load_si512(p); }
// As avx2::transpose8 for 16 blocks: unpacks within 128-bit lanes, then two lane shuffles.
inline void transpose16(__m512i c0, __m512i c1, __m512i c2, __m512i c3, std::uint32_t* w) {
  const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
  const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
  const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);  // {0,4,8,12}, {1,5,9,13}
  const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);  // {2,6,10,14}, {3,7,11,15}
  const __m512i x0 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0));  // blocks 0, 8, 1, 9
  const __m512i x1 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(2, 0, 2, 0));  // 2, 10, 3, 11
  const __m512i x2 = _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1));  // 4, 12, 5, 13
  const __m512i x3 = _mm512_shuffle_i32x4(u2, u3, _MM_SHUFFLE(3, 1, 3, 1));  // 6, 14, 7, 15
  _mm512_storeu_si512(w + 0, _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_si512(w + 16, _mm512_shuffle_i32x4(x2, x3, _MM_SHUFFLE(2, 0, 2, 0)));
  _mm512_storeu_si512(w + 32, _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm512_storeu_si512(w + 48, _mm512_shuffle_i32x4(x2, x3, _MM_SHUFFLE(3, 1, 3, 1)));
}
BRRR_PHILOX_BLOCKS(16, __m512i, _mm512_mul_epu32, _mm512_srli_epi64, _mm512_slli_epi64, blend_odd, _mm512_xor_si512,
                   _mm512_set1_epi32, load16, transpose16)
}
#pragma clang attribute pop
#undef BRRR_NORMAL_F64
#undef BRRR_PHILOX_BLOCKS
#else  // other architectures: the baseline build only, under every name
namespace avx2 = baseline;
namespace avx512 = baseline;
#endif

namespace {

constexpr IsaKernels tables[] = {
    {Capability::baseline, "baseline", baseline::exp_array_f32, baseline::softmax_f32, baseline::sum_f32,
     baseline::sum_f64, baseline::philox_blocks, baseline::normal_f64},
    {Capability::avx2, "avx2", avx2::exp_array_f32, avx2::softmax_f32, avx2::sum_f32, avx2::sum_f64,
     avx2::philox_blocks, avx2::normal_f64},
    {Capability::avx512, "avx512", avx512::exp_array_f32, avx512::softmax_f32, avx512::sum_f32, avx512::sum_f64,
     avx512::philox_blocks, avx512::normal_f64},
};

const IsaKernels& choose() {
  Capability best = Capability::baseline;
  for (Capability c : {Capability::avx2, Capability::avx512})
    if (supported(c)) best = c;
  if (const char* env = std::getenv("BRRR_CPU_CAPABILITY")) {
    for (const IsaKernels& t : tables)
      if (std::strcmp(env, t.name) == 0 && supported(t.capability) && t.capability < best) best = t.capability;
  }
  return kernels_for(best);
}

}  // namespace

bool supported(Capability c) {
#if defined(__x86_64__)
  __builtin_cpu_init();  // idempotent; needed if the first call comes before constructors ran
  switch (c) {
    case Capability::baseline: return true;
    case Capability::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Capability::avx512:
      return supported(Capability::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return c == Capability::baseline;
#endif
}

const IsaKernels& kernels_for(Capability c) { return tables[static_cast<int>(c)]; }

const IsaKernels& isa() {
  static const IsaKernels& chosen = choose();
  return chosen;
}

}  // namespace brrr::backend::cpu
