// The CPU kernel tables of ops/cpu/isa/kernels.hpp: kernels.inc compiled once per
// capability through clang's target attribute (a function-level ISA, so the rest of this
// file and every inline function it calls outside kernels.inc stay baseline: nothing built
// for AVX-512 can be picked by the linker for baseline code), and the run-time choice.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): no level fuses a * b + c,
// so all levels give the same bits (exp's and the normals' fused multiply-adds are explicit:
// an instruction at avx2/avx512, glibc's correctly rounded fmaf at the baseline).
#include "ops/cpu/isa/kernels.hpp"

#include <math.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ops/random_transform.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace brrr::backend::cpu {

namespace rt = random_transform;

// kernels.inc's helpers pass 64-byte vectors by value; at the baseline and avx2 that is an
// ABI other code compiled for avx512 would not share, which clang warns about. They are
// internal to one table (each table's functions call only their own namespace's).
#pragma clang diagnostic ignored "-Wpsabi"

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
}  // namespace baseline


#if defined(__x86_64__)
// Philox4x32-10 as baseline::philox_blocks, in intrinsics, one block per 64-bit lane: each
// word sits in the low half of its lane (the high half is ignored: mul_epu32 reads the low
// 32 bits only), so a round is one full 32x32 -> 64 product per multiplier (its low half is
// already the next lo word), the high half brought down, and a three-way XOR with the round
// key. AVX-512 brings one product's high half down by a shift and the other's by a dword
// shuffle, which run on different ports (both shifts or both shuffles: ~10-20 % slower,
// measured on the build machine). Several vectors of blocks per step for instruction-level
// parallelism; the words are then interleaved into cuRAND's block-major order. Integer arithmetic only: the same words as
// the generic loop on every level (tests/ops/test_cpu_isa.cpp).

#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
namespace avx2 {
#define BRRR_ISA_AVX2 1
#include "ops/cpu/isa/kernels.inc"
#undef BRRR_ISA_AVX2
inline __m256i swap_dwords(__m256i a) { return _mm256_shuffle_epi32(a, 0xB1); }
void philox_blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t* words, std::int64_t n) {
  constexpr int lanes = 4, sets = 2, step = lanes * sets;
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
  const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3), low16 = _mm256_set1_epi64x(0xffff);
  __m256i key0[10], key1[10];
  auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    key0[r] = _mm256_set1_epi32(static_cast<int>(k0));
    key1[r] = _mm256_set1_epi32(static_cast<int>(k1));
  }
  for (std::int64_t i = 0; i < n; i += step) {
    __m256i c0[sets], c1[sets], c2[sets], c3[sets];
    for (int s = 0; s < sets; ++s) {
      const __m256i b = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(first + static_cast<std::uint64_t>(i + lanes * s))), lane);
      c0[s] = _mm256_srli_epi64(b, 16);
      c1[s] = _mm256_srli_epi64(b, 48);
      c2[s] = _mm256_and_si256(b, low16);
      c3[s] = _mm256_setzero_si256();
    }
    for (int r = 0; r < 10; ++r)
      for (int s = 0; s < sets; ++s) {
        const __m256i p0 = _mm256_mul_epu32(c0[s], m0), p1 = _mm256_mul_epu32(c2[s], m1);
        c0[s] = _mm256_xor_si256(_mm256_xor_si256(swap_dwords(p1), c1[s]), key0[r]);
        c2[s] = _mm256_xor_si256(_mm256_xor_si256(swap_dwords(p0), c3[s]), key1[r]);
        c1[s] = p1;
        c3[s] = p0;
      }
    alignas(32) std::uint32_t tail[4 * step];
    std::uint32_t* out = n - i >= step ? words + 4 * i : tail;
    for (int s = 0; s < sets; ++s) {
      const __m256i t01 = _mm256_blend_epi32(c0[s], swap_dwords(c1[s]), 0xAA);  // (w0, w1) per block
      const __m256i t23 = _mm256_blend_epi32(c2[s], swap_dwords(c3[s]), 0xAA);
      const __m256i lo = _mm256_unpacklo_epi64(t01, t23), hi = _mm256_unpackhi_epi64(t01, t23);  // blocks {0, 2}, {1, 3}
      auto* o = reinterpret_cast<__m256i*>(out + 4 * lanes * s);
      _mm256_storeu_si256(o, _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
    if (out == tail) std::memcpy(words + 4 * i, tail, static_cast<std::size_t>(4 * (n - i)) * sizeof(std::uint32_t));
  }
}
}
#pragma clang attribute pop

#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl"))), \
                             apply_to = function)
namespace avx512 {
#define BRRR_ISA_AVX512 1
#include "ops/cpu/isa/kernels.inc"
#undef BRRR_ISA_AVX512
inline __m512i swap_dwords(__m512i a) { return _mm512_shuffle_epi32(a, _MM_PERM_CDAB); }
void philox_blocks(std::uint64_t seed, std::uint64_t first, std::uint32_t* words, std::int64_t n) {
  constexpr int lanes = 8, sets = 4, step = lanes * sets;
  const __m512i m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
  const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7), low16 = _mm512_set1_epi64(0xffff);
  const __m512i pick_lo = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), pick_hi = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  __m512i key0[10], key1[10];
  auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    key0[r] = _mm512_set1_epi32(static_cast<int>(k0));
    key1[r] = _mm512_set1_epi32(static_cast<int>(k1));
  }
  for (std::int64_t i = 0; i < n; i += step) {
    __m512i c0[sets], c1[sets], c2[sets], c3[sets];
    for (int s = 0; s < sets; ++s) {
      const __m512i b = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first + static_cast<std::uint64_t>(i + lanes * s))), lane);
      c0[s] = _mm512_srli_epi64(b, 16);
      c1[s] = _mm512_srli_epi64(b, 48);
      c2[s] = _mm512_and_si512(b, low16);
      c3[s] = _mm512_setzero_si512();
    }
    for (int r = 0; r < 10; ++r)
      for (int s = 0; s < sets; ++s) {
        const __m512i p0 = _mm512_mul_epu32(c0[s], m0), p1 = _mm512_mul_epu32(c2[s], m1);
        c0[s] = _mm512_ternarylogic_epi32(_mm512_srli_epi64(p1, 32), c1[s], key0[r], 0x96);  // a ^ b ^ c
        c2[s] = _mm512_ternarylogic_epi32(swap_dwords(p0), c3[s], key1[r], 0x96);
        c1[s] = p1;
        c3[s] = p0;
      }
    alignas(64) std::uint32_t tail[4 * step];
    std::uint32_t* out = n - i >= step ? words + 4 * i : tail;
    for (int s = 0; s < sets; ++s) {
      const __m512i t01 = _mm512_mask_blend_epi32(0xAAAA, c0[s], swap_dwords(c1[s]));  // (w0, w1) per block
      const __m512i t23 = _mm512_mask_blend_epi32(0xAAAA, c2[s], swap_dwords(c3[s]));
      _mm512_storeu_si512(out + 4 * lanes * s, _mm512_permutex2var_epi64(t01, pick_lo, t23));
      _mm512_storeu_si512(out + 4 * lanes * s + 16, _mm512_permutex2var_epi64(t01, pick_hi, t23));
    }
    if (out == tail) std::memcpy(words + 4 * i, tail, static_cast<std::size_t>(4 * (n - i)) * sizeof(std::uint32_t));
  }
}
}
#pragma clang attribute pop
#else  // other architectures: the baseline build only, under every name
namespace avx2 = baseline;
namespace avx512 = baseline;
#endif

namespace {

constexpr IsaKernels tables[] = {
    {Capability::baseline, "baseline", baseline::exp_array_f32, baseline::softmax_f32, baseline::sum_f32,
     baseline::sum_f64, baseline::philox_blocks, baseline::normal_f32, baseline::normal_f64,
     baseline::max_pool2x2_f32},
    {Capability::avx2, "avx2", avx2::exp_array_f32, avx2::softmax_f32, avx2::sum_f32, avx2::sum_f64,
     avx2::philox_blocks, avx2::normal_f32, avx2::normal_f64,
     avx2::max_pool2x2_f32},
    {Capability::avx512, "avx512", avx512::exp_array_f32, avx512::softmax_f32, avx512::sum_f32, avx512::sum_f64,
     avx512::philox_blocks, avx512::normal_f32, avx512::normal_f64,
     avx512::max_pool2x2_f32},
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
