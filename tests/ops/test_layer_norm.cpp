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
  CHECK_BRRR_ERROR(layer_norm(zeros({2, 3}), {3}, zeros({1, 3})), ErrorKind::shape, "layer_norm", "weight", "[1, 3]");
  // eps: a negative one gave NaN rows (rsqrt of var + eps < 0), a NaN one NaN everywhere, an
  // infinite one zeros; 0 stays allowed (PyTorch's too; above).
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double eps : {-1.0, -1e-12, nan, inf})
    CHECK_BRRR_ERROR(layer_norm(randn({2, 3}), {3}, {}, {}, eps), ErrorKind::value, "layer_norm", "eps");
}

// ---------------------------------------------------------------------------------------
// layer_norm's fused backward kernel (layer_norm_backward), which backward uses unless
// create_graph records the Tensor-op rule instead
// ---------------------------------------------------------------------------------------

namespace {

// The gradients of sum(layer_norm(x, [cols], w, b) * gy) w.r.t. the defined ones of x, w, b:
// by the fused kernel (create_graph off) or by the recorded Tensor-op rule (create_graph on).
std::vector<Tensor> ln_grads(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy, bool create_graph) {
  std::vector<Tensor> in;
  Tensor xx = x.detach().clone().requires_grad_(), ww, bb;
  in.push_back(xx);
  if (w.defined()) in.push_back(ww = w.detach().clone().requires_grad_());
  if (b.defined()) in.push_back(bb = b.detach().clone().requires_grad_());
  Tensor y = layer_norm(xx, {x.size(-1)}, ww, bb);
  auto g = autograd::grad({sum(y * gy)}, in, {}, false, create_graph);
  for (Tensor& t : g) t = t.detach();
  return g;
}

}  // namespace

TEST_CASE("layer_norm backward kernel: equals the Tensor-op rule in f64 (rows 1..many, cols 1..4097, affine or not)") {
  FRESH_SEED();
  for (std::int64_t rows : {1, 3, 300}) {
    for (std::int64_t cols : {1, 2, 5, 64, 1000, 4097}) {
      if (rows * cols > 300000) continue;
      Tensor x = randn({rows, cols}, {.dtype = DType::f64}) * 2.0 + 1.0;
      Tensor gy = randn({rows, cols}, {.dtype = DType::f64});
      Tensor w = randn({cols}, {.dtype = DType::f64}), b = randn({cols}, {.dtype = DType::f64});
      for (int affine = 0; affine < 4; ++affine) {
        INFO("rows ", rows, " cols ", cols, " affine ", affine);
        const Tensor wu = affine & 1 ? w : Tensor(), bu = affine & 2 ? b : Tensor();
        auto kernel = ln_grads(x, wu, bu, gy, false);
        auto rule = ln_grads(x, wu, bu, gy, true);
        REQUIRE(kernel.size() == rule.size());
        for (std::size_t i = 0; i < kernel.size(); ++i) {
          CHECK(kernel[i].dtype() == DType::f64);
          CHECK(kernel[i].shape() == rule[i].shape());
          const Tol t = tol_for(DType::f64);
          check_close(values(kernel[i]), values(rule[i]), t.rtol, t.atol);
        }
      }
    }
  }
}

TEST_CASE("layer_norm backward kernel: gradcheck (rows 1, cols 1, wide rows, weight and bias each optional)") {
  FRESH_SEED();
  manual_seed(seed_);
  auto ln = [](bool use_w, bool use_b) {
    return [use_w, use_b](const std::vector<Tensor>& in) {
      std::size_t k = 1;
      Tensor w = use_w ? in[k++] : Tensor();
      Tensor b = use_b ? in[k] : Tensor();
      return layer_norm(in[0], {in[0].size(-1)}, w, b);
    };
  };
  for (auto [rows, cols] : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 6}, {4, 1}, {1, 1}, {2, 300}}) {
    Tensor x = randn({rows, cols}, {.dtype = DType::f64}) * 2.0 + 0.5;
    Tensor w = randn({cols}, {.dtype = DType::f64}), b = randn({cols}, {.dtype = DType::f64});
    for (int affine = 0; affine < 4; ++affine) {
      INFO("rows ", rows, " cols ", cols, " affine ", affine);
      std::vector<Tensor> in{x};
      if (affine & 1) in.push_back(w);
      if (affine & 2) in.push_back(b);
      CHECK(autograd::gradcheck(ln(affine & 1, affine & 2), in));
    }
  }
}

TEST_CASE("layer_norm backward kernel: f32/bf16/f16 inputs against f64; gradient dtypes; f32 weights on bf16") {
  FRESH_SEED();
  manual_seed(seed_);
  for (std::int64_t cols : {7, 384, 1500}) {
    const std::int64_t rows = 37;
    Tensor x64 = randn({rows, cols}, {.dtype = DType::f64}) * 1.5 + 2.0;
    Tensor w64 = randn({cols}, {.dtype = DType::f64}), b64 = randn({cols}, {.dtype = DType::f64});
    Tensor gy64 = randn({rows, cols}, {.dtype = DType::f64});
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      for (DType wdt : {dt, DType::f32}) {
        INFO("cols ", cols, " x ", to_string(dt), " weight/bias ", to_string(wdt));
        // The reference runs in f64 on the values the low-precision run sees: x and gy rounded
        // to dt, w and b to wdt; the forward uses w rounded to dt (the kernel's weight is the
        // parameter itself for dx, as the Tensor-op rule's).
        Tensor x = x64.to(dt), gy = gy64.to(dt), w = w64.to(wdt), b = b64.to(wdt);
        auto got = ln_grads(x, w, b, gy, false);
        auto want = ln_grads(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64), gy.to(DType::f64), false);
        CHECK(got[0].dtype() == dt);
        CHECK(got[1].dtype() == wdt);
        CHECK(got[2].dtype() == wdt);
        // The CPU computes in double and rounds once (dx to dt, dweight/dbias to f32, then
        // wdt), from statistics kept in f32: the row-op row of the table. dweight sums
        // gy * xhat over the rows, and each xhat carries the f32 mean's and rstd's relative
        // error (~2^-23): a column whose terms cancel needs an atol of that error times the
        // sum of the terms' magnitudes (here bounded by rows * max|gy| * max|xhat|).
        const Tol tx = tol_for(dt), tw = tol_for(wdt);
        const Tensor xd = x.to(DType::f64);
        const double max_xhat = max(abs(layer_norm(xd, {cols}))).item<double>();
        const double max_gy = max(abs(gy.to(DType::f64))).item<double>();
        const double atol_w = tw.atol + std::ldexp(1.0, -23) * static_cast<double>(rows) * max_gy * max_xhat;
        check_close(values(got[0]), values(want[0]), tx.rtol, tx.atol);
        check_close(values(got[1]), values(want[1]), tw.rtol, atol_w);
        check_close(values(got[2]), values(want[2]), tw.rtol, tw.atol);
      }
    }
  }
}

TEST_CASE("layer_norm backward kernel: bit-identical run to run and for any thread count; empty shapes") {
  FRESH_SEED();
  manual_seed(seed_);
  Tensor x = randn({513, 384}), w = randn({384}), b = randn({384}), gy = randn({513, 384});
  const int threads = get_num_threads();
  auto first = ln_grads(x, w, b, gy, false);
  set_num_threads(1);
  auto one = ln_grads(x, w, b, gy, false);
  set_num_threads(std::max(threads, 2));
  auto again = ln_grads(x, w, b, gy, false);
  set_num_threads(threads);
  for (std::size_t i = 0; i < first.size(); ++i) {
    CHECK(values(first[i]) == values(one[i]));
    CHECK(values(first[i]) == values(again[i]));
  }
  // No rows: dx empty, dweight/dbias zeros; no columns: everything empty.
  auto rows0 = ln_grads(zeros({0, 4}), ones({4}), ones({4}), zeros({0, 4}), false);
  CHECK(rows0[0].shape() == Shape{0, 4});
  CHECK(values(rows0[1]) == std::vector<double>(4, 0.0));
  CHECK(values(rows0[2]) == std::vector<double>(4, 0.0));
  auto cols0 = ln_grads(zeros({3, 0}), ones({0}), ones({0}), zeros({3, 0}), false);
  CHECK(cols0[0].shape() == Shape{3, 0});
  CHECK(cols0[1].shape() == Shape{0});
  // Only the weight's gradient wanted (x does not require grad): no dx is computed.
  Tensor ww = w.detach().clone().requires_grad_();
  auto gw = autograd::grad({sum(layer_norm(x, {384}, ww) * gy)}, {ww});
  check_close(values(gw[0]), values(first[1]), 0, 0);
}
