// The CPU backend's random words (ops/random_transform.hpp): Philox4x32-10 against the
// known-answer vectors of its authors (Random123's kat_vectors), and, in a build with CUDA,
// word for word against cuRAND's host generator, which the CUDA backend's device generator
// matches (tests/gpu/test_random.cpp compares rand() on both devices).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>
#ifdef BRRR_TEST_CURAND
#include <curand.h>
#endif

#include "ops/random_transform.hpp"
import brrr;

namespace rt = brrr::random_transform;

TEST_CASE("philox4x32_10: the known-answer vectors of Salmon et al.") {
  struct Kat {
    std::uint32_t counter[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    std::uint32_t c[4] = {k.counter[0], k.counter[1], k.counter[2], k.counter[3]};
    rt::philox4x32_10(c, k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) CHECK(c[i] == k.want[i]);
  }
}

TEST_CASE("philox_words: any offset reads the same stream") {
  const std::uint64_t seed = 67280421310721ull;
  std::vector<std::uint32_t> all(1 << 12);
  rt::philox_words(seed, 0, all.data(), all.size());
  for (std::uint64_t offset : {1ull, 3ull, 4ull, 1001ull, 4095ull}) {
    std::vector<std::uint32_t> part(all.size() - offset);
    rt::philox_words(seed, offset, part.data(), part.size());
    for (std::size_t i = 0; i < part.size(); ++i)
      if (part[i] != all[offset + i]) FAIL_CHECK("offset " << offset << " word " << i);
  }
  // The first block is Philox at counter 0 under the seed as key.
  std::uint32_t c[4] = {0, 0, 0, 0};
  rt::philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  for (int i = 0; i < 4; ++i) CHECK(all[i] == c[i]);
}

TEST_CASE("philox_word: word w of philox_words alone (the capturable draw of CUDA graphs)") {
  for (std::uint64_t seed : {0ull, 7ull, 67280421310721ull, 0xdeadbeefcafef00dull})
    for (std::uint64_t offset : {0ull, 3ull, (1ull << 18) - 5, (1ull << 34) + 1}) {
      std::vector<std::uint32_t> all(1000);
      rt::philox_words(seed, offset, all.data(), all.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < all.size(); ++i) bad += rt::philox_word(seed, offset + i) != all[i];
      INFO("seed ", seed, " offset ", offset);
      CHECK(bad == 0);
    }
}

#ifdef BRRR_TEST_CURAND
TEST_CASE("philox_words: word for word cuRAND's host generator (CURAND_RNG_PSEUDO_PHILOX4_32_10)") {
  // Offsets past one pass of the 65536 interleaved streams (2^18 words) and past 2^32.
  const std::uint64_t seeds[] = {0, 42, 67280421310721ull, 0xdeadbeefcafef00dull};
  const std::uint64_t offsets[] = {0, 4, 6, 1000, (1ull << 18) - 8, (1ull << 34) + 12};
  const std::size_t n = (1 << 19) + 5;
  for (std::uint64_t seed : seeds)
    for (std::uint64_t offset : offsets) {
      curandGenerator_t gen = nullptr;
      REQUIRE(curandCreateGeneratorHost(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10) == CURAND_STATUS_SUCCESS);
      REQUIRE(curandSetPseudoRandomGeneratorSeed(gen, seed) == CURAND_STATUS_SUCCESS);
      REQUIRE(curandSetGeneratorOffset(gen, offset) == CURAND_STATUS_SUCCESS);
      std::vector<std::uint32_t> want(n), got(n);
      REQUIRE(curandGenerate(gen, want.data(), n) == CURAND_STATUS_SUCCESS);
      curandDestroyGenerator(gen);
      rt::philox_words(seed, offset, got.data(), n);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) bad += got[i] != want[i];
      INFO("seed ", seed, " offset ", offset);
      CHECK(bad == 0);
    }
}
#endif
