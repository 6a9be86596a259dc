// Optimizers on the CPU. Every optimizer against a float64 reference written here from the
// formulas (PyTorch's order, see optim/optimizer.cpp) over several steps on random
// parameters and gradients: SGD (plain, weight decay, momentum with dampening, nesterov,
// maximize), Adam (weight decay, amsgrad, maximize, and the exact values of a hand-worked
// example), AdamW (decoupled decay); several parameters of different shapes and dtypes (f32,
// f64, bf16) in one optimizer; parameters without a gradient skipped (and their state created
// on their first update); zero_grad in both modes; version bumps. Schedulers and clipping:
// test_schedulers_clip.cpp.
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
#include "tests/optim/optim_cases.hpp"

using namespace optim_test;

using namespace brrr;
using namespace brrr::optim;
using namespace test;

TEST_SUITE("optim") {

// ---------------------------------------------------------------------------------------
// SGD
// ---------------------------------------------------------------------------------------

TEST_CASE("SGD: plain steps and weight decay match the formula (f64 and f32)") {
  manual_seed(1);
  for (double wd : {0.0, 0.1}) {
    CAPTURE(wd);
    SGDOptions o{.lr = 0.05, .weight_decay = wd};
    Tensor a = param({3, 4}), b = param({5});
    SGD opt({a, b}, o);
    run_against(opt, {a, b}, std::vector<RefSGD>{{o}, {o}}, 3, 1e-12, 1e-12);

    Tensor c = param({7}, DType::f32);
    SGD opt32({c}, o);
    run_against(opt32, {c}, std::vector<RefSGD>{{o}}, 3, 1e-5, 1e-6);
  }
}

TEST_CASE("SGD: a hand-computed step") {
  // p = [1, -2], g = [0.5, 4], lr 0.1, wd 0.5: g' = [1, 3], p = [0.9, -2.3].
  Tensor p = Tensor::from_vector(std::vector<double>{1, -2});
  p.requires_grad_(true);
  SGD opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  p.set_grad(Tensor::from_vector(std::vector<double>{0.5, 4}));
  opt.step();
  check_values(host(p), {0.9, -2.3}, 1e-15, 1e-15);
  // momentum 0.9: the first step takes the gradient as the buffer, the second mixes.
  Tensor q = Tensor::from_vector(std::vector<double>{0});
  q.requires_grad_(true);
  SGD mom({q}, {.lr = 1, .momentum = 0.9, .dampening = 0.5});
  q.set_grad(Tensor::from_vector(std::vector<double>{1}));
  mom.step();  // b = 1, q = -1
  check_values(host(q), {-1}, 0, 1e-15);
  q.set_grad(Tensor::from_vector(std::vector<double>{2}));
  mom.step();  // b = 0.9 + 0.5 * 2 = 1.9, q = -2.9
  check_values(host(q), {-2.9}, 1e-15, 1e-15);
}

TEST_CASE("SGD: momentum with dampening, nesterov, maximize over several steps") {
  manual_seed(2);
  std::vector<SGDOptions> cases = {
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.1, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.02, .nesterov = true},
      {.lr = 0.05, .momentum = 0.5, .nesterov = true, .maximize = true},
      {.lr = 0.2, .weight_decay = 0.1, .maximize = true},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const SGDOptions& o = cases[c];
    Tensor a = param({2, 3}), b = param({4, 1, 2}), s = param({});
    SGD opt({a, b, s}, o);
    run_against(opt, {a, b, s}, std::vector<RefSGD>{{o}, {o}, {o}}, 4, 1e-12, 1e-12);
  }
}

TEST_CASE("SGD: maximize goes uphill") {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0});
  p.requires_grad_(true);
  SGD opt({p}, {.lr = 0.5, .maximize = true});
  p.set_grad(Tensor::from_vector(std::vector<double>{2.0}));
  opt.step();
  check_values(host(p), {2.0}, 0, 1e-15);
}

// ---------------------------------------------------------------------------------------
// Adam, AdamW
// ---------------------------------------------------------------------------------------

TEST_CASE("Adam: the hand-worked example (p=0, lr=1, eps=0, gradients 1, 0, 0)") {
  // PyTorch gives p = -1, -1.670058, -2.188015 (Adam) and -1, -1.669723, -2.187162
  // (amsgrad: vmax keeps the first step's v, then bias correction divides it).
  for (bool ams : {false, true}) {
    CAPTURE(ams);
    for (DType dt : {DType::f64, DType::f32}) {
      CAPTURE(dt);
      Tensor p = zeros({1}, {.dtype = dt, .requires_grad = true});
      Adam opt({p}, {.lr = 1, .eps = 0, .amsgrad = ams});
      V expected = ams ? V{-1, -1.669723, -2.187162} : V{-1, -1.670058, -2.188015};
      double g[3] = {1, 0, 0};
      for (int s = 0; s < 3; ++s) {
        p.set_grad(full({1}, g[s], {.dtype = dt}));
        opt.step();
        CHECK(host(p)[0] == doctest::Approx(expected[s]).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("Adam: several steps with weight decay, amsgrad, maximize match the reference") {
  manual_seed(3);
  std::vector<AdamOptions> cases = {
      {},
      {.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1},
      {.lr = 0.02, .weight_decay = 0.05, .amsgrad = true},
      {.lr = 0.01, .amsgrad = true, .maximize = true},
      {.lr = 0.03, .betas = {0.0, 0.5}, .weight_decay = 0.2, .maximize = true},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const AdamOptions& o = cases[c];
    Tensor a = param({3, 2}), b = param({6}), s = param({});
    Adam opt({a, b, s}, o);
    RefAdam r{o};
    run_against(opt, {a, b, s}, std::vector<RefAdam>{r, r, r}, 5, 1e-12, 1e-13);
    // f32 parameters compute in f32
    Tensor f = param({9}, DType::f32);
    Adam opt32({f}, o);
    run_against(opt32, {f}, std::vector<RefAdam>{r}, 5, 1e-5, 1e-6);
  }
}

TEST_CASE("AdamW: decoupled weight decay (default 0.01) matches the reference") {
  manual_seed(4);
  {
    AdamW defaults({param({2})});
    CHECK(defaults.lr() == doctest::Approx(1e-3));
  }
  std::vector<AdamOptions> cases = {
      {.weight_decay = 0.01},
      {.lr = 0.05, .weight_decay = 0.3},
      {.lr = 0.05, .weight_decay = 0.3, .amsgrad = true},
      {.lr = 0.01, .weight_decay = 0.1, .maximize = true},
  };
  for (std::size_t c = 0; c < cases.size(); ++c) {
    CAPTURE(c);
    const AdamOptions& o = cases[c];
    Tensor a = param({4, 3}), b = param({2});
    AdamW opt({a, b}, o);
    RefAdam r{o, true};
    run_against(opt, {a, b}, std::vector<RefAdam>{r, r}, 4, 1e-12, 1e-13);
  }
  // AdamW's decay differs from Adam's L2 term: same options, different results.
  manual_seed(5);
  Tensor p1 = param({8});
  Tensor p2 = p1.detach().clone();
  p2.requires_grad_(true);
  Adam adam({p1}, {.lr = 0.1, .weight_decay = 0.5});
  AdamW adamw({p2}, {.lr = 0.1, .weight_decay = 0.5});
  for (int s = 0; s < 2; ++s) {
    Tensor g = grad_like(p1);
    p1.set_grad(g);
    p2.set_grad(g);
    adam.step();
    adamw.step();
  }
  CHECK_FALSE(testing::allclose(p1, p2));
}

// ---------------------------------------------------------------------------------------
// Shared behaviour
// ---------------------------------------------------------------------------------------

TEST_CASE("optimizers: parameters of several shapes and dtypes in one optimizer") {
  manual_seed(6);
  Tensor a = param({2, 3, 4}, DType::f64), b = param({5}, DType::f32), c = param({3, 3}, DType::bf16),
         d = param({}, DType::f32), e = param({0, 3}, DType::f64);
  SGDOptions so{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  {
    SGD opt({a, b, c, d, e}, so);
    std::vector<V> values;
    std::vector<RefSGD> refs(5, RefSGD{so});
    std::vector<Tensor> ps = {a, b, c, d, e};
    for (const Tensor& p : ps) values.push_back(host(p));
    for (int s = 0; s < 3; ++s) {
      for (std::size_t k = 0; k < ps.size(); ++k) {
        ps[k].set_grad(grad_like(ps[k]));
        refs[k].step(values[k], host(ps[k].grad()));
      }
      opt.step();
      check_values(host(a), values[0], 1e-12, 1e-12);
      check_values(host(b), values[1], 1e-5, 1e-5);
      // bf16 parameters compute in f32 but store 8-bit mantissas (and so does the buffer)
      check_values(host(c), values[2], 2e-2, 2e-2);
      check_values(host(d), values[3], 1e-5, 1e-5);
      CHECK(host(e).empty());
    }
  }
  // bf16 Adam: one step from known values against the f64 formula, to bf16 precision.
  Tensor h = Tensor::from_vector(std::vector<double>{0.5, -1.25, 2.0, 3.0}).to(DType::bf16);
  h.requires_grad_(true);
  Adam adam({h}, {.lr = 0.1});
  h.set_grad(Tensor::from_vector(std::vector<double>{0.25, -0.5, 1.0, 0.0}).to(DType::bf16));
  adam.step();
  // first Adam step: p -= lr * g / (|g| + eps') = p - 0.1 sign(g)
  check_values(host(h), {0.4, -1.15, 1.9, 3.0}, 8e-3, 1e-6);
  CHECK(h.dtype() == DType::bf16);
}

TEST_CASE("optimizers: parameters without a gradient are skipped; their state starts on their first update") {
  manual_seed(7);
  Tensor a = param({4}), b = param({3});
  SGDOptions o{.lr = 0.1, .momentum = 0.9};
  SGD opt({a, b}, o);
  RefSGD ra{o}, rb{o};
  V va = host(a), vb = host(b);
  std::uint64_t vb_version = b.storage().version();
  // step 1 and 2: only a has a gradient
  for (int s = 0; s < 2; ++s) {
    a.set_grad(grad_like(a));
    ra.step(va, host(a.grad()));
    opt.step();
    check_values(host(a), va, 1e-12, 1e-12);
    check_values(host(b), vb, 0, 0);
  }
  CHECK(b.storage().version() == vb_version);
  // step 3: b gets its first gradient: its buffer starts as that gradient (b = g)
  a.set_grad(grad_like(a));
  b.set_grad(grad_like(b));
  ra.step(va, host(a.grad()));
  rb.step(vb, host(b.grad()));
  opt.step();
  check_values(host(a), va, 1e-12, 1e-12);
  check_values(host(b), vb, 1e-12, 1e-12);
  CHECK(b.storage().version() > vb_version);
  // step 4: both with momentum
  a.set_grad(grad_like(a));
  b.set_grad(grad_like(b));
  ra.step(va, host(a.grad()));
  rb.step(vb, host(b.grad()));
  opt.step();
  check_values(host(a), va, 1e-12, 1e-12);
  check_values(host(b), vb, 1e-12, 1e-12);

  // Adam: a parameter without a gradient keeps its value.
  Tensor c = param({2}), d = param({2});
  V vd = host(d);
  Adam adam({c, d});
  c.set_grad(grad_like(c));
  adam.step();
  check_values(host(d), vd, 0, 0);
}

TEST_CASE("optimizers: non-contiguous and other-dtype gradients are used as values") {
  manual_seed(8);
  Tensor p = param({3, 2});
  Tensor gt = randn({2, 3}, {.dtype = DType::f64});
  Tensor g = gt.t();  // [3, 2], not contiguous
  CHECK_FALSE(g.is_contiguous());
  V expected = host(p);
  V gv = host(g);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] -= 0.5 * gv[i];
  SGD opt({p}, {.lr = 0.5});
  p.set_grad(g);
  opt.step();
  check_values(host(p), expected, 1e-14, 1e-14);
  // an expanded (stride-0) gradient, as sum()'s backward leaves it
  Tensor q = param({4});
  V qe = host(q);
  q.set_grad(full({}, 2.0, {.dtype = DType::f64}).expand({4}));
  SGD opt2({q}, {.lr = 0.25});
  opt2.step();
  for (double& x : qe) x -= 0.5;
  check_values(host(q), qe, 1e-15, 1e-15);
}

TEST_CASE("optimizers: a training loop on a least-squares problem converges") {
  manual_seed(9);
  Tensor x = randn({64, 3}, {.dtype = DType::f64});
  Tensor w_true = Tensor::from_vector(std::vector<double>{1.5, -2.0, 0.5}, {1, 3});
  Tensor y = sum(x * w_true, {1});
  for (int which = 0; which < 3; ++which) {
    CAPTURE(which);
    Tensor w = zeros({1, 3}, {.dtype = DType::f64, .requires_grad = true});
    std::unique_ptr<optim::Optimizer> opt;
    if (which == 0) opt = std::make_unique<SGD>(std::vector<Tensor>{w}, SGDOptions{.lr = 0.1, .momentum = 0.9});
    if (which == 1) opt = std::make_unique<Adam>(std::vector<Tensor>{w}, AdamOptions{.lr = 0.1});
    if (which == 2) opt = std::make_unique<AdamW>(std::vector<Tensor>{w}, AdamOptions{.lr = 0.1, .weight_decay = 0});
    double first = 0, last = 0;
    for (int s = 0; s < 200; ++s) {
      opt->zero_grad();
      Tensor r = sum(x * w, {1}) - y;
      Tensor loss = mean(r * r);
      loss.backward();
      opt->step();
      if (s == 0) first = loss.item<double>();
      last = loss.item<double>();
    }
    CHECK(last < 1e-3 * first);
    check_values(host(w), {1.5, -2.0, 0.5}, 1e-2, 1e-2);
  }
}

TEST_CASE("optimizers: a step bumps each updated parameter's version and is not recorded") {
  manual_seed(10);
  Tensor p = param({3});
  std::uint64_t v0 = p.storage().version();
  SGD opt({p}, {.lr = 0.1});
  p.set_grad(grad_like(p));
  opt.step();
  CHECK(p.storage().version() == v0 + 1);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  CHECK(p.grad_fn() == nullptr);
  // a saved tensor of p is stale after the step: backward through it is refused
  Tensor y = (p * p).sum();
  p.set_grad(grad_like(p));
  opt.step();
  CHECK_BRRR_ERROR(y.backward(), ErrorKind::autograd);
}

TEST_CASE("optimizers: set_lr takes effect at the next step") {
  Tensor p = Tensor::from_vector(std::vector<double>{0.0});
  p.requires_grad_(true);
  SGD opt({p}, {.lr = 1.0});
  opt.set_lr(0.25);
  CHECK(opt.lr() == 0.25);
  p.set_grad(Tensor::from_vector(std::vector<double>{1.0}));
  opt.step();
  check_values(host(p), {-0.25}, 0, 1e-15);
}

TEST_CASE("zero_grad: set to none by default, zeroed in place otherwise") {
  manual_seed(11);
  Tensor a = param({3}), b = param({2, 2}), c = param({2});
  SGD opt({a, b, c});
  a.set_grad(grad_like(a));
  b.set_grad(grad_like(b));
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(b.grad().defined());
  CHECK_FALSE(c.grad().defined());

  a.set_grad(grad_like(a));
  b.set_grad(full({}, 3.0, {.dtype = DType::f64}).expand({2, 2}));  // an expanded gradient
  Tensor ga = a.grad();
  std::uint64_t v = ga.storage().version();
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().storage().is_same(ga.storage()));  // in place: same storage
  CHECK(ga.storage().version() > v);
  check_values(host(a.grad()), {0, 0, 0}, 0, 0);
  check_values(host(b.grad()), {0, 0, 0, 0}, 0, 0);
  CHECK_FALSE(c.grad().defined());

  // a gradient recorded by create_graph is detached before it is zeroed
  Tensor x = param({2});
  Tensor y = (x * x * x).sum();
  y.backward({}, false, true);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().requires_grad());
  SGD ox({x});
  ox.zero_grad(false);
  CHECK_FALSE(x.grad().requires_grad());
  check_values(host(x.grad()), {0, 0}, 0, 0);
}

}  // TEST_SUITE("optim")
