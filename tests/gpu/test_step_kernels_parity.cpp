// The fused kernels of a transformer training step (issue 19) on the GPU against the CPU
// backend: layer_norm's backward (layer_norm_backward: the warp kernel for rows up to 1024
// elements (512 f64) with every elements-per-lane variant and more rows than the 1024 blocks
// of partial sums, the block kernel and the column sums of wider rows; every floating dtype,
// weight and bias each optional, f32 weights on bf16 inputs), gelu_backward, the fused
// dropout (the same bits as the CPU's), clip_grad_norm_'s multi-tensor kernels (more than one
// launch of 64 tensors, mixed dtypes); every result bit-identical run to run, and a captured
// step replayed equal to the eager one bit for bit. Without a CUDA device the suite exits 77
// (skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

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

TEST_CASE("a captured step (layer_norm, gelu, dropout, split, clipping) replays the eager step bit for bit") {
  manual_seed(194);
  Tensor x = randn({64, 96}, {.device = gpu()});
  Tensor w1 = (randn({96, 288}, {.device = gpu()}) * 0.1).requires_grad_();
  Tensor lw = ones({96}, {.device = gpu()}).requires_grad_();
  auto step = [&] {
    for (Tensor* p : {&w1, &lw}) p->set_grad(Tensor());
    Tensor h = layer_norm(x, {96}, lw);
    std::vector<Tensor> qkv = split(matmul(h, w1), 96, 1);
    Tensor y = dropout(gelu(qkv[0]) * qkv[1] + qkv[2], 0.2);
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
