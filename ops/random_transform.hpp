// The one transform from Philox words to random values, compiled for both backends (host
// C++ and CUDA device code), so CPU and GPU turn the same words into the same numbers; and
// the words themselves on the host, in cuRAND's order (the CPU backend's generator, which
// needs no CUDA toolkit). Plain header, no module: included by ops/cpu/backend_cpu.cpp and
// ops/cuda/random.cu.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/contract.hpp"  // BRRR_HD

namespace brrr::random_transform {

/// Words each element consumes. Uniform: 1 (2 for f64, which uses 53 bits). Normal: 4 (two
/// 53-bit uniforms for one Box-Muller draw; the sine half is dropped, so element i depends
/// only on words 4i..4i+3). Integer: 2 (a 64-bit draw).
inline constexpr int words_uniform = 1, words_uniform_f64 = 2, words_normal = 4, words_integer = 2;

/// Uniform on [0, 1) with `bits` bits of precision from one word (bits <= 24): exact in any
/// float type with at least `bits` significand bits, so rounding can never reach 1.
BRRR_HD float uniform_bits(std::uint32_t w, int bits) {
  return static_cast<float>(w >> (32 - bits)) * (1.0f / static_cast<float>(1u << bits));
}

/// Uniform on [0, 1) with 53 bits from two words.
BRRR_HD double uniform53(std::uint32_t hi, std::uint32_t lo) {
  std::uint64_t k = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(k) * 0x1.0p-53;
}

/// Standard normal from four words: Box-Muller (G. E. P. Box and M. E. Muller, "A Note on
/// the Generation of Random Normal Deviates", 1958), z = sqrt(-2 ln u1) cos(2 pi u2), with
/// u1 in (0, 1] so the log is finite. Computed in double on both sides.
BRRR_HD double normal(std::uint32_t w0, std::uint32_t w1, std::uint32_t w2, std::uint32_t w3) {
  double u1 = 1.0 - uniform53(w0, w1);  // (0, 1]
  double u2 = uniform53(w2, w3);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925286766559 * u2);
}

/// Philox4x32-10 (J. K. Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011):
/// the block of four 32-bit words at 128-bit counter `c` under 64-bit key `k`.
BRRR_HD void philox4x32_10(std::uint32_t (&c)[4], std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // the key schedule (Weyl sequence)
  for (int round = 0; round < 10; ++round) {
    if (round > 0) k0 += w0, k1 += w1;
    const std::uint64_t p0 = m0 * c[0], p1 = m1 * c[2];
    const std::uint32_t r0 = static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    const std::uint32_t r2 = static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[1] = static_cast<std::uint32_t>(p1);
    c[3] = static_cast<std::uint32_t>(p0);
    c[0] = r0;
    c[2] = r2;
  }
}

/// Words offset, offset + 1, ..., offset + n - 1 of cuRAND's CURAND_RNG_PSEUDO_PHILOX4_32_10
/// generator seeded with `seed` (its host and device generators give the same words): the key
/// is the seed, and the generator interleaves 65536 Philox streams block by block, so word w
/// is word w % 4 of the block at counter (b / 65536 as 64 bits, b % 65536, 0) with b = w / 4.
/// (Layout measured against curandGenerate of CUDA 13.0 for 2^21 words at several seeds and
/// offsets up to 2^34; tests/tensor/test_philox.cpp checks it when CUDA is built.)
inline void philox_words(std::uint64_t seed, std::uint64_t offset, std::uint32_t* out, std::uint64_t n) {
  const auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  constexpr std::uint64_t streams = 65536;
  std::uint64_t w = offset;
  const std::uint64_t end = offset + n;
  while (w < end) {
    const std::uint64_t b = w / 4, hi = b / streams;
    std::uint32_t c[4] = {static_cast<std::uint32_t>(hi), static_cast<std::uint32_t>(hi >> 32),
                          static_cast<std::uint32_t>(b % streams), 0};
    philox4x32_10(c, k0, k1);
    for (std::uint64_t j = w % 4; j < 4 && w < end; ++j, ++w) *out++ = c[j];
  }
}

/// Word `w` alone of the stream philox_words describes (for kernels that draw each element's
/// words where they use them: the capturable draw of a CUDA graph).
BRRR_HD std::uint32_t philox_word(std::uint64_t seed, std::uint64_t w) {
  const std::uint64_t b = w / 4, hi = b / 65536;
  std::uint32_t c[4] = {static_cast<std::uint32_t>(hi), static_cast<std::uint32_t>(hi >> 32),
                        static_cast<std::uint32_t>(b % 65536), 0};
  philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  return c[w % 4];
}

/// Integer in [low, high) from two words (64-bit draw modulo the range; bias < range/2^64).
BRRR_HD std::int64_t integer(std::uint32_t hi, std::uint32_t lo, std::int64_t low, std::int64_t high) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + x % range);
}

}  // namespace brrr::random_transform
