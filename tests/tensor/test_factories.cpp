// Factories on the CPU: empty/zeros/ones/full/arange/eye/from_vector for every dtype, the
// *_like forms, and the seeded random factories (range, reproducibility, moments).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

double mean_of(const V& v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }
double std_of(const V& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}

// Expected value of `x` stored in `dtype` (what full() should hold): rounding for floats,
// truncation toward zero for integers, x != 0 for bool.
double stored(DType dtype, double x) {
  switch (dtype) {
    case DType::f32: return static_cast<float>(x);
    case DType::f64: return x;
    case DType::bf16: return static_cast<float>(bfloat16(static_cast<float>(x)));
    case DType::f16: return static_cast<float>(half(static_cast<float>(x)));
    case DType::i32:
    case DType::i64: return std::trunc(x);
    case DType::boolean: return x != 0 ? 1 : 0;
  }
  return 0;
}

}  // namespace

TEST_CASE("empty: shape, dtype, device, contiguous strides and storage size for every dtype") {
  for (DType d : all_dtypes) {
    CAPTURE(d);
    Tensor t = empty({2, 3, 5}, {.dtype = d});
    CHECK(t.defined());
    CHECK(t.shape() == Shape{2, 3, 5});
    CHECK(t.strides() == Shape{15, 5, 1});
    CHECK(t.dtype() == d);
    CHECK(t.device() == Device::cpu());
    CHECK(t.storage_offset() == 0);
    CHECK(t.storage().nbytes() == 30 * itemsize(d));
    CHECK_FALSE(t.is_pinned());
    CHECK_FALSE(t.requires_grad());
    CHECK(t.storage().device() == Device::cpu());
    // Aligned for vector loads.
    CHECK(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64 == 0);
  }
  CHECK(empty({}).numel() == 1);
  CHECK(empty({0, 4}).numel() == 0);
  CHECK(empty({}).dtype() == DType::f32);  // the default dtype
  // A fresh allocation each time.
  Tensor a = empty({4}), b = empty({4});
  CHECK_FALSE(a.storage().is_same(b.storage()));
}

TEST_CASE("zeros, ones, full for every dtype, after poisoning the memory") {
  for (DType d : all_dtypes) {
    CAPTURE(d);
    // Poison a same-size block first, so a factory that forgot to write can't pass by luck.
    { Tensor poison = full({3, 4}, 77.0, {.dtype = d}); }
    Tensor z = zeros({3, 4}, {.dtype = d});
    CHECK(z.dtype() == d);
    CHECK(z.shape() == Shape{3, 4});
    CHECK(values(z) == V(12, 0.0));
    Tensor o = ones({3, 4}, {.dtype = d});
    CHECK(values(o) == V(12, 1.0));
    for (double x : {-2.5, 3.75, 0.1, 1e-3, 100.0}) {
      CAPTURE(x);
      Tensor f = full({2, 3}, x, {.dtype = d});
      CHECK(f.dtype() == d);
      CHECK(values(f) == V(6, stored(d, x)));
    }
    CHECK(values(full({}, -7.0, {.dtype = d})) == V{stored(d, -7.0)});
    CHECK(zeros({0, 5}, {.dtype = d}).numel() == 0);
  }
  // Exact spot checks of the conversions full() does.
  CHECK(full({1}, -2.5, {.dtype = DType::i32}).item<std::int32_t>() == -2);
  CHECK(full({1}, 0.5, {.dtype = DType::boolean}).item<bool>() == true);
  CHECK(full({1}, 0.1, {.dtype = DType::bf16}).item<bfloat16>().bits == 0x3dcd);
  CHECK(full({1}, 0.1, {.dtype = DType::f16}).item<half>().bits == 0x2e66);
  CHECK(full({1}, 0.1, {.dtype = DType::f64}).item<double>() == 0.1);
  CHECK(full({1}, 1e10, {.dtype = DType::i64}).item<std::int64_t>() == 10000000000LL);
  CHECK(full({1}, 70000.0, {.dtype = DType::f16}).item<half>().bits == 0x7c00);
  CHECK(std::isnan(full({2}, NAN).to_host<float>()[1]));
  CHECK(full({1}, -INFINITY, {.dtype = DType::f64}).item<double>() == -INFINITY);
  // fill_ on an existing tensor, and through a strided view.
  Tensor t = zeros({3, 3});
  t.t().slice(0, 1, 2).fill_(5);  // column 1
  CHECK(values(t) == V{0, 5, 0, 0, 5, 0, 0, 5, 0});
}

TEST_CASE("arange: integer and floating forms, negative steps, ceil((end - start) / step) elements") {
  Tensor a = arange(5);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.shape() == Shape{5});
  CHECK(a.to_host<std::int64_t>() == std::vector<std::int64_t>{0, 1, 2, 3, 4});
  CHECK(arange(0).shape() == Shape{0});
  CHECK(arange(1).to_host<std::int64_t>() == std::vector<std::int64_t>{0});
  CHECK(arange(4, {.dtype = DType::f32}).to_host<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK(values(arange(3, {.dtype = DType::f16})) == V{0, 1, 2});
  CHECK(arange(3, {.dtype = DType::boolean}).to_host<bool>() == std::vector<bool>{false, true, true});

  // Floating form: default dtype f32.
  Tensor f = arange(0, 1, 0.25);
  CHECK(f.dtype() == DType::f32);
  CHECK(f.to_host<float>() == std::vector<float>{0, 0.25f, 0.5f, 0.75f});
  CHECK(arange(1, 2.5, 0.5).to_host<float>() == std::vector<float>{1, 1.5f, 2});          // ceil(3) = 3
  CHECK(arange(0, 1, 0.3, {.dtype = DType::f64}).to_host<double>() == V{0, 0.3, 0.6, 0.3 * 3});  // ceil(3.33) = 4
  CHECK(arange(-2, 2).to_host<float>() == std::vector<float>{-2, -1, 0, 1});
  CHECK(arange(10, 0, -3, {.dtype = DType::i64}).to_host<std::int64_t>() == std::vector<std::int64_t>{10, 7, 4, 1});
  CHECK(arange(5, 0, -1.5).to_host<float>() == std::vector<float>{5, 3.5f, 2, 0.5f});  // ceil(3.33) = 4
  CHECK(arange(0, -1, -0.5).to_host<float>() == std::vector<float>{0, -0.5f});
  CHECK(arange(2, 2).numel() == 0);
  CHECK(arange(2, 2, -1).numel() == 0);
  CHECK(arange(0, 10, 3).numel() == 4);  // 0 3 6 9
  CHECK(arange(0, 9, 3).numel() == 3);   // 0 3 6: end excluded
  // Integer dtypes truncate each start + i * step.
  CHECK(arange(0.5, 3.5, 1, {.dtype = DType::i32}).to_host<std::int32_t>() == std::vector<std::int32_t>{0, 1, 2});
  CHECK(arange(-0.5, -3.5, -1, {.dtype = DType::i32}).to_host<std::int32_t>() == std::vector<std::int32_t>{0, -1, -2});
  // A long one: every element start + i * step, count from the formula.
  Tensor big = arange(-3.0, 1000.0, 0.7, {.dtype = DType::f64});
  CHECK(big.numel() == static_cast<std::int64_t>(std::ceil(1003.0 / 0.7)));
  std::vector<double> bv = big.to_host<double>();
  int bad = 0;
  for (std::size_t i = 0; i < bv.size(); ++i) bad += bv[i] != -3.0 + static_cast<double>(i) * 0.7;
  CHECK(bad == 0);
  CHECK(bv.back() < 1000.0);
  // requires_grad from options.
  CHECK(arange(0, 3, 1, {.requires_grad = true}).requires_grad());
}

TEST_CASE("eye: square, rectangular, empty, every dtype") {
  CHECK(values(eye(3)) == V{1, 0, 0, 0, 1, 0, 0, 0, 1});
  CHECK(eye(3).shape() == Shape{3, 3});
  CHECK(eye(3).dtype() == DType::f32);
  CHECK(values(eye(2, 4)) == V{1, 0, 0, 0, 0, 1, 0, 0});
  CHECK(values(eye(4, 2)) == V{1, 0, 0, 1, 0, 0, 0, 0});
  CHECK(eye(4, 2).shape() == Shape{4, 2});
  CHECK(values(eye(1)) == V{1});
  CHECK(eye(0).shape() == Shape{0, 0});
  CHECK(eye(3, 0).shape() == Shape{3, 0});
  CHECK(eye(0, 3).shape() == Shape{0, 3});
  for (DType d : all_dtypes) {
    CAPTURE(d);
    Tensor e = eye(5, 7, {.dtype = d});
    CHECK(e.dtype() == d);
    V v = values(e);
    int bad = 0;
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 7; ++j) bad += v[static_cast<std::size_t>(i * 7 + j)] != (i == j ? 1.0 : 0.0);
    CHECK(bad == 0);
  }
}

TEST_CASE("from_vector: every dtype, default and explicit shapes, copies the values") {
  std::uint64_t seed = fresh_seed();
  INFO("seed = ", seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nf;
  std::vector<float> f(12);
  for (auto& x : f) x = nf(rng);
  Tensor tf = Tensor::from_vector(f);
  CHECK(tf.dtype() == DType::f32);
  CHECK(tf.shape() == Shape{12});
  CHECK(tf.to_host<float>() == f);
  Tensor tf2 = Tensor::from_vector(f, {3, 4});
  CHECK(tf2.shape() == Shape{3, 4});
  CHECK(tf2.strides() == Shape{4, 1});
  CHECK(tf2.to_host<float>() == f);
  CHECK(tf2.select(0, 1).to_host<float>() == std::vector<float>(f.begin() + 4, f.begin() + 8));
  CHECK(Tensor::from_vector(f, {2, 3, 2}).to_host<float>() == f);
  // It copies: changing the source vector afterwards changes nothing.
  std::vector<float> f_copy = f;
  f[0] += 1;
  CHECK(tf.to_host<float>() == f_copy);

  std::vector<double> d(6);
  for (auto& x : d) x = nf(rng);
  Tensor td = Tensor::from_vector(d, {2, 3});
  CHECK(td.dtype() == DType::f64);
  CHECK(td.to_host<double>() == d);

  std::vector<bfloat16> b;
  std::vector<half> h;
  for (int i = 0; i < 8; ++i) {
    b.push_back(bfloat16(nf(rng)));
    h.push_back(half(nf(rng)));
  }
  Tensor tb = Tensor::from_vector(b, {2, 4});
  Tensor th = Tensor::from_vector(h, {4, 2});
  CHECK(tb.dtype() == DType::bf16);
  CHECK(th.dtype() == DType::f16);
  std::vector<bfloat16> rb = tb.to_host<bfloat16>();
  std::vector<half> rh = th.to_host<half>();
  int bad = 0;
  for (int i = 0; i < 8; ++i) bad += rb[i].bits != b[i].bits || rh[i].bits != h[i].bits;
  CHECK(bad == 0);
  CHECK(tb.select(0, 1).select(0, 3).item<bfloat16>().bits == b[7].bits);
  CHECK(th.select(0, 2).select(0, 0).item<half>().bits == h[4].bits);

  std::uniform_int_distribution<std::int32_t> ui32(std::numeric_limits<std::int32_t>::min(),
                                                   std::numeric_limits<std::int32_t>::max());
  std::uniform_int_distribution<std::int64_t> ui64(std::numeric_limits<std::int64_t>::min(),
                                                   std::numeric_limits<std::int64_t>::max());
  std::vector<std::int32_t> i32(10);
  std::vector<std::int64_t> i64(10);
  for (auto& x : i32) x = ui32(rng);
  for (auto& x : i64) x = ui64(rng);
  i64[0] = std::numeric_limits<std::int64_t>::max();
  Tensor ti32 = Tensor::from_vector(i32, {5, 2});
  Tensor ti64 = Tensor::from_vector(i64, {2, 5});
  CHECK(ti32.dtype() == DType::i32);
  CHECK(ti64.dtype() == DType::i64);
  CHECK(ti32.to_host<std::int32_t>() == i32);
  CHECK(ti64.to_host<std::int64_t>() == i64);
  CHECK(ti64.t().select(0, 0).select(0, 0).item<std::int64_t>() == std::numeric_limits<std::int64_t>::max());

  std::vector<bool> bo = {true, false, false, true, true, false};
  Tensor tbo = Tensor::from_vector(bo, {3, 2});
  CHECK(tbo.dtype() == DType::boolean);
  CHECK(tbo.itemsize() == 1);
  CHECK(tbo.to_host<bool>() == bo);
  CHECK(tbo.t().to_host<bool>() == std::vector<bool>{true, false, true, false, true, false});
  CHECK(Tensor::from_vector(bo).shape() == Shape{6});

  // Empty vectors.
  CHECK(Tensor::from_vector(std::vector<float>{}).shape() == Shape{0});
  CHECK(Tensor::from_vector(std::vector<std::int64_t>{}, {0, 3}).shape() == Shape{0, 3});
  CHECK(Tensor::from_vector(std::vector<bool>{}).numel() == 0);
}

TEST_CASE("empty_like, zeros_like, ones_like, full_like") {
  Tensor src = rand({2, 3}, {.dtype = DType::f64}).t();  // non-contiguous [3, 2]
  Tensor z = zeros_like(src);
  CHECK(z.shape() == Shape{3, 2});
  CHECK(z.strides() == Shape{2, 1});  // always contiguous
  CHECK(z.dtype() == DType::f64);
  CHECK(z.device() == Device::cpu());
  CHECK(values(z) == V(6, 0.0));
  CHECK_FALSE(z.storage().is_same(src.storage()));
  CHECK(values(ones_like(src)) == V(6, 1.0));
  CHECK(values(full_like(src, -3.25)) == V(6, -3.25));
  Tensor e = empty_like(src);
  CHECK(e.shape() == Shape{3, 2});
  CHECK(e.dtype() == DType::f64);
  // Explicit options replace the source's dtype.
  Tensor zi = zeros_like(src, TensorOptions{.dtype = DType::i32});
  CHECK(zi.dtype() == DType::i32);
  CHECK(zi.shape() == Shape{3, 2});
  CHECK(full_like(src, 2.9, TensorOptions{.dtype = DType::i64}).to_host<std::int64_t>() ==
        std::vector<std::int64_t>(6, 2));
  CHECK(ones_like(zeros({0, 4}, {.dtype = DType::bf16})).shape() == Shape{0, 4});
  CHECK(ones_like(zeros({0, 4}, {.dtype = DType::bf16})).dtype() == DType::bf16);
  CHECK(ones_like(full({}, 3.0)).item<float>() == 1.0f);
}

TEST_CASE("requires_grad option on factories (floating dtypes)") {
  CHECK(zeros({2}, {.requires_grad = true}).requires_grad());
  CHECK(ones({2}, {.dtype = DType::f64, .requires_grad = true}).requires_grad());
  CHECK(full({2}, 1.0, {.dtype = DType::bf16, .requires_grad = true}).requires_grad());
  CHECK(eye(2, -1, {.requires_grad = true}).requires_grad());
  CHECK(randn({2}, {.requires_grad = true}).requires_grad());
  CHECK(empty({2}, {.requires_grad = true}).requires_grad());
  CHECK_FALSE(zeros({2}).requires_grad());
  // The values are still written.
  CHECK(values(ones({3}, {.requires_grad = true})) == V(3, 1.0));
  CHECK_THROWS_AS((void)zeros({2}, {.dtype = DType::i64, .requires_grad = true}), Error);
}

TEST_CASE("rand: [0, 1) for every floating dtype, uniform moments, seeded reproducibility") {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(d);
    Tensor r = rand({100000}, {.dtype = d});
    CHECK(r.dtype() == d);
    V v = values(r);
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
    CHECK(std::abs(mean_of(v) - 0.5) < 0.01);
    CHECK(std_of(v) == doctest::Approx(std::sqrt(1.0 / 12)).epsilon(0.02));
    // Not a constant: many distinct values, and both halves of the interval are hit.
    std::set<double> distinct(v.begin(), v.end());
    CHECK(distinct.size() > (d == DType::bf16 ? 200u : 1000u));
    CHECK(std::count_if(v.begin(), v.end(), [](double x) { return x < 0.1; }) ==
          doctest::Approx(10000).epsilon(0.05));
  }
  // Same seed -> identical; different seed -> different; the next draw differs from the first.
  manual_seed(1234);
  V a = values(rand({1000}));
  V a2 = values(rand({1000}));
  manual_seed(1234);
  V b = values(rand({1000}));
  V b2 = values(rand({1000}));
  manual_seed(1235);
  V c = values(rand({1000}));
  CHECK(a == b);
  CHECK(a2 == b2);
  CHECK(a != a2);
  CHECK(a != c);
  int equal = 0;
  for (std::size_t i = 0; i < a.size(); ++i) equal += a[i] == c[i];
  CHECK(equal < 10);
  // Shapes: a multi-dim rand is the same stream laid out row-major.
  manual_seed(99);
  V flat = values(rand({24}));
  manual_seed(99);
  Tensor shaped = rand({2, 3, 4});
  CHECK(shaped.shape() == Shape{2, 3, 4});
  CHECK(values(shaped) == flat);
  CHECK(rand({0, 3}).numel() == 0);
  CHECK(rand({}).shape().empty());
  // f64 uses 53 bits: values that need more than f32's 24.
  manual_seed(5);
  V d64 = values(rand({1000}, {.dtype = DType::f64}));
  int needs_more = 0;
  for (double x : d64) needs_more += static_cast<double>(static_cast<float>(x)) != x;
  CHECK(needs_more > 900);
}

TEST_CASE("randn: mean 0 and std 1 over 100000 samples, every floating dtype, seeded") {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(d);
    Tensor r = randn({100000}, {.dtype = d});
    CHECK(r.dtype() == d);
    V v = values(r);
    CHECK(std::abs(mean_of(v)) < 0.02);
    CHECK(std::abs(std_of(v) - 1.0) < 0.02);
    int finite = 0, beyond2 = 0;
    for (double x : v) {
      finite += std::isfinite(x);
      beyond2 += std::abs(x) > 2;
    }
    CHECK(finite == 100000);
    CHECK(beyond2 == doctest::Approx(4550).epsilon(0.1));  // P(|z| > 2) = 4.55 %
    CHECK(*std::max_element(v.begin(), v.end()) > 3.0);
    CHECK(*std::min_element(v.begin(), v.end()) < -3.0);
  }
  manual_seed(42);
  V a = values(randn({4, 8}));
  manual_seed(42);
  V b = values(randn({4, 8}));
  manual_seed(43);
  V c = values(randn({4, 8}));
  CHECK(a == b);
  CHECK(a != c);
  // Shapes: a multi-dim randn is the same stream laid out row-major (pairs run across rows).
  manual_seed(8);
  V flat = values(randn({15}));
  manual_seed(8);
  CHECK(values(randn({3, 5})) == flat);
  // f64 draws its own 53-bit uniforms (tests/tensor/test_normal.cpp has the values).
  manual_seed(8);
  V d64 = values(randn({500}, {.dtype = DType::f64}));
  int needs_more = 0;
  for (double x : d64) needs_more += static_cast<double>(static_cast<float>(x)) != x;
  CHECK(needs_more > 450);
}

TEST_CASE("randint: within [low, high), hits every value of a small range, seeded") {
  Tensor r = randint(0, 5, {10000});
  CHECK(r.dtype() == DType::i64);
  std::vector<std::int64_t> v = r.to_host<std::int64_t>();
  std::vector<int> counts(5, 0);
  bool in_range = true;
  for (auto x : v) {
    in_range = in_range && x >= 0 && x < 5;
    if (x >= 0 && x < 5) ++counts[static_cast<std::size_t>(x)];
  }
  CHECK(in_range);
  for (int k = 0; k < 5; ++k) {
    CAPTURE(k);
    CHECK(counts[static_cast<std::size_t>(k)] == doctest::Approx(2000).epsilon(0.1));
  }
  // Negative ranges, other dtypes.
  std::vector<std::int32_t> n = randint(-3, 3, {3000}, {.dtype = DType::i32}).to_host<std::int32_t>();
  std::set<std::int32_t> seen(n.begin(), n.end());
  CHECK(seen == std::set<std::int32_t>{-3, -2, -1, 0, 1, 2});
  V f = values(randint(10, 13, {300}, {.dtype = DType::f32}));
  CHECK(std::set<double>(f.begin(), f.end()) == std::set<double>{10, 11, 12});
  CHECK(values(randint(7, 8, {50})) == V(50, 7.0));  // a range of one value
  // A range wider than 2^32 stays inside and spreads out.
  const std::int64_t lo = -(std::int64_t{1} << 62), hi = std::int64_t{1} << 62;
  std::vector<std::int64_t> w = randint(lo, hi, {2000}).to_host<std::int64_t>();
  bool wide_ok = true;
  int negative = 0;
  for (auto x : w) {
    wide_ok = wide_ok && x >= lo && x < hi;
    negative += x < 0;
  }
  CHECK(wide_ok);
  CHECK(negative == doctest::Approx(1000).epsilon(0.15));
  manual_seed(3);
  auto a = randint(0, 1000, {64}).to_host<std::int64_t>();
  manual_seed(3);
  auto b = randint(0, 1000, {64}).to_host<std::int64_t>();
  manual_seed(4);
  auto c = randint(0, 1000, {64}).to_host<std::int64_t>();
  CHECK(a == b);
  CHECK(a != c);
}
