// Reductions on the CPU: sum, mean, max/min (all, along a dim with indices), amax/amin,
// argmax/argmin. Values against a float64 reference computed here from the input's host
// values; every dtype for sum; contiguous, transposed, sliced and expanded inputs; zero-size
// dims, 0-d and single elements; keepdim, negative and multiple dims; NaN and ties. var, std,
// logsumexp, sum_to_size, errors and gradients: test_reduce_stats.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/reduce_cases.hpp"

using namespace reduce_test;

using namespace brrr;
using namespace test;

// =========================================================================================
// sum
// =========================================================================================

TEST_CASE("sum: every dtype, dims sets, keepdim, result dtype (integers and bool -> i64)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{3, 4, 5};
  V x = random_ints(rng, 60, -5, 5);
  const std::vector<Dims> dim_sets = {{}, {0}, {1}, {2}, {-1}, {0, 2}, {-3, -2}, {2, 0, 1}};
  for (DType dt : all_dtypes) {
    CAPTURE(to_string(dt));
    V xv = x;
    if (dt == DType::boolean)
      for (auto& e : xv) e = e > 0 ? 1 : 0;
    Tensor t = make(dt, xv, shape);
    for (const Dims& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        CAPTURE(keepdim);
        CAPTURE(dims.size());
        Tensor s = sum(t, dims, keepdim);
        Ref ref = reference(RefOp::sum, xv, shape, dims, keepdim);
        CHECK(s.dtype() == (is_floating_point(dt) ? dt : DType::i64));
        CHECK(s.shape() == ref.shape);
        CHECK(values(s) == ref.values);  // small integers: exact in every dtype
      }
    }
  }
}

TEST_CASE("sum: non-contiguous inputs (transposed, sliced, expanded) match the reference") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{4, 3, 6};
  V x = normal_values(rng, numel_of(shape));
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    CAPTURE(to_string(dt));
    V xv = x;
    if (dt == DType::i64)
      for (auto& e : xv) e = std::round(e * 10);
    Tensor base = make(dt, xv, shape);
    V exact = values(base);  // the values as stored in dt
    for (const Variant& var : layouts(base)) {
      CAPTURE(var.name);
      REQUIRE(values(var.t) == exact);
      for (const Dims& dims : std::vector<Dims>{{}, {0}, {1}, {2}, {0, 2}, {1, 2}}) {
        Ref ref = reference(RefOp::sum, exact, shape, dims, false);
        Tensor s = sum(var.t, dims);
        CHECK(s.shape() == ref.shape);
        check_close(values(s), ref.values, dt == DType::f32 ? 1e-6 : 1e-12, 1e-6);
      }
    }
  }
  // Expanded (stride 0) input: [4, 1, 6] broadcast to [4, 5, 6].
  V small = normal_values(rng, 24);
  Tensor e = f64_tensor(small, {4, 1, 6}).expand({4, 5, 6});
  V ev = values(e);
  for (const Dims& dims : std::vector<Dims>{{}, {1}, {0, 1}, {2}}) {
    Ref ref = reference(RefOp::sum, ev, {4, 5, 6}, dims, true);
    check_close(values(sum(e, dims, true)), ref.values, 1e-12, 1e-12);
  }
  // A transposed 2-D view summed along either dim.
  Tensor m = f64_tensor(normal_values(rng, 35), {5, 7});
  Tensor mt = m.t();
  V mtv = values(mt);
  check_close(values(sum(mt, {0})), reference(RefOp::sum, mtv, {7, 5}, {0}, false).values, 1e-12, 1e-12);
  check_close(values(sum(mt, {1})), reference(RefOp::sum, mtv, {7, 5}, {1}, false).values, 1e-12, 1e-12);
}

TEST_CASE("sum: zero-size dims, 0-d and single elements") {
  Tensor e = zeros({0, 3});
  CHECK(sum(e).shape() == Shape{});
  CHECK(sum(e).item<float>() == 0.0f);
  CHECK(sum(e, {0}).shape() == Shape{3});
  CHECK(values(sum(e, {0})) == V{0, 0, 0});
  CHECK(sum(e, {1}).shape() == Shape{0});
  CHECK(sum(e, {1}, true).shape() == Shape{0, 1});
  CHECK(sum(zeros({0}, {.dtype = DType::i32})).item<std::int64_t>() == 0);

  Tensor s = full({}, 2.5, {.dtype = DType::f64});
  CHECK(sum(s).item<double>() == 2.5);
  CHECK(sum(s, {0}).item<double>() == 2.5);
  CHECK(sum(s, {-1}, true).shape() == Shape{});
  Tensor one = full({1, 1}, -4.0);
  CHECK(sum(one).item<float>() == -4.0f);
  CHECK(sum(one, {1}).shape() == Shape{1});
  CHECK(one.sum().item<float>() == -4.0f);  // the Tensor shortcut
}

TEST_CASE("sum: f32 is accurate (pairwise in f32), bf16/f16 accumulate in f32") {
  // 1e6 values of 0.1f: a naive f32 running sum drifts by ~1e-3 relative; pairwise summation
  // (8-lane leaves of 256, then log2 n levels) stays within (32 + log2 n + 2) ulps relative.
  std::int64_t n = 1000000;
  Tensor x = full({n}, 0.1);
  double exact = static_cast<double>(0.1f) * static_cast<double>(n);
  const double got = sum(x).item<float>();
  INFO("got ", got, " exact ", exact);
  CHECK(std::abs(got - exact) <= (32 + std::log2(static_cast<double>(n)) + 2) * 0x1p-24 * exact);
  // f64 in f64: exact to its own rounding here.
  CHECK(sum(x.to(DType::f64)).item<double>() == doctest::Approx(exact).epsilon(1e-12));
  // bf16: 4096 ones. An accumulator in bf16 would stop at 256.
  Tensor b = ones({4096}, {.dtype = DType::bf16});
  CHECK(static_cast<float>(sum(b).item<bfloat16>()) == 4096.0f);
  Tensor h = full({3000}, 1.0, {.dtype = DType::f16});
  CHECK(static_cast<float>(sum(h).item<half>()) == 3000.0f);
  // Integer sums do not wrap at i32.
  Tensor big = full({4}, 2000000000.0, {.dtype = DType::i32});
  CHECK(sum(big).item<std::int64_t>() == 8000000000LL);
}

// =========================================================================================
// mean
// =========================================================================================

TEST_CASE("mean: float dtypes, dims, keepdim, empty gives NaN, integers are an error") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{3, 4, 5};
  V x = normal_values(rng, 60);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(to_string(dt));
    Tensor t = make(dt, x, shape);
    V exact = values(t);
    for (const Dims& dims : std::vector<Dims>{{}, {0}, {-1}, {0, 2}}) {
      for (bool keepdim : {false, true}) {
        Tensor m = mean(t, dims, keepdim);
        Ref ref = reference(RefOp::sum, exact, shape, dims, keepdim);
        for (std::size_t i = 0; i < ref.values.size(); ++i) ref.values[i] /= static_cast<double>(ref.counts[i]);
        CHECK(m.dtype() == dt);
        CHECK(m.shape() == ref.shape);
        const test::Tol tol = test::tolerance(test::Computed::rounded_once, dt);
        check_close(values(m), ref.values, tol.rtol, tol.atol);
      }
    }
  }
  CHECK(std::isnan(mean(zeros({0})).item<float>()));
  CHECK(std::isnan(mean(zeros({0, 2}, {.dtype = DType::f64})).item<double>()));
  V e = values(mean(zeros({0, 2}), {0}));
  REQUIRE(e.size() == 2);
  CHECK((std::isnan(e[0]) && std::isnan(e[1])));
  CHECK(mean(zeros({2, 0}), {0}).shape() == Shape{0});
  CHECK_BRRR_ERROR(mean(make(DType::i32, {1, 2, 3})), ErrorKind::dtype, "mean", "i32");
  CHECK_BRRR_ERROR(mean(make(DType::boolean, {1, 0})), ErrorKind::dtype, "mean", "bool");
  CHECK(Tensor::from_vector(std::vector<float>{1, 2, 3, 6}).mean().item<float>() == 3.0f);
}

// =========================================================================================
// max / min / amax / amin / argmax / argmin
// =========================================================================================

TEST_CASE("max/min over all elements: values, every dtype, NaN propagates, empty is an error") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  V x = random_ints(rng, 24, -50, 50);
  for (DType dt : all_dtypes) {
    CAPTURE(to_string(dt));
    V xv = x;
    if (dt == DType::boolean)
      for (auto& e : xv) e = e > 10 ? 1 : 0;
    Tensor t = make(dt, xv, {2, 3, 4});
    Tensor mx = max(t), mn = min(t);
    CHECK(mx.dtype() == dt);
    CHECK(mx.shape() == Shape{});
    CHECK(values(mx)[0] == *std::max_element(xv.begin(), xv.end()));
    CHECK(values(mn)[0] == *std::min_element(xv.begin(), xv.end()));
    CHECK(values(max(t.permute({2, 0, 1})))[0] == *std::max_element(xv.begin(), xv.end()));
  }
  Tensor n = Tensor::from_vector(std::vector<float>{1, NAN, 7, -3});
  CHECK(std::isnan(max(n).item<float>()));
  CHECK(std::isnan(min(n).item<float>()));
  CHECK(argmax(n).item<std::int64_t>() == 1);
  CHECK(argmin(n).item<std::int64_t>() == 1);
  Tensor infs = Tensor::from_vector(std::vector<double>{-inf, -inf});
  CHECK(max(infs).item<double>() == -inf);
  CHECK(max(full({}, 3.0)).item<float>() == 3.0f);
  CHECK_BRRR_ERROR(max(zeros({0})), ErrorKind::value, "max", "[0]");
  CHECK_BRRR_ERROR(min(zeros({2, 0})), ErrorKind::value, "min", "[2, 0]");
  CHECK_BRRR_ERROR(argmax(zeros({0})), ErrorKind::value, "argmax");
}

TEST_CASE("max/min along a dim: values and first indices, keepdim, negative dims, layouts") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{4, 5, 6};
  // Few distinct values: many ties, which must resolve to the first index.
  V x = random_ints(rng, 120, -3, 3);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    CAPTURE(to_string(dt));
    Tensor base = make(dt, x, shape);
    for (const Variant& var : layouts(base)) {
      CAPTURE(var.name);
      for (std::int64_t dim : {0, 1, 2, -1, -3}) {
        for (bool keepdim : {false, true}) {
          CAPTURE(dim);
          CAPTURE(keepdim);
          for (RefOp op : {RefOp::max, RefOp::min}) {
            ValuesIndices r = op == RefOp::max ? max(var.t, dim, keepdim) : min(var.t, dim, keepdim);
            Ref ref = reference(op, x, shape, {dim}, keepdim);
            CHECK(r.values.dtype() == dt);
            CHECK(r.indices.dtype() == DType::i64);
            CHECK(r.values.shape() == ref.shape);
            CHECK(r.indices.shape() == ref.shape);
            CHECK(values(r.values) == ref.values);
            CHECK(r.indices.to_host<std::int64_t>() == ref.indices);
            Tensor a = op == RefOp::max ? argmax(var.t, dim, keepdim) : argmin(var.t, dim, keepdim);
            CHECK(a.to_host<std::int64_t>() == ref.indices);
          }
        }
      }
    }
  }
  // NaN wins, at its first position; an all-equal row gives index 0.
  Tensor n = Tensor::from_vector(std::vector<float>{1, NAN, 5, NAN, 2, 2, 2, 2}, {2, 4});
  ValuesIndices r = max(n, 1);
  V rv = values(r.values);
  CHECK(std::isnan(rv[0]));
  CHECK(rv[1] == 2);
  CHECK(r.indices.to_host<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  CHECK(min(n, 1).indices.to_host<std::int64_t>() == std::vector<std::int64_t>{1, 0});
  // 0-d input: dim 0 / -1, index 0.
  ValuesIndices s = max(full({}, 7.0), -1);
  CHECK(s.values.shape() == Shape{});
  CHECK(s.values.item<float>() == 7.0f);
  CHECK(s.indices.item<std::int64_t>() == 0);
  CHECK(argmax(full({}, 7.0)).item<std::int64_t>() == 0);
  // Size-1 dim and zero-size kept dims.
  CHECK(max(full({3, 1}, 2.0), 1).indices.to_host<std::int64_t>() == std::vector<std::int64_t>{0, 0, 0});
  CHECK(max(zeros({0, 4}), 1).values.shape() == Shape{0});
  CHECK_BRRR_ERROR(max(zeros({3, 0}), 1), ErrorKind::value, "max", "[3, 0]");
  CHECK_BRRR_ERROR(max(zeros({3, 2}), 2), ErrorKind::index, "max", "[3, 2]");
}

TEST_CASE("argmax/argmin over all elements: flattened index, first on ties, any layout") {
  Tensor t = Tensor::from_vector(std::vector<float>{3, 9, 1, 9, -2, 1}, {2, 3});
  CHECK(argmax(t).item<std::int64_t>() == 1);
  CHECK(argmin(t).item<std::int64_t>() == 4);
  CHECK(argmax(t).shape() == Shape{});
  // t.t() is [[3, 9], [9, -2], [1, 1]] (flattened row-major): first 9 at 1, -2 at 3.
  CHECK(argmax(t.t()).item<std::int64_t>() == 1);
  CHECK(argmin(t.t()).item<std::int64_t>() == 3);
  CHECK(argmax(make(DType::i32, {4, 4, 2})).item<std::int64_t>() == 0);
  CHECK(argmin(make(DType::i64, {4, 4, 2})).item<std::int64_t>() == 2);
}

TEST_CASE("amax/amin over several dims, keepdim, layouts; zero-size reduced dims are an error") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{4, 5, 6};
  V x = normal_values(rng, 120);
  Tensor base = f64_tensor(x, shape);
  for (const Variant& var : layouts(base)) {
    CAPTURE(var.name);
    for (const Dims& dims : std::vector<Dims>{{}, {0}, {1, 2}, {-1, 0}, {0, 1, 2}}) {
      for (bool keepdim : {false, true}) {
        Ref mx = reference(RefOp::max, x, shape, dims, keepdim);
        Ref mn = reference(RefOp::min, x, shape, dims, keepdim);
        Tensor a = amax(var.t, dims, keepdim), b = amin(var.t, dims, keepdim);
        CHECK(a.shape() == mx.shape);
        CHECK(values(a) == mx.values);
        CHECK(values(b) == mn.values);
      }
    }
  }
  CHECK(amax(zeros({0, 3}), {1}).shape() == Shape{0});
  CHECK_BRRR_ERROR(amax(zeros({0, 3}), {0}), ErrorKind::value, "amax", "[0, 3]");
  CHECK_BRRR_ERROR(amin(zeros({2, 0}), {}), ErrorKind::value, "amin");
}
