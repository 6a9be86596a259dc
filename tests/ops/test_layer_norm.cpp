// layer_norm on the CPU: values and statistics against a float64 reference, weight/bias
// optional, dtypes and layouts; gradients w.r.t. x, weight and bias (gradcheck, second order,
// f32/bf16 against f64); errors.
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
#include "tests/ops/softmax_loss_cases.hpp"

using namespace softmax_loss_test;

using namespace brrr;
using namespace test;

// ---------------------------------------------------------------------------------------
// layer_norm
// ---------------------------------------------------------------------------------------

namespace {
// Layer norm of row-major [rows, cols] in double.
V ref_layer_norm(const V& x, std::int64_t rows, std::int64_t cols, const V* w, const V* b, double eps) {
  V y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (std::int64_t c = 0; c < cols; ++c) mu += x[static_cast<std::size_t>(r * cols + c)];
    mu /= static_cast<double>(cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      double d = x[static_cast<std::size_t>(r * cols + c)] - mu;
      var += d * d;
    }
    var /= static_cast<double>(cols);
    double rs = 1 / std::sqrt(var + eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      auto i = static_cast<std::size_t>(r * cols + c);
      double v = (x[i] - mu) * rs;
      if (w) v *= (*w)[static_cast<std::size_t>(c)];
      if (b) v += (*b)[static_cast<std::size_t>(c)];
      y[i] = v;
    }
  }
  return y;
}
}  // namespace

TEST_CASE("layer_norm matches a float64 reference (shapes, affine or not, dtypes, layouts)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  struct Case {
    Shape shape, normalized;
  };
  const std::vector<Case> cases = {{{4, 10}, {10}}, {{2, 3, 4, 5}, {4, 5}}, {{7}, {7}}, {{3, 1100}, {1100}},
                                   {{2, 3, 4}, {2, 3, 4}}};
  for (const Case& cs : cases) {
    std::int64_t cols = numel_of(cs.normalized), rows = numel_of(cs.shape) / cols;
    for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      Tensor x = make(dtype, normal_values(rng, numel_of(cs.shape), 2.0), cs.shape);
      // a shift, so that the mean matters
      x = (x + 3.0).to(dtype);
      Tensor w = make(dtype, normal_values(rng, cols), cs.normalized);
      Tensor b = make(dtype, normal_values(rng, cols), cs.normalized);
      V xv = values(x), wv = values(w), bv = values(b);
      Tol tol = tol_for(dtype);
      if (dtype == DType::f32) tol = {1e-5, 1e-5};
      for (int affine = 0; affine < 4; ++affine) {
        INFO("shape ", to_string(cs.shape), " normalized ", to_string(cs.normalized), " ", to_string(dtype),
             " affine ", affine);
        const bool use_w = affine & 1, use_b = affine & 2;
        Tensor y = layer_norm(x, cs.normalized, use_w ? w : Tensor(), use_b ? b : Tensor(), 1e-5);
        CHECK(y.shape() == cs.shape);
        CHECK(y.dtype() == dtype);
        check_close(values(y), ref_layer_norm(xv, rows, cols, use_w ? &wv : nullptr, use_b ? &bv : nullptr, 1e-5),
                    tol.rtol, tol.atol);
      }
    }
  }
  // Non-contiguous input: a transposed [5, 6] normalised over its last dim; eps matters for
  // constant rows (variance 0 -> output 0, rstd 1/sqrt(eps)).
  Tensor base = make(DType::f64, normal_values(rng, 30), {6, 5});
  Tensor xt = base.t();
  check_close(values(layer_norm(xt, {6})), ref_layer_norm(values(xt), 5, 6, nullptr, nullptr, 1e-5), 1e-12, 1e-12);
  check_close(values(layer_norm(full({2, 4}, 7.0, {.dtype = DType::f64}), {4}, make(DType::f64, {2, 2, 2, 2}),
                                make(DType::f64, {1, 1, 1, 1}))),
              V(8, 1.0), 0, 0);
  check_close(values(layer_norm(make(DType::f64, {1, 3}), {2}, {}, {}, 0.0)), {-1, 1}, 1e-15, 0);
  check_close(values(layer_norm(make(DType::f64, {1, 3}), {2}, {}, {}, 1.0)), {-1 / std::sqrt(2.0), 1 / std::sqrt(2.0)},
              1e-15, 0);
  CHECK(layer_norm(zeros({0, 4}), {4}).shape() == Shape{0, 4});
  // f32 weights with an f64 input: the output keeps x's dtype.
  CHECK(layer_norm(zeros({2, 3}, {.dtype = DType::f64}), {3}, ones({3})).dtype() == DType::f64);
}

TEST_CASE("layer_norm gradients (gradcheck) w.r.t. x, weight, bias; second order") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor x = randn({3, 2, 5}, {.dtype = DType::f64}) * 2.0 + 1.0;
  Tensor w = randn({2, 5}, {.dtype = DType::f64});
  Tensor b = randn({2, 5}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 5}, in[1], in[2]); },
                            {x, w, b}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}); }, {x}));
  Tensor w5 = randn({5}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, in[1]); }, {x, w5}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], {5}, {}, in[1]); }, {x, w5}));
  // Non-contiguous x.
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return layer_norm(in[0].transpose(0, 2), {3}, in[1], in[2]); },
      {x, randn({3}, {.dtype = DType::f64}), randn({3}, {.dtype = DType::f64})}));
  // Second order (create_graph recomputes the statistics from x).
  Tensor g = randn({3, 2, 5}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        GradModeGuard on(true);  // gradcheck evaluates f under NoGradGuard for the differences
        Tensor y = layer_norm(in[0], {5}, in[1]);
        auto gs = autograd::grad({sum(y * g)}, {in[0], in[1]}, {}, true, true);
        return sum(gs[0] * gs[0]) + sum(gs[1] * in[1]);
      },
      {x, w5}));
}

TEST_CASE("layer_norm gradients in f32 and bf16 agree with f64") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor x = randn({4, 8}, {.dtype = DType::f64});
  Tensor w = randn({8}, {.dtype = DType::f64});
  Tensor b = randn({8}, {.dtype = DType::f64});
  Tensor gy = randn({4, 8}, {.dtype = DType::f64});
  auto grads = [&](DType dtype) {
    Tensor xx = x.detach().to(dtype).clone().requires_grad_(), ww = w.detach().to(dtype).clone().requires_grad_(),
           bb = b.detach().to(dtype).clone().requires_grad_();
    (layer_norm(xx, {8}, ww, bb) * gy.to(dtype)).sum().backward();
    return std::vector<V>{values(xx.grad()), values(ww.grad()), values(bb.grad())};
  };
  auto ref = grads(DType::f64);
  auto f32 = grads(DType::f32);
  auto bf = grads(DType::bf16);
  for (int i = 0; i < 3; ++i) {
    check_close(f32[static_cast<std::size_t>(i)], ref[static_cast<std::size_t>(i)], 1e-4, 1e-4);
    check_close(bf[static_cast<std::size_t>(i)], ref[static_cast<std::size_t>(i)], 5e-2, 1e-1);
  }
}

TEST_CASE("layer_norm errors") {
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {4}), ErrorKind::shape, "layer_norm", "[2, 3]", "[4]");
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3, 4}), {3, 3}), ErrorKind::shape, "layer_norm", "[2, 3, 4]", "[3, 3]");
  CHECK_BRRR_ERROR(layer_norm(zeros({3}), {2, 3}), ErrorKind::shape, "layer_norm", "[3]", "[2, 3]");
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {}), ErrorKind::shape, "layer_norm", "normalized_shape");
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {3}, zeros({4})), ErrorKind::shape, "layer_norm", "weight", "[4]", "[3]");
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {3}, {}, zeros({2, 3})), ErrorKind::shape, "layer_norm", "bias");
  CHECK_BRRR_ERROR(layer_norm(arange(6).view({2, 3}), {3}), ErrorKind::dtype, "layer_norm", "i64");
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {3}, arange(3)), ErrorKind::dtype, "layer_norm", "weight");
}
