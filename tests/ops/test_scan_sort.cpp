// Scans, sorting and sampling on the CPU: values (and gradients) against PyTorch (fixtures
// of tests/ops/make_scan_sort_fixtures.py), NaN / inf / -0.0 / tie orders, every dtype for
// sort and cumsum, non-contiguous inputs and dims, gradcheck (cumprod with zeros included),
// data-dependent unique/bincount, searchsorted, and the samplers: reproducible under a seed,
// statistics within bounds, multinomial without replacement never repeating a category nor
// drawing a zero weight (at a uniform of exactly 0 too), weights near the float maximum.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/fixture_replay.hpp"
#include "tests/ops/scan_bound.hpp"

namespace {
using test::replay;
using In = std::vector<Tensor>;
using V = std::vector<double>;
}  // namespace

TEST_CASE("scans against PyTorch: values, indices and gradients") {
  replay("cumsum_d1", [](const In& x) { return cumsum(x[0], 1); });
  replay("cumsum_d0", [](const In& x) { return cumsum(x[0], 0); });
  replay("cumprod_d1", [](const In& x) { return cumprod(x[0], 1); });
  replay("cumprod_zeros", [](const In& x) { return cumprod(x[0], 1); });
  replay("cummax_d1", [](const In& x) { return cummax(x[0], 1).values; });
  replay("cummin_d0", [](const In& x) { return cummin(x[0], 0).values; });
  replay("cummax_idx", [](const In& x) { return cummax(x[0], 1).indices; });
  replay("cummin_idx", [](const In& x) { return cummin(x[0], 0).indices; });
  replay("logcumsumexp_d1", [](const In& x) { return logcumsumexp(x[0], 1); });
  replay("logcumsumexp_inf", [](const In& x) { return logcumsumexp(x[0], 0); });
  replay("cumsum_int", [](const In& x) { return cumsum(x[0], 0); });
}

TEST_CASE("scans: dtypes, dims, non-contiguous inputs, 0-d and empty") {
  for (DType dt : test::all_dtypes) {
    Tensor x = test::make(dt, {1, 0, 1, 1, 0, 1}, {2, 3});
    Tensor c = cumsum(x, 1);
    CHECK(c.dtype() == (is_floating_point(dt) ? dt : DType::i64));
    CHECK(test::values(c) == V{1, 1, 2, 1, 1, 2});
    CHECK(test::values(cummax(x, 0).values) == V{1, 0, 1, 1, 0, 1});
  }
  Tensor t = Tensor::from_vector(test::iota(12, 1.0), {3, 4}).transpose(0, 1);  // [4, 3], strided
  CHECK(test::values(cumsum(t, 0)) == test::values(cumsum(t.contiguous(), 0)));
  CHECK(test::values(cumsum(t, -1)) == V{1, 6, 15, 2, 8, 18, 3, 10, 21, 4, 12, 24});
  CHECK(cumsum(test::make(DType::i32, {1, 2}), 0, DType::f64).dtype() == DType::f64);
  CHECK(cumsum(full({}, 3.0), 0).item<float>() == 3.0f);
  CHECK(cumsum(zeros({0, 3}), 0).shape() == Shape{0, 3});
  CHECK_BRRR_ERROR(cumsum(zeros({2}), 1), ErrorKind::index, "cumsum");
  CHECK_BRRR_ERROR(logcumsumexp(test::make(DType::i64, {1}), 0), ErrorKind::dtype, "logcumsumexp");
  // bf16 accumulates in f32: 256 ones sum to 256 exactly (bf16 steps alone would stall at 256).
  CHECK(test::values(cumsum(ones({300}, {.dtype = DType::bf16}), 0)).back() == 300);
}

TEST_CASE("scans: long rows stay within the rounding-error bound of the exact scan, every floating dtype") {
  FRESH_SEED();
  // The CPU half of the GPU suite's check (tests/gpu/test_more_ops_parity.cpp): the bound of
  // tests/ops/scan_bound.hpp against a float64 scan, along a long row and a short dim.
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (auto [shape, d] : {std::pair<Shape, std::int64_t>{{1, 1 << 20}, 1}, {{4096, 37}, 0}, {{3, 5, 300}, 2}}) {
      Tensor x = randn(shape, {.dtype = DType::f64}).to(dt);
      INFO(to_string(dt) << " " << to_string(shape) << " dim " << d);
      const std::string sum_err = test::scan_bound_violation(cumsum(x, d), x, d, test::ScanKind::cumsum);
      CHECK_MESSAGE(sum_err.empty(), sum_err);
      const std::string lse_err = test::scan_bound_violation(logcumsumexp(x, d), x, d, test::ScanKind::logcumsumexp);
      CHECK_MESSAGE(lse_err.empty(), lse_err);
    }
  // The bound still sees a wrong element: a cumsum off by 0.5 from position 1000 on fails it.
  Tensor x = randn({1, 1 << 20}, {.dtype = DType::f64}).to(DType::f32);
  Tensor off = add(cumsum(x, 1), mul(ge(arange(1 << 20), 1000).to(DType::f32), 0.5));
  CHECK_FALSE(test::scan_bound_violation(off, x, 1, test::ScanKind::cumsum).empty());
}

TEST_CASE("sort, argsort, topk, kthvalue, median against PyTorch") {
  replay("sort_values", [](const In& x) { return sort(x[0], 1).values; });
  replay("sort_indices", [](const In& x) { return sort(x[0], 1).indices; });
  replay("sort_desc_values", [](const In& x) { return sort(x[0], 1, true).values; });
  replay("sort_desc_indices", [](const In& x) { return sort(x[0], 1, true).indices; });
  replay("sort_grad_d0", [](const In& x) { return sort(x[0], 0).values; });
  replay("topk3", [](const In& x) { return topk(x[0], 3, 1).values; });
  replay("topk3_smallest_d0", [](const In& x) { return topk(x[0], 2, 0, false).values; });
  replay("kthvalue2", [](const In& x) { return kthvalue(x[0], 2, 1).values; });
  replay("median_d1", [](const In& x) { return median(x[0], 1).values; });
  replay("median_nan", [](const In& x) { return median(x[0], 1).values; });
  replay("median_all", [](const In& x) { return median(x[0]); });
  // Every dtype sorts; ties keep their order.
  for (DType dt : test::all_dtypes) {
    Tensor x = test::make(dt, {1, 0, 1, 0, 1});
    CHECK(test::values(sort(x).indices) == V{1, 3, 0, 2, 4});
    CHECK(test::values(sort(x, 0, true).indices) == V{0, 2, 4, 1, 3});
  }
  Tensor big = test::make(DType::i64, {std::pow(2.0, 53) + 2, -std::pow(2.0, 53), 5});
  CHECK(test::values(argsort(big)) == V{1, 2, 0});
  CHECK(test::values(argsort(test::make(DType::i64, {3, 1, 2}), 0, true)) == V{0, 2, 1});
  CHECK_BRRR_ERROR(topk(zeros({3}), 4), ErrorKind::index, "topk");
  CHECK_BRRR_ERROR(kthvalue(zeros({3}), 0), ErrorKind::index, "kthvalue");
  Tensor m = median(Tensor::from_vector(V{4, 1, 3, 2}), 0).indices;  // lower median 2 at position 3
  CHECK(m.item<std::int64_t>() == 3);
}

TEST_CASE("topk is sort's first k: every dtype, ties, NaN, -0.0, k = 0, 1 and n, any dim") {
  FRESH_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dt : test::all_dtypes) {
    // Few distinct values (ties everywhere); floats also get NaN, +-inf and both zeros.
    Tensor x = randint(-4, 4, {6, 50}).to(DType::f64);
    if (is_floating_point(dt)) {
      Tensor pick = rand({6, 50}, {.dtype = DType::f64});
      x = where(lt(pick, 0.1), full({}, nan, {.dtype = DType::f64}), x);
      x = where(logical_and(ge(pick, 0.1), lt(pick, 0.2)), full({}, -0.0, {.dtype = DType::f64}), x);
      x = where(logical_and(ge(pick, 0.2), lt(pick, 0.25)), full({}, inf, {.dtype = DType::f64}), x);
      x = where(logical_and(ge(pick, 0.25), lt(pick, 0.3)), full({}, -inf, {.dtype = DType::f64}), x);
    }
    x = x.to(dt);
    for (std::int64_t d : {0, 1})
      for (bool largest : {true, false})
        for (std::int64_t k : {std::int64_t(0), std::int64_t(1), std::int64_t(5), x.size(d)}) {
          INFO(to_string(dt), " dim ", d, " largest ", largest, " k ", k);
          ValuesIndices t = topk(x, k, d, largest);
          ValuesIndices s = sort(x, d, largest);
          CHECK_NOTHROW(testing::assert_close(t.indices, s.indices.narrow(d, 0, k), {.rtol = 0, .atol = 0}));
          CHECK_NOTHROW(
              testing::assert_close(t.values, s.values.narrow(d, 0, k), {.rtol = 0, .atol = 0, .equal_nan = true}));
        }
  }
  // -0.0 keeps its sign in the values (they are x's elements).
  ValuesIndices z = topk(Tensor::from_vector(V{0.0, -0.0, 1.0}), 3, 0, false);
  CHECK(test::values(z.indices) == V{0, 1, 2});
  CHECK(std::signbit(test::values(z.values)[1]));
}

TEST_CASE("unique, bincount and searchsorted against PyTorch") {
  replay("unique_values", [](const In& x) { return unique(x[0]).values; });
  replay("unique_inverse", [](const In& x) { return unique(x[0], true, true).inverse; });
  replay("unique_counts", [](const In& x) { return unique(x[0], true, false, true).counts; });
  replay("bincount", [](const In& x) { return bincount(x[0]); });
  replay("bincount_weights", [](const In& x) { return bincount(x[0], x[1], 10); });
  replay("searchsorted_left", [](const In& x) { return searchsorted(x[0], x[1]); });
  replay("searchsorted_right", [](const In& x) { return searchsorted(x[0], x[1], false, true); });
  replay("searchsorted_nd", [](const In& x) { return searchsorted(x[0], x[1]); });
  CHECK(unique(zeros({0})).values.numel() == 0);
  UniqueResult u = unique(Tensor::from_vector(V{NAN, 1, NAN}), true, false, true);
  CHECK(u.values.numel() == 3);  // each NaN is its own value
  CHECK_BRRR_ERROR(bincount(test::make(DType::i64, {1, -2})), ErrorKind::value, "bincount");
  CHECK_BRRR_ERROR(bincount(zeros({2})), ErrorKind::dtype, "bincount");
  CHECK(searchsorted(Tensor::from_vector(V{1, 2}), Tensor::from_vector(V{1.5}), true).dtype() == DType::i32);
}

TEST_CASE("gradcheck of the scans and sort-based ops") {
  std::mt19937_64 rng(test::fresh_seed());
  auto normal = [&](Shape s) { return Tensor::from_vector(test::normal_values(rng, test::numel_of(s)), s); };
  auto check = [](const test::CaseFn& f, std::vector<Tensor> in) { CHECK(autograd::gradcheck(f, in)); };
  check([](const In& x) { return cumsum(x[0], 1); }, {normal({3, 4})});
  check([](const In& x) { return cumprod(x[0], 0); }, {normal({4, 3})});
  check([](const In& x) { return logcumsumexp(x[0], 1); }, {normal({3, 4})});
  check([](const In& x) { return cummax(x[0], 1).values; }, {normal({3, 4})});
  check([](const In& x) { return sort(x[0], 0, true).values; }, {normal({4, 3})});
  check([](const In& x) { return topk(x[0], 2, 1).values; }, {normal({3, 4})});
  check([](const In& x) { return median(x[0], 1).values; }, {normal({3, 5})});
  // cumprod through zeros; its second derivative (the rule is Tensor ops) away from zeros.
  Tensor z = Tensor::from_vector(V{1.5, 0.0, -2.0, 0.5, 0.0, 3.0}, {2, 3});
  check([](const In& x) { return cumprod(x[0], 1); }, {z});
  check(
      [](const In& x) {
        GradModeGuard on(true);
        Tensor y = sum(cumprod(x[0], 1));
        return sum(mul(autograd::grad({y}, {x[0]}, {}, true, true)[0], x[0]));
      },
      {normal({2, 4})});
}

TEST_CASE("samplers: reproducible under a seed, with the right statistics") {
  FRESH_SEED();
  const std::uint64_t seed = seed_;
  Tensor p = Tensor::from_vector(std::vector<float>{0.0f, 0.25f, 0.9f, 1.0f});
  manual_seed(seed);
  Tensor a = bernoulli(p.expand({20000, 4}).contiguous());
  manual_seed(seed);
  Tensor b = bernoulli(p.expand({20000, 4}).contiguous());
  CHECK(test::values(a) == test::values(b));
  std::vector<double> freq = test::values(mean(a, {0}));
  CHECK(freq[0] == 0);
  CHECK(freq[3] == 1);
  CHECK(std::abs(freq[1] - 0.25) < 0.02);
  CHECK(std::abs(freq[2] - 0.9) < 0.015);
  for (float bad : {-0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()})
    CHECK_BRRR_ERROR(bernoulli(Tensor::from_vector(std::vector<float>{0.5f, bad})), ErrorKind::value, "bernoulli");
  CHECK_BRRR_ERROR(bernoulli(zeros({3}), 1.5), ErrorKind::value, "bernoulli");

  Tensor mu = Tensor::from_vector(V{-3, 0, 10}), sd = Tensor::from_vector(V{0.5, 1, 0});
  Tensor s = normal(mu.expand({20000, 3}), sd);
  std::vector<double> m = test::values(mean(s, {0})), v = test::values(var(s, {0}));
  CHECK(std::abs(m[0] + 3) < 0.02);
  CHECK(std::abs(v[0] - 0.25) < 0.02);
  CHECK(std::abs(v[1] - 1) < 0.06);
  CHECK(v[2] == 0);
  CHECK_BRRR_ERROR(normal(mu, -1.0), ErrorKind::value, "normal");

  Tensor w = Tensor::from_vector(V{1, 0, 3, 6});
  Tensor draws = multinomial(w, 20000, true);
  CHECK(draws.dtype() == DType::i64);
  std::vector<double> counts = test::values(bincount(draws, {}, 4));
  CHECK(counts[1] == 0);
  CHECK(std::abs(counts[0] / 20000 - 0.1) < 0.01);
  CHECK(std::abs(counts[3] / 20000 - 0.6) < 0.015);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<double> pick = test::values(multinomial(Tensor::from_vector(V{1, 2, 3, 4, 5}), 5, false));
    CHECK(std::set<double>(pick.begin(), pick.end()).size() == 5);
  }
  // Without replacement, the first draw follows the weights.
  Tensor firsts = multinomial(w.expand({20000, 4}).contiguous(), 2, false).narrow(1, 0, 1).reshape({-1});
  std::vector<double> fc = test::values(bincount(firsts, {}, 4));
  CHECK(fc[1] == 0);
  CHECK(std::abs(fc[3] / 20000 - 0.6) < 0.015);
  CHECK_BRRR_ERROR(multinomial(w, 4, false), ErrorKind::value, "multinomial");
  CHECK_BRRR_ERROR(multinomial(w, 5, false), ErrorKind::value, "multinomial");
  CHECK_BRRR_ERROR(multinomial(Tensor::from_vector(V{1, -1}), 1, true), ErrorKind::value, "multinomial");
}

TEST_CASE("multinomial: a zero weight is never drawn, even at a uniform of exactly 0") {
  // Without replacement the key of category j is w_j / E_j with E_j = -log(1 - u_j); a uniform
  // of exactly 0 (one f32 draw in 2^24) made E_j = 0 and a zero weight's key 0 / 0 = NaN, which
  // topk ranks above every number: that category was drawn first. Seed 2300 puts such a uniform
  // at element 7687 of the first draw, (60, 7) of a [64, 128] weight matrix.
  constexpr std::uint64_t seed = 2300;
  manual_seed(seed);
  REQUIRE(rand({64, 128}).select(0, 60).select(0, 7).item<float>() == 0.0f);  // the premise
  Tensor w = ones({64, 128});
  w.select(0, 60).select(0, 7).fill_(0.0);
  for (std::int64_t n : {std::int64_t(1), std::int64_t(127)}) {
    INFO("num_samples ", n);
    manual_seed(seed);
    const std::vector<double> row = test::values(multinomial(w, n, false).select(0, 60));
    CHECK(std::find(row.begin(), row.end(), 7.0) == row.end());
    CHECK(std::set<double>(row.begin(), row.end()).size() == static_cast<std::size_t>(n));
  }
  // A weight too small to survive the division by its row's largest is still positive: drawn
  // before a zero one when every positive weight is needed.
  Tensor tiny = Tensor::from_vector(std::vector<float>{3e38f, 0.0f, 1e-45f});
  for (int rep = 0; rep < 20; ++rep) {
    const std::vector<double> pick = test::values(multinomial(tiny, 2, false));
    CHECK(pick == V{0, 2});
  }
}

TEST_CASE("multinomial: weights near the float maximum keep their proportions; no rows") {
  FRESH_SEED();
  // Summed in f32 these overflowed to inf: every draw with replacement took the last category
  // (weight 1 of 6e38), and keys w / E of infinity made the race favour the first index.
  Tensor w = Tensor::from_vector(std::vector<float>{3e38f, 3e38f, 1.0f});
  const std::vector<double> with = test::values(bincount(multinomial(w, 20000, true), {}, 3));
  CHECK(with[2] == 0);
  CHECK(std::abs(with[0] / 20000 - 0.5) < 0.02);
  Tensor w2 = Tensor::from_vector(std::vector<float>{3e38f, 1e38f});
  const std::vector<double> first =
      test::values(bincount(multinomial(w2.expand({20000, 2}).contiguous(), 1, false).reshape({-1}), {}, 2));
  CHECK(std::abs(first[0] / 20000 - 0.75) < 0.02);
  // No rows: no samples, either way.
  CHECK(multinomial(ones({0, 3}), 2, false).shape() == Shape{0, 2});
  CHECK(multinomial(ones({0, 3}), 5, true).shape() == Shape{0, 5});
  CHECK_BRRR_ERROR(multinomial(ones({2, 0}), 1), ErrorKind::shape, "multinomial", "no categories");
  CHECK_BRRR_ERROR(multinomial(ones({}), 1), ErrorKind::shape, "multinomial", "1-D or 2-D");
  CHECK_BRRR_ERROR(multinomial(ones({3}), 0), ErrorKind::value, "multinomial", "num_samples");
  CHECK_BRRR_ERROR(multinomial(ones({3}, {.dtype = DType::i64}), 1), ErrorKind::dtype, "multinomial");
  CHECK_BRRR_ERROR(multinomial(Tensor::from_vector(V{1, std::nan("")}), 1), ErrorKind::value, "multinomial", "finite");
}
