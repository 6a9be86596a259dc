// Issue 17's ops on cuda:0 against the CPU on the same inputs: the new unary/binary math,
// logic and bitwise ops (f32, f64, bf16, f16, integers; contiguous, strided and broadcast),
// all/any, clamp with tensor bounds, the new losses and their gradients, the scans (every op,
// along every dim, one long row and many short ones, 16-bit inputs), sort/argsort/topk/
// kthvalue/median (indices equal to the CPU's: both sorts are stable; NaN, -0.0, ties),
// unique/bincount (one counted sync each), searchsorted, and the samplers (the same seed
// gives the same samples on both devices). Without a CUDA device the suite exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/scan_bound.hpp"

namespace {

using In = std::vector<Tensor>;
using Fn = std::function<Tensor(const In&)>;

using test::gpu;

using test::check_parity;

testing::CloseOptions tol(DType d) {
  switch (d) {
    case DType::bf16: return {.rtol = 1.6e-2, .atol = 1e-3};
    case DType::f16: return {.rtol = 2e-3, .atol = 1e-4};
    case DType::f32: return {.rtol = 1e-5, .atol = 1e-5};
    case DType::f64: return {.rtol = 1e-12, .atol = 1e-12};
    case DType::i32: case DType::i64: case DType::boolean: return {};
  }
  return {};
}

/// test::parity with this suite's per-dtype tolerance (tol) unless `o` sets one.
void parity(const std::string& what, const Fn& f, const In& cpu_in, bool grads = false, testing::CloseOptions o = {}) {
  test::parity(what, f, cpu_in, grads, o, tol);
}

Tensor normal_in(Shape s, DType d = DType::f32) { return randn(std::move(s), {.dtype = DType::f64}).to(d); }
Tensor positive_in(Shape s, DType d = DType::f32) { return add(mul(rand(std::move(s), {.dtype = DType::f64}), 3), 0.2).to(d); }
Tensor unit_in(Shape s, DType d = DType::f32) { return mul(tanh(randn(std::move(s), {.dtype = DType::f64})), 0.9).to(d); }

}  // namespace

TEST_CASE("new unary math: GPU equals CPU in every floating dtype, forward and backward") {
  manual_seed(1);
  using U = Tensor (*)(const Tensor&);
  struct Case { const char* name; U f; int domain; };  // 0 normal, 1 positive, 2 (-0.9, 0.9)
  const Case cases[] = {{"tan", tan, 2}, {"asin", asin, 2}, {"acos", acos, 2}, {"atan", atan, 0}, {"sinh", sinh, 0},
                        {"cosh", cosh, 0}, {"expm1", expm1, 0}, {"log2", log2, 1}, {"log10", log10, 1},
                        {"exp2", exp2, 0}, {"erfc", erfc, 0}, {"erfinv", erfinv, 2}, {"lgamma", lgamma, 1},
                        {"digamma", digamma, 1}, {"reciprocal", reciprocal, 1}, {"square", square, 0},
                        {"floor", floor, 0}, {"ceil", ceil, 0}, {"trunc", trunc, 0}, {"frac", frac, 0}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const Shape s{257, 129};
      Tensor x = c.domain == 0 ? mul(normal_in(s), 2).to(dt) : c.domain == 1 ? positive_in(s, dt) : unit_in(s, dt);
      testing::CloseOptions o = tol(dt);
      if (dt == DType::f32 && (std::string(c.name) == "digamma" || std::string(c.name) == "lgamma")) o = {.rtol = 1e-4, .atol = 1e-5};
      parity(std::string(c.name) + " " + to_string(dt), [f = c.f](const In& i) { return f(i[0]); }, {x},
             dt == DType::f64 || dt == DType::f32, o);
      parity(std::string(c.name) + " transposed " + to_string(dt), [f = c.f](const In& i) { return f(i[0].t()); }, {x},
             false, o);
    }
  Tensor special = Tensor::from_vector(std::vector<double>{NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.5, -2.5, 1e308});
  parity("nan_to_num", [](const In& i) { return nan_to_num(i[0]); }, {special});
  parity("nan_to_num custom", [](const In& i) { return nan_to_num(i[0], 1.0, 2.0, -3.0); }, {special.to(DType::f32)});
  parity("round", [](const In& i) { return round(i[0]); }, {Tensor::from_vector(std::vector<double>{0.5, 1.5, 2.5, -0.5, -1.5})});
  parity("round decimals", [](const In& i) { return round(i[0], 2); }, {mul(normal_in({1000}, DType::f64), 10)});
  parity("erfinv edges", [](const In& i) { return erfinv(i[0]); },
         {Tensor::from_vector(std::vector<double>{-1, 1, 1.5, 0, 0.999999, -0.9999999999})});
  parity("digamma edges", [](const In& i) { return digamma(i[0]); },
         {Tensor::from_vector(std::vector<double>{0.0, -0.0, -1.0, -2.5, 1e-8, 1e8})});
  parity("polygamma 1", [](const In& i) { return polygamma(1, i[0]); }, {positive_in({1000}, DType::f64)});
  parity("isnan/isinf/isfinite", [](const In& i) { return logical_or(isnan(i[0]), logical_xor(isinf(i[0]), isfinite(i[0]))); },
         {special});
}

TEST_CASE("new binary math, logic, bitwise, all/any, clamp with tensors: GPU equals CPU") {
  manual_seed(2);
  using B = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, B> floating[] = {{"atan2", atan2}, {"hypot", hypot}, {"logaddexp", logaddexp},
                                                {"copysign", copysign}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (auto [name, f] : floating)
      parity(std::string(name) + " broadcast " + to_string(dt), [f](const In& i) { return f(i[0], i[1]); },
             {normal_in({65, 33}, dt), normal_in({33}, dt)}, dt == DType::f32 || dt == DType::f64);
  parity("xlogy", [](const In& i) { return xlogy(i[0], i[1]); }, {normal_in({1000}), positive_in({1000})}, true);
  parity("atan2 integers", [](const In& i) { return atan2(i[0], i[1]); },
         {randint(-5, 6, {100}), randint(-5, 6, {100})});
  parity("lerp", [](const In& i) { return lerp(i[0], i[1], i[2]); }, {normal_in({40, 3}), normal_in({3}), normal_in({40, 1})}, true);
  parity("clamp tensors", [](const In& i) { return clamp(i[0], i[1], i[2]); },
         {normal_in({300}), mul(rand({300}), -1.0), rand({300})}, true);
  const std::pair<const char*, B> ints[] = {{"bitwise_and", bitwise_and}, {"bitwise_or", bitwise_or},
                                            {"bitwise_xor", bitwise_xor}, {"bitwise_left_shift", bitwise_left_shift},
                                            {"bitwise_right_shift", bitwise_right_shift}, {"logical_and", logical_and},
                                            {"logical_or", logical_or}, {"logical_xor", logical_xor}};
  for (DType dt : {DType::i32, DType::i64})
    for (auto [name, f] : ints)
      parity(std::string(name) + " " + to_string(dt), [f](const In& i) { return f(i[0], i[1]); },
             {randint(-1000, 1000, {5000}, {.dtype = dt}), randint(-2, 70, {5000}, {.dtype = dt})});
  parity("bitwise_not", [](const In& i) { return bitwise_not(i[0]); }, {randint(-1000, 1000, {5000})});
  parity("all/any dims", [](const In& i) { return logical_and(all(i[0], {1}), any(i[0], {1})); },
         {gt(normal_in({64, 7}), 1.0)});
  parity("all float", [](const In& i) { return all(i[0], {0}, true); }, {randint(0, 3, {5, 300}).to(DType::f32)});
}

TEST_CASE("new losses and options: GPU equals CPU, forward and backward") {
  manual_seed(3);
  Tensor x = normal_in({64, 10}), t = normal_in({64, 10});
  parity("smooth_l1", [](const In& i) { return smooth_l1_loss(i[0], i[1], Reduction::mean, 0.5); }, {x, t}, true);
  parity("huber", [](const In& i) { return huber_loss(i[0], i[1], Reduction::sum, 0.7); }, {x, t}, true);
  parity("l1", [](const In& i) { return l1_loss(i[0], i[1], Reduction::none); }, {x, t}, true);
  parity("kl_div", [](const In& i) { return kl_div(log_softmax(i[0], 1), softmax(i[1], 1)); }, {x, t}, true);
  parity("bce", [](const In& i) { return binary_cross_entropy(sigmoid(i[0]), sigmoid(i[1])); }, {x, t}, true);
  parity("gaussian_nll", [](const In& i) { return gaussian_nll_loss(i[0], i[1], exp(i[0])); }, {x, t}, true);
  parity("poisson_nll", [](const In& i) { return poisson_nll_loss(i[0], abs(i[1])); }, {x, t}, true);
  parity("cosine_embedding", [](const In& i) { return cosine_embedding_loss(i[0], i[1], sign(i[0].narrow(1, 0, 1).reshape({-1}))); },
         {x, t}, true);
  parity("triplet", [](const In& i) { return triplet_margin_loss(i[0], i[1], mul(i[0], 0.5)); }, {x, t}, true);
  Tensor target = randint(0, 10, {64});
  Tensor w = rand({10});
  parity("cross_entropy weight", [target, w](const In& i) {
    return cross_entropy(i[0], target.to(i[0].device()), {.label_smoothing = 0.1, .weight = w.to(i[0].device())});
  }, {x}, true);
  parity("cross_entropy probabilities", [](const In& i) { return cross_entropy(i[0], softmax(i[1], 1)); }, {x, t}, true);
  parity("softmax dtype", [](const In& i) { return softmax(i[0], 1, DType::f32); }, {x.to(DType::f16)});
  parity("var_mean", [](const In& i) { auto [v, m] = var_mean(i[0], {1}); return add(v, m); }, {x}, true);
  parity("vector_norm 3", [](const In& i) { return vector_norm(i[0], 3.0, {1}); }, {x}, true);
}

TEST_CASE("scans: GPU equals CPU for every op, dim and shape") {
  manual_seed(4);
  const std::vector<Shape> shapes = {{1, 1 << 20}, {4096, 37}, {3, 5, 300}, {1}, {0, 4}};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (const Shape& s : shapes)
      for (std::int64_t d = 0; d < static_cast<std::int64_t>(s.size()); ++d) {
        const std::string where = to_string(s) + " dim " + std::to_string(d) + " " + to_string(dt);
        Tensor x = normal_in(s, dt);
        // cumsum/logcumsumexp: both devices within the rounding-error bound of the exact scan
        // (tests/ops/scan_bound.hpp), not a fixed tolerance between CPU and GPU, whose
        // summation orders differ (sequential against CUB's tiles).
        for (test::ScanKind kind : {test::ScanKind::cumsum, test::ScanKind::logcumsumexp}) {
          const bool sum = kind == test::ScanKind::cumsum;
          const std::string what = (sum ? "cumsum " : "logcumsumexp ") + where;
          INFO(what);
          Tensor gx = x.to(gpu());
          Tensor g = sum ? cumsum(gx, d) : logcumsumexp(gx, d), c = sum ? cumsum(x, d) : logcumsumexp(x, d);
          CHECK(g.device() == gpu());
          CHECK(g.dtype() == dt);
          REQUIRE(g.shape() == s);
          const std::string gpu_err = test::scan_bound_violation(g, x, d, kind);
          CHECK_MESSAGE(gpu_err.empty(), "cuda: " << gpu_err);
          const std::string cpu_err = test::scan_bound_violation(c, x, d, kind);
          CHECK_MESSAGE(cpu_err.empty(), "cpu: " << cpu_err);
        }
        parity("cummax " + where, [d](const In& i) { return cummax(i[0], d).values; }, {x});
        parity("cummax indices " + where, [d](const In& i) { return cummax(i[0], d).indices; }, {x});
        parity("cummin indices " + where, [d](const In& i) { return cummin(i[0], d).indices; }, {x});
      }
  parity("cumprod", [](const In& i) { return cumprod(i[0], 1); }, {add(mul(rand({64, 50}, {.dtype = DType::f64}), 0.2), 0.9)}, true);
  // f64: the f32 forward is checked against its bound above; here the backward (a reversed
  // cumsum) is compared at f64's tolerance.
  parity("cumsum grad", [](const In& i) { return cumsum(i[0], 0); }, {normal_in({300, 7}, DType::f64)}, true);
  parity("logcumsumexp grad", [](const In& i) { return logcumsumexp(i[0], 1); }, {normal_in({7, 300}, DType::f64)}, true);
  parity("cumsum i32 -> i64", [](const In& i) { return cumsum(i[0], 0); }, {randint(-100, 100, {100000}, {.dtype = DType::i32})});
  parity("cummax NaN/ties", [](const In& i) { return cummax(i[0], 0).indices; },
         {Tensor::from_vector(std::vector<double>{1, 3, 3, 2, NAN, 5, NAN, 0})});
}

TEST_CASE("sort, topk, kthvalue, median, unique, bincount, searchsorted: GPU equals CPU (indices too)") {
  manual_seed(5);
  for (DType dt : test::all_dtypes)
    for (const Shape& s : std::vector<Shape>{{1 << 18}, {1000, 33}, {7, 5, 64}}) {
      // Few distinct values, so that ties are common: the stable order must agree.
      Tensor x = randint(-20, 20, s).to(dt);
      const std::string where = to_string(s) + " " + to_string(dt);
      for (bool desc : {false, true}) {
        parity("sort values " + where, [desc](const In& i) { return sort(i[0], -1, desc).values; }, {x});
        parity("sort indices " + where, [desc](const In& i) { return sort(i[0], -1, desc).indices; }, {x});
        parity("sort dim 0 indices " + where, [desc](const In& i) { return sort(i[0], 0, desc).indices; }, {x});
      }
    }
  Tensor special = Tensor::from_vector(std::vector<double>{3, -1, NAN, 2, -0.0, 0.0, 2, -INFINITY, INFINITY, NAN});
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    parity(std::string("sort NaN/-0 indices ") + to_string(dt), [](const In& i) { return sort(i[0]).indices; }, {special.to(dt)});
    parity(std::string("sort NaN descending ") + to_string(dt), [](const In& i) { return sort(i[0], 0, true).indices; }, {special.to(dt)});
  }
  Tensor x = normal_in({500, 300});
  parity("topk", [](const In& i) { return topk(i[0], 7, 1).values; }, {x}, true);
  parity("topk indices smallest", [](const In& i) { return topk(i[0], 7, 0, false).indices; }, {x});
  parity("kthvalue", [](const In& i) { return kthvalue(i[0], 5, 1).values; }, {x}, true);
  parity("median", [](const In& i) { return median(i[0], 1).values; }, {x}, true);
  parity("median all", [](const In& i) { return median(i[0]); }, {x});
  Tensor ints = randint(0, 50, {100000});
  parity("unique values", [](const In& i) { return unique(i[0]).values; }, {ints});
  parity("unique inverse", [](const In& i) { return unique(i[0], true, true).inverse; }, {ints});
  parity("unique counts", [](const In& i) { return unique(i[0], true, false, true).counts; }, {ints});
  parity("bincount", [](const In& i) { return bincount(i[0], {}, 60); }, {ints});
  parity("bincount weights", [](const In& i) { return bincount(i[0], i[1]); }, {ints, rand({100000}, {.dtype = DType::f64})});
  Tensor seq = sort(normal_in({4, 1000}), 1).values;
  parity("searchsorted", [](const In& i) { return searchsorted(i[0], i[1]); }, {seq, normal_in({4, 333})});
  parity("searchsorted right 1-D", [](const In& i) { return searchsorted(i[0], i[1], false, true); },
         {Tensor::from_vector(std::vector<double>{1, 2, 2, 3}), Tensor::from_vector(std::vector<double>{2, 0, 5, 2.5})});
}

TEST_CASE("samplers give the same samples on CPU and GPU under one seed") {
  auto same = [](const std::string& what, const std::function<Tensor(Device)>& draw) {
    manual_seed(1234);
    Tensor c = draw(Device::cpu());
    manual_seed(1234);
    Tensor g = draw(gpu());
    check_parity(g, c, what, {.rtol = 0, .atol = 0});
  };
  Tensor p = rand({300, 17});
  same("bernoulli", [&](Device d) { return bernoulli(p.to(d)); });
  same("bernoulli number", [&](Device d) { return bernoulli(zeros({1000}, {.device = d}), 0.3); });
  Tensor w = add(rand({40, 25}, {.dtype = DType::f64}), 0.01);
  same("multinomial with replacement", [&](Device d) { return multinomial(w.to(d), 100, true); });
  same("multinomial without replacement", [&](Device d) { return multinomial(w.to(d), 10, false); });
  manual_seed(99);
  Tensor mc = normal(zeros({1000}, {.dtype = DType::f64}), 2.0);
  manual_seed(99);
  Tensor mg = normal(zeros({1000}, {.dtype = DType::f64, .device = gpu()}), 2.0);
  check_parity(mg, mc, "normal", {.rtol = 1e-12, .atol = 1e-12});
}

TEST_CASE("shape ops and linear algebra: GPU equals CPU, forward and backward") {
  manual_seed(6);
  Tensor m = normal_in({6, 7});
  parity("repeat", [](const In& i) { return repeat(i[0], {2, 1, 3}); }, {m}, true);
  parity("repeat_interleave tensor", [](const In& i) {
    return repeat_interleave(i[0], Tensor::from_vector(std::vector<std::int64_t>{1, 0, 3, 2, 1, 1}).to(i[0].device()), 0);
  }, {m}, true);
  parity("roll", [](const In& i) { return roll(i[0], {2, -3}, {0, 1}); }, {m}, true);
  parity("diagonal", [](const In& i) { return diagonal(i[0], 1); }, {m}, true);
  parity("diag", [](const In& i) { return diag(i[0], -1); }, {normal_in({5})}, true);
  parity("take_along_dim", [](const In& i) { return take_along_dim(i[0], argsort(i[0], 1), 1); }, {m}, true);
  parity("einsum attention", [](const In& i) { return einsum("bhqd,bhkd->bhqk", i); },
         {normal_in({2, 3, 8, 16}), normal_in({2, 3, 9, 16})}, true, {.rtol = 1e-4, .atol = 1e-4});
  parity("einsum three", [](const In& i) { return einsum("ij,jk,kl->il", i); },
         {normal_in({4, 5}, DType::f64), normal_in({5, 6}, DType::f64), normal_in({6, 3}, DType::f64)}, true);
  parity("addmm", [](const In& i) { return addmm(i[0], i[1], i[2], 0.5, 2.0); },
         {normal_in({4}, DType::f64), normal_in({3, 5}, DType::f64), normal_in({5, 4}, DType::f64)}, true);
  parity("prod with zeros", [](const In& i) { return prod(i[0], 1); },
         {Tensor::from_vector(std::vector<double>{1.5, 0, 2, 0, 0, 3, 2, -1, 0.5}, {3, 3})}, true);
  parity("cdist", [](const In& i) { return cdist(i[0], i[1]); }, {normal_in({2, 30, 8}, DType::f64), normal_in({2, 20, 8}, DType::f64)}, true);
  parity("matrix_norm 1", [](const In& i) { return matrix_norm(i[0], 1.0); }, {m}, true);
  // The SVD runs on the host for both (a counted sync for the CUDA input): the factors and
  // their gradients must come back to the device equal to the CPU's.
  parity("matrix_norm nuc", [](const In& i) { return matrix_norm(i[0], "nuc"); }, {normal_in({3, 6, 4}, DType::f64)}, true);
  parity("matrix_norm 2", [](const In& i) { return matrix_norm(i[0], 2.0, {0, 2}); }, {normal_in({5, 2, 3})}, true);
  parity("linalg_svd U Vh", [](const In& i) {
    SVDResult r = linalg_svd(i[0], false);
    CHECK(r.U.device() == i[0].device());
    return matmul(r.U, r.Vh);
  }, {normal_in({2, 4, 7}, DType::f64)}, true);
}
