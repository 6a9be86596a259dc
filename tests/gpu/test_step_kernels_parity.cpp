// The fused kernels of a transformer training step (issue 19) on the GPU against the CPU
// backend: layer_norm's backward (layer_norm_backward: the warp kernel for rows up to 1024
// elements (512 f64) with every elements-per-lane variant and more rows than the 1024 blocks
// of partial sums, the block kernel and the column sums of wider rows; every floating dtype,
// weight and bias each optional, f32 weights on bf16 inputs), gelu_backward, the fused
// dropout (the same bits as the CPU's), clip_grad_norm_'s multi-tensor kernels (more than one
// launch of 64 tensors, mixed dtypes); every result bit-identical run to run, and a captured
// step replayed equal to the eager one bit for bit; dropout_add_layer_norm's fused kernels
// against the CPU's and the GPU composite, and the packed q/k/v gradients of split +
// attention. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/dropout_add_layer_norm_run.hpp"

using namespace brrr;
using namespace test;

namespace {

using test::gpu;

// A CPU tensor of `dtype` with N(shift, scale) values.
Tensor cpu_randn(Shape shape, DType dtype, double scale = 1.0, double shift = 0.0) {
  return (randn(std::move(shape), {.dtype = DType::f64}) * scale + shift).to(dtype);
}

// Bitwise equality of two tensors of one dtype (any floating dtype: compared as f64 values,
// which is exact for every one of them; NaN bits compare equal to NaN).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  std::vector<double> x = a.to(DType::f64).to_host<double>(), y = b.to(DType::f64).to_host<double>();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

// The gradients of sum(layer_norm(x, [cols], w, b) * gy) w.r.t. x and the defined w, b, on `dev`.
std::vector<Tensor> ln_grads(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy, Device dev) {
  std::vector<Tensor> in;
  Tensor xx = x.detach().to(dev).clone().requires_grad_(), ww, bb;
  in.push_back(xx);
  if (w.defined()) in.push_back(ww = w.detach().to(dev).clone().requires_grad_());
  if (b.defined()) in.push_back(bb = b.detach().to(dev).clone().requires_grad_());
  Tensor y = layer_norm(xx, {x.size(-1)}, ww, bb);
  return autograd::grad({sum(y * gy.to(dev))}, in);
}

testing::CloseOptions parity(DType d) { return test::close_options(Computed::accumulated, d, /*equal_nan=*/true); }

}  // namespace

TEST_CASE("layer_norm backward parity: every kernel path, dtypes, weight/bias optional; bit-identical twice") {
  manual_seed(191);
  struct Shape2 {
    std::int64_t rows, cols;
  };
  // cols <= 1024 (512 for f64): the warp kernel, N = 1 .. 32 per lane; 16385 rows of 384
  // need more than the 1024 blocks of partial sums. Wider rows: the block and column kernels.
  const std::vector<Shape2> shapes = {{1, 1},     {7, 5},    {33, 32},   {33, 33},  {300, 100}, {16385, 384},
                                      {65, 512},  {65, 513}, {40, 1000}, {9, 1024}, {9, 1025},  {5, 4097},
                                      {3, 40000}, {1, 2048}};
  for (const Shape2& s : shapes) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      if (s.rows * s.cols > 2000000 && dt == DType::f64) continue;
      Tensor x = cpu_randn({s.rows, s.cols}, dt, 2.0, 1.0), gy = cpu_randn({s.rows, s.cols}, dt);
      Tensor w = cpu_randn({s.cols}, dt), b = cpu_randn({s.cols}, dt);
      for (int affine = 0; affine < 4; ++affine) {
        INFO("rows ", s.rows, " cols ", s.cols, " ", to_string(dt), " affine ", affine);
        const Tensor wu = affine & 1 ? w : Tensor(), bu = affine & 2 ? b : Tensor();
        auto want = ln_grads(x, wu, bu, gy, Device::cpu());
        auto got = ln_grads(x, wu, bu, gy, gpu());
        auto again = ln_grads(x, wu, bu, gy, gpu());
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO("gradient ", i);
          CHECK(got[i].dtype() == want[i].dtype());
          // dweight/dbias (i > 0) are column sums over `rows` terms, in f32 on the GPU and in
          // double on the CPU: their f32 error grows with the rows and the terms' size (seen:
          // 3.3e-5 on 0.65 over 16385 rows), so f32's atol is sqrt(rows) units of f32 at the
          // largest reference sum.
          testing::CloseOptions o = parity(got[i].dtype());
          if (i > 0 && got[i].dtype() == DType::f32) {
            double big = 0;
            for (double v : want[i].to(DType::f64).to_host<double>()) big = std::max(big, std::abs(v));
            o.atol = std::max(*o.atol, std::sqrt(static_cast<double>(s.rows)) * 0x1p-24 * big);
          }
          CHECK_NOTHROW(testing::assert_close(got[i], want[i], o));
          CHECK(same_values(got[i], again[i]));  // no atomics: the same bits every run
        }
      }
    }
  }
  // Autocast's case: bf16 input, f32 weight and bias; gradients keep each one's dtype.
  Tensor x = cpu_randn({256, 384}, DType::bf16), gy = cpu_randn({256, 384}, DType::bf16);
  Tensor w = cpu_randn({384}, DType::f32), b = cpu_randn({384}, DType::f32);
  auto want = ln_grads(x, w, b, gy, Device::cpu());
  auto got = ln_grads(x, w, b, gy, gpu());
  CHECK(got[0].dtype() == DType::bf16);
  CHECK(got[1].dtype() == DType::f32);
  CHECK(got[2].dtype() == DType::f32);
  for (std::size_t i = 0; i < got.size(); ++i)
    CHECK_NOTHROW(testing::assert_close(got[i], want[i], parity(got[i].dtype())));
  // Only the weight's gradient (no dx): the same column sums.
  Tensor ww = w.to(gpu()).requires_grad_();
  Tensor xg = x.to(DType::f32).to(gpu());
  auto only_w = autograd::grad({sum(layer_norm(xg, {384}, ww) * gy.to(DType::f32).to(gpu()))}, {ww});
  auto both = ln_grads(x.to(DType::f32), w, Tensor(), gy.to(DType::f32), gpu());
  CHECK(same_values(only_w[0], both[1]));
}

TEST_CASE("gelu_backward parity (both approximations, every floating dtype)") {
  manual_seed(192);
  for (const char* approx : {"none", "tanh"}) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      INFO(approx, " ", to_string(dt));
      // |x| <= 3: further out, tanh's 1 - t^2 cancels in f32 (glibc's and CUDA's tanhf differ).
      Tensor x = clamp(cpu_randn({1000, 37}, DType::f64, 3.0), -3.0, 3.0).to(dt), g = cpu_randn({1000, 37}, dt);
      Tensor want = gelu_backward(g, x, approx);
      Tensor got = gelu_backward(g.to(gpu()), x.to(gpu()), approx);
      CHECK(got.dtype() == dt);
      CHECK_NOTHROW(testing::assert_close(got, want, test::close_options(Computed::math_parity, dt)));
      // backward() of gelu on the GPU uses it
      Tensor xl = x.to(gpu()).requires_grad_();
      (gelu(xl, approx) * g.to(gpu())).sum().backward();
      CHECK_NOTHROW(testing::assert_close(xl.grad(), want, test::close_options(Computed::math_parity, dt)));
    }
  }
}

TEST_CASE("fused dropout: the CPU's bits on the GPU for every dtype; the composite's too; gradient = noise") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t n : {1, 5, 4099, 1 << 20}) {
      INFO(to_string(dt), " n ", n);
      Tensor x = cpu_randn({n}, dt, 1.0, 4.0);
      manual_seed(77);
      Tensor want = dropout(x, 0.2);
      manual_seed(77);
      Tensor xg = x.to(gpu()).requires_grad_();
      Tensor got = dropout(xg, 0.2);
      CHECK(same_values(got.detach(), want.to(gpu())));
      // The GPU's composite: rand, ge, where, mul.
      manual_seed(77);
      Tensor u = rand({n}, {.dtype = dt == DType::f64 ? DType::f64 : DType::f32, .device = gpu()});
      Tensor noise = where(ge(u, 0.2), full({}, 1.0 / 0.8, {.dtype = dt, .device = gpu()}),
                           zeros({}, {.dtype = dt, .device = gpu()}));
      CHECK(same_values(got.detach(), mul(x.to(gpu()), noise)));
      got.sum().backward();
      CHECK(same_values(xg.grad(), noise));
    }
  }
}

TEST_CASE("clip_grad_norm_ parity: multi-tensor norms and scaling (70 gradients, mixed dtypes), bit-identical twice") {
  for (double norm_type : {2.0, 1.0, 2.5, std::numeric_limits<double>::infinity()}) {
    INFO("norm_type ", norm_type);
    manual_seed(193);
    std::vector<Tensor> cpu_p, gpu_p, gpu_q;
    for (int k = 0; k < 70; ++k) {
      const DType dt = k % 3 == 0 ? DType::f32 : k % 3 == 1 ? DType::f64 : DType::bf16;
      const std::int64_t n = k == 4 ? 0 : 1 + (k * 7919) % 40000;
      Tensor g = cpu_randn({n}, dt);
      for (auto* list : {&cpu_p, &gpu_p, &gpu_q}) {
        const Device dev = list == &cpu_p ? Device::cpu() : gpu();
        Tensor p = zeros({n}, {.dtype = dt, .device = dev, .requires_grad = true});
        p.set_grad(g.to(dev).clone());
        list->push_back(p);
      }
    }
    Tensor tc = optim::clip_grad_norm_(cpu_p, 1.0, norm_type);
    Tensor tg = optim::clip_grad_norm_(gpu_p, 1.0, norm_type);
    Tensor tq = optim::clip_grad_norm_(gpu_q, 1.0, norm_type);
    CHECK_NOTHROW(testing::assert_close(tg, tc.to(gpu()), parity(DType::f32)));
    CHECK(same_values(tg, tq));
    for (std::size_t k = 0; k < cpu_p.size(); ++k) {
      INFO("gradient ", k);
      const DType dt = cpu_p[k].grad().dtype();
      CHECK_NOTHROW(testing::assert_close(gpu_p[k].grad(), cpu_p[k].grad().to(gpu()), parity(dt == DType::f64 ? DType::f32 : dt)));
      CHECK(same_values(gpu_p[k].grad(), gpu_q[k].grad()));
    }
  }
}

TEST_CASE("dropout_add_layer_norm: CUDA kernels against the CPU's and the GPU composite (dtypes, rows, alignment)") {
  using dropout_add_ln_test::run;
  FRESH_SEED();
  struct Case {
    DType x0, res;
    bool has_res;
    std::int64_t rows, cols;
    bool misaligned;  // x0 and residual at an odd element offset: the scalar-access kernel
  };
  const std::vector<Case> cases = {
      {DType::f32, DType::f32, true, 300, 384, false},   {DType::bf16, DType::f32, true, 300, 384, false},
      {DType::f16, DType::f32, true, 77, 100, false},    {DType::bf16, DType::bf16, true, 50, 36, false},
      {DType::f64, DType::f64, true, 40, 512, false},    {DType::f32, DType::f32, false, 64, 8, false},
      {DType::bf16, DType::f32, false, 64, 1024, false}, {DType::f32, DType::f32, true, 4500, 384, false},
      {DType::f32, DType::f32, true, 33, 384, true},     {DType::bf16, DType::f32, true, 33, 100, true},
      {DType::f32, DType::f32, true, 20, 7, false},      {DType::f64, DType::f64, true, 9, 600, false},
      {DType::f32, DType::f32, true, 10, 1028, false},   {DType::f32, DType::f32, true, 100, 768, false},
      {DType::bf16, DType::f32, true, 50, 640, false},   {DType::f64, DType::f64, true, 20, 260, false},
      {DType::f32, DType::f32, true, 40, 256, false},    {DType::f32, DType::f32, true, 9, 900, true}};
  for (const Case& cs : cases)
    for (double p : {0.0, 0.2})
      for (int affine = 0; affine < 3; ++affine) {
        INFO(to_string(cs.x0), " + ", cs.has_res ? to_string(cs.res) : "none", " [", cs.rows, ", ", cs.cols, "] p ", p,
             " affine ", affine, cs.misaligned ? " misaligned" : "");
        const Shape shape{cs.rows, cs.cols};
        const DType sum_dt = cs.has_res ? promote_types(cs.x0, cs.res) : cs.x0;
        auto input = [&](DType dt, double scale, double shift) {
          Tensor t = cpu_randn(shape, dt, scale, shift);
          if (!cs.misaligned) return t;
          Tensor base = empty({cs.rows * cs.cols + 1}, {.dtype = dt});
          base.narrow(0, 1, cs.rows * cs.cols).copy_(t.view({-1}));
          return base.narrow(0, 1, cs.rows * cs.cols).view(shape);
        };
        Tensor x0 = input(cs.x0, 1.0, 0.0);
        Tensor res = cs.has_res ? input(cs.res, 2.0, 1.0) : Tensor();
        Tensor w = affine < 2 ? cpu_randn({cs.cols}, sum_dt, 1.0, 1.0) : Tensor();
        Tensor b = affine == 1 ? cpu_randn({cs.cols}, sum_dt) : Tensor();
        Tensor g_out = cpu_randn(shape, DType::f64), g_sum = cpu_randn(shape, DType::f64);
        auto on_gpu = [](const Tensor& t) {
          if (!t.defined()) return Tensor();
          if (t.storage_offset() % 2 == 0) return t.to(gpu());
          // keep the odd offset on the device too
          Tensor base = empty({t.numel() + 1}, {.dtype = t.dtype(), .device = gpu()});
          base.narrow(0, 1, t.numel()).copy_(t.reshape({-1}).to(gpu()));
          return base.narrow(0, 1, t.numel()).view(t.shape());
        };
        const std::uint64_t seed = fresh_seed();
        auto c = run(true, x0, res, w, b, p, true, seed, g_out, g_sum);
        auto g = run(true, on_gpu(x0), on_gpu(res), on_gpu(w), on_gpu(b), p, true, seed, g_out.to(gpu()),
                     g_sum.to(gpu()));
        auto g2 = run(true, on_gpu(x0), on_gpu(res), on_gpu(w), on_gpu(b), p, true, seed, g_out.to(gpu()),
                      g_sum.to(gpu()));
        auto gc = run(false, on_gpu(x0), on_gpu(res), on_gpu(w), on_gpu(b), p, true, seed, g_out.to(gpu()),
                      g_sum.to(gpu()));
        CHECK(g.out.dtype() == cs.x0);
        CHECK(g.sum.dtype() == sum_dt);
        // The same mask as the CPU's and the composite's: the sums agree (to the rounding of the add).
        CHECK_NOTHROW(testing::assert_close(g.sum, c.sum.to(gpu()), parity(sum_dt)));
        CHECK_NOTHROW(testing::assert_close(g.sum, gc.sum, parity(sum_dt)));
        CHECK_NOTHROW(testing::assert_close(g.out, c.out.to(gpu()), parity(cs.x0)));
        CHECK_NOTHROW(testing::assert_close(g.out, gc.out, parity(cs.x0)));
        REQUIRE(g.grads.size() == c.grads.size());
        for (std::size_t i = 0; i < g.grads.size(); ++i) {
          INFO("gradient ", i);
          // dweight/dbias (after x0's and the residual's) are column sums over the rows, in f32
          // on the GPU: atol as in the layer_norm backward case above, sqrt(rows) units of f32
          // at the largest sum.
          testing::CloseOptions o = parity(g.grads[i].dtype());
          if (i >= (cs.has_res ? 2u : 1u) && g.grads[i].dtype() == DType::f32) {
            double big = 0;
            for (double v : c.grads[i].to(DType::f64).to_host<double>()) big = std::max(big, std::abs(v));
            o.atol = std::max(*o.atol, std::sqrt(static_cast<double>(cs.rows)) * 0x1p-24 * big);
          }
          CHECK_NOTHROW(testing::assert_close(g.grads[i], c.grads[i].to(gpu()), o));
          CHECK_NOTHROW(testing::assert_close(g.grads[i], gc.grads[i], o));
          CHECK(same_values(g.grads[i], g2.grads[i]));  // deterministic: no atomics
        }
        CHECK(same_values(g.out, g2.out));
        if (cs.misaligned) {  // run() leaves are fresh copies: the views themselves here, forward
          NoGradGuard no_grad;
          manual_seed(seed);
          auto [mo, ms] = dropout_add_layer_norm(on_gpu(x0), on_gpu(res), on_gpu(w), on_gpu(b), p);
          CHECK(on_gpu(x0).storage_offset() == 1);
          CHECK(same_values(mo, g.out));
          CHECK(same_values(ms, g.sum));
        }
      }
}

TEST_CASE("q, k, v split from one projection: the fused attention writes their gradients in place of the cat") {
  FRESH_SEED();
  const std::int64_t b = 4, t = 64, h = 6, d = 64, c = h * d;
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(to_string(dt));
    Tensor qkv = cpu_randn({b, t, 3 * c}, dt).to(gpu());
    Tensor g = cpu_randn({b, h, t, d}, dt).to(gpu());
    auto heads = [&](const Tensor& z) { return z.reshape({b, t, h, d}).transpose(1, 2); };
    auto grad_of = [&](bool packed) {
      Tensor p = qkv.detach().clone().requires_grad_();
      std::vector<Tensor> parts = split(p, c, -1);
      auto sep = [&](const Tensor& z) { return packed ? heads(z) : heads(z.clone()); };
      manual_seed(5);
      Tensor y = scaled_dot_product_attention(sep(parts[0]), sep(parts[1]), sep(parts[2]),
                                              {.dropout_p = 0.1, .is_causal = true});
      sum(mul(y, g).to(DType::f32)).backward();
      return p.grad();
    };
    Tensor packed = grad_of(true), separate = grad_of(false);
    CHECK(packed.is_contiguous());
    CHECK(same_values(packed, separate));
  }
}

TEST_CASE("a captured step (layer_norm, gelu, dropout, split, dropout_add_layer_norm, clipping) replays the eager step bit for bit") {
  manual_seed(194);
  Tensor x = randn({64, 96}, {.device = gpu()});
  Tensor w1 = (randn({96, 288}, {.device = gpu()}) * 0.1).requires_grad_();
  Tensor lw = ones({96}, {.device = gpu()}).requires_grad_();
  auto step = [&] {
    for (Tensor* p : {&w1, &lw}) p->set_grad(Tensor());
    Tensor h = layer_norm(x, {96}, lw);
    std::vector<Tensor> qkv = split(matmul(h, w1), 96, 1);
    Tensor y = dropout(gelu(qkv[0]) * qkv[1] + qkv[2], 0.2);
    y = dropout_add_layer_norm(y, x, lw, Tensor(), 0.2).first;
    Tensor loss = sum(y * y);
    loss.backward();
    Tensor norm = optim::clip_grad_norm_({w1, lw}, 0.5);
    return std::vector<Tensor>{loss.detach(), norm, w1.grad(), lw.grad()};
  };
  step();  // warm-up: the caching allocator and cuBLAS outside the capture
  std::vector<Tensor> captured;
  cuda::Graph graph;
  graph.capture([&] { captured = step(); });
  manual_seed(4321);
  std::vector<std::vector<Tensor>> eager;
  for (int i = 0; i < 3; ++i) {
    std::vector<Tensor> e = step();
    for (Tensor& t : e) t = t.clone();
    eager.push_back(e);
  }
  manual_seed(4321);
  for (int i = 0; i < 3; ++i) {
    graph.replay();
    INFO("replay ", i);
    for (std::size_t j = 0; j < captured.size(); ++j) {
      INFO("output ", j);
      CHECK(same_values(captured[j], eager[static_cast<std::size_t>(i)][j]));
    }
  }
}
