// Standard normals (ops/normal_math.hpp): the Box-Muller pairs against long-double and
// 40-digit references of the same uniforms, the values of fixed seeds (so any change to the
// numbers is caught: the GPU must give the same ones, tests/gpu/test_random.cpp), and the
// distribution of 2^20 draws of every floating dtype.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

// Before the import: random_transform's unqualified log/exp must not see brrr::log.
#include "ops/random_transform.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
namespace rt = brrr::random_transform;

namespace {

// Distance in representable floats between a and the float nearest to ref.
std::int64_t ulps_f32(float a, long double ref) {
  auto key = [](float v) {
    const auto i = std::bit_cast<std::int32_t>(v);
    return i < 0 ? std::int64_t{std::numeric_limits<std::int32_t>::min()} - i : std::int64_t{i};
  };
  const std::int64_t d = key(a) - key(static_cast<float>(ref));
  return d < 0 ? -d : d;
}

// |a - ref| in units of the last place of the double nearest to ref.
double ulps_f64(double a, long double ref) {
  const double r = static_cast<double>(ref);
  if (r == 0) return a == 0 ? 0 : std::numeric_limits<double>::infinity();
  return static_cast<double>(std::fabs(static_cast<long double>(a) - ref)) / std::ldexp(1.0, std::ilogb(r) - 52);
}

// cos and sin of q pi/2 + t (t small: long double's own reduction is then exact enough).
void quadrant(std::uint64_t q, long double t, long double& c, long double& s) {
  const long double ct = std::cos(t), st = std::sin(t);
  switch (q & 3) {
    case 0: c = ct, s = st; break;
    case 1: c = -st, s = ct; break;
    case 2: c = -ct, s = -st; break;
    default: c = st, s = -ct; break;
  }
}
constexpr long double half_pi = 1.570796326794896619231321691639751442L;

// The pair of normal_pair_f32 in long double: the same u (its f32 rounding is part of the
// definition), the exact angle 2 pi b / 2^32 (reduced in integers, as a quadrant and t).
void reference_f32(std::uint32_t a, std::uint32_t b, long double& z0, long double& z1) {
  const float u = std::fma(static_cast<float>(a), 0x1.0p-32f, 0x1.0p-33f);
  const long double r = std::sqrt(-2.0L * std::log(static_cast<long double>(u)));
  const std::uint32_t q = (b + 0x20000000u) >> 30;
  const auto f = static_cast<std::int32_t>(b - (q << 30));
  long double c = 0, s = 0;
  quadrant(q, static_cast<long double>(f) * half_pi * 0x1.0p-30L, c, s);
  z0 = r * c, z1 = r * s;
}

void reference_f64(const std::uint32_t* w, long double& z0, long double& z1) {
  const std::uint64_t ka = ((std::uint64_t{w[0]} << 32) | w[1]) >> 11, kb = ((std::uint64_t{w[2]} << 32) | w[3]) >> 11;
  const long double u = 1.0L - static_cast<long double>(ka) * 0x1.0p-53L;
  const long double r = std::sqrt(-2.0L * std::log(u));
  const std::uint64_t qq = (kb + (std::uint64_t{1} << 50)) >> 51;
  const std::int64_t f = static_cast<std::int64_t>(kb) - static_cast<std::int64_t>(qq << 51);
  long double c = 0, s = 0;
  quadrant(qq, static_cast<long double>(f) * half_pi * 0x1.0p-51L, c, s);
  z0 = r * c, z1 = r * s;
}

// Words that reach the edges: u at 2^-33 and 1, angles at and around each quarter turn.
const std::uint32_t edge_words[] = {0u,          1u,          2u,          0x7fffffu,   0x800000u,   0xffffffu,
                                    0x1000000u,  0x1fffffffu, 0x20000000u, 0x3fffffffu, 0x40000000u, 0x5fffffffu,
                                    0x60000000u, 0x7fffffffu, 0x80000000u, 0xbfffffffu, 0xc0000000u, 0xdfffffffu,
                                    0xe0000000u, 0xffffff7fu, 0xffffff80u, 0xfffffffeu, 0xffffffffu};

}  // namespace

TEST_CASE("normal_pair_f32: within 4 ulps of the long-double Box-Muller of the same uniforms") {
  static_assert(std::numeric_limits<long double>::digits >= 64, "the reference needs x87 long double");
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> words;
  for (std::uint32_t a : edge_words)
    for (std::uint32_t b : edge_words) words.emplace_back(a, b);
  for (int i = 0; i < 1000000; ++i) words.emplace_back(static_cast<std::uint32_t>(rng()), static_cast<std::uint32_t>(rng()));
  std::int64_t worst = 0;
  float largest = 0;
  for (auto [a, b] : words) {
    float z0 = 0, z1 = 0;
    rt::normal_pair_f32(a, b, z0, z1);
    long double e0 = 0, e1 = 0;
    reference_f32(a, b, e0, e1);
    worst = std::max({worst, ulps_f32(z0, e0), ulps_f32(z1, e1)});
    largest = std::max({largest, std::abs(z0), std::abs(z1)});
  }
  INFO("worst: " << worst << " ulps; largest |z| " << largest);
  CHECK(worst <= 4);  // measured: 4 over 2e8 pairs
  CHECK(largest <= 6.7638f);  // sqrt(-2 ln 2^-33)
}

TEST_CASE("normal_pair_f64: within 4 ulps of the long-double Box-Muller of the same uniforms") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  std::vector<std::uint32_t> words;
  for (std::uint32_t a : edge_words)
    for (std::uint32_t b : edge_words) words.insert(words.end(), {a, static_cast<std::uint32_t>(rng()), b, a});
  for (int i = 0; i < 4 * 500000; ++i) words.push_back(static_cast<std::uint32_t>(rng()));
  double worst = 0;
  for (std::size_t i = 0; i + 4 <= words.size(); i += 4) {
    double z0 = 0, z1 = 0;
    rt::normal_pair_f64(words[i], words[i + 1], words[i + 2], words[i + 3], z0, z1);
    long double e0 = 0, e1 = 0;
    reference_f64(&words[i], e0, e1);
    worst = std::max({worst, ulps_f64(z0, e0), ulps_f64(z1, e1)});
  }
  INFO("worst: " << worst << " ulps");
  CHECK(worst <= 4);  // measured: 3.1 over 5e7 pairs
}

TEST_CASE("log_f32 and log_f64: within 1 ulp of the natural log over (0, 1]") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  std::int64_t worst32 = 0;
  double worst64 = 0;
  for (int i = 0; i < 1000000; ++i) {
    // Uniform exponents as well as uniform values: both ends of the range.
    const float u = i % 2 ? std::ldexp(1.0f + static_cast<float>(rng() >> 40) * 0x1.0p-24f, -static_cast<int>(rng() % 33) - 1)
                          : std::fma(static_cast<float>(static_cast<std::uint32_t>(rng())), 0x1.0p-32f, 0x1.0p-33f);
    if (u != 1.0f) worst32 = std::max(worst32, ulps_f32(rt::log_f32(u), std::log(static_cast<long double>(u))));
    const double d = 1.0 - static_cast<double>(rng() >> 11) * 0x1.0p-53;
    if (d != 1.0) worst64 = std::max(worst64, ulps_f64(rt::log_f64(d), std::log(static_cast<long double>(d))));
  }
  CHECK(rt::log_f32(1.0f) == 0.0f);
  CHECK(rt::log_f64(1.0) == 0.0);
  INFO("worst: f32 " << worst32 << " ulps, f64 " << worst64 << " ulps");
  CHECK(worst32 <= 1);
  CHECK(worst64 <= 1.0);
}

TEST_CASE("randn: the numbers of fixed seeds, against 40-digit references (make_normal_reference.py)") {
  // tests/tensor/make_normal_reference.py: Philox and the Box-Muller pairs recomputed in Python
  // with mpmath from the same words.
  const double seed2024_f32[] = {-1.1691735280655707e-1, 9.9785757866195733e-1, 1.5243752405493515e-1,
                                 8.8345638399956512e-2,  -1.0552008209219712,   -1.1449215676167058,
                                 5.30787153775178e-1};
  const double seed2024_f64[] = {1.5822894825849721e-1, 1.516710978185651, 1.5037991546304523};
  const double seed7_f32_at_262140[] = {7.3664371149055334e-1, 3.6452818197175229e-1, 4.5827519036675975e-1,
                                        -1.6158764359780158e-1, 3.7640351399092685e-1, -1.287011731037445,
                                        1.8115038846256417,     -4.9124090347088881e-1};
  // And the exact bits brrr gives (the CPU's, which the GPU must equal): a change of the
  // transform, even within the tolerance, changes them.
  const std::uint32_t seed2024_f32_bits[] = {0xbdef725e, 0x3f7f7398, 0x3e1c1895, 0x3db4ee90,
                                             0xbf8710d3, 0xbf928cca, 0x3f07e1ac};
  const std::uint64_t seed2024_f64_bits[] = {0x3fc440d89f067e0cull, 0x3ff84472bb0caa26ull,
                                             0x3ff80f8fb3ce3e6bull};
  const std::uint32_t seed7_f32_bits[] = {0x3f3c94af, 0x3ebaa371, 0x3eeaa30c, 0xbe25773c,
                                          0x3ec0b7f5, 0xbfa4bccd, 0x3fe7df5c, 0xbefb83ee};

  manual_seed(2024);
  const std::vector<float> a = randn({7}).to_host<float>();
  const std::vector<double> b = randn({3}, {.dtype = DType::f64}).to_host<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(ulps_f32(a[i], seed2024_f32[i]) <= 4);
    CHECK(std::bit_cast<std::uint32_t>(a[i]) == seed2024_f32_bits[i]);
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    CAPTURE(i);
    CHECK(ulps_f64(b[i], seed2024_f64[i]) <= 4);
    CHECK(std::bit_cast<std::uint64_t>(b[i]) == seed2024_f64_bits[i]);
  }
  manual_seed(7);
  const std::vector<float> c = randn({300000}).narrow(0, 262140, 8).to_host<float>();
  for (std::size_t i = 0; i < c.size(); ++i) {
    CAPTURE(i);
    CHECK(ulps_f32(c[i], seed7_f32_at_262140[i]) <= 4);
    CHECK(std::bit_cast<std::uint32_t>(c[i]) == seed7_f32_bits[i]);
  }
}

TEST_CASE("randn: pairs, odd lengths, and the 16-bit dtypes are the f32 draw rounded") {
  FRESH_SEED();
  // An odd-length draw is the prefix of the next even one (its last pair's sine is dropped),
  // and advances the generator by the same whole blocks.
  for (std::int64_t n : {1, 3, 4095, 4097, 8193}) {
    CAPTURE(n);
    for (DType d : {DType::f32, DType::f64}) {
      CAPTURE(d);
      manual_seed(seed_ + static_cast<std::uint64_t>(n));
      const std::vector<double> odd = test::values(randn({n}, {.dtype = d}));
      const std::vector<double> after_odd = test::values(randn({5}, {.dtype = d}));
      manual_seed(seed_ + static_cast<std::uint64_t>(n));
      const std::vector<double> even = test::values(randn({n + 1}, {.dtype = d}));
      const std::vector<double> after_even = test::values(randn({5}, {.dtype = d}));
      CHECK(std::equal(odd.begin(), odd.end(), even.begin()));
      CHECK(after_odd == after_even);
    }
  }
  // f16 and bf16 use the f32 path's words and values, rounded once.
  for (DType d : {DType::f16, DType::bf16}) {
    CAPTURE(d);
    manual_seed(seed_);
    const Tensor narrow = randn({10001}, {.dtype = d});
    manual_seed(seed_);
    const Tensor wide = randn({10001}).to(d);
    CHECK(test::values(narrow) == test::values(wide));
  }
}

TEST_CASE("randn: moments, tails, Kolmogorov-Smirnov and pair independence over 2^20 draws") {
  FRESH_SEED();
  const std::int64_t n = std::int64_t{1} << 20;
  const double nd = static_cast<double>(n);
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(d);
    std::vector<double> v = test::values(randn({n}, {.dtype = d}));
    double m1 = 0, m2 = 0, m3 = 0, m4 = 0, cross = 0, next = 0;
    std::int64_t beyond3 = 0, beyond4 = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double x = v[i], x2 = x * x;
      m1 += x, m2 += x2, m3 += x2 * x, m4 += x2 * x2;
      beyond3 += std::abs(x) > 3, beyond4 += std::abs(x) > 4;
      if (i % 2 == 0) cross += x * v[i + 1];               // the two halves of one pair
      else if (i + 1 < v.size()) next += x * v[i + 1];     // neighbouring pairs
    }
    m1 /= nd, m2 /= nd, m3 /= nd, m4 /= nd;
    // Bounds at 5 standard deviations of each statistic for n normal draws (m1: 1/sqrt(n),
    // m2: sqrt(2/n), m3: sqrt(15/n), m4: sqrt(96/n), a correlation of n/2 pairs: sqrt(2/n)).
    CHECK(std::abs(m1) < 5e-3);
    CHECK(std::abs(m2 - 1) < 7e-3);
    CHECK(std::abs(m3) < 2e-2);
    CHECK(std::abs(m4 - 3) < 5e-2);
    CHECK(std::abs(cross / (nd / 2)) < 7e-3);  // the cos and sin halves of one pair
    CHECK(std::abs(next / (nd / 2)) < 7e-3);   // neighbouring pairs
    // Tails: a rounded value exceeds 3 (4) when the draw exceeded the midpoint between 3 (4)
    // and the next value of the dtype; counts within 5 standard deviations of n P(|z| > t).
    const double step3 = d == DType::bf16 ? 0x1.0p-6 : d == DType::f16 ? 0x1.0p-9 : 0;
    for (auto [limit, count] : {std::pair{3.0, beyond3}, std::pair{4.0, beyond4}}) {
      const double t = limit + (limit == 4.0 ? 2 * step3 : step3) / 2;
      const double want = nd * std::erfc(t / std::sqrt(2.0));
      CAPTURE(limit);
      CHECK(std::abs(static_cast<double>(count) - want) < 5 * std::sqrt(want));
    }
    if (d == DType::f32 || d == DType::f64) {  // 16-bit rounding alone moves the empirical CDF
      std::sort(v.begin(), v.end());
      double dmax = 0;
      for (std::size_t i = 0; i < v.size(); ++i) {
        const double cdf = 0.5 * std::erfc(-v[i] / std::sqrt(2.0));
        dmax = std::max({dmax, cdf - static_cast<double>(i) / nd, static_cast<double>(i + 1) / nd - cdf});
      }
      INFO("Kolmogorov-Smirnov D sqrt(n) = " << dmax * std::sqrt(nd));
      CHECK(dmax * std::sqrt(nd) < 2.4);  // P(K > 2.4) ~ 2e-5
    }
  }
}
