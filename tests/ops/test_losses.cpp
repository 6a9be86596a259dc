// Losses on the CPU: cross_entropy / nll_loss (reductions, ignore_index, all ignored, label
// smoothing against the hand formula, i32 targets, [C] and [N, C, d] inputs, -inf logits,
// second derivatives), mse_loss (broadcast target), binary_cross_entropy_with_logits (with and
// without pos_weight, extreme logits, the exact gradient at 0); gradients against central
// differences; error kinds and messages.
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
// cross_entropy / nll_loss
// ---------------------------------------------------------------------------------------

TEST_CASE("cross_entropy values: reductions, ignore_index, label smoothing") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t n = 9, c = 6;
  V lv = normal_values(rng, n * c, 2.0);
  std::vector<std::int64_t> t = random_targets(rng, n, c);
  t[2] = -100;
  t[5] = -100;
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor logits = make(dtype, lv, {n, c});
    V xv = values(logits);
    for (double e : {0.0, 0.1, 1.0}) {
      INFO(to_string(dtype), " label_smoothing ", e);
      CeRef r = ref_cross_entropy(xv, n, c, t, -100, e);
      Tol tol = dtype == DType::f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-5};
      Tensor target = Tensor::from_vector(t);
      Tensor none = cross_entropy(logits, target, {.reduction = Reduction::none, .label_smoothing = e});
      CHECK(none.shape() == Shape{n});
      CHECK(none.dtype() == dtype);
      check_close(values(none), r.per_sample, tol.rtol, tol.atol);
      Tensor s = cross_entropy(logits, target, {.reduction = Reduction::sum, .label_smoothing = e});
      CHECK(s.shape() == Shape{});
      check_close(values(s), {sum_of(r.per_sample)}, tol.rtol, tol.atol);
      Tensor m = cross_entropy(logits, target, {.label_smoothing = e});
      check_close(values(m), {sum_of(r.per_sample) / static_cast<double>(r.counted)}, tol.rtol, tol.atol);
    }
  }
  // label smoothing by hand: logits [0, 0] (uniform), target 0: nll = ln 2, smooth = ln 2.
  Tensor l2 = zeros({1, 2}, {.dtype = DType::f64});
  check_close(values(cross_entropy(l2, i64_tensor({0}), {.label_smoothing = 0.3})), {std::log(2.0)}, 1e-15, 1e-15);
  // logits [ln 1, ln 3] -> p = [1/4, 3/4]; target 1: (1-e) (-ln 3/4) + e (-(ln 1/4 + ln 3/4) / 2)
  Tensor l3 = make(DType::f64, {0, std::log(3.0)}, {1, 2});
  double e = 0.2;
  double want = (1 - e) * -std::log(0.75) + e * -(std::log(0.25) + std::log(0.75)) / 2;
  check_close(values(cross_entropy(l3, i64_tensor({1}), {.label_smoothing = e})), {want}, 1e-14, 1e-15);
}

TEST_CASE("cross_entropy: ignore_index inside the class range, i32 targets, [C] and [N, C, d] inputs") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t n = 5, c = 4;
  V lv = normal_values(rng, n * c);
  Tensor logits = make(DType::f64, lv, {n, c});
  std::vector<std::int64_t> t = {0, 1, 2, 0, 3};
  // ignore_index = 0 ignores samples 0 and 3.
  CeRef r = ref_cross_entropy(lv, n, c, t, 0, 0.0);
  CHECK(r.counted == 3);
  check_close(values(cross_entropy(logits, Tensor::from_vector(t), {.ignore_index = 0})),
              {sum_of(r.per_sample) / 3.0}, 1e-12, 1e-12);
  // i32 targets give the same.
  std::vector<std::int32_t> t32(t.begin(), t.end());
  check_close(values(cross_entropy(logits, Tensor::from_vector(t32), {.reduction = Reduction::none, .ignore_index = 0})),
              r.per_sample, 1e-12, 1e-12);
  // [C] logits with a 0-d target.
  Tensor one = logits.select(0, 2);
  Tensor t0 = full({}, 2.0, {.dtype = DType::i64});
  CeRef r1 = ref_cross_entropy(V(lv.begin() + 8, lv.begin() + 12), 1, c, {2}, -100, 0.0);
  Tensor l1 = cross_entropy(one, t0, {.reduction = Reduction::none});
  CHECK(l1.shape() == Shape{});
  check_close(values(l1), r1.per_sample, 1e-12, 1e-12);
  check_close(values(cross_entropy(one, t0)), r1.per_sample, 1e-12, 1e-12);
  // [N, C, d]: class dim 1, target [N, d]; equals the [N*d, C] problem.
  const std::int64_t d = 3;
  V kv = normal_values(rng, n * c * d);
  Tensor k = make(DType::f64, kv, {n, c, d});
  std::vector<std::int64_t> kt = random_targets(rng, n * d, c);
  kt[4] = -100;
  Tensor flat = k.permute({0, 2, 1}).reshape({n * d, c});
  CeRef rk = ref_cross_entropy(values(flat), n * d, c, kt, -100, 0.1);
  Tensor lk = cross_entropy(k, Tensor::from_vector(kt, {n, d}), {.reduction = Reduction::none, .label_smoothing = 0.1});
  CHECK(lk.shape() == Shape{n, d});
  check_close(values(lk), rk.per_sample, 1e-12, 1e-12);
}

TEST_CASE("cross_entropy with every target ignored: NaN mean with zero gradient, 0 sum") {
  manual_seed(3);
  Tensor logits = randn({4, 3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor target = i64_tensor({-100, -100, -100, -100});
  Tensor m = cross_entropy(logits, target);
  CHECK(std::isnan(m.item<double>()));
  m.backward();
  check_close(values(logits.grad()), V(12, 0.0), 0, 0);
  CHECK(cross_entropy(logits, target, {.reduction = Reduction::sum}).item<double>() == 0.0);
  check_close(values(cross_entropy(logits, target, {.reduction = Reduction::none})), V(4, 0.0), 0, 0);
  // f32 and label smoothing too.
  Tensor lf = randn({2, 5}, {.requires_grad = true});
  Tensor mf = cross_entropy(lf, i64_tensor({7, 7}), {.ignore_index = 7, .label_smoothing = 0.2});
  CHECK(std::isnan(mf.item<float>()));
  mf.backward();
  check_close(values(lf.grad()), V(10, 0.0), 0, 0);
  // No samples at all.
  CHECK(std::isnan(cross_entropy(zeros({0, 3}), zeros({0}, {.dtype = DType::i64})).item<float>()));
}

TEST_CASE("cross_entropy with -inf logits off the target stays finite") {
  // Masked logits (e.g. attention-style -inf) must not produce 0 * -inf = NaN in the pick.
  Tensor logits = make(DType::f64, {0, -inf, 1, 2, -inf, 0}, {2, 3}).requires_grad_();
  Tensor target = i64_tensor({0, 0});
  Tensor l = cross_entropy(logits, target, {.reduction = Reduction::none});
  double l0 = -(0 - std::log(1 + std::exp(1.0)));
  double l1 = -(2 - std::log(std::exp(2.0) + 1.0));
  check_close(values(l), {l0, l1}, 1e-12, 1e-12);
  sum(l).backward();
  V g = values(logits.grad());
  for (double v : g) CHECK(std::isfinite(v));
  check_close({g[1], g[4]}, {0, 0}, 0, 0);
}

TEST_CASE("cross_entropy: second derivatives (create_graph) match finite differences") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = make(DType::f64, normal_values(rng, 12), {4, 3});
  Tensor target = i64_tensor({2, -100, 0, 1});
  Tensor w = make(DType::f64, normal_values(rng, 12), {4, 3});
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    INFO("reduction ", static_cast<int>(red));
    // f(x) = sum(w * d loss / d x): its gradient is the Hessian-vector product H w.
    auto f = [&](const std::vector<Tensor>& in) {
      GradModeGuard on(true);  // gradcheck evaluates f under no_grad for the differences
      Tensor loss = cross_entropy(in[0], target, {.reduction = red, .label_smoothing = 0.2});
      Tensor g = autograd::grad({red == Reduction::none ? sum(loss) : loss}, {in[0]}, {}, true, true)[0];
      return sum(mul(g, w));
    };
    CHECK(autograd::gradcheck(f, {x}));
  }
}

TEST_CASE("cross_entropy under create_graph: all ignored stays finite, bf16/f16 gradients keep their dtype") {
  Tensor x = randn({3, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor ignored = i64_tensor({-100, -100, -100});
  Tensor g = autograd::grad({cross_entropy(x, ignored, {.label_smoothing = 0.1})}, {x}, {}, true, true)[0];
  check_close(values(g), V(12, 0.0), 0, 0);
  sum(g).backward();  // the second derivative: zeros, not 0 * inf = NaN
  check_close(values(x.grad()), V(12, 0.0), 0, 0);
  for (DType dt : {DType::f16, DType::bf16}) {
    Tensor h = randn({2, 3}).to(dt).requires_grad_();
    Tensor gh = autograd::grad({cross_entropy(h, i64_tensor({0, 2}))}, {h}, {}, true, true)[0];
    CHECK(gh.dtype() == dt);
    Tensor plain = randn({2, 3}).to(dt).requires_grad_();
    cross_entropy(plain, i64_tensor({0, 2})).backward();
    CHECK(plain.grad().dtype() == dt);
  }
}

TEST_CASE("nll_loss on log-probabilities") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  V lp = normal_values(rng, 12);
  Tensor x = make(DType::f64, lp, {4, 3});
  std::vector<std::int64_t> t = {2, -100, 0, 1};
  V per = {-lp[2], 0, -lp[6], -lp[10]};
  check_close(values(nll_loss(x, Tensor::from_vector(t), {.reduction = Reduction::none})), per, 1e-15, 0);
  check_close(values(nll_loss(x, Tensor::from_vector(t))), {sum_of(per) / 3}, 1e-14, 1e-15);
  check_close(values(nll_loss(x, Tensor::from_vector(t), {.reduction = Reduction::sum})), {sum_of(per)}, 1e-14, 1e-15);
  // cross_entropy is nll_loss of log_softmax.
  Tensor tt = Tensor::from_vector(t);
  check_close(values(cross_entropy(x, tt)), values(nll_loss(log_softmax(x, 1), tt)), 1e-15, 1e-15);
  CHECK_BRRR_ERROR(nll_loss(x, tt, {.label_smoothing = 0.1}), ErrorKind::value, "nll_loss", "label_smoothing");
}

TEST_CASE("cross_entropy and nll_loss gradients (gradcheck)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  std::mt19937_64 rng(seed);
  Tensor logits = randn({6, 5}, {.dtype = DType::f64});
  std::vector<std::int64_t> tv = random_targets(rng, 6, 5);
  tv[1] = -100;
  tv[4] = 3;
  Tensor target = Tensor::from_vector(tv);
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    for (double e : {0.0, 0.25}) {
      INFO("reduction ", static_cast<int>(red), " label_smoothing ", e);
      CrossEntropyOptions o{.reduction = red, .label_smoothing = e};
      CHECK(autograd::gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target, o); },
                                {logits}));
    }
  }
  std::vector<std::int64_t> tv3 = tv;
  tv3[1] = 0;  // -100 is an ordinary (out-of-range) target when ignore_index is 3
  Tensor target3 = Tensor::from_vector(tv3);
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], target3, {.ignore_index = 3}); }, {logits}));
  CHECK(autograd::gradcheck([&](const std::vector<Tensor>& in) { return nll_loss(log_softmax(in[0], 1), target); },
                            {logits}));
  // [C] input and [N, C, d] input.
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], full({}, 1.0, {.dtype = DType::i64})); },
      {randn({4}, {.dtype = DType::f64})}));
  Tensor kt = Tensor::from_vector(std::vector<std::int64_t>{0, 2, -100, 1, 1, 0}, {2, 3});
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(in[0], kt, {.label_smoothing = 0.1}); },
      {randn({2, 3, 3}, {.dtype = DType::f64})}));
}

TEST_CASE("cross_entropy gradient by hand: softmax - one_hot, over the count") {
  Tensor logits = make(DType::f64, {0, std::log(3.0), 1, 1}, {2, 2}).requires_grad_();
  cross_entropy(logits, i64_tensor({1, 0})).backward();
  // p = [[1/4, 3/4], [1/2, 1/2]]; (p - onehot) / 2
  check_close(values(logits.grad()), {0.125, -0.125, -0.25, 0.25}, 1e-14, 1e-15);
}

TEST_CASE("cross_entropy / nll_loss errors") {
  Tensor logits = zeros({3, 4});
  CHECK_BRRR_ERROR(cross_entropy(logits, zeros({3})), ErrorKind::dtype, "cross_entropy", "target", "f32");
  CHECK_BRRR_ERROR(cross_entropy(logits, i64_tensor({0, 1})), ErrorKind::shape, "cross_entropy", "[2]", "[3, 4]");
  CHECK_BRRR_ERROR(cross_entropy(logits, i64_tensor({0, 1, 2}, {3, 1})), ErrorKind::shape, "cross_entropy", "[3, 1]");
  CHECK_BRRR_ERROR(cross_entropy(logits, i64_tensor({0, 4, 1})), ErrorKind::index, "cross_entropy", "target 4", "4 classes");
  CHECK_BRRR_ERROR(cross_entropy(logits, i64_tensor({0, -1, 1})), ErrorKind::index, "cross_entropy", "target -1");
  CHECK_BRRR_ERROR(nll_loss(logits, Tensor::from_vector(std::vector<std::int32_t>{9, 0, 0})), ErrorKind::index,
                   "nll_loss", "target 9");
  CHECK_BRRR_ERROR(cross_entropy(logits, i64_tensor({0, 0, 0}), {.label_smoothing = 1.5}), ErrorKind::value,
                   "label_smoothing");
  CHECK_BRRR_ERROR(cross_entropy(full({}, 1.0), full({}, 0.0, {.dtype = DType::i64})), ErrorKind::shape, "cross_entropy");
  CHECK_BRRR_ERROR(cross_entropy(arange(12).view({3, 4}), i64_tensor({0, 0, 0})), ErrorKind::dtype, "cross_entropy",
                   "i64");
  CHECK_BRRR_ERROR(cross_entropy(zeros({4}), i64_tensor({1})), ErrorKind::shape, "cross_entropy", "[1]", "[4]");
}

// ---------------------------------------------------------------------------------------
// mse_loss
// ---------------------------------------------------------------------------------------

TEST_CASE("mse_loss values, reductions and broadcast target") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  V a = normal_values(rng, 12), b = normal_values(rng, 12), row = normal_values(rng, 4);
  Tensor x = make(DType::f64, a, {3, 4});
  V sq(12), sqb(12);
  for (std::size_t i = 0; i < 12; ++i) {
    sq[i] = (a[i] - b[i]) * (a[i] - b[i]);
    sqb[i] = (a[i] - row[i % 4]) * (a[i] - row[i % 4]);
  }
  Tensor y = make(DType::f64, b, {3, 4});
  check_close(values(mse_loss(x, y, Reduction::none)), sq, 1e-15, 0);
  check_close(values(mse_loss(x, y)), {sum_of(sq) / 12}, 1e-14, 1e-15);
  check_close(values(mse_loss(x, y, Reduction::sum)), {sum_of(sq)}, 1e-14, 1e-15);
  Tensor r = make(DType::f64, row, {4});
  check_close(values(mse_loss(x, r)), {sum_of(sqb) / 12}, 1e-14, 1e-15);
  check_close(values(mse_loss(make(DType::f32, a, {3, 4}), make(DType::f32, b, {3, 4}))), {sum_of(sq) / 12}, 1e-5, 1e-6);
  CHECK(std::isnan(mse_loss(zeros({0}), zeros({0})).item<float>()));
  CHECK_BRRR_ERROR(mse_loss(zeros({3}), zeros({4})), ErrorKind::shape, "mse_loss", "[3]", "[4]");
  CHECK_BRRR_ERROR(mse_loss(arange(3), arange(3)), ErrorKind::dtype, "mse_loss");
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1]); }, {x, r}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], Reduction::none); },
                            {x, y}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return mse_loss(in[0], in[1], Reduction::sum); },
                            {x, y}));
}

// ---------------------------------------------------------------------------------------
// binary_cross_entropy_with_logits
// ---------------------------------------------------------------------------------------

namespace {
// PyTorch's formulas, in double.
double bce_ref(double x, double t) { return std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::abs(x))); }
double bce_ref_pw(double x, double t, double p) {
  return (1 - t) * x + (1 + (p - 1) * t) * (std::log1p(std::exp(-std::abs(x))) + std::max(-x, 0.0));
}
}  // namespace

TEST_CASE("binary_cross_entropy_with_logits values, pos_weight, extreme logits") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const std::int64_t n = 4, c = 3;
  V xv = normal_values(rng, n * c, 4.0), tv(n * c), pv(c);
  for (auto& t : tv) t = u(rng);
  for (auto& p : pv) p = 0.5 + 2 * u(rng);
  xv[0] = 100;
  xv[1] = -100;
  xv[2] = 0;
  V want(n * c), want_pw(n * c);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    want[i] = bce_ref(xv[i], tv[i]);
    want_pw[i] = bce_ref_pw(xv[i], tv[i], pv[i % c]);
  }
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(to_string(dtype));
    Tensor x = make(dtype, xv, {n, c}), t = make(dtype, tv, {n, c}), p = make(dtype, pv, {c});
    Tol tol = dtype == DType::f64 ? Tol{1e-13, 1e-14} : Tol{1e-5, 2e-5};
    V w = want, wp = want_pw;
    if (dtype == DType::f32) {  // reference from the f32-rounded inputs
      V x32 = values(x), t32 = values(t), p32 = values(p);
      for (std::size_t i = 0; i < xv.size(); ++i) {
        w[i] = bce_ref(x32[i], t32[i]);
        wp[i] = bce_ref_pw(x32[i], t32[i], p32[i % c]);
      }
    }
    check_close(values(binary_cross_entropy_with_logits(x, t, Reduction::none)), w, tol.rtol, tol.atol);
    check_close(values(binary_cross_entropy_with_logits(x, t)), {sum_of(w) / 12}, tol.rtol, tol.atol);
    check_close(values(binary_cross_entropy_with_logits(x, t, Reduction::sum)), {sum_of(w)}, tol.rtol, tol.atol);
    check_close(values(binary_cross_entropy_with_logits(x, t, Reduction::none, p)), wp, tol.rtol, tol.atol);
    check_close(values(binary_cross_entropy_with_logits(x, t, Reduction::mean, p)), {sum_of(wp) / 12}, tol.rtol,
                tol.atol);
  }
  // Extreme logits stay finite: x = 100, t = 0 -> 100; x = -100, t = 1 -> 100.
  check_close(values(binary_cross_entropy_with_logits(make(DType::f32, {100, -100}), make(DType::f32, {0, 1}),
                                                      Reduction::none)),
              {100, 100}, 1e-6, 0);
}

TEST_CASE("binary_cross_entropy_with_logits gradients") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor x = randn({4, 3}, {.dtype = DType::f64}) * 3.0;
  Tensor t = rand({4, 3}, {.dtype = DType::f64});
  Tensor p = rand({3}, {.dtype = DType::f64}) * 2.0 + 0.5;
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    INFO("reduction ", static_cast<int>(red));
    CHECK(autograd::gradcheck(
        [red](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], red); }, {x, t}));
    CHECK(autograd::gradcheck(
        [red](const std::vector<Tensor>& in) { return binary_cross_entropy_with_logits(in[0], in[1], red, in[2]); },
        {x, t, p}));
  }
  // At x = 0 the gradient is sigmoid(0) - t = 0.5 - t exactly (the max/abs kinks do not leak).
  Tensor x0 = zeros({3}, {.dtype = DType::f64, .requires_grad = true});
  binary_cross_entropy_with_logits(x0, make(DType::f64, {0, 0.25, 1}), Reduction::sum).backward();
  check_close(values(x0.grad()), {0.5, 0.25, -0.5}, 1e-15, 0);
  // With pos_weight p at x = 0: L/2 - p t, L = 1 + (p - 1) t.
  Tensor x1 = zeros({2}, {.dtype = DType::f64, .requires_grad = true});
  binary_cross_entropy_with_logits(x1, make(DType::f64, {1, 0.5}), Reduction::sum, make(DType::f64, {3, 3})).backward();
  check_close(values(x1.grad()), {3.0 / 2 - 3, 2.0 / 2 - 1.5}, 1e-15, 0);
}

TEST_CASE("binary_cross_entropy_with_logits errors") {
  CHECK_BRRR_ERROR(binary_cross_entropy_with_logits(zeros({3}), zeros({4})), ErrorKind::shape,
                   "binary_cross_entropy_with_logits", "[4]", "[3]");
  CHECK_BRRR_ERROR(binary_cross_entropy_with_logits(zeros({2, 3}), zeros({2, 3}), Reduction::mean, zeros({2})),
                   ErrorKind::shape, "pos_weight", "[2]");
  CHECK_BRRR_ERROR(binary_cross_entropy_with_logits(zeros({3}), arange(3)), ErrorKind::dtype,
                   "binary_cross_entropy_with_logits", "i64");
}
