// Softmax family and losses on the CPU: softmax / log_softmax (values against a float64
// reference computed here, along every dim, contiguous and non-contiguous, infinities and
// large logits, 0-d and zero-size, every floating dtype), cross_entropy / nll_loss
// (reductions, ignore_index, all ignored, label smoothing against the hand formula, i32
// targets, [C] and [N, C, d] inputs, -inf logits), mse_loss (broadcast target),
// binary_cross_entropy_with_logits (with and without pos_weight, extreme logits, the exact
// gradient at 0), layer_norm (values and statistics, weight/bias optional, dtypes); gradients
// against central differences (autograd::gradcheck), second derivatives of softmax and
// layer_norm; error kinds and messages.
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
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

// NaN matches NaN, infinities must be equal; otherwise |got - want| <= atol + rtol |want|.
void check_close(const V& got, const V& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", want ", want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType d) {
  switch (d) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f32: return {1e-5, 1e-6};
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1.6e-2, 1e-2};
    case DType::i32: case DType::i64: case DType::boolean: break;
  }
  return {0, 0};
}

// softmax / log_softmax of row-major `x` of `shape` along `dim`, in double.
V ref_softmax(const V& x, const Shape& shape, std::int64_t dim, bool log) {
  const std::int64_t nd = static_cast<std::int64_t>(shape.size());
  if (nd == 0) return {log ? 0.0 : 1.0};
  if (dim < 0) dim += nd;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (std::int64_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  const std::int64_t len = shape[dim];
  V y(x.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * len + k) * inner + i); };
      double m = -inf;
      for (std::int64_t k = 0; k < len; ++k) m = std::max(m, x[at(k)]);
      double s = 0;
      for (std::int64_t k = 0; k < len; ++k) s += std::exp(x[at(k)] - m);
      for (std::int64_t k = 0; k < len; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return y;
}

// Per-sample cross entropy of logits [N, C] (row-major) with label smoothing e; ignored
// samples give 0 and are flagged in `counted`.
struct CeRef {
  V per_sample;
  std::int64_t counted = 0;
};
CeRef ref_cross_entropy(const V& logits, std::int64_t n, std::int64_t c, const std::vector<std::int64_t>& target,
                        std::int64_t ignore, double e) {
  CeRef r;
  V lp = ref_softmax(logits, {n, c}, 1, true);
  for (std::int64_t i = 0; i < n; ++i) {
    if (target[static_cast<std::size_t>(i)] == ignore) {
      r.per_sample.push_back(0.0);
      continue;
    }
    ++r.counted;
    double nll = -lp[static_cast<std::size_t>(i * c + target[static_cast<std::size_t>(i)])];
    double smooth = 0;
    for (std::int64_t k = 0; k < c; ++k) smooth -= lp[static_cast<std::size_t>(i * c + k)];
    smooth /= static_cast<double>(c);
    r.per_sample.push_back((1 - e) * nll + e * smooth);
  }
  return r;
}

double sum_of(const V& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

Tensor i64_tensor(const std::vector<std::int64_t>& v, Shape shape = {}) { return Tensor::from_vector(v, std::move(shape)); }

std::vector<std::int64_t> random_targets(std::mt19937_64& rng, std::int64_t n, std::int64_t c) {
  std::uniform_int_distribution<std::int64_t> dist(0, c - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// softmax / log_softmax
// ---------------------------------------------------------------------------------------

TEST_CASE("softmax and log_softmax match a float64 reference along every dim and dtype") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::vector<Shape> shapes = {{7}, {3, 5}, {4, 1, 6}, {2, 3, 4, 5}, {3, 1500}, {2, 33}};
  for (const Shape& shape : shapes) {
    for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      V raw = normal_values(rng, numel_of(shape), 3.0);
      Tensor x = make(dtype, raw, shape);
      V xv = values(x);  // the values as the dtype holds them
      const std::int64_t nd = static_cast<std::int64_t>(shape.size());
      for (std::int64_t dim = -nd; dim < nd; ++dim) {
        for (bool log : {false, true}) {
          INFO("shape ", to_string(shape), " ", to_string(dtype), " dim ", dim, log ? " log_softmax" : " softmax");
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          CHECK(y.shape() == shape);
          CHECK(y.dtype() == dtype);
          Tol t = tol_for(dtype);
          check_close(values(y), ref_softmax(xv, shape, dim, log), t.rtol, t.atol);
        }
      }
    }
  }
}

TEST_CASE("softmax of non-contiguous inputs: transposed, sliced, expanded") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor base = make(DType::f64, normal_values(rng, 6 * 8), {6, 8});
  {
    Tensor xt = base.t();  // [8, 6], strides [1, 8]
    CHECK_FALSE(xt.is_contiguous());
    V xv = values(xt);
    for (std::int64_t dim : {0, 1}) {
      check_close(values(softmax(xt, dim)), ref_softmax(xv, {8, 6}, dim, false), 1e-12, 1e-12);
      check_close(values(log_softmax(xt, dim)), ref_softmax(xv, {8, 6}, dim, true), 1e-12, 1e-12);
    }
  }
  {
    Tensor xs = base.slice(1, 1, 8, 2);  // [6, 4] every other column
    V xv = values(xs);
    for (std::int64_t dim : {0, 1}) check_close(values(softmax(xs, dim)), ref_softmax(xv, {6, 4}, dim, false), 1e-12, 1e-12);
  }
  {
    Tensor row = make(DType::f32, normal_values(rng, 5), {1, 5});
    Tensor xe = row.expand({3, 5});  // stride 0 rows
    V xv = values(xe);
    check_close(values(softmax(xe, 1)), ref_softmax(xv, {3, 5}, 1, false), 1e-6, 1e-7);
    check_close(values(softmax(xe, 0)), V(15, 1.0 / 3.0), 1e-6, 1e-7);
  }
}

TEST_CASE("softmax with infinities and large logits follows PyTorch") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(to_string(dtype));
    check_close(values(softmax(make(dtype, {-inf, -inf, -inf}))), {nan_v, nan_v, nan_v}, 0, 0);
    check_close(values(log_softmax(make(dtype, {-inf, -inf, -inf}))), {nan_v, nan_v, nan_v}, 0, 0);
    check_close(values(softmax(make(dtype, {0, -inf}))), {1, 0}, 0, 0);
    check_close(values(log_softmax(make(dtype, {0, -inf}))), {0, -inf}, 0, 0);
    check_close(values(softmax(make(dtype, {0, inf}))), {nan_v, nan_v}, 0, 0);
    check_close(values(log_softmax(make(dtype, {0, inf}))), {nan_v, nan_v}, 0, 0);
    check_close(values(softmax(make(dtype, {1, nan_v, 2}))), {nan_v, nan_v, nan_v}, 0, 0);
    // Large logits: max subtracted first, no overflow.
    check_close(values(softmax(make(dtype, {1e4, 1e4 - 1, 0}))),
                {1 / (1 + std::exp(-1.0)), std::exp(-1.0) / (1 + std::exp(-1.0)), 0}, 1e-6, 1e-7);
    check_close(values(log_softmax(make(dtype, {1e4, 0}))), {0, -1e4}, 1e-7, 1e-7);
    check_close(values(softmax(make(dtype, {-1e4, -1e4}))), {0.5, 0.5}, 1e-7, 0);
    // A row of -inf next to a finite row: only that row is NaN.
    check_close(values(softmax(make(dtype, {-inf, -inf, 1, 1}, {2, 2}), 1)), {nan_v, nan_v, 0.5, 0.5}, 1e-7, 0);
  }
}

TEST_CASE("softmax of 0-d, single-element and zero-size tensors") {
  Tensor s = full({}, 3.5, {.dtype = DType::f64});
  CHECK(softmax(s).shape() == Shape{});
  CHECK(softmax(s).item<double>() == 1.0);
  CHECK(log_softmax(s, 0).item<double>() == 0.0);
  CHECK(values(softmax(make(DType::f32, {5}, {1, 1}), 0)) == V{1.0});
  Tensor z = zeros({0, 4});
  CHECK(softmax(z, 1).shape() == Shape{0, 4});
  CHECK(softmax(z, 0).shape() == Shape{0, 4});
  CHECK(log_softmax(zeros({3, 0}), 1).shape() == Shape{3, 0});
}

TEST_CASE("softmax errors") {
  CHECK_BRRR_ERROR(softmax(arange(5)), ErrorKind::dtype, "softmax", "i64");
  CHECK_BRRR_ERROR(log_softmax(arange(5).to(DType::i32)), ErrorKind::dtype, "log_softmax", "i32");
  CHECK_BRRR_ERROR(softmax(zeros({2, 3}), 2), ErrorKind::index, "softmax", "[2, 3]");
  CHECK_BRRR_ERROR(log_softmax(zeros({2, 3}), -3), ErrorKind::index, "log_softmax");
  CHECK_BRRR_ERROR(softmax(Tensor()), ErrorKind::value, "softmax");
}

TEST_CASE("softmax and log_softmax gradients (gradcheck), including second order") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor x = randn({3, 4, 5}, {.dtype = DType::f64});
  for (std::int64_t dim : {0, 1, 2, -1}) {
    INFO("dim ", dim);
    CHECK(autograd::gradcheck([dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x}));
    CHECK(autograd::gradcheck([dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}));
  }
  // Non-contiguous input, and the output feeding further ops.
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0].transpose(0, 2), 1) * 3.0; },
                            {x}));
  // 0-d: the gradient is 0.
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); },
                            {full({}, 0.7, {.dtype = DType::f64})}));
  // Second order: the gradient of <softmax(x), w> is itself differentiable.
  Tensor w = randn({3, 4, 5}, {.dtype = DType::f64});
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    CHECK(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          GradModeGuard on(true);  // gradcheck evaluates f under NoGradGuard for the differences
          Tensor y = log ? log_softmax(in[0], 1) : softmax(in[0], 1);
          return autograd::grad({sum(y * w)}, {in[0]}, {}, true, true)[0];
        },
        {x}));
  }
}

TEST_CASE("softmax backward by hand") {
  // y = softmax([0, ln 3]) = [1/4, 3/4]; with g = [1, 0]: dx = y * (g - <g, y>) = [3/16, -3/16]
  Tensor x = make(DType::f64, {0, std::log(3.0)}).requires_grad_();
  Tensor y = softmax(x);
  (y * make(DType::f64, {1, 0})).sum().backward();
  check_close(values(x.grad()), {3.0 / 16, -3.0 / 16}, 1e-14, 1e-15);
  // log_softmax: dx = g - softmax * sum(g) = [1, 0] - [1/4, 3/4]
  Tensor x2 = make(DType::f64, {0, std::log(3.0)}).requires_grad_();
  (log_softmax(x2) * make(DType::f64, {1, 0})).sum().backward();
  check_close(values(x2.grad()), {0.75, -0.75}, 1e-14, 1e-15);
}

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
