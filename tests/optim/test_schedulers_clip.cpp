// StepLR and CosineWithWarmup against their formulas, clip_grad_norm_ (2-norm, inf-norm,
// p=1, scaling above max_norm, none below, aliased and expanded gradients), and the errors of
// optimizers, on the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/optim/optim_cases.hpp"

using namespace optim_test;

using namespace brrr;
using namespace brrr::optim;
using namespace test;

TEST_SUITE("optim") {

// ---------------------------------------------------------------------------------------
// Schedulers
// ---------------------------------------------------------------------------------------

TEST_CASE("StepLR: lr = base * gamma^floor(step / step_size)") {
  Tensor p = zeros({1}, {.requires_grad = true});
  SGD opt({p}, {.lr = 0.5});
  StepLR sched(opt, 3, 0.1);
  CHECK(sched.last_lr() == 0.5);
  CHECK(opt.lr() == 0.5);
  V expected = {0.5, 0.5, 0.05, 0.05, 0.05, 0.005, 0.005, 0.005, 0.0005};
  for (std::size_t s = 0; s < expected.size(); ++s) {
    CAPTURE(s);
    sched.step();
    CHECK(opt.lr() == doctest::Approx(expected[s]).epsilon(1e-12));
    CHECK(sched.last_lr() == opt.lr());
  }
  CHECK_BRRR_ERROR(StepLR(opt, 0), ErrorKind::value, "StepLR", "step_size");
}

TEST_CASE("CosineWithWarmup: linear warmup from 0, cosine decay to min_lr, then min_lr") {
  Tensor p = zeros({1}, {.requires_grad = true});
  SGD opt({p}, {.lr = 1.0});
  const std::int64_t warmup = 4, total = 12;
  const double min_lr = 0.1;
  CosineWithWarmup sched(opt, warmup, total, min_lr);
  CHECK(opt.lr() == 0.0);  // lr_at(0) applied at construction
  CHECK(sched.last_lr() == 0.0);
  auto formula = [&](std::int64_t s) {
    if (s < warmup) return 1.0 * s / warmup;
    if (s >= total) return min_lr;
    double prog = double(s - warmup) / double(total - warmup);
    return min_lr + (1.0 - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * prog));
  };
  for (std::int64_t s = 1; s <= 15; ++s) {
    CAPTURE(s);
    sched.step();
    CHECK(opt.lr() == doctest::Approx(formula(s)).epsilon(1e-12));
    CHECK(sched.last_lr() == opt.lr());
  }
  // spot values: s = 2 -> 0.5; s = 4 -> peak 1.0; s = 8 -> midpoint (1 + 0.1) / 2
  CHECK(formula(2) == doctest::Approx(0.5));
  CHECK(formula(4) == doctest::Approx(1.0));
  CHECK(formula(8) == doctest::Approx(0.55));

  // no warmup: starts at the base lr
  SGD opt2({p}, {.lr = 0.2});
  CosineWithWarmup s2(opt2, 0, 10);
  CHECK(opt2.lr() == doctest::Approx(0.2));
  for (int i = 0; i < 5; ++i) s2.step();
  CHECK(opt2.lr() == doctest::Approx(0.1));
  for (int i = 0; i < 5; ++i) s2.step();
  CHECK(opt2.lr() == doctest::Approx(0.0));

  CHECK_BRRR_ERROR(CosineWithWarmup(opt2, 5, 3), ErrorKind::value, "CosineWithWarmup", "total_steps");
  CHECK_BRRR_ERROR(CosineWithWarmup(opt2, -1, 3), ErrorKind::value, "CosineWithWarmup", "warmup_steps");
}

TEST_CASE("schedulers drive the optimizer's steps") {
  Tensor p = Tensor::from_vector(std::vector<double>{0.0});
  p.requires_grad_(true);
  SGD opt({p}, {.lr = 1.0});
  StepLR sched(opt, 1, 0.5);
  double expected = 0;
  double lr = 1.0;
  for (int s = 0; s < 4; ++s) {
    p.set_grad(Tensor::from_vector(std::vector<double>{1.0}));
    opt.step();
    expected -= lr;
    sched.step();
    lr *= 0.5;
  }
  check_values(host(p), {expected}, 1e-15, 1e-15);
}

// ---------------------------------------------------------------------------------------
// clip_grad_norm_
// ---------------------------------------------------------------------------------------

TEST_CASE("clip_grad_norm_: total 2-norm, scaling above max_norm, unchanged below") {
  manual_seed(12);
  Tensor a = param({3, 4}), b = param({5}), c = param({2});  // c has no gradient
  a.set_grad(grad_like(a));
  b.set_grad(grad_like(b) * 3.0);
  V ga = host(a.grad()), gb = host(b.grad());
  double sq = 0;
  for (double x : ga) sq += x * x;
  for (double x : gb) sq += x * x;
  double total = std::sqrt(sq);

  // below: unchanged (coef clamps at 1)
  Tensor n = optim::clip_grad_norm_({a, b, c}, total * 2);
  CHECK(n.dim() == 0);
  CHECK(n.dtype() == DType::f32);
  CHECK(n.item<float>() == doctest::Approx(total).epsilon(1e-6));
  check_values(host(a.grad()), ga, 1e-15, 0);
  check_values(host(b.grad()), gb, 1e-15, 0);
  CHECK_FALSE(c.grad().defined());

  // above: scaled by max_norm / (total + 1e-6), in place
  Tensor ga_handle = a.grad();
  double max_norm = total / 4;
  Tensor n2 = optim::clip_grad_norm_({a, b, c}, max_norm);
  CHECK(n2.item<float>() == doctest::Approx(total).epsilon(1e-6));
  double coef = max_norm / (total + 1e-6);
  V sa = ga, sb = gb;
  for (double& x : sa) x *= coef;
  for (double& x : sb) x *= coef;
  check_values(host(a.grad()), sa, 1e-6, 1e-7);  // coef is an f32 tensor
  check_values(host(b.grad()), sb, 1e-6, 1e-7);
  CHECK(a.grad().storage().is_same(ga_handle.storage()));
  // the new joint norm is max_norm
  double sq2 = 0;
  for (double x : host(a.grad())) sq2 += x * x;
  for (double x : host(b.grad())) sq2 += x * x;
  CHECK(std::sqrt(sq2) == doctest::Approx(max_norm).epsilon(1e-5));
}

TEST_CASE("clip_grad_norm_: inf norm and p = 1, 3") {
  Tensor a = zeros({3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor b = zeros({2}, {.dtype = DType::f32, .requires_grad = true});
  auto reset = [&] {
    a.set_grad(Tensor::from_vector(std::vector<double>{1, -7, 2}));
    b.set_grad(Tensor::from_vector(std::vector<float>{3, -4}));
  };
  reset();
  Tensor n = optim::clip_grad_norm_({a, b}, 3.5, std::numeric_limits<double>::infinity());
  CHECK(n.item<float>() == doctest::Approx(7.0));
  double coef = 3.5 / (7.0 + 1e-6);
  check_values(host(a.grad()), {coef, -7 * coef, 2 * coef}, 1e-6, 0);
  check_values(host(b.grad()), {3 * coef, -4 * coef}, 1e-6, 0);

  reset();
  Tensor n1 = optim::clip_grad_norm_({a, b}, 100.0, 1.0);
  CHECK(n1.item<float>() == doctest::Approx(17.0));
  check_values(host(a.grad()), {1, -7, 2}, 0, 0);

  reset();
  Tensor n3 = optim::clip_grad_norm_({a, b}, 100.0, 3.0);
  CHECK(n3.item<float>() == doctest::Approx(std::cbrt(1.0 + 343 + 8 + 27 + 64)).epsilon(1e-6));

  CHECK_BRRR_ERROR(optim::clip_grad_norm_({a, b}, 1.0, 0.0), ErrorKind::value, "clip_grad_norm_", "norm_type");
  CHECK_BRRR_ERROR(optim::clip_grad_norm_({a, b}, -1.0), ErrorKind::value, "clip_grad_norm_", "max_norm");
}

TEST_CASE("clip_grad_norm_: aliased and expanded gradients are scaled once") {
  // (x + y).sum(): sum()'s backward leaves an expanded (stride-0) gradient and add()'s
  // backward hands the same tensor to both inputs.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 4});
  Tensor y = Tensor::from_vector(std::vector<double>{5, 6, 7, 8});
  x.requires_grad_(true);
  y.requires_grad_(true);
  (x + y).sum().backward();
  // each gradient is ones(4): total norm sqrt(8)
  Tensor n = optim::clip_grad_norm_({x, y}, 1.0);
  CHECK(n.item<float>() == doctest::Approx(std::sqrt(8.0)).epsilon(1e-6));
  double coef = 1.0 / (std::sqrt(8.0) + 1e-6);
  check_values(host(x.grad()), V(4, coef), 1e-6, 0);
  check_values(host(y.grad()), V(4, coef), 1e-6, 0);
}

TEST_CASE("clip_grad_norm_: no gradients gives 0; bf16 gradients are summed in f32") {
  Tensor a = zeros({3}, {.requires_grad = true});
  Tensor n = optim::clip_grad_norm_({a}, 1.0);
  CHECK(n.item<float>() == 0.0f);
  Tensor b = zeros({4}, {.dtype = DType::bf16, .requires_grad = true});
  b.set_grad(Tensor::from_vector(std::vector<double>{3, 4, 0, 0}).to(DType::bf16));
  Tensor nb = optim::clip_grad_norm_({b}, 1.0);
  CHECK(nb.item<float>() == doctest::Approx(5.0));
  check_values(host(b.grad()), {0.6, 0.8, 0, 0}, 8e-3, 0);
  CHECK(b.grad().dtype() == DType::bf16);
}

TEST_CASE("clip_grad_norm_: many gradients of mixed dtypes and layouts against the per-tensor formula") {
  FRESH_SEED();
  manual_seed(seed_);
  // 70 gradients (more than one multi-tensor launch holds on CUDA): f32, f64 and bf16, an
  // empty one, a transposed (non-contiguous) one, sizes from 1 to 20000.
  std::vector<Tensor> params;
  for (int k = 0; k < 70; ++k) {
    const DType dt = k % 3 == 0 ? DType::f32 : k % 3 == 1 ? DType::f64 : DType::bf16;
    const std::int64_t n = k == 5 ? 0 : 1 + (k * 7919) % 20000;
    Tensor p = zeros({n}, {.dtype = dt, .requires_grad = true});
    p.set_grad(randn({n}, {.dtype = DType::f64}).to(dt));
    params.push_back(p);
  }
  Tensor m = zeros({30, 40}, {.requires_grad = true});
  m.set_grad(randn({40, 30}).t());  // not contiguous: scaled through a copy
  params.push_back(m);
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(norm_type);
    std::vector<Tensor> before;
    for (const Tensor& p : params) before.push_back(p.grad().to(DType::f64).clone());  // f64: to() is the tensor itself
    // The formula in double over the gradients' values.
    double acc = 0;
    for (const Tensor& g : before)
      for (double v : host(g))
        acc = std::isinf(norm_type) ? std::max(acc, std::abs(v)) : acc + std::pow(std::abs(v), norm_type);
    const double total = std::isinf(norm_type) ? acc : std::pow(acc, 1.0 / norm_type);
    const double max_norm = total / 3;
    Tensor n = optim::clip_grad_norm_(params, max_norm, norm_type);
    CHECK(n.item<float>() == doctest::Approx(total).epsilon(1e-5));
    const double coef = max_norm / (total + 1e-6);
    for (std::size_t k = 0; k < params.size(); ++k) {
      CAPTURE(k);
      V want = host(before[k]);
      for (double& v : want) v *= coef;
      // The factor comes from f32 sums (an f32 tensor); bf16 gradients are rounded once more.
      const Tol t = tolerance(Computed::accumulated, params[k].grad().dtype() == DType::bf16 ? DType::bf16 : DType::f32);
      check_values(host(params[k].grad()), want, t.rtol, t.atol);
    }
  }
  // NaN in a gradient: the inf-norm is NaN (and every gradient becomes NaN), as PyTorch's.
  params[3].grad().fill_(std::numeric_limits<double>::quiet_NaN());
  CHECK(std::isnan(optim::clip_grad_norm_(params, 1.0, std::numeric_limits<double>::infinity()).item<float>()));
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

TEST_CASE("optimizers: errors name the optimizer and the offending value") {
  Tensor p = zeros({2}, {.requires_grad = true});
  CHECK_BRRR_ERROR(SGD({p}, {.lr = 0.1, .nesterov = true}), ErrorKind::value, "SGD", "nesterov");
  CHECK_BRRR_ERROR(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), ErrorKind::value,
                   "SGD", "nesterov", "dampening");
  CHECK_BRRR_ERROR(SGD({p}, {.lr = -0.1}), ErrorKind::value, "SGD", "learning rate", "-0.1");
  CHECK_BRRR_ERROR(SGD({p}, {.momentum = -1}), ErrorKind::value, "SGD", "momentum");
  CHECK_BRRR_ERROR(SGD({p}, {.weight_decay = -1}), ErrorKind::value, "SGD", "weight_decay");
  CHECK_BRRR_ERROR(Adam({p}, {.lr = -1}), ErrorKind::value, "Adam", "learning rate");
  CHECK_BRRR_ERROR(Adam({p}, {.betas = {1.0, 0.999}}), ErrorKind::value, "Adam", "beta1");
  CHECK_BRRR_ERROR(Adam({p}, {.betas = {0.9, -0.1}}), ErrorKind::value, "Adam", "beta2");
  CHECK_BRRR_ERROR(Adam({p}, {.eps = -1}), ErrorKind::value, "Adam", "eps");
  CHECK_BRRR_ERROR(AdamW({p}, {.weight_decay = -0.1}), ErrorKind::value, "AdamW", "weight_decay");
  CHECK_BRRR_ERROR(SGD(std::vector<Tensor>{}), ErrorKind::value, "SGD", "empty");
  CHECK_BRRR_ERROR(SGD({p, Tensor()}), ErrorKind::value, "SGD", "undefined");
  CHECK_BRRR_ERROR(SGD({p, p}), ErrorKind::value, "SGD", "more than once");
  CHECK_BRRR_ERROR(SGD({zeros({2}, {.dtype = DType::i64})}), ErrorKind::dtype, "SGD", "i64");
  Tensor nc = zeros({3, 2}).t();
  CHECK_BRRR_ERROR(Adam({nc}), ErrorKind::value, "Adam", "contiguous", "[2, 3]");

  // a negative lr set later (e.g. by hand) is refused at the step
  SGD opt({p}, {.lr = 0.1});
  opt.set_lr(-1);
  p.set_grad(ones({2}));
  CHECK_BRRR_ERROR(opt.step(), ErrorKind::value, "SGD.step", "learning rate");
  // a gradient of another shape (the parameter's data was replaced by set_data)
  opt.set_lr(0.1);
  p.set_data(zeros({3}));
  CHECK_BRRR_ERROR(opt.step(), ErrorKind::shape, "SGD.step", "[2]", "[3]");
}

}  // TEST_SUITE
