// var, std, logsumexp and sum_to_size on the CPU against float64 references; error kinds and
// messages of every reduction; gradients against central differences in f64 (and the tie
// rules by hand).
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
          const test::Tol tol = test::tolerance(test::Computed::variance, dt);
          check_close(values(v), want_var, tol.rtol, tol.atol);
          check_close(values(sd), want_std, tol.rtol, tol.atol);
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
        const test::Tol tol = test::tolerance(test::Computed::log_sum_exp, dt);
        check_close(values(l), want, tol.rtol, tol.atol);
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
