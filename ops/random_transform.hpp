// The one transform from Philox words to random values, compiled for both backends (host
// C++ and CUDA device code), so CPU and GPU turn the same words into the same numbers.
// Plain header, no module: included by ops/cpu/backend_cpu.cpp and ops/cuda/random.cu.
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

/// Integer in [low, high) from two words (64-bit draw modulo the range; bias < range/2^64).
BRRR_HD std::int64_t integer(std::uint32_t hi, std::uint32_t lo, std::int64_t low, std::int64_t high) {
  std::uint64_t x = (static_cast<std::uint64_t>(hi) << 32) | lo;
  std::uint64_t range = static_cast<std::uint64_t>(high) - static_cast<std::uint64_t>(low);
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(low) + x % range);
}

}  // namespace brrr::random_transform
