// Reductions on the CPU: sum, mean, max/min (all, along a dim with indices), amax/amin,
// argmax/argmin, var, std, logsumexp, sum_to_size. Values against a float64 reference
// computed here from the input's host values; every dtype for sum; contiguous, transposed,
// sliced and expanded inputs; zero-size dims, 0-d and single elements; keepdim, negative and
// multiple dims; NaN and ties; error kinds and messages; gradients against central
// differences in f64 (and the tie rules by hand).
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

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;
using Dims = std::vector<std::int64_t>;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

Tensor f64_tensor(const V& v, const Shape& shape) {
  if (shape.empty()) return full({}, v.at(0), {.dtype = DType::f64});
  return Tensor::from_vector(v, shape);
}

// --- the float64 reference -------------------------------------------------------------

enum class RefOp { sum, max, min };

struct Ref {
  V values;
  std::vector<std::int64_t> indices;  // max/min with one reduced dim: index along it
  Shape shape;                        // after keepdim
  std::vector<std::int64_t> counts;   // elements reduced into each output
};

std::uint32_t ref_mask(const Dims& dims, std::size_t nd) {
  if (dims.empty()) return nd == 0 ? 0u : static_cast<std::uint32_t>((1ull << nd) - 1);
  std::uint32_t m = 0;
  for (auto d : dims) m |= 1u << static_cast<std::size_t>(d < 0 ? d + static_cast<std::int64_t>(nd) : d);
  return m;
}

Ref reference(RefOp op, const V& x, const Shape& shape, const Dims& dims, bool keepdim) {
  std::size_t nd = shape.size();
  std::uint32_t mask = ref_mask(dims, nd);
  Shape kshape;
  for (std::size_t d = 0; d < nd; ++d) kshape.push_back(mask & (1u << d) ? 1 : shape[d]);
  std::int64_t n_out = numel_of(kshape);
  Ref r;
  r.values.assign(static_cast<std::size_t>(n_out), op == RefOp::sum ? 0.0 : nan_v);
  r.indices.assign(static_cast<std::size_t>(n_out), -1);
  r.counts.assign(static_cast<std::size_t>(n_out), 0);
  std::vector<std::int64_t> idx(nd, 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t o = 0, along = 0;
    for (std::size_t d = 0; d < nd; ++d) {
      if (mask & (1u << d)) along = idx[d];
      o = o * kshape[d] + ((mask & (1u << d)) ? 0 : idx[d]);
    }
    auto k = static_cast<std::size_t>(o);
    double v = x[i];
    double& a = r.values[k];
    std::int64_t& ai = r.indices[k];
    if (op == RefOp::sum) {
      a += v;
    } else if (ai < 0 || (!std::isnan(a) && (std::isnan(v) || (op == RefOp::max ? v > a : v < a)))) {
      a = v;
      ai = along;
    }
    ++r.counts[k];
    for (std::size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  for (std::size_t d = 0; d < nd; ++d)
    if (!(mask & (1u << d)) || keepdim) r.shape.push_back(kshape[d]);
  return r;
}

void check_close(const V& got, const V& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

// Layouts of one logical [A, B, C] input: contiguous, transposed (permuted storage),
// sliced with a step, and expanded from a size-1 dim.
struct Variant {
  const char* name;
  Tensor t;
};

std::vector<Variant> layouts(const Tensor& base) {
  // base: [A, B, C] contiguous. Each variant holds the same values in another layout.
  std::vector<Variant> v;
  v.push_back({"contiguous", base});
  v.push_back({"transposed", base.permute({2, 0, 1}).contiguous().permute({1, 2, 0})});
  {
    Shape big = base.shape();
    big[2] *= 2;
    Tensor wide = zeros(big, {.dtype = base.dtype()});
    // every second column holds base
    Tensor view = wide.slice(2, 0, big[2], 2);
    view.copy_(base);
    v.push_back({"sliced", view});
  }
  return v;
}

// --- gradients against central differences -------------------------------------------------

using Fn = std::function<Tensor(const Tensor&)>;

// Checks d/dx <R, f(x)> from backward() against central differences in f64, at `x0`.
void check_gradient(const Fn& f, const V& x0, const Shape& shape, std::mt19937_64& rng, double eps = 1e-6,
                    double tol = 1e-6) {
  Tensor x = f64_tensor(x0, shape);
  x.requires_grad_();
  Tensor out = f(x);
  REQUIRE(out.requires_grad());
  V rv = normal_values(rng, out.numel());
  Tensor r = f64_tensor(rv, out.shape());
  out.backward(r);
  REQUIRE(x.grad().defined());
  V analytic = values(x.grad());
  REQUIRE(x.grad().shape() == shape);
  auto loss = [&](const V& xv) {
    NoGradGuard no_grad;
    V o = values(f(f64_tensor(xv, shape)));
    double l = 0;
    for (std::size_t i = 0; i < o.size(); ++i) l += o[i] * rv[i];
    return l;
  };
  for (std::size_t i = 0; i < x0.size(); ++i) {
    V p = x0, m = x0;
    p[i] += eps;
    m[i] -= eps;
    double numeric = (loss(p) - loss(m)) / (2 * eps);
    CAPTURE(i);
    CAPTURE(numeric);
    CAPTURE(analytic[i]);
    CHECK(std::abs(numeric - analytic[i]) <= tol * (1 + std::abs(numeric)));
  }
}

}  // namespace

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
        double tol = dt == DType::bf16 ? 8e-3 : dt == DType::f16 ? 1e-3 : dt == DType::f32 ? 1e-6 : 1e-14;
        check_close(values(m), ref.values, tol, tol);
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

// =========================================================================================
// var / std / logsumexp / sum_to_size
// =========================================================================================

TEST_CASE("var/std: corrections, dims, keepdim; N - correction <= 0 divides by 0 (NaN or inf)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{3, 4, 5};
  V x = normal_values(rng, 60);
  for (auto& e : x) e = 3 + 2 * e;
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(to_string(dt));
    Tensor t = make(dt, x, shape);
    V exact = values(t);
    for (const Dims& dims : std::vector<Dims>{{}, {0}, {2}, {0, -1}}) {
      for (std::int64_t correction : {0, 1, 2}) {
        for (bool keepdim : {false, true}) {
          Ref s = reference(RefOp::sum, exact, shape, dims, true);
          std::uint32_t mask = ref_mask(dims, 3);
          // second pass: sum of squared deviations per output
          V ss(s.values.size(), 0.0);
          std::int64_t i = 0;
          for (std::int64_t a = 0; a < 3; ++a)
            for (std::int64_t b = 0; b < 4; ++b)
              for (std::int64_t c = 0; c < 5; ++c, ++i) {
                std::int64_t oa = mask & 1 ? 0 : a, ob = mask & 2 ? 0 : b, oc = mask & 4 ? 0 : c;
                std::int64_t o = (oa * (mask & 2 ? 1 : 4) + ob) * (mask & 4 ? 1 : 5) + oc;
                double n = static_cast<double>(s.counts[static_cast<std::size_t>(o)]);
                double d = exact[static_cast<std::size_t>(i)] - s.values[static_cast<std::size_t>(o)] / n;
                ss[static_cast<std::size_t>(o)] += d * d;
              }
          V want_var(ss.size()), want_std(ss.size());
          for (std::size_t k = 0; k < ss.size(); ++k) {
            double n = static_cast<double>(s.counts[k]) - static_cast<double>(correction);
            want_var[k] = n > 0 ? ss[k] / n : (ss[k] == 0 ? nan_v : inf);
            want_std[k] = std::sqrt(want_var[k]);
          }
          Tensor v = var(t, dims, correction, keepdim);
          Tensor sd = brrr::std(t, dims, correction, keepdim);
          CHECK(v.dtype() == dt);
          CHECK(v.shape() == reference(RefOp::sum, exact, shape, dims, keepdim).shape);
          double tol = dt == DType::f32 ? 1e-5 : 1e-12;
          check_close(values(v), want_var, tol, tol);
          check_close(values(sd), want_std, tol, tol);
        }
      }
    }
  }
  CHECK(std::isnan(var(full({1}, 2.0)).item<float>()));           // N = 1, correction 1
  CHECK(std::isnan(var(ones({2}), {}, 2).item<float>()));          // N - correction = 0
  // N - correction < 0 divides by 0 (PyTorch's max(0, N - correction)): inf for unequal values.
  CHECK(var(Tensor::from_vector(std::vector<float>{1, 5}), {}, 3).item<float>() == std::numeric_limits<float>::infinity());
  CHECK(var(Tensor::from_vector(std::vector<double>{1, 5}), {}, 1).item<double>() == 8.0);
  CHECK(var(Tensor::from_vector(std::vector<double>{1, 5}), {}, 0).item<double>() == 4.0);
  CHECK(brrr::std(Tensor::from_vector(std::vector<double>{1, 5}), {}, 0).item<double>() == 2.0);
  CHECK_BRRR_ERROR(var(make(DType::i64, {1, 2})), ErrorKind::dtype, "var", "i64");
  CHECK_BRRR_ERROR(brrr::std(make(DType::i32, {1, 2})), ErrorKind::dtype, "std", "i32");
}

TEST_CASE("logsumexp: stable for large values, -inf/+inf rows, dims and keepdim, empty gives -inf") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{3, 4, 5};
  V x = normal_values(rng, 60);
  for (auto& e : x) e *= 4;
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor t = make(dt, x, shape);
    V exact = values(t);
    for (const Dims& dims : std::vector<Dims>{{}, {0}, {2}, {1, 2}}) {
      for (bool keepdim : {false, true}) {
        Ref mx = reference(RefOp::max, exact, shape, dims, true);
        Ref s = reference(RefOp::sum, exact, shape, dims, keepdim);
        // recompute sum(exp(x - m)) per output
        std::uint32_t mask = ref_mask(dims, 3);
        V acc(mx.values.size(), 0.0);
        std::int64_t i = 0;
        for (std::int64_t a = 0; a < 3; ++a)
          for (std::int64_t b = 0; b < 4; ++b)
            for (std::int64_t c = 0; c < 5; ++c, ++i) {
              std::int64_t oa = mask & 1 ? 0 : a, ob = mask & 2 ? 0 : b, oc = mask & 4 ? 0 : c;
              auto o = static_cast<std::size_t>((oa * (mask & 2 ? 1 : 4) + ob) * (mask & 4 ? 1 : 5) + oc);
              acc[o] += std::exp(exact[static_cast<std::size_t>(i)] - mx.values[o]);
            }
        V want(acc.size());
        for (std::size_t k = 0; k < acc.size(); ++k) want[k] = std::log(acc[k]) + mx.values[k];
        Tensor l = logsumexp(t, dims, keepdim);
        CHECK(l.shape() == s.shape);
        double tol = dt == DType::f32 ? 2e-6 : 1e-13;
        check_close(values(l), want, tol, tol);
      }
    }
  }
  Tensor big = Tensor::from_vector(std::vector<float>{1000, 1000, -inf, -inf, -inf, -inf, inf, 1}, {4, 2});
  V l = values(logsumexp(big, {1}));
  CHECK(l[0] == doctest::Approx(1000 + std::log(2.0)));
  CHECK(l[1] == -inf);
  CHECK(l[2] == -inf);
  CHECK(l[3] == inf);
  CHECK(logsumexp(zeros({2, 0}), {1}).shape() == Shape{2});
  CHECK(values(logsumexp(zeros({2, 0}), {1})) == V{-inf, -inf});
  // integers are computed in f32
  Tensor li = logsumexp(make(DType::i64, {0, 0}), {0});
  CHECK(li.dtype() == DType::f32);
  CHECK(li.item<float>() == doctest::Approx(std::log(2.0)));
}

TEST_CASE("sum_to_size: leading dims and size-1 dims, the inverse of expand; bad sizes are an error") {
  Tensor x = f64_tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  Tensor a = sum_to_size(x, {3});
  CHECK(a.shape() == Shape{3});
  CHECK(values(a) == V{22, 26, 30});
  Tensor b = sum_to_size(x, {2, 1});
  CHECK(b.shape() == Shape{2, 1});
  CHECK(values(b) == V{1 + 2 + 3 + 7 + 8 + 9, 4 + 5 + 6 + 10 + 11 + 12});
  Tensor c = sum_to_size(x, {1, 1, 1});
  CHECK(c.shape() == Shape{1, 1, 1});
  CHECK(values(c) == V{78});
  CHECK(sum_to_size(x, {2, 2, 3}).is_same(x));
  CHECK(sum_to_size(make(DType::i32, {1, 2, 3, 4}, {2, 2}), {2}).dtype() == DType::i64);
  CHECK_BRRR_ERROR(sum_to_size(x, {4}), ErrorKind::shape, "sum_to_size", "[4]", "[2, 2, 3]");
  CHECK_BRRR_ERROR(sum_to_size(x, {1, 2, 2, 3}), ErrorKind::shape, "sum_to_size");
}

// =========================================================================================
// errors
// =========================================================================================

TEST_CASE("errors: dims out of range name the op and shape; duplicate dims; undefined input") {
  Tensor x = zeros({2, 3});
  CHECK_BRRR_ERROR(sum(x, {2}), ErrorKind::index, "sum", "[2, 3]");
  CHECK_BRRR_ERROR(sum(x, {-3}), ErrorKind::index, "sum", "[2, 3]");
  CHECK_BRRR_ERROR(mean(x, {5}), ErrorKind::index, "mean", "[2, 3]");
  CHECK_BRRR_ERROR(amax(x, {0, 7}), ErrorKind::index, "amax", "[2, 3]");
  CHECK_BRRR_ERROR(var(x, {3}), ErrorKind::index, "var", "[2, 3]");
  CHECK_BRRR_ERROR(logsumexp(x, {-4}), ErrorKind::index, "logsumexp", "[2, 3]");
  CHECK_BRRR_ERROR(argmin(x, 2), ErrorKind::index, "argmin", "[2, 3]");
  CHECK_BRRR_ERROR(sum(full({}, 1.0), {1}), ErrorKind::index, "sum", "[]");
  CHECK_BRRR_ERROR(sum(x, {0, -2}), ErrorKind::value, "sum", "more than once");
  CHECK_BRRR_ERROR(amin(x, {1, 1}), ErrorKind::value, "amin", "more than once");
  CHECK_BRRR_ERROR(sum(Tensor()), ErrorKind::value, "sum");
  CHECK_BRRR_ERROR(max(Tensor()), ErrorKind::value, "max");
}

// =========================================================================================
// gradients
// =========================================================================================

TEST_CASE("gradients: sum, mean, amax/amin, max/min along a dim, var, std, logsumexp, sum_to_size") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Shape shape{3, 4, 2};
  V x0 = normal_values(rng, 24);  // distinct values: no ties, max is differentiable
  struct Case {
    const char* name;
    Fn f;
  };
  std::vector<Case> cases = {
      {"sum all", [](const Tensor& x) { return sum(x); }},
      {"sum dims", [](const Tensor& x) { return sum(x, {0, 2}); }},
      {"sum keepdim", [](const Tensor& x) { return sum(x, {-1}, true); }},
      {"mean all", [](const Tensor& x) { return mean(x); }},
      {"mean dims", [](const Tensor& x) { return mean(x, {1}, true); }},
      {"max", [](const Tensor& x) { return max(x); }},
      {"min", [](const Tensor& x) { return min(x); }},
      {"amax", [](const Tensor& x) { return amax(x, {0, 2}); }},
      {"amin keepdim", [](const Tensor& x) { return amin(x, {1}, true); }},
      {"max dim", [](const Tensor& x) { return max(x, 1).values; }},
      {"min dim keepdim", [](const Tensor& x) { return min(x, -1, true).values; }},
      {"var", [](const Tensor& x) { return var(x, {1}); }},
      {"var all correction 0", [](const Tensor& x) { return var(x, {}, 0); }},
      {"std", [](const Tensor& x) { return brrr::std(x, {0, 2}, 1, true); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {1}); }},
      {"logsumexp all keepdim", [](const Tensor& x) { return logsumexp(x, {}, true); }},
      {"sum_to_size", [](const Tensor& x) { return sum_to_size(x, {4, 1}); }},
      {"on a transposed view", [](const Tensor& x) { return sum(x.transpose(0, 2), {1}); }},
      {"composition", [](const Tensor& x) { return mul(mean(x, {2}), amax(x, {2})); }},
  };
  for (const Case& c : cases) {
    std::string name = c.name;
    CAPTURE(name);
    check_gradient(c.f, x0, shape, rng);
  }
  // 0-d inputs
  check_gradient([](const Tensor& x) { return max(x, 0).values; }, {1.5}, {}, rng);
  check_gradient([](const Tensor& x) { return sum(x); }, {1.5}, {}, rng);
}

TEST_CASE("gradients: ties share evenly for max()/amax, go to the first index for max(dim)") {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 5, 5, 2, 5, 0}, {2, 3});
  x.requires_grad_();
  max(x).backward();
  CHECK(values(x.grad()) == V{0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0});

  Tensor y = Tensor::from_vector(std::vector<double>{1, 5, 5, 2, 5, 0}, {2, 3});
  y.requires_grad_();
  sum(amax(y, {1})).backward();
  CHECK(values(y.grad()) == V{0, 0.5, 0.5, 0, 1, 0});

  Tensor z = Tensor::from_vector(std::vector<double>{1, 5, 5, 2, 5, 0}, {2, 3});
  z.requires_grad_();
  ValuesIndices r = max(z, 1);
  r.values.backward(Tensor::from_vector(std::vector<double>{10, 20}));
  CHECK(values(z.grad()) == V{0, 10, 0, 0, 20, 0});
  CHECK_FALSE(r.indices.requires_grad());

  // NaN: the gradient goes to the NaN(s).
  Tensor w = Tensor::from_vector(std::vector<double>{1, nan_v, 3}, {3});
  w.requires_grad_();
  min(w).backward(full({}, 2.0, {.dtype = DType::f64}));
  CHECK(values(w.grad()) == V{0, 2, 0});

  // mean's gradient is 1/N everywhere.
  Tensor m = zeros({2, 4}, {.dtype = DType::f64});
  m.requires_grad_();
  mean(m).backward();
  CHECK(values(m.grad()) == V(8, 1.0 / 8));

  // Integer and bool results do not require grad.
  Tensor f = ones({3});
  f.requires_grad_();
  CHECK_FALSE(argmax(f).requires_grad());
  CHECK(sum(f).requires_grad());
  CHECK_FALSE(sum(make(DType::i32, {1, 2})).requires_grad());
  {
    NoGradGuard g;
    CHECK_FALSE(sum(f).requires_grad());
  }
}

TEST_CASE("gradients: autograd::gradcheck agrees, and second derivatives (create_graph) work") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = f64_tensor(normal_values(rng, 30), {5, 6});
  using In = std::vector<Tensor>;
  CHECK(autograd::gradcheck([](const In& v) { return sum(v[0], {1}); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return mean(v[0], {0}, true); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return amax(v[0], {1}); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return min(v[0], 0).values; }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return var(v[0], {1}); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return brrr::std(v[0]); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return logsumexp(v[0], {0}); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return sum_to_size(v[0], {1, 6}); }, {x}));

  // d/dx of sum(d logsumexp / dx * w): the Hessian-vector product of logsumexp along a row.
  // For one row p = softmax(x): grad = p; d/dx <p, w> = p * (w - <p, w>).
  V xv = normal_values(rng, 4), wv = normal_values(rng, 4);
  Tensor xr = f64_tensor(xv, {4});
  xr.requires_grad_();
  Tensor g = autograd::grad({logsumexp(xr, {0})}, {xr}, {}, false, true)[0];
  Tensor h = autograd::grad({sum(mul(g, f64_tensor(wv, {4})))}, {xr})[0];
  double m = *std::max_element(xv.begin(), xv.end()), z = 0, pw = 0;
  V p(4);
  for (int i = 0; i < 4; ++i) z += std::exp(xv[static_cast<std::size_t>(i)] - m);
  for (std::size_t i = 0; i < 4; ++i) {
    p[i] = std::exp(xv[i] - m) / z;
    pw += p[i] * wv[i];
  }
  V want(4);
  for (std::size_t i = 0; i < 4; ++i) want[i] = p[i] * (wv[i] - pw);
  check_close(values(g), p, 1e-12, 1e-14);
  check_close(values(h), want, 1e-10, 1e-12);
  // var's second derivative: d2/dx2 of sum(x - mean)^2 / (N - 1) is (2 / (N - 1)) (I - 1/N).
  Tensor xs = f64_tensor({1, 2, 4}, {3});
  xs.requires_grad_();
  Tensor gv = autograd::grad({var(xs)}, {xs}, {}, false, true)[0];
  Tensor hv = autograd::grad({gv.select(0, 0)}, {xs})[0];
  check_close(values(hv), V{2.0 / 2 * (1 - 1.0 / 3), -2.0 / 2 / 3, -2.0 / 2 / 3}, 1e-12, 1e-12);
}
