// The one transform from Philox words to random values, compiled for both backends (host
// C++ and CUDA device code), so CPU and GPU turn the same words into the same numbers; and
// the words themselves on the host, in cuRAND's order (the CPU backend's generator, which
// needs no CUDA toolkit). Plain header, no module: included by ops/cpu/backend_cpu.cpp and
// ops/cuda/random.cu.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/contract.hpp"  // BRRR_HD
#include "ops/normal_math.hpp"     // normal_pair_f32 / _f64, mul_rn, div_rn

namespace brrr::random_transform {

/// Words each element consumes. Uniform: 1 (2 for f64, which uses 53 bits). Integer: 2 (a
/// 64-bit draw). Normal: elements come in pairs, 2j and 2j + 1 the cosine and sine halves of
/// one Box-Muller draw (ops/normal_math.hpp): 1 word per element (the pair's two words
/// 2j, 2j + 1) for f32, f16 and bf16; 2 for f64 (words 4j .. 4j + 3, two 53-bit uniforms). A
/// draw of odd length consumes the last pair's words too.
inline constexpr int words_uniform = 1, words_uniform_f64 = 2, words_integer = 2;
inline constexpr int words_normal = 1, words_normal_f64 = 2;

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

/// Words 4b .. 4b + 3 of the stream philox_words describes (its block b), into c.
BRRR_HD void philox_block(std::uint64_t seed, std::uint64_t b, std::uint32_t (&c)[4]) {
  const std::uint64_t hi = b / 65536;
  c[0] = static_cast<std::uint32_t>(hi);
  c[1] = static_cast<std::uint32_t>(hi >> 32);
  c[2] = static_cast<std::uint32_t>(b % 65536);
  c[3] = 0;
  philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// Word `w` alone of the stream philox_words describes (for kernels that draw each element's
/// words where they use them: the capturable draw of a CUDA graph, attention dropout).
BRRR_HD std::uint32_t philox_word(std::uint64_t seed, std::uint64_t w) {
  std::uint32_t c[4];
  philox_block(seed, w / 4, c);
  return c[w % 4];
}

/// Integer in [low, high) from two words (64-bit draw modulo the range; bias < range/2^64).
BRRR_HD std::int64_t integer(std::uint32_t hi, std::uint32_t lo, std::int64_t low, std::int64_t high) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + x % range);
}


// ---- Poisson samples (the poisson kernel of both backends) --------------------------------

/// Words of the shared stream each Poisson sample owns: element i of a draw at `offset` reads
/// words offset + i * words_poisson + j for j < words_poisson, and the generator advances by
/// numel * words_poisson. A sample needing more (a PTRS run of more than 16 rejections, less
/// likely than 2e-10 per sample) continues with words at the same positions of a second key,
/// seed ^ poisson_spill_key: every sample stays a function of (seed, offset, i) alone.
inline constexpr int words_poisson = 32;
inline constexpr std::uint64_t poisson_spill_key = 0x9E3779B97F4A7C15ull;

// mul_rn and div_rn (products and quotients rounded on their own, so nvcc's contraction
// cannot make the device's arithmetic differ from the host's) are in ops/normal_math.hpp.

/// Uniform on (0, 1) from one word: (w + 1/2) 2^-32.
BRRR_HD double uniform_open32(std::uint32_t w) { return (static_cast<double>(w) + 0.5) * 0x1.0p-32; }

/// A Poisson(lambda) sample (lambda >= 0, finite; +inf gives +inf), computed in double from the
/// words word(0), word(1), ... of its element:
///  - lambda < 10: inversion by sequential search (L. Devroye, "Non-Uniform Random Variate
///    Generation", Springer 1986, section X.3.3): one 53-bit uniform u from words 0 and 1, the
///    smallest k with F(k) >= u, F the CDF summed from p(0) = exp(-lambda) by
///    p(k) = p(k - 1) lambda / k. Two words always; at most ~200 steps (the loop ends when p
///    underflows to 0).
///  - lambda >= 10: PTRS, the transformed rejection with squeeze of W. Hoermann, "The
///    transformed rejection method for generating Poisson random variables", Insurance:
///    Mathematics and Economics 12 (1993) 39-45, with its constants; each attempt takes two
///    32-bit uniforms (words 2t, 2t + 1) and accepts with probability 0.76 at lambda = 10,
///    rising to 0.89 (measured, 10^5 attempts each), so more than 16 attempts (the
///    words_poisson budget) has probability below 2e-10.
/// The same IEEE operations run on both backends; only exp, log and lgamma are the two math
/// libraries' own, whose last-bit differences can change a sample only where a comparison is
/// within one rounding of its threshold.
template <class Word> BRRR_HD double poisson(double lambda, Word&& word) {
  if (lambda == 0) return 0;
  if (!(lambda <= 1.7976931348623157e308)) return lambda;  // +inf
  if (lambda < 10) {
    const double u = uniform53(word(0), word(1));
    double p = exp(-lambda), f = p;
    std::int64_t k = 0;
    while (u > f && p > 0) {
      ++k;
      p = div_rn(mul_rn(p, lambda), static_cast<double>(k));
      f = f + p;
    }
    return static_cast<double>(k);
  }
  const double slam = sqrt(lambda), loglam = log(lambda);
  const double b = 0.931 + mul_rn(2.53, slam);
  const double a = -0.059 + mul_rn(0.02483, b);
  const double invalpha = 1.1239 + div_rn(1.1328, b - 3.4);
  const double vr = 0.9277 - div_rn(3.6224, b - 2);
  for (std::uint64_t t = 0;; ++t) {
    const double u = uniform_open32(word(2 * t)) - 0.5, v = uniform_open32(word(2 * t + 1));
    const double us = 0.5 - fabs(u);
    const double k = floor(mul_rn(div_rn(mul_rn(2, a), us) + b, u) + lambda + 0.43);
    if (us >= 0.07 && v <= vr) return k;
    if (k < 0 || (us < 0.013 && v > us)) continue;
    const double lhs = log(v) + log(invalpha) - log(div_rn(a, mul_rn(us, us)) + b);
    const double rhs = -lambda + mul_rn(k, loglam) - lgamma(k + 1);
    if (lhs <= rhs) return k;
  }
}

/// The words of sample i of a draw at (seed, offset) (see words_poisson), computed a Philox
/// block at a time as the sample asks for them.
struct PoissonWords {
  std::uint64_t seed = 0, base = 0;  ///< base: offset + i * words_poisson
  std::uint64_t block = ~0ull;       ///< the cached block's index and key
  std::uint64_t key = 0;
  std::uint32_t c[4] = {};
  BRRR_HD PoissonWords(std::uint64_t seed_, std::uint64_t offset, std::uint64_t i)
      : seed(seed_), base(offset + i * words_poisson) {}
  BRRR_HD std::uint32_t operator()(std::uint64_t j) {
    const std::uint64_t w = base + j, b = w / 4;
    const std::uint64_t k = j < static_cast<std::uint64_t>(words_poisson) ? seed : seed ^ poisson_spill_key;
    if (b != block || k != key) {
      philox_block(k, b, c);
      block = b;
      key = k;
    }
    return c[w % 4];
  }
};

}  // namespace brrr::random_transform
