// dropout_add_layer_norm on the CPU: the fused kernels against the composite they replace
// (dropout, add, layer_norm, to) from the same generator state, values and gradients of both
// outputs, every dtype pairing; gradcheck (first and second order); the packed q/k/v
// gradients of split + attention; errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/dropout_add_layer_norm_run.hpp"
#include "tests/ops/softmax_loss_cases.hpp"

using namespace brrr;
using namespace test;
using dropout_add_ln_test::run;
using dropout_add_ln_test::Run;
using namespace softmax_loss_test;

namespace {

Tol tol_of(DType dt) { return dt == DType::f64 ? Tol{1e-12, 1e-12} : dt == DType::f32 ? Tol{1e-5, 1e-5} : tol_for(dt); }

}  // namespace

TEST_CASE("dropout_add_layer_norm equals the composite (dtypes, shapes, p, residual/weight/bias optional)") {
  FRESH_SEED();
  struct Pair {
    DType x0, res;  // res f64 (unused) when there is no residual
    bool has_res;
  };
  const std::vector<Pair> pairs = {{DType::f32, DType::f32, true},   {DType::f64, DType::f64, true},
                                   {DType::bf16, DType::f32, true},  {DType::f16, DType::f32, true},
                                   {DType::bf16, DType::bf16, true}, {DType::f32, DType::f32, false},
                                   {DType::bf16, DType::f32, false}, {DType::f32, DType::bf16, true}};
  const std::vector<Shape> shapes = {{3, 5, 8}, {2, 7}, {4, 384}, {1, 1}};
  for (const Pair& pr : pairs)
    for (const Shape& shape : shapes)
      for (double p : {0.0, 0.25})
        for (int variant = 0; variant < 3; ++variant) {  // weight, weight + bias, neither; training off in the last
          const std::int64_t cols = shape.back();
          const bool training = variant != 2 || p == 0.0;
          INFO(to_string(pr.x0), " + ", pr.has_res ? to_string(pr.res) : "none", " shape ", to_string(shape), " p ", p,
               " variant ", variant);
          Tensor x0 = randn(shape, {.dtype = DType::f64}).to(pr.x0);
          Tensor res = pr.has_res ? (randn(shape, {.dtype = DType::f64}) * 2.0 + 1.0).to(pr.res) : Tensor();
          const DType sum_dt = pr.has_res ? promote_types(pr.x0, pr.res) : pr.x0;
          Tensor w = variant < 2 ? (randn({cols}, {.dtype = DType::f64}) + 1.0).to(sum_dt) : Tensor();
          Tensor b = variant == 1 ? randn({cols}, {.dtype = DType::f64}).to(sum_dt) : Tensor();
          Tensor g_out = randn(shape, {.dtype = DType::f64}), g_sum = randn(shape, {.dtype = DType::f64});
          const std::uint64_t seed = fresh_seed();
          Run f = run(true, x0, res, w, b, p, training, seed, g_out, g_sum);
          Run c = run(false, x0, res, w, b, p, training, seed, g_out, g_sum);
          CHECK(f.out.dtype() == pr.x0);
          CHECK(f.sum.dtype() == sum_dt);
          CHECK(f.out.shape() == shape);
          const Tol to = tol_of(pr.x0), ts = tol_of(sum_dt);
          check_close(values(f.out), values(c.out), to.rtol, to.atol);
          check_close(values(f.sum), values(c.sum), ts.rtol, ts.atol);
          REQUIRE(f.grads.size() == c.grads.size());
          for (std::size_t i = 0; i < f.grads.size(); ++i) {
            INFO("gradient ", i);
            CHECK(f.grads[i].dtype() == c.grads[i].dtype());
            const Tol tg = tol_of(f.grads[i].dtype());
            check_close(values(f.grads[i]), values(c.grads[i]), 10 * tg.rtol, 10 * tg.atol);
          }
        }
}

TEST_CASE("dropout_add_layer_norm: dropout keeps 1 - p of x0, eval mode and p == 0 add x0 itself") {
  FRESH_SEED();
  Tensor x0 = ones({64, 128}), res = zeros({64, 128});
  auto [out, s] = dropout_add_layer_norm(x0, res, {}, {}, 0.25, 1e-5, true);
  // s = x0 / (1 - p) where kept, else 0: the kept fraction is about 0.75.
  const double kept = mean(ne(s, 0.0).to(DType::f32)).item<double>();
  CHECK(kept == doctest::Approx(0.75).epsilon(0.03));
  check_close(values(s), values(mul(ne(s, 0.0).to(DType::f32), 1.0 / 0.75)), 1e-6, 1e-6);
  for (bool training : {false, true}) {
    auto [o2, s2] = dropout_add_layer_norm(x0, res, {}, {}, training ? 0.0 : 0.5, 1e-5, training);
    check_close(values(s2), values(x0), 0, 0);
    check_close(values(o2), values(zeros({64, 128})), 0, 0);  // constant rows normalise to 0
  }
  // p == 1 drops everything: s is the residual.
  auto [o3, s3] = dropout_add_layer_norm(x0, res, {}, {}, 1.0, 1e-5, true);
  check_close(values(s3), values(res), 0, 0);
}

TEST_CASE("dropout_add_layer_norm gradients (gradcheck, first and second order)") {
  FRESH_SEED();
  Tensor x0 = randn({3, 4, 6}, {.dtype = DType::f64});
  Tensor res = randn({3, 4, 6}, {.dtype = DType::f64}) * 2.0;
  Tensor w = randn({6}, {.dtype = DType::f64}) + 1.0, b = randn({6}, {.dtype = DType::f64});
  for (double p : {0.0, 0.3}) {
    INFO("p ", p);
    // The same mask at every evaluation: the generator is reseeded inside.
    auto f = [p](const std::vector<Tensor>& in) {
      manual_seed(11);
      auto [out, s] = dropout_add_layer_norm(in[0], in[1], in[2], in[3], p, 1e-5, true);
      return add(out, mul(s, 0.7));
    };
    CHECK(autograd::gradcheck(f, {x0, res, w, b}));
    CHECK(autograd::gradcheck(
        [p](const std::vector<Tensor>& in) {
          manual_seed(11);
          return dropout_add_layer_norm(in[0], Tensor(), in[1], Tensor(), p, 1e-5, true).first;
        },
        {x0, w}));
  }
  // Second order: create_graph's rule (recorded ops).
  Tensor g = randn({3, 4, 6}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        GradModeGuard on(true);
        manual_seed(11);
        auto [out, s] = dropout_add_layer_norm(in[0], in[1], in[2], Tensor(), 0.3, 1e-5, true);
        auto gs = autograd::grad({add(sum(out * g), sum(s * s))}, {in[0], in[1], in[2]}, {}, true, true);
        return add(add(sum(gs[0] * gs[0]), sum(gs[1] * in[1])), sum(gs[2] * in[2]));
      },
      {x0, res, w}));
}

TEST_CASE("q, k, v split from one projection: their gradients land in one buffer, equal to separate tensors") {
  FRESH_SEED();
  const std::int64_t b = 2, t = 5, h = 3, d = 4, c = h * d;
  Tensor qkv = randn({b, t, 3 * c}, {.dtype = DType::f64});
  Tensor g = randn({b, h, t, d}, {.dtype = DType::f64});
  auto heads = [&](const Tensor& z) { return z.reshape({b, t, h, d}).transpose(1, 2); };
  // Split views (packed) against clones of each (separate buffers).
  Tensor p = qkv.detach().clone().requires_grad_();
  std::vector<Tensor> parts = split(p, c, -1);
  Tensor y = scaled_dot_product_flash_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                {.dropout_p = 0.0, .is_causal = true});
  sum(y * g).backward();
  Tensor s = qkv.detach().clone().requires_grad_();
  std::vector<Tensor> sp = split(s, c, -1);
  Tensor y2 = scaled_dot_product_flash_attention(heads(sp[0].clone()), heads(sp[1].clone()), heads(sp[2].clone()),
                                                 {.dropout_p = 0.0, .is_causal = true});
  sum(y2 * g).backward();
  check_close(values(y), values(y2), 0, 0);
  check_close(values(p.grad()), values(s.grad()), 1e-12, 1e-12);
  CHECK(p.grad().is_contiguous());
}

TEST_CASE("dropout_add_layer_norm errors") {
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({2, 3}), zeros({2, 4}), {}, {}, 0.1), ErrorKind::shape,
                   "dropout_add_layer_norm", "[2, 4]", "[2, 3]");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({2, 3}), zeros({2, 3}), zeros({4}), {}, 0.1), ErrorKind::shape,
                   "dropout_add_layer_norm", "weight", "[4]");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({2, 3}), {}, {}, zeros({2, 3}), 0.1), ErrorKind::shape,
                   "dropout_add_layer_norm", "bias");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(arange(6).view({2, 3}), {}, {}, {}, 0.1), ErrorKind::dtype,
                   "dropout_add_layer_norm", "i64");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({2, 3}), arange(6).view({2, 3}), {}, {}, 0.1), ErrorKind::dtype,
                   "dropout_add_layer_norm", "residual");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({2, 3}), {}, {}, {}, 1.5), ErrorKind::value, "dropout_add_layer_norm",
                   "probability");
  CHECK_BRRR_ERROR(dropout_add_layer_norm(zeros({}), {}, {}, {}, 0.1), ErrorKind::shape, "dropout_add_layer_norm");
  for (double eps : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    CHECK_BRRR_ERROR(dropout_add_layer_norm(randn({2, 3}), randn({2, 3}), {}, {}, 0.1, eps), ErrorKind::value,
                     "dropout_add_layer_norm", "eps");
}
