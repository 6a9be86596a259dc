// The CPU kernel tables of ops/cpu/isa/kernels.hpp: every capability this CPU supports gives
// bitwise the baseline's results (same operations in the same order, no FMA contraction:
// the only fused multiply-adds are explicit ones), and the baseline is checked against
// float64: exp within 1 ulp, sums within the pairwise bound, softmax / log_softmax rows
// close to the float64 row, with PyTorch's edge semantics.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

// Before the import: random_transform's unqualified log/cos must not see brrr::log.
#include "ops/cpu/isa/kernels.hpp"
#include "ops/cpu/loops.hpp"  // exp_f32, the strided path's scalar exp
#include "ops/random_transform.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr::backend::cpu;

namespace {

const Capability all[] = {Capability::baseline, Capability::avx2, Capability::avx512};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  return a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Distance in representable floats (finite, same sign or across zero).
std::int64_t ulps(float a, float b) {
  auto key = [](float v) {
    std::int32_t i = std::bit_cast<std::int32_t>(v);
    return i < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - i : std::int64_t{i};
  };
  std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

std::vector<float> uniform(std::mt19937_64& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

const std::int64_t lengths[] = {0, 1, 7, 15, 16, 17, 31, 63, 64, 65, 255, 256, 257, 300, 511, 512, 513, 1000, 4099, 70001};

}  // namespace

TEST_CASE("cpu isa: the capability in use is supported, and the baseline always is") {
  CHECK(supported(Capability::baseline));
  CHECK(supported(isa().capability));
  MESSAGE("CPU capability in use: " << isa().name);
  for (Capability c : all) CHECK(kernels_for(c).capability == c);
}

TEST_CASE("cpu isa: exp_f32 is bitwise the same at every capability, within 1 ulp of float64") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (std::int64_t n : lengths) {
    CAPTURE(n);
    std::vector<float> x = uniform(rng, static_cast<std::size_t>(n), -110.0f, 95.0f);
    if (n > 8) {  // the edges: overflow, underflow to 0, subnormal results, NaN, infinities
      x[0] = std::numeric_limits<float>::quiet_NaN();
      x[1] = std::numeric_limits<float>::infinity();
      x[2] = -std::numeric_limits<float>::infinity();
      x[3] = 88.72f;
      x[4] = -100.0f;
      x[5] = 0.0f;
      x[6] = -0.0f;
      x[7] = 89.0f;
    }
    if (n > 12) {  // the clamp points (exp_f32 gives inf and 0 there by its arithmetic) and their neighbours
      const float hi = 88.72283935546875f, lo = -103.97208404541016f;
      x[8] = hi;
      x[9] = std::nextafter(hi, 0.0f);
      x[10] = lo;
      x[11] = std::nextafter(lo, 0.0f);
      x[12] = std::nextafter(lo, -200.0f);
    }
    std::vector<float> ref(x.size()), scalar(x.size());
    kernels_for(Capability::baseline).exp_f32(x.data(), ref.data(), n);
    for (std::size_t i = 0; i < x.size(); ++i) scalar[i] = exp_f32(x[i]);
    CHECK(same_bits(ref, scalar));  // the vector kernels repeat exp_f32's operations
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(static_cast<double>(x[i]));
      const float want = static_cast<float>(e);
      if (std::isnan(x[i])) CHECK(std::isnan(ref[i]));
      else if (std::isinf(want) || want == 0.0f) CHECK(ref[i] == want);
      else CHECK(ulps(ref[i], want) <= 1);  // all 2^32 inputs: at most 1 (docs/benchmarks.md)
    }
    for (Capability c : all) {
      if (!supported(c)) continue;
      CAPTURE(kernels_for(c).name);
      std::vector<float> y(x.size());
      kernels_for(c).exp_f32(x.data(), y.data(), n);
      CHECK(same_bits(y, ref));
      std::vector<float> in_place = x;  // y may be x
      kernels_for(c).exp_f32(in_place.data(), in_place.data(), n);
      CHECK(same_bits(in_place, ref));
    }
  }
}

TEST_CASE("cpu isa: sums are bitwise the same at every capability, within the pairwise bound") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (std::int64_t n : lengths) {
    CAPTURE(n);
    std::vector<float> x = uniform(rng, static_cast<std::size_t>(n), -1.0f, 3.0f);
    std::vector<double> xd(x.begin(), x.end());
    // The reference: Neumaier's compensated sum in float64 (error ~2^-53 of the sum).
    double exact = 0, carry = 0, abs_sum = 0;
    for (float v : x) {
      const double t = exact + v;
      carry += std::abs(exact) >= std::abs(v) ? (exact - t) + v : (v - t) + exact;
      exact = t;
      abs_sum += std::abs(v);
    }
    exact += carry;
    const float s = kernels_for(Capability::baseline).sum_f32(x.data(), n);
    // Pairwise with 16 partial sums per leaf of 256: at most 16 + log2(n / 256) + 4
    // roundings on any path (Higham 1993, eq. 2.6), each of relative size 2^-24.
    const double depth = 20 + std::ceil(std::log2(static_cast<double>(n) / 256.0 + 1));
    CHECK(std::abs(s - exact) <= depth * 0x1p-24 * abs_sum + 1e-30);
    const double sd = kernels_for(Capability::baseline).sum_f64(xd.data(), n);
    CHECK(std::abs(sd - exact) <= depth * 0x1p-53 * abs_sum + 0x1p-52 * std::abs(exact));
    for (Capability c : all) {
      if (!supported(c)) continue;
      CAPTURE(kernels_for(c).name);
      CHECK(std::bit_cast<std::uint32_t>(kernels_for(c).sum_f32(x.data(), n)) == std::bit_cast<std::uint32_t>(s));
      CHECK(std::bit_cast<std::uint64_t>(kernels_for(c).sum_f64(xd.data(), n)) == std::bit_cast<std::uint64_t>(sd));
    }
  }
}

TEST_CASE("cpu isa: softmax / log_softmax rows are bitwise the same at every capability and close to float64") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (std::int64_t cols : {1, 5, 16, 33, 256, 1000, 3001}) {
    const std::int64_t rows = 6;
    CAPTURE(cols);
    std::vector<float> x = uniform(rng, static_cast<std::size_t>(rows * cols), -20.0f, 20.0f);
    // Row 3: all -inf (NaN row). Row 4: a NaN (NaN row). Row 5: +inf (NaN row).
    const float inf = std::numeric_limits<float>::infinity();
    for (std::int64_t c = 0; c < cols; ++c) x[static_cast<std::size_t>(3 * cols + c)] = -inf;
    x[static_cast<std::size_t>(4 * cols + cols / 2)] = std::numeric_limits<float>::quiet_NaN();
    x[static_cast<std::size_t>(5 * cols)] = inf;
    for (bool log : {false, true}) {
      CAPTURE(log);
      std::vector<float> ref(x.size());
      kernels_for(Capability::baseline).softmax_f32(x.data(), ref.data(), rows, cols, log);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * cols;
        const float* yr = ref.data() + r * cols;
        if (r >= 3) {
          for (std::int64_t c = 0; c < cols; ++c) CHECK(std::isnan(yr[c]));
          continue;
        }
        double m = -INFINITY, s = 0;
        for (std::int64_t c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
        for (std::int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(xr[c]) - m);
        for (std::int64_t c = 0; c < cols; ++c) {
          const double want = log ? (xr[c] - m) - std::log(s) : std::exp(xr[c] - m) / s;
          // softmax: x - m rounds (relative 2^-24, so exp's argument is off by |x - m| 2^-24),
          // exp within 2 ulps, the pairwise sum and the scaling a few 2^-24 more.
          // log_softmax: x - m, log(sum) and the subtraction, each 2^-24 relative.
          const double d = std::abs(static_cast<double>(xr[c]) - m);
          if (log) CHECK(std::abs(yr[c] - want) <= 1e-6 * (1 + std::abs(want)));
          else CHECK(std::abs(yr[c] - want) <= (1e-6 + d * 0x1p-23) * want + 1e-38);
        }
      }
      for (Capability c : all) {
        if (!supported(c)) continue;
        CAPTURE(kernels_for(c).name);
        std::vector<float> y(x.size());
        kernels_for(c).softmax_f32(x.data(), y.data(), rows, cols, log);
        CHECK(same_bits(y, ref));
      }
    }
  }
}

TEST_CASE("cpu isa: philox_blocks gives random_transform::philox_words' words at every capability") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{65530}, std::uint64_t{1} << 33, rng() >> 4}) {
    for (std::int64_t n : {1, 15, 16, 17, 1000}) {
      CAPTURE(first);
      CAPTURE(n);
      const std::uint64_t key = rng();
      std::vector<std::uint32_t> want(static_cast<std::size_t>(4 * n));
      brrr::random_transform::philox_words(key, 4 * first, want.data(), want.size());
      for (Capability c : all) {
        if (!supported(c)) continue;
        CAPTURE(kernels_for(c).name);
        std::vector<std::uint32_t> got(want.size());
        kernels_for(c).philox_blocks(key, first, got.data(), n);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("cpu isa: normal_f32 and normal_f64 give normal_pair_f32 / _f64's bits at every capability") {
  // Explicit FMAs and roundings (ops/normal_math.hpp): the vectorised loops, the scalar
  // function (and the GPU's kernel) compute the same IEEE operations.
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  for (std::int64_t pairs : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{17}, std::int64_t{100003}}) {
    CAPTURE(pairs);
    std::vector<std::uint32_t> w(static_cast<std::size_t>(4 * pairs + 4));
    kernels_for(Capability::baseline).philox_blocks(seed, 0, w.data(), pairs + 1);
    std::vector<float> want32(static_cast<std::size_t>(2 * pairs));
    std::vector<double> want64(static_cast<std::size_t>(2 * pairs));
    for (std::int64_t i = 0; i < pairs; ++i) {
      const auto k = static_cast<std::size_t>(i);
      brrr::random_transform::normal_pair_f32(w[2 * k], w[2 * k + 1], want32[2 * k], want32[2 * k + 1]);
      brrr::random_transform::normal_pair_f64(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3], want64[2 * k],
                                              want64[2 * k + 1]);
    }
    for (Capability c : all) {
      if (!supported(c)) continue;
      CAPTURE(kernels_for(c).name);
      std::vector<float> z32(want32.size() + 1, -7.0f);  // one past the end: must stay untouched
      std::vector<double> z64(want64.size() + 1, -7.0);
      kernels_for(c).normal_f32(w.data(), z32.data(), pairs);
      kernels_for(c).normal_f64(w.data(), z64.data(), pairs);
      CHECK(same_bits(std::vector<float>(z32.begin(), z32.end() - 1), want32));
      CHECK((want64.empty() || std::memcmp(z64.data(), want64.data(), want64.size() * sizeof(double)) == 0));
      CHECK(z32.back() == -7.0f);
      CHECK(z64.back() == -7.0);
    }
  }
}

TEST_CASE("cpu isa: max_pool2x2_f32 is PyTorch's max and argmax (first of ties, last NaN) at every capability") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(), -0.0f, 0.0f};
  for (std::int64_t ow : {std::int64_t{1}, std::int64_t{7}, std::int64_t{16}, std::int64_t{33}, std::int64_t{257}}) {
    CAPTURE(ow);
    const std::int64_t w = 2 * ow + 1, base = 5 * w;  // an odd width: the last column is not read
    std::vector<float> r0(static_cast<std::size_t>(w)), r1(static_cast<std::size_t>(w));
    for (auto* r : {&r0, &r1})
      for (float& v : *r) v = rng() % 8 == 0 ? specials[rng() % 5] : static_cast<float>(rng() % 4);  // many ties
    // The rule, cell by cell in row-major order.
    std::vector<float> want(static_cast<std::size_t>(ow));
    std::vector<std::int64_t> want_idx(static_cast<std::size_t>(ow));
    for (std::int64_t ox = 0; ox < ow; ++ox) {
      const float v[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
      const std::int64_t cell[4] = {base + 2 * ox, base + 2 * ox + 1, base + w + 2 * ox, base + w + 2 * ox + 1};
      float best = v[0];
      std::int64_t at = cell[0];
      for (int k = 1; k < 4; ++k)
        if (!std::isnan(best) && (v[k] > best || std::isnan(v[k]))) best = v[k], at = cell[k];
        else if (std::isnan(best) && std::isnan(v[k])) at = cell[k];  // the last NaN
      want[static_cast<std::size_t>(ox)] = best;
      want_idx[static_cast<std::size_t>(ox)] = at;
    }
    for (Capability c : all) {
      if (!supported(c)) continue;
      CAPTURE(kernels_for(c).name);
      std::vector<float> got(want.size());
      std::vector<std::int64_t> idx(want.size());
      kernels_for(c).max_pool2x2_f32(r0.data(), r1.data(), got.data(), idx.data(), ow, base, w);
      CHECK(idx == want_idx);
      for (std::size_t i = 0; i < got.size(); ++i) {
        CAPTURE(i);
        if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
        else CHECK(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]));
      }
    }
  }
}
