// addmm and linear with a bias on the CPU, the fused path (one GEMM with the bias in its
// epilogue; backward: the bias gradient from the weight-gradient GEMM): values against a
// float64 reference for every float dtype and operand layout, 1-D and N-D inputs, bias present
// and absent, empty dims, the fall-back to the composite (beta/alpha != 1, other input shapes,
// mixed dtypes), gradients against central differences and gradcheck, create_graph's second
// derivatives, and nn::Linear.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/gradient_check.hpp"
#include "tests/ops/matmul_reference.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

const DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

enum class Lay { contiguous, transposed, padded, strided };
const Lay lays[] = {Lay::contiguous, Lay::transposed, Lay::padded, Lay::strided};

const char* lay_name(Lay l) {
  switch (l) {
    case Lay::contiguous: return "contiguous";
    case Lay::transposed: return "transposed";
    case Lay::padded: return "padded";
    case Lay::strided: return "strided";
  }
  return "?";
}

/// A 2-D `x` (contiguous) copied into a tensor of layout `lay` (same values); storage outside
/// the view holds NaN.
Tensor relayout(const Tensor& x, Lay lay) {
  NoGradGuard no_grad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TensorOptions o{.dtype = x.dtype()};
  const std::int64_t r = x.size(0), c = x.size(1);
  Tensor v;
  switch (lay) {
    case Lay::contiguous: return x.contiguous();
    case Lay::transposed: v = full({c, r}, nan, o).t(); break;
    case Lay::padded: v = full({r, c + 3}, nan, o).narrow(1, 1, c); break;
    case Lay::strided: v = full({r, 2 * c}, nan, o).slice(1, 0, 2 * c, 2); break;
  }
  v.copy_(x);
  return v;
}

/// x [m, k] @ w [k, n] + bias [n] in double, and the scale of its rounding (sum |x||w| + |bias|).
struct Affine {
  V values, scale;
};
Affine ref_affine(const V& x, const V& w, const V& bias, std::int64_t m, std::int64_t k, std::int64_t n) {
  Affine r{ref_matmul(x, {m, k}, w, {k, n}).values, ref_matmul(x, {m, k}, w, {k, n}, true).values};
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      r.values[static_cast<std::size_t>(i * n + j)] += bias.empty() ? 0.0 : bias[static_cast<std::size_t>(j)];
      r.scale[static_cast<std::size_t>(i * n + j)] += bias.empty() ? 0.0 : std::abs(bias[static_cast<std::size_t>(j)]);
    }
  return r;
}

/// Largest excess of |got - want| over rtol * scale + atol (0 when within; NaN counts).
double excess(const V& got, const V& want, const V& scale, Tol t) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(got[i] - want[i]) - t.rtol * scale[i] - t.atol - 1e-300;
    if (!(e <= 0)) worst = std::max(worst, std::isnan(e) ? 1e300 : e);
  }
  return worst;
}

Tol gemm_tol(DType d) { return test::tolerance(Computed::gemm, d); }

/// Column sums of g [m, n] (the bias gradient) and their scale (sum of |g|).
Affine ref_column_sums(const V& g, std::int64_t m, std::int64_t n) {
  Affine r{V(static_cast<std::size_t>(n), 0.0), V(static_cast<std::size_t>(n), 0.0)};
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      r.values[static_cast<std::size_t>(j)] += g[static_cast<std::size_t>(i * n + j)];
      r.scale[static_cast<std::size_t>(j)] += std::abs(g[static_cast<std::size_t>(i * n + j)]);
    }
  return r;
}

}  // namespace

TEST_CASE("addmm with a row bias: hand-computed values, one AddmmBackward node") {
  Tensor x = Tensor::from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = Tensor::from_vector(V{1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor b = Tensor::from_vector(V{10, -20}, {2});
  // x w = [[4, 5], [10, 11]]
  CHECK(values(addmm(b, x, w)) == V{14, -15, 20, -9});
  CHECK(values(addmm(b.view({1, 2}), x, w)) == V{14, -15, 20, -9});
  CHECK(values(linear(x, w.t(), b)) == V{14, -15, 20, -9});
  CHECK(addmm(b, x, w).grad_fn().get() == nullptr);
  w.requires_grad_();
  Tensor y = addmm(b, x, w);
  REQUIRE(y.grad_fn().get() != nullptr);
  CHECK(y.grad_fn()->name() == "AddmmBackward");
  Tensor z = linear(x, w.t(), b);
  REQUIRE(z.grad_fn().get() != nullptr);
  CHECK(z.grad_fn()->name() == "AddmmBackward");
  // ones as the output gradient: dw = x^T 1 = column sums of x repeated; db = [2, 2].
  b.requires_grad_();
  addmm(b, x, w).backward(ones({2, 2}, {.dtype = DType::f64}));
  CHECK(values(w.grad()) == V{5, 5, 7, 7, 9, 9});
  CHECK(values(b.grad()) == V{2, 2});
}

TEST_CASE("addmm and linear with a bias: every dtype and layout against float64") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 7, k = 13, n = 5;
  for (DType dtype : float_dtypes)
    for (Lay lx : lays)
      for (Lay lw : lays) {
        INFO("dtype ", std::string(to_string(dtype)), " x ", std::string(lay_name(lx)), " w ",
             std::string(lay_name(lw)));
        Tensor x = relayout(make(dtype, normal_values(rng, m * k), {m, k}), lx);
        Tensor w = relayout(make(dtype, normal_values(rng, k * n), {k, n}), lw);
        // a non-contiguous bias (every other element of a longer vector)
        Tensor b = make(dtype, normal_values(rng, 2 * n), {2 * n}).slice(0, 0, 2 * n, 2);
        const Affine want = ref_affine(values(x), values(w), values(b), m, k, n);
        for (const Tensor& y : {addmm(b, x, w), addmm(b.unsqueeze(0), x, w), linear(x, w.t(), b)}) {
          REQUIRE(y.shape() == Shape{m, n});
          CHECK(y.dtype() == dtype);
          CHECK(excess(values(y), want.values, want.scale, gemm_tol(dtype)) == 0);
        }
      }
}

TEST_CASE("linear: 1-D and N-D inputs flatten to rows and come back in their shape") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t in = 6, out = 4;
  Tensor w = make(DType::f32, normal_values(rng, out * in), {out, in});
  Tensor b = make(DType::f32, normal_values(rng, out), {out});
  const V wt = values(w.t().contiguous()), bv = values(b);
  for (const Shape& lead : {Shape{}, Shape{3}, Shape{2, 3}, Shape{2, 1, 3}, Shape{0, 3}}) {
    Shape xs = lead;
    xs.push_back(in);
    INFO("x ", to_string(xs));
    Tensor x = make(DType::f32, normal_values(rng, numel_of(xs)), xs);
    for (bool transposed_copy : {false, true}) {
      // also a non-contiguous input (its last two dims stored transposed) for >= 2-D
      Tensor xi = x;
      if (transposed_copy && x.dim() >= 2) xi = x.transpose(-1, -2).contiguous().transpose(-1, -2);
      Tensor y = linear(xi, w, b);
      Shape ys = lead;
      ys.push_back(out);
      REQUIRE(y.shape() == ys);
      const std::int64_t rows = numel_of(lead);
      const Affine want = ref_affine(values(x), wt, bv, rows, in, out);
      CHECK(excess(values(y), want.values, want.scale, gemm_tol(DType::f32)) == 0);
      // without a bias: matmul's path, the same product
      const Affine plain = ref_affine(values(x), wt, {}, rows, in, out);
      CHECK(excess(values(linear(xi, w)), plain.values, plain.scale, gemm_tol(DType::f32)) == 0);
    }
  }
}

TEST_CASE("addmm and linear with a bias: empty dims") {
  for (DType dtype : float_dtypes) {
    INFO("dtype ", std::string(to_string(dtype)));
    const TensorOptions o{.dtype = dtype};
    Tensor b = make(dtype, {1, -2, 3}, {3});
    // k = 0: the output is the bias in every row (a poisoned-free fresh output)
    CHECK(values(addmm(b, empty({2, 0}, o), empty({0, 3}, o))) == V{1, -2, 3, 1, -2, 3});
    CHECK(values(linear(empty({2, 0}, o), empty({3, 0}, o), b)) == V{1, -2, 3, 1, -2, 3});
    // m = 0 and n = 0
    CHECK(addmm(b, empty({0, 4}, o), empty({4, 3}, o)).shape() == Shape{0, 3});
    CHECK(addmm(empty({0}, o), empty({2, 4}, o), empty({4, 0}, o)).shape() == Shape{2, 0});
    CHECK(linear(empty({5, 0, 4}, o), empty({3, 4}, o), b).shape() == Shape{5, 0, 3});
  }
  // gradients through empty dims: zero-row inputs give zero weight and bias gradients; k = 0
  // gives the bias gradient as the column sums of g.
  Tensor x = empty({0, 4}, {.dtype = DType::f64}), w = ones({3, 4}, {.dtype = DType::f64});
  Tensor b = Tensor::from_vector(V{1, 2, 3}, {3});
  x.requires_grad_();
  w.requires_grad_();
  b.requires_grad_();
  linear(x, w, b).sum().backward();
  CHECK(values(w.grad()) == V(12, 0.0));
  CHECK(values(b.grad()) == V{0, 0, 0});
  Tensor x0 = empty({2, 0}, {.dtype = DType::f64}), w0 = empty({3, 0}, {.dtype = DType::f64});
  Tensor b0 = Tensor::from_vector(V{1, 2, 3}, {3});
  x0.requires_grad_();
  w0.requires_grad_();
  b0.requires_grad_();
  Tensor y0 = linear(x0, w0, b0);
  CHECK(values(y0) == V{1, 2, 3, 1, 2, 3});
  y0.backward(Tensor::from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3}));
  CHECK(values(b0.grad()) == V{5, 7, 9});
  CHECK(w0.grad().shape() == Shape{3, 0});
  CHECK(x0.grad().shape() == Shape{2, 0});
}

TEST_CASE("addmm: the composite where the bias is not a row or beta/alpha are not 1") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 4, k = 5, n = 3;
  V xv = normal_values(rng, m * k), wv = normal_values(rng, k * n), full_in = normal_values(rng, m * n);
  Tensor x = Tensor::from_vector(xv, {m, k}), w = Tensor::from_vector(wv, {k, n});
  const V prod = ref_matmul(xv, {m, k}, wv, {k, n}).values;
  auto near = [](const V& got, const V& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  };
  // a full [m, n] input, a column [m, 1], a scalar-like [1]: broadcast adds
  Tensor in = Tensor::from_vector(full_in, {m, n});
  V want(prod);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += full_in[i];
  near(values(addmm(in, x, w)), want);
  Tensor col = Tensor::from_vector(V{1, 2, 3, 4}, {m, 1});
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) want[static_cast<std::size_t>(i * n + j)] = prod[static_cast<std::size_t>(i * n + j)] + double(i + 1);
  near(values(addmm(col, x, w)), want);
  // beta and alpha
  Tensor row = Tensor::from_vector(V{1, -1, 2}, {n});
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      want[static_cast<std::size_t>(i * n + j)] =
          2.0 * prod[static_cast<std::size_t>(i * n + j)] + 0.5 * V{1, -1, 2}[static_cast<std::size_t>(j)];
  near(values(addmm(row, x, w, 0.5, 2.0)), want);
  // beta = 0 ignores the input, NaN included
  Tensor nan_row = full({n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = DType::f64});
  near(values(addmm(nan_row, x, w, 0.0)), prod);
  // a bias of another dtype promotes, as the composite always did
  Tensor xf = x.to(DType::f32), wf = w.to(DType::f32);
  CHECK(addmm(row, xf, wf).dtype() == DType::f64);
  CHECK(linear(xf, wf.t(), row).dtype() == DType::f64);
  // errors still name the op
  CHECK_BRRR_ERROR(addmm(row, x, x), ErrorKind::shape, "cannot be multiplied");
}

TEST_CASE("addmm and linear with a bias: gradients against central differences") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  using Fs = std::vector<Tensor>;
  // addmm with a 1-D and a [1, n] bias
  check_gradients([](const Fs& x) { return Fs{addmm(x[2], x[0], x[1])}; }, {{5, 3}, {3, 4}, {4}}, rng);
  check_gradients([](const Fs& x) { return Fs{addmm(x[2], x[0], x[1])}; }, {{5, 3}, {3, 4}, {1, 4}}, rng);
  // linear: 1-D, 2-D, 3-D and 4-D inputs; with and without a bias
  for (const Shape& xs : {Shape{3}, Shape{5, 3}, Shape{2, 5, 3}, Shape{2, 1, 2, 3}}) {
    INFO("x ", to_string(xs));
    check_gradients([](const Fs& x) { return Fs{linear(x[0], x[1], x[2])}; }, {xs, {4, 3}, {4}}, rng);
    check_gradients([](const Fs& x) { return Fs{linear(x[0], x[1])}; }, {xs, {4, 3}}, rng);
  }
  // transposed and strided operands
  check_gradients([](const Fs& x) { return Fs{addmm(x[2], x[0].t(), x[1].slice(1, 0, 8, 2))}; },
                  {{3, 5}, {3, 8}, {4}}, rng);
  check_gradients([](const Fs& x) { return Fs{linear(x[0].transpose(0, 1), x[1].t(), x[2])}; },
                  {{3, 5}, {3, 4}, {4}}, rng);
  // only some inputs requiring grad (the others constants): the weight alone, the bias alone
  Tensor xc = f64_tensor(normal_values(rng, 15), {5, 3}), wc = f64_tensor(normal_values(rng, 12), {4, 3});
  Tensor bc = f64_tensor(normal_values(rng, 4), {4});
  check_gradients([&](const Fs& x) { return Fs{linear(xc, x[0], bc)}; }, {{4, 3}}, rng);
  check_gradients([&](const Fs& x) { return Fs{linear(xc, wc, x[0])}; }, {{4}}, rng);
  check_gradients([&](const Fs& x) { return Fs{addmm(x[0], xc, wc.t())}; }, {{4}}, rng);
  // a chain of two layers with a relu between (the benchmark's MLP)
  check_gradients(
      [](const Fs& x) { return Fs{addmm(x[4], relu(addmm(x[2], x[0], x[1])), x[3])}; },
      {{6, 3}, {3, 5}, {5}, {5, 2}, {2}}, rng);
}

TEST_CASE("addmm and linear with a bias: autograd::gradcheck") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  std::vector<Tensor> in = {f64_tensor(normal_values(rng, 12), {4, 3}), f64_tensor(normal_values(rng, 6), {3, 2}),
                            f64_tensor(normal_values(rng, 2), {2})};
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return addmm(x[2], x[0], x[1]); }, in));
  std::vector<Tensor> lin = {f64_tensor(normal_values(rng, 24), {2, 4, 3}), f64_tensor(normal_values(rng, 15), {5, 3}),
                             f64_tensor(normal_values(rng, 5), {5})};
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); }, lin));
}

TEST_CASE("linear with a bias: create_graph gives second derivatives") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 5, in = 3, out = 4;
  const V xv = normal_values(rng, m * in), wv = normal_values(rng, out * in), bv = normal_values(rng, out);
  const V rv = normal_values(rng, m * out), sv = normal_values(rng, m * in), tv = normal_values(rng, out);
  auto near = [](const V& got, const V& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  };
  for (bool is_addmm : {false, true}) {
    INFO("addmm ", is_addmm);
    Tensor x = Tensor::from_vector(xv, {m, in}), w = Tensor::from_vector(wv, {out, in});
    Tensor b = Tensor::from_vector(bv, {out});
    for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
    auto layer = [&] { return is_addmm ? addmm(b, x, w.t()) : linear(x, w, b); };
    // y = x w^T + b; gx = <R, y>'s gradient = R w (recorded); d<S, gx>/dw = R^T S.
    std::vector<Tensor> gx = autograd::grad({layer()}, {x}, {Tensor::from_vector(rv, {m, out})}, false, true);
    REQUIRE(gx[0].requires_grad());
    near(values(gx[0]), ref_matmul(rv, {m, out}, wv, {out, in}).values);
    gx[0].backward(Tensor::from_vector(sv, {m, in}));
    V rt(static_cast<std::size_t>(out * m));
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t o = 0; o < out; ++o) rt[static_cast<std::size_t>(o * m + i)] = rv[static_cast<std::size_t>(i * out + o)];
    near(values(w.grad()), ref_matmul(rt, {out, m}, sv, {m, in}).values);
    CHECK(!b.grad().defined());
    // gb = d sum(y^2) / db = 2 sum_rows y (recorded); d<T, gb>/db = 2 m T, /dx = rows of 2 T w,
    // /dw = 2 T^T colsum(x).
    w.set_grad(Tensor());
    x.set_grad(Tensor());
    Tensor y = layer();
    std::vector<Tensor> gb = autograd::grad({sum(mul(y, y))}, {b}, {}, false, true);
    REQUIRE(gb[0].requires_grad());
    gb[0].backward(Tensor::from_vector(tv, {out}));
    V want_b(tv), want_x, want_w;
    for (double& v : want_b) v *= 2.0 * m;
    const V tw = ref_matmul(tv, {out}, wv, {out, in}).values;  // [in]
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t c = 0; c < in; ++c) want_x.push_back(2 * tw[static_cast<std::size_t>(c)]);
    V colsum(static_cast<std::size_t>(in), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t c = 0; c < in; ++c) colsum[static_cast<std::size_t>(c)] += xv[static_cast<std::size_t>(i * in + c)];
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t c = 0; c < in; ++c) want_w.push_back(2 * tv[static_cast<std::size_t>(o)] * colsum[static_cast<std::size_t>(c)]);
    near(values(b.grad()), want_b);
    near(values(x.grad()), want_x);
    near(values(w.grad()), want_w);
  }
}

TEST_CASE("addmm and linear with a bias: bf16/f16/f32 gradients of the input dtype against float64") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 9, k = 6, n = 5;
  for (DType dtype : float_dtypes)
    for (bool linear_layout : {false, true}) {
      INFO("dtype ", std::string(to_string(dtype)), " linear ", linear_layout);
      Tensor x = make(dtype, normal_values(rng, m * k), {m, k});
      Tensor w = linear_layout ? make(dtype, normal_values(rng, n * k), {n, k}) : make(dtype, normal_values(rng, k * n), {k, n});
      Tensor b = make(dtype, normal_values(rng, n), {n});
      Tensor g = make(dtype, normal_values(rng, m * n), {m, n});
      for (Tensor* t : {&x, &w, &b}) t->requires_grad_();
      Tensor y = linear_layout ? linear(x, w, b) : addmm(b, x, w);
      y.backward(g);
      for (const Tensor* t : {&x, &w, &b}) {
        REQUIRE(t->grad().defined());
        CHECK(t->grad().dtype() == dtype);
        CHECK(t->grad().shape() == t->shape());
      }
      const V gv = values(g), xv = values(x);
      // dx = g w^T [m, k]
      const V wnk = values(linear_layout ? w : w.t().contiguous());
      const Affine dx{ref_matmul(gv, {m, n}, wnk, {n, k}).values, ref_matmul(gv, {m, n}, wnk, {n, k}, true).values};
      CHECK(excess(values(x.grad()), dx.values, dx.scale, gemm_tol(dtype)) == 0);
      // dw = x^T g [k, n] (linear: its transpose)
      const V xt = values(x.t().contiguous());
      const Affine dw{ref_matmul(xt, {k, m}, gv, {m, n}).values, ref_matmul(xt, {k, m}, gv, {m, n}, true).values};
      const V dw_got = values(linear_layout ? w.grad().t().contiguous() : w.grad());
      CHECK(excess(dw_got, dw.values, dw.scale, gemm_tol(dtype)) == 0);
      // db = column sums of g, accumulated wide and rounded once
      const Affine db = ref_column_sums(gv, m, n);
      CHECK(excess(values(b.grad()), db.values, db.scale, test::tolerance(Computed::reduction, dtype)) == 0);
    }
}

TEST_CASE("nn::Linear: the fused path, its gradients contiguous") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  nn::Linear layer(6, 4);
  Tensor x = make(DType::f32, normal_values(rng, 3 * 2 * 6), {3, 2, 6});
  Tensor y = layer(x);
  CHECK(y.shape() == Shape{3, 2, 4});
  const V wt = values(layer.weight().t().contiguous()), bv = values(layer.bias());
  const Affine want = ref_affine(values(x), wt, bv, 6, 6, 4);
  CHECK(excess(values(y), want.values, want.scale, gemm_tol(DType::f32)) == 0);
  y.sum().backward();
  REQUIRE(layer.weight().grad().defined());
  CHECK(layer.weight().grad().is_contiguous());
  CHECK(layer.bias().grad().is_contiguous());
  // d sum / d b = the number of rows; d sum / d W[o, i] = sum over rows of x[., i]
  CHECK(values(layer.bias().grad()) == V(4, 6.0));
  const V xv = values(x);
  V col(6, 0.0);
  for (std::size_t r = 0; r < 6; ++r)
    for (std::size_t i = 0; i < 6; ++i) col[i] += xv[r * 6 + i];
  const V gw = values(layer.weight().grad());
  for (std::size_t o = 0; o < 4; ++o)
    for (std::size_t i = 0; i < 6; ++i) CHECK(gw[o * 6 + i] == doctest::Approx(col[i]).epsilon(1e-5));
}
