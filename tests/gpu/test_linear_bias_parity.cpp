// addmm and linear with a bias on the GPU (one cuBLASLt GEMM with the bias epilogue; backward:
// the bias gradient from the weight-gradient GEMM's BGRADA/BGRADB epilogue) against the CPU and
// a float64 reference: f32 (TF32 off and on), f64, bf16, f16; transposed, padded (offset, so
// less aligned) and strided operands, offset biases, 1-D and N-D inputs, empty dims; the same
// bits on repeated calls; an output block recycled full of NaN (beta = 0 must not read C); a
// forward + backward under SyncPolicy::error and captured in a CUDA graph, its replays equal to
// eager bit for bit. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/matmul_reference.hpp"
#include "tests/gpu/step_capture.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;
using test::gpu;

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

/// A 2-D CPU `x` copied onto `device` in layout `lay` (same values); storage outside the view
/// holds NaN. `padded` starts one element in: its pointer is only element-aligned.
Tensor relayout(const Tensor& x, Lay lay, Device device) {
  NoGradGuard no_grad;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const TensorOptions o{.dtype = x.dtype(), .device = device};
  const std::int64_t r = x.size(0), c = x.size(1);
  Tensor v;
  switch (lay) {
    case Lay::contiguous: return x.to(device);
    case Lay::transposed: v = full({c, r}, nan, o).t(); break;
    case Lay::padded: v = full({r, c + 3}, nan, o).narrow(1, 1, c); break;
    case Lay::strided: v = full({r, 2 * c}, nan, o).slice(1, 0, 2 * c, 2); break;
  }
  v.copy_(x.to(device));
  return v;
}

/// A 1-D bias on `device`: contiguous, or one element into a longer buffer (offset pointer).
Tensor bias_on(const Tensor& b, bool offset, Device device) {
  NoGradGuard no_grad;
  if (!offset) return b.to(device);
  Tensor v = full({b.size(0) + 1}, std::numeric_limits<double>::quiet_NaN(), {.dtype = b.dtype(), .device = device})
                 .narrow(0, 1, b.size(0));
  v.copy_(b.to(device));
  return v;
}

using test::Computed;
using test::Tol;

Tol tolerance(DType d, bool tf32) {
  return test::tolerance(tf32 && d == DType::f32 ? Computed::gemm_tf32 : Computed::gemm_parity, d);
}
Tol twice(Tol t) { return {2 * t.rtol, 2 * t.atol}; }

/// Largest excess of |got - want| over t.rtol * scale + t.atol (0 when within; NaN counts).
double excess(const V& got, const V& want, const V& scale, Tol t) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(got[i] - want[i]) - t.rtol * scale[i] - t.atol - 1e-300;
    if (!(e <= 0)) worst = std::max(worst, std::isnan(e) ? 1e300 : e);
  }
  return worst;
}

/// A reference and the scale of its rounding error (the sum of the terms' magnitudes).
struct Ref2 {
  V values, scale;
};

/// a [m, k] @ b [k, n] (+ bias [n]) in double.
Ref2 ref_affine(const V& a, const V& b, const V& bias, std::int64_t m, std::int64_t k, std::int64_t n) {
  Ref2 r{ref_matmul(a, {m, k}, b, {k, n}).values, ref_matmul(a, {m, k}, b, {k, n}, true).values};
  if (!bias.empty())
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        r.values[static_cast<std::size_t>(i * n + j)] += bias[static_cast<std::size_t>(j)];
        r.scale[static_cast<std::size_t>(i * n + j)] += std::abs(bias[static_cast<std::size_t>(j)]);
      }
  return r;
}

/// x [r, c] as [c, r] values.
V transposed(const V& x, std::int64_t r, std::int64_t c) {
  V t(x.size());
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) t[static_cast<std::size_t>(j * r + i)] = x[static_cast<std::size_t>(i * c + j)];
  return t;
}

/// The float64 gradients of x [m, k] @ w [k, n] + b for the output gradient g [m, n]:
/// dx = g w^T [m, k], dw = x^T g [k, n], db = column sums of g [n].
struct GradRefs {
  Ref2 dx, dw, db;
};
GradRefs grad_refs(const V& g, const V& x, const V& w_kn, std::int64_t m, std::int64_t k, std::int64_t n) {
  GradRefs r{ref_affine(g, transposed(w_kn, k, n), {}, m, n, k), ref_affine(transposed(x, m, k), g, {}, k, m, n),
             {V(static_cast<std::size_t>(n), 0.0), V(static_cast<std::size_t>(n), 0.0)}};
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      r.db.values[static_cast<std::size_t>(j)] += g[static_cast<std::size_t>(i * n + j)];
      r.db.scale[static_cast<std::size_t>(j)] += std::abs(g[static_cast<std::size_t>(i * n + j)]);
    }
  return r;
}

struct Mkn {
  std::int64_t m, k, n;
};
const Mkn shapes[] = {{7, 13, 5}, {1, 9, 4}, {6, 1, 3}, {5, 8, 1}, {33, 129, 65}, {64, 96, 80}, {256, 80, 10}};

const DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

}  // namespace

TEST_CASE("gpu addmm/linear with a bias: forward parity, every dtype, layout and bias offset, TF32 off and on") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (bool tf32 : {false, true}) {
    Tf32Guard guard(tf32);
    for (DType dtype : float_dtypes) {
      if (tf32 && dtype != DType::f32) continue;
      for (const Mkn& s : shapes)
        for (Lay lx : lays)
          for (Lay lw : lays) {
            const bool offset_bias = lx == Lay::padded || lw == Lay::strided;
            INFO("dtype ", std::string(to_string(dtype)), " tf32 ", tf32, " m k n ", s.m, " ", s.k, " ", s.n, " x ",
                 std::string(lay_name(lx)), " w ", std::string(lay_name(lw)), " offset bias ", offset_bias);
            Tensor x_cpu = make(dtype, normal_values(rng, s.m * s.k), {s.m, s.k});
            Tensor w_cpu = make(dtype, normal_values(rng, s.k * s.n), {s.k, s.n});
            Tensor b_cpu = make(dtype, normal_values(rng, s.n), {s.n});
            Tensor x = relayout(x_cpu, lx, gpu()), w = relayout(w_cpu, lw, gpu());
            Tensor b = bias_on(b_cpu, offset_bias, gpu());
            const Ref2 want = ref_affine(values(x_cpu), values(w_cpu), values(b_cpu), s.m, s.k, s.n);
            const V cpu = values(addmm(b_cpu, x_cpu, w_cpu));
            const Tol tol = tolerance(dtype, tf32);
            for (const Tensor& y : {addmm(b, x, w), addmm(b.unsqueeze(0), x, w), linear(x, w.t(), b)}) {
              REQUIRE(y.shape() == Shape{s.m, s.n});
              CHECK(y.device() == gpu());
              CHECK(y.dtype() == dtype);
              const V got = values(y);
              CHECK(excess(got, want.values, want.scale, tol) == 0);
              CHECK(excess(got, cpu, want.scale, twice(tol)) == 0);
            }
          }
    }
  }
}

TEST_CASE("gpu addmm/linear with a bias: the MLP's shapes (256 x 784 x 1024), f32 and TF32") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t m = 256, k = 784, n = 1024;
  Tensor x_cpu = make(DType::f32, normal_values(rng, m * k), {m, k});
  Tensor w_cpu = make(DType::f32, normal_values(rng, k * n, 0.05), {k, n});
  Tensor b_cpu = make(DType::f32, normal_values(rng, n), {n});
  const Ref2 want = ref_affine(values(x_cpu), values(w_cpu), values(b_cpu), m, k, n);
  for (bool tf32 : {false, true}) {
    Tf32Guard guard(tf32);
    INFO("tf32 ", tf32);
    CHECK(excess(values(addmm(b_cpu.to(gpu()), x_cpu.to(gpu()), w_cpu.to(gpu()))), want.values, want.scale,
                 tolerance(DType::f32, tf32)) == 0);
  }
}

TEST_CASE("gpu addmm/linear with a bias: backward parity, the bias gradient fused (BGRADA and BGRADB)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (bool tf32 : {false, true}) {
    Tf32Guard guard(tf32);
    for (DType dtype : float_dtypes) {
      if (tf32 && dtype != DType::f32) continue;
      for (const Mkn& s : shapes)
        for (bool linear_layout : {false, true})  // weight [n, k] (linear: BGRADB) or [k, n] (addmm: BGRADA)
          for (Lay lx : {Lay::contiguous, Lay::transposed, Lay::padded}) {
            INFO("dtype ", std::string(to_string(dtype)), " tf32 ", tf32, " m k n ", s.m, " ", s.k, " ", s.n,
                 " linear ", linear_layout, " x ", std::string(lay_name(lx)));
            const Shape ws = linear_layout ? Shape{s.n, s.k} : Shape{s.k, s.n};
            Tensor x_cpu = make(dtype, normal_values(rng, s.m * s.k), {s.m, s.k});
            Tensor w_cpu = make(dtype, normal_values(rng, s.k * s.n), ws);
            Tensor b_cpu = make(dtype, normal_values(rng, s.n), {s.n});
            Tensor g_cpu = make(dtype, normal_values(rng, s.m * s.n), {s.m, s.n});
            Tensor x = relayout(x_cpu, lx, gpu()), w = w_cpu.to(gpu()), b = b_cpu.to(gpu());
            for (Tensor* t : {&x_cpu, &w_cpu, &b_cpu, &x, &w, &b}) t->requires_grad_();
            auto layer = [&](const Tensor& xi, const Tensor& wi, const Tensor& bi) {
              return linear_layout ? linear(xi, wi, bi) : addmm(bi, xi, wi);
            };
            layer(x_cpu, w_cpu, b_cpu).backward(g_cpu);
            layer(x, w, b).backward(g_cpu.to(gpu()));
            const V wv = values(w_cpu);
            // linear's weight [n, k] gets the transpose of dw [k, n]
            const GradRefs ref = grad_refs(values(g_cpu), values(x_cpu), linear_layout ? transposed(wv, s.n, s.k) : wv,
                                           s.m, s.k, s.n);
            const Ref2 &dx = ref.dx, &dw = ref.dw, &db = ref.db;
            const Tol tol = tolerance(dtype, tf32);
            for (const Tensor* t : {&x, &w, &b}) {
              REQUIRE(t->grad().defined());
              CHECK(t->grad().device() == gpu());
              CHECK(t->grad().dtype() == dtype);
              CHECK(t->grad().shape() == t->shape());
            }
            CHECK(w.grad().is_contiguous());
            const V gx = values(x.grad()), gb = values(b.grad());
            const V gw = linear_layout ? transposed(values(w.grad()), s.n, s.k) : values(w.grad());
            const V cw = linear_layout ? transposed(values(w_cpu.grad()), s.n, s.k) : values(w_cpu.grad());
            CHECK(excess(gx, dx.values, dx.scale, tol) == 0);
            CHECK(excess(gw, dw.values, dw.scale, tol) == 0);
            CHECK(excess(gb, db.values, db.scale, tol) == 0);
            CHECK(excess(gx, values(x_cpu.grad()), dx.scale, twice(tol)) == 0);
            CHECK(excess(gw, cw, dw.scale, twice(tol)) == 0);
            CHECK(excess(gb, values(b_cpu.grad()), db.scale, twice(tol)) == 0);
          }
    }
  }
}

TEST_CASE("gpu linear with a bias: N-D and 1-D inputs, empty dims") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::int64_t in = 12, out = 7;
  for (DType dtype : float_dtypes) {
    Tensor w_cpu = make(dtype, normal_values(rng, out * in), {out, in});
    Tensor b_cpu = make(dtype, normal_values(rng, out), {out});
    for (const Shape& lead : {Shape{}, Shape{5}, Shape{2, 3}, Shape{2, 3, 4}, Shape{0, 3}}) {
      Shape xs = lead;
      xs.push_back(in);
      INFO("dtype ", std::string(to_string(dtype)), " x ", to_string(xs));
      Tensor x_cpu = make(dtype, normal_values(rng, numel_of(xs)), xs);
      // w_cpu and b_cpu require grad after the first shape: their copies must be fresh leaves
      Tensor x = x_cpu.to(gpu()), w = w_cpu.detach().to(gpu()), b = b_cpu.detach().to(gpu());
      for (Tensor* t : {&x_cpu, &w_cpu, &b_cpu, &x, &w, &b}) {
        t->set_grad(Tensor());
        t->requires_grad_();
      }
      Tensor y_cpu = linear(x_cpu, w_cpu, b_cpu), y = linear(x, w, b);
      REQUIRE(y.shape() == y_cpu.shape());
      const std::int64_t rows = numel_of(lead);
      const Ref2 want = ref_affine(values(x_cpu), transposed(values(w_cpu), out, in), values(b_cpu), rows, in, out);
      const Tol tol = tolerance(dtype, false);
      CHECK(excess(values(y), want.values, want.scale, tol) == 0);
      Tensor g_cpu = make(dtype, normal_values(rng, y_cpu.numel()), y_cpu.shape());
      y_cpu.backward(g_cpu);
      y.backward(g_cpu.to(gpu()));
      const GradRefs ref =
          grad_refs(values(g_cpu), values(x_cpu), transposed(values(w_cpu), out, in), rows, in, out);
      for (const Tensor* t : {&x, &w, &b}) {
        REQUIRE(t->grad().defined());
        CHECK(t->grad().shape() == t->shape());
      }
      CHECK(excess(values(x.grad()), ref.dx.values, ref.dx.scale, tol) == 0);
      CHECK(excess(transposed(values(w.grad()), out, in), ref.dw.values, ref.dw.scale, tol) == 0);
      CHECK(excess(values(b.grad()), ref.db.values, ref.db.scale, tol) == 0);
      CHECK(excess(values(x.grad()), values(x_cpu.grad()), ref.dx.scale, twice(tol)) == 0);
      CHECK(excess(values(w.grad()), values(w_cpu.grad()), transposed(ref.dw.scale, in, out), twice(tol)) == 0);
      CHECK(excess(values(b.grad()), values(b_cpu.grad()), ref.db.scale, twice(tol)) == 0);
    }
    // k = 0: the output is the bias in every row; the bias gradient the column sums of g
    const TensorOptions o{.dtype = dtype, .device = gpu()};
    Tensor bk = b_cpu.detach().to(gpu());
    CHECK(values(addmm(bk, empty({2, 0}, o), empty({0, out}, o))) == [&] {
      V r = values(b_cpu);
      r.insert(r.end(), r.begin(), r.end());
      return r;
    }());
  }
}

TEST_CASE("gpu addmm with a bias: the same bits every call, and NaN in a recycled output block is never read") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (DType dtype : float_dtypes) {
    INFO("dtype ", std::string(to_string(dtype)));
    const std::int64_t m = 96, k = 200, n = 72;
    Tensor x = make(dtype, normal_values(rng, m * k), {m, k}).to(gpu());
    Tensor w = make(dtype, normal_values(rng, k * n), {k, n}).to(gpu());
    Tensor b = make(dtype, normal_values(rng, n), {n}).to(gpu());
    x.requires_grad_();
    w.requires_grad_();
    b.requires_grad_();
    Tensor g = make(dtype, normal_values(rng, m * n), {m, n}).to(gpu());
    std::vector<V> ys, gws, gbs;
    for (int r = 0; r < 3; ++r) {
      {  // an output-sized block full of NaN, freed just before: the caching allocator hands it back
        NoGradGuard no_grad;
        Tensor poison = full({m, n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = dtype, .device = gpu()});
        Tensor poison_w = full({k, n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = dtype, .device = gpu()});
      }
      Tensor y = addmm(b, x, w);
      std::vector<Tensor> grads = autograd::grad({y}, {w, b}, {g});
      ys.push_back(values(y));
      gws.push_back(values(grads[0]));
      gbs.push_back(values(grads[1]));
      for (const V* v : {&ys.back(), &gws.back(), &gbs.back()})
        CHECK(std::none_of(v->begin(), v->end(), [](double e) { return std::isnan(e); }));
    }
    for (int r = 1; r < 3; ++r) {
      CHECK(ys[static_cast<std::size_t>(r)] == ys[0]);
      CHECK(gws[static_cast<std::size_t>(r)] == gws[0]);
      CHECK(gbs[static_cast<std::size_t>(r)] == gbs[0]);
    }
  }
}

TEST_CASE("gpu addmm with a bias: an MLP step under SyncPolicy::error and in a CUDA graph, equal to eager") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (bool tf32 : {false, true}) {
    Tf32Guard guard(tf32);
    INFO("tf32 ", tf32);
    auto param = [&](const Shape& s) {
      Tensor t = make(DType::f32, normal_values(rng, numel_of(s), 0.1), s).to(gpu());
      t.requires_grad_();
      return t;
    };
    Tensor w1 = param({64, 128}), b1 = param({128}), w2 = param({128, 10}), b2 = param({10});
    Tensor x = make(DType::f32, normal_values(rng, 32 * 64), {32, 64}).to(gpu());
    Tensor r = make(DType::f32, normal_values(rng, 32 * 10), {32, 10}).to(gpu());
    auto step = [&] {
      Tensor y = addmm(b2, relu(addmm(b1, x, w1)), w2);
      std::vector<Tensor> g = autograd::grad({sum(mul(y, r))}, {w1, b1, w2, b2});
      g.insert(g.begin(), y);
      return g;
    };
    const std::vector<Tensor> eager = check_step_capture(step, 3);
    // and eager after the capture still agrees (the capture left the plans as they were)
    std::vector<Tensor> again = step();
    for (std::size_t i = 0; i < eager.size(); ++i) CHECK(values(again[i]) == values(eager[i]));
  }
}
