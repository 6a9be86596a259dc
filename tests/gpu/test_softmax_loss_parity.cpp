// Softmax family, losses and layer_norm on the GPU against the CPU backend: every kernel
// path of ops/cuda/rows.cu (warp per row for cols <= 1024 with every elements-per-lane
// variant, the register block kernel with 16-byte vectors and each VPT, the generic block
// kernel for unaligned / odd / very wide rows, the grid-stride loop over more rows than
// blocks), every floating dtype (bf16/f16 with loose tolerances), dims 0/1/-1,
// non-contiguous inputs, infinities and NaN in every path; backward parity of every op;
// cross_entropy(layer_norm(x) ...) forward + backward under SyncPolicy::error. Without a
// CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
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

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

using test::gpu;

testing::CloseOptions tol(DType d) { return test::close_options(test::Computed::accumulated, d, /*equal_nan=*/true); }

std::size_t free_device_bytes() {
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return free_b;
}

// A CPU tensor of `dtype` with N(0, scale) values.
Tensor cpu_randn(Shape shape, DType dtype, double scale = 1.0) {
  return (randn(std::move(shape), {.dtype = DType::f64}) * scale).to(dtype);
}

// A fresh leaf requiring grad with t's values on `dev` (never t's own handle).
Tensor leaf(const Tensor& t, Device dev) { return t.detach().to(dev).clone().requires_grad_(); }

// The row widths that reach each kernel path (see ops/cuda/rows.cu).
const std::vector<std::int64_t> row_widths = {1,    5,    32,   33,   64,   100,  250,  512,  1000, 1024,
                                              1025, 1028, 1032, 2000, 2048, 4096, 8192, 9000, 32768, 50257};

}  // namespace

TEST_CASE("softmax/log_softmax parity across kernel paths and dtypes") {
  manual_seed(11);
  for (std::int64_t cols : row_widths) {
    const std::int64_t rows = cols >= 8192 ? 7 : 37;
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      Tensor x = cpu_randn({rows, cols}, dtype, 4.0);
      Tensor xg = x.to(gpu());
      for (bool log : {false, true}) {
        INFO("cols ", cols, " ", to_string(dtype), log ? " log_softmax" : " softmax");
        Tensor want = log ? log_softmax(x, 1) : softmax(x, 1);
        Tensor got = log ? log_softmax(xg, 1) : softmax(xg, 1);
        CHECK(got.device() == gpu());
        CHECK_NOTHROW(testing::assert_close(got, want, tol(dtype)));
      }
    }
  }
}

TEST_CASE("softmax parity: other dims, non-contiguous and unaligned inputs, 0-d, empty") {
  manual_seed(12);
  Tensor x = cpu_randn({6, 40, 9}, DType::f32, 3.0);
  Tensor xg = x.to(gpu());
  for (std::int64_t dim : {0, 1, 2, -1, -3}) {
    INFO("dim ", dim);
    CHECK_NOTHROW(testing::assert_close(softmax(xg, dim), softmax(x, dim), tol(DType::f32)));
    CHECK_NOTHROW(testing::assert_close(log_softmax(xg, dim), log_softmax(x, dim), tol(DType::f32)));
  }
  CHECK_NOTHROW(testing::assert_close(softmax(xg.transpose(0, 2), 1), softmax(x.transpose(0, 2), 1), tol(DType::f32)));
  CHECK_NOTHROW(testing::assert_close(softmax(xg.slice(1, 1, 40, 3), 1), softmax(x.slice(1, 1, 40, 3), 1), tol(DType::f32)));
  // A contiguous view whose data starts 4 bytes past a 16-byte boundary: the vector kernels
  // must not be used (generic path), results unchanged.
  for (std::int64_t cols : {1028, 4096}) {
    INFO("unaligned cols ", cols);
    Tensor flat = cpu_randn({3 * cols + 1}, DType::f32, 2.0);
    Tensor xc = flat.slice(0, 1, 3 * cols + 1).view({3, cols});
    Tensor xcg = flat.to(gpu()).slice(0, 1, 3 * cols + 1).view({3, cols});
    CHECK(xcg.is_contiguous());
    CHECK_NOTHROW(testing::assert_close(softmax(xcg, 1), softmax(xc, 1), tol(DType::f32)));
    CHECK_NOTHROW(testing::assert_close(log_softmax(xcg, 1), log_softmax(xc, 1), tol(DType::f32)));
  }
  Tensor s = full({}, 2.0, {.device = gpu()});
  CHECK(softmax(s).item<float>() == 1.0f);
  CHECK(softmax(zeros({0, 5}, {.device = gpu()}), 1).shape() == Shape{0, 5});
  CHECK(softmax(zeros({5, 0}, {.device = gpu()}), 1).shape() == Shape{5, 0});
}

TEST_CASE("softmax infinities and NaN in every kernel path") {
  for (std::int64_t cols : {5, 64, 1024, 1025, 2048, 50257}) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      INFO("cols ", cols, " ", to_string(dtype));
      // row 0: all -inf; row 1: finite with some -inf (even a whole leading block);
      // row 2: one +inf; row 3: one NaN; row 4: huge logits.
      std::vector<double> v(static_cast<std::size_t>(5 * cols));
      std::mt19937_64 rng(static_cast<std::uint64_t>(cols));
      std::normal_distribution<double> nd(0, 2);
      for (auto& e : v) e = nd(rng);
      for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(c)] = -inf;
      for (std::int64_t c = 0; c < cols; ++c)
        if (c < cols / 2 || c % 3 == 0) v[static_cast<std::size_t>(cols + c)] = -inf;
      v[static_cast<std::size_t>(cols + cols - 1)] = 0.5;  // at least one finite
      v[static_cast<std::size_t>(2 * cols + cols / 2)] = inf;
      v[static_cast<std::size_t>(3 * cols + cols / 3)] = nan_v;
      for (std::int64_t c = 0; c < cols; ++c) v[static_cast<std::size_t>(4 * cols + c)] += 1e4;
      Tensor x = make(dtype, v, {5, cols});
      Tensor xg = x.to(gpu());
      CHECK_NOTHROW(testing::assert_close(softmax(xg, 1), softmax(x, 1), tol(dtype)));
      CHECK_NOTHROW(testing::assert_close(log_softmax(xg, 1), log_softmax(x, 1), tol(dtype)));
      std::vector<double> got = values(softmax(xg, 1));
      CHECK(std::isnan(got[0]));
      CHECK(std::isnan(got[static_cast<std::size_t>(2 * cols)]));
      CHECK(std::isnan(got[static_cast<std::size_t>(3 * cols)]));
      CHECK_FALSE(std::isnan(got[static_cast<std::size_t>(2 * cols - 1)]));
    }
  }
}

TEST_CASE("softmax over more rows than blocks (grid-stride loops)") {
  manual_seed(13);
  // Warp kernel: 4 rows per block, at most 2^20 blocks -> more than 4M rows loop.
  {
    const std::int64_t rows = (std::int64_t(1) << 22) + 77, cols = 3;
    Tensor xg = randn({rows, cols}, {.device = gpu()});
    Tensor yg = softmax(xg, 1);
    CHECK_NOTHROW(testing::assert_close(sum(yg, {1}), ones({rows}, {.device = gpu()}), {.rtol = 1e-5, .atol = 1e-6}));
    Tensor tail = xg.slice(0, rows - 500, rows).to(Device::cpu());
    CHECK_NOTHROW(testing::assert_close(yg.slice(0, rows - 500, rows), softmax(tail, 1), tol(DType::f32)));
  }
  // Block kernels: one row per block, at most 2^20 blocks.
  const std::int64_t rows = (std::int64_t(1) << 20) + 300, cols = 1032;
  if (free_device_bytes() > static_cast<std::size_t>(rows * cols) * 2 * 6) {
    Tensor xg = randn({rows, cols}, {.dtype = DType::bf16, .device = gpu()});
    Tensor yg = log_softmax(xg, 1);
    Tensor tail = xg.slice(0, rows - 400, rows).to(Device::cpu());
    CHECK_NOTHROW(testing::assert_close(yg.slice(0, rows - 400, rows), log_softmax(tail, 1), tol(DType::bf16)));
    Tensor ln = layer_norm(xg, {cols});
    CHECK_NOTHROW(testing::assert_close(ln.slice(0, rows - 400, rows), layer_norm(tail, {cols}), tol(DType::bf16)));
  }
}

TEST_CASE("layer_norm parity across kernel paths, dtypes, affine or not") {
  manual_seed(14);
  for (std::int64_t cols : {1, 8, 100, 1000, 1024, 1025, 1032, 2048, 4096, 9000, 40000}) {
    const std::int64_t rows = cols >= 9000 ? 5 : 33;
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      Tensor x = (cpu_randn({rows, cols}, DType::f64, 2.0) + 3.0).to(dtype);
      Tensor w = cpu_randn({cols}, dtype), b = cpu_randn({cols}, dtype);
      Tensor xg = x.to(gpu()), wg = w.to(gpu()), bg = b.to(gpu());
      for (int affine = 0; affine < 4; ++affine) {
        INFO("cols ", cols, " ", to_string(dtype), " affine ", affine);
        const bool uw = affine & 1, ub = affine & 2;
        Tensor want = layer_norm(x, {cols}, uw ? w : Tensor(), ub ? b : Tensor());
        Tensor got = layer_norm(xg, {cols}, uw ? wg : Tensor(), ub ? bg : Tensor());
        testing::CloseOptions o = tol(dtype);
        if (dtype == DType::f32) o = {.rtol = 1e-4, .atol = 1e-4, .equal_nan = true};
        CHECK_NOTHROW(testing::assert_close(got, want, o));
      }
    }
  }
  // Multi-dim normalized_shape and a non-contiguous input.
  Tensor x = cpu_randn({4, 6, 5, 7}, DType::f32);
  Tensor w = cpu_randn({5, 7}, DType::f32), b = cpu_randn({5, 7}, DType::f32);
  CHECK_NOTHROW(testing::assert_close(layer_norm(x.to(gpu()), {5, 7}, w.to(gpu()), b.to(gpu())),
                                      layer_norm(x, {5, 7}, w, b), {.rtol = 1e-4, .atol = 1e-4}));
  Tensor xt = x.transpose(1, 3);  // [4, 7, 5, 6]
  CHECK_NOTHROW(testing::assert_close(layer_norm(x.to(gpu()).transpose(1, 3), {6}), layer_norm(xt, {6}),
                                      {.rtol = 1e-4, .atol = 1e-4}));
  CHECK(layer_norm(zeros({0, 8}, {.device = gpu()}), {8}).shape() == Shape{0, 8});
}

TEST_CASE("backward parity: softmax, log_softmax, layer_norm") {
  manual_seed(15);
  for (std::int64_t cols : {7, 300, 2048, 1025}) {
    INFO("cols ", cols);
    Tensor x = cpu_randn({9, cols}, DType::f32, 2.0), g = cpu_randn({9, cols}, DType::f32);
    Tensor w = cpu_randn({cols}, DType::f32), b = cpu_randn({cols}, DType::f32);
    for (int op = 0; op < 3; ++op) {
      INFO("op ", op);
      auto run = [&](Device dev) {
        Tensor xx = leaf(x, dev), ww = leaf(w, dev), bb = leaf(b, dev);
        Tensor y = op == 0 ? softmax(xx, 1) : op == 1 ? log_softmax(xx, 0) : layer_norm(xx, {cols}, ww, bb);
        (y * g.to(dev)).sum().backward();
        return std::vector<Tensor>{xx.grad(), op == 2 ? ww.grad() : Tensor(), op == 2 ? bb.grad() : Tensor()};
      };
      auto c = run(Device::cpu()), d = run(gpu());
      CHECK_NOTHROW(testing::assert_close(d[0], c[0], {.rtol = 1e-4, .atol = 1e-5}));
      if (op == 2) {
        CHECK_NOTHROW(testing::assert_close(d[1], c[1], {.rtol = 1e-4, .atol = 1e-4}));
        CHECK_NOTHROW(testing::assert_close(d[2], c[2], {.rtol = 1e-4, .atol = 1e-4}));
      }
    }
  }
  // bf16 layer_norm backward (statistics and arithmetic in f32 on both sides).
  Tensor x = cpu_randn({16, 256}, DType::bf16), w = cpu_randn({256}, DType::bf16);
  auto run = [&](Device dev) {
    Tensor xx = leaf(x, dev), ww = leaf(w, dev);
    (layer_norm(xx, {256}, ww) * 0.5).sum().backward();
    return std::vector<Tensor>{xx.grad(), ww.grad()};
  };
  auto c = run(Device::cpu()), d = run(gpu());
  CHECK_NOTHROW(testing::assert_close(d[0], c[0], {.rtol = 3e-2, .atol = 3e-2}));
  CHECK_NOTHROW(testing::assert_close(d[1], c[1], {.rtol = 3e-2, .atol = 1e-1}));
}

TEST_CASE("loss parity, forward and backward: cross_entropy, nll_loss, mse_loss, bce_with_logits") {
  manual_seed(16);
  std::mt19937_64 rng(16);
  for (std::int64_t c : {10, 1000, 50257}) {
    const std::int64_t n = c > 1000 ? 6 : 64;
    std::uniform_int_distribution<std::int64_t> cls(0, c - 1);
    std::vector<std::int64_t> tv(static_cast<std::size_t>(n));
    for (auto& t : tv) t = cls(rng);
    tv[1] = -100;
    Tensor target = Tensor::from_vector(tv);
    Tensor logits = cpu_randn({n, c}, DType::f32, 3.0);
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      for (double e : {0.0, 0.1}) {
        INFO("C ", c, " reduction ", static_cast<int>(red), " label_smoothing ", e);
        auto run = [&](Device dev) {
          Tensor l = leaf(logits, dev);
          Tensor loss = cross_entropy(l, target.to(dev), {.reduction = red, .label_smoothing = e});
          (red == Reduction::none ? loss.sum() : loss).backward();
          return std::vector<Tensor>{loss, l.grad()};
        };
        auto cp = run(Device::cpu()), gp = run(gpu());
        CHECK_NOTHROW(testing::assert_close(gp[0], cp[0], {.rtol = 1e-4, .atol = 1e-5}));
        CHECK_NOTHROW(testing::assert_close(gp[1], cp[1], {.rtol = 1e-4, .atol = 1e-6}));
      }
    }
    // nll_loss on i32 targets.
    Tensor lp = log_softmax(logits, 1);
    Tensor t32 = target.to(DType::i32);
    CHECK_NOTHROW(testing::assert_close(nll_loss(lp.to(gpu()), t32.to(gpu())), nll_loss(lp, t32), {.rtol = 1e-5, .atol = 1e-6}));
  }
  // All targets ignored: NaN mean, zero gradient, on the GPU too.
  {
    Tensor l = randn({3, 4}, {.device = gpu(), .requires_grad = true});
    Tensor loss = cross_entropy(l, full({3}, -100.0, {.dtype = DType::i64, .device = gpu()}));
    loss.backward();
    CHECK(std::isnan(loss.item<float>()));
    CHECK_NOTHROW(testing::assert_close(l.grad(), zeros({3, 4}, {.device = gpu()})));
  }
  // mse_loss with a broadcast target; bce with logits with pos_weight.
  Tensor a = cpu_randn({8, 5}, DType::f32), t = cpu_randn({5}, DType::f32);
  Tensor bt = rand({8, 5}), pw = rand({5}) + 0.5;
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
    INFO("reduction ", static_cast<int>(red));
    auto run = [&](Device dev) {
      Tensor aa = leaf(a, dev), tt = leaf(t, dev);
      Tensor bb = leaf(bt, dev), pp = leaf(pw, dev);
      Tensor m = mse_loss(aa, tt, red);
      Tensor b = binary_cross_entropy_with_logits(aa, bb, red, pp);
      Tensor b0 = binary_cross_entropy_with_logits(aa, bb, red);
      (m.sum() + b.sum() * 2.0 + b0.sum() * 3.0).backward();
      return std::vector<Tensor>{m, b, b0, aa.grad(), tt.grad(), bb.grad(), pp.grad()};
    };
    auto cp = run(Device::cpu()), gp = run(gpu());
    for (std::size_t i = 0; i < cp.size(); ++i) {
      INFO("result ", i);
      CHECK_NOTHROW(testing::assert_close(gp[i], cp[i], {.rtol = 1e-4, .atol = 1e-5}));
    }
  }
}

TEST_CASE("cross_entropy on CUDA: an out-of-range target is a deferred error, never a sync") {
  Tensor logits = randn({4, 3}, {.device = gpu()});
  Tensor bad = full({4}, 7.0, {.dtype = DType::i64, .device = gpu()});
  Tensor loss;
  {
    cuda::SyncPolicyGuard guard(cuda::SyncPolicy::error);  // the call itself must not wait
    CHECK_NOTHROW(loss = cross_entropy(logits, bad, {.reduction = Reduction::none}));
  }
  CHECK(loss.shape() == Shape{4});
  // Reported at the next sync point (docs/semantics.md, "Indexing").
  CHECK_THROWS_AS(cuda::synchronize(gpu()), Error);
  // The flag is cleared once reported: the device is usable again.
  Tensor ok = cross_entropy(logits, full({4}, 1.0, {.dtype = DType::i64, .device = gpu()}));
  CHECK(std::isfinite(ok.item<float>()));
}

TEST_CASE("cross_entropy parity: [N, C, d] inputs, i32 targets, bf16/f16/f64 logits") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> cls(0, 4);
  std::vector<std::int64_t> tv(3 * 7);
  for (auto& t : tv) t = cls(rng);
  tv[4] = 2;  // ignored below
  Tensor target = Tensor::from_vector(tv, {3, 7});
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    Tensor logits = cpu_randn({3, 5, 7}, DType::f32, 2.0).to(dt);
    for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none}) {
      INFO("dtype ", to_string(dt), " reduction ", static_cast<int>(red));
      auto run = [&](Device dev) {
        Tensor l = leaf(logits, dev);
        Tensor loss = cross_entropy(l, target.to(DType::i32).to(dev),
                                    {.reduction = red, .ignore_index = 2, .label_smoothing = 0.1});
        (red == Reduction::none ? loss.sum() : loss).backward();
        return std::vector<Tensor>{loss, l.grad()};
      };
      auto cp = run(Device::cpu()), gp = run(gpu());
      const double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 2e-2;
      CHECK(gp[0].dtype() == dt);
      CHECK_NOTHROW(testing::assert_close(gp[0], cp[0], {.rtol = tol, .atol = tol}));
      CHECK_NOTHROW(testing::assert_close(gp[1], cp[1], {.rtol = tol, .atol = tol}));
    }
  }
}

TEST_CASE("cross_entropy(layer_norm(x) W) forward + backward under SyncPolicy::error") {
  manual_seed(17);
  const std::int64_t n = 32, d = 64, c = 10;
  Tensor x = cpu_randn({n, d}, DType::f32), w = cpu_randn({d, c}, DType::f32, 0.2);
  Tensor gamma = cpu_randn({d}, DType::f32), beta = cpu_randn({d}, DType::f32);
  std::vector<std::int64_t> tv(n);
  for (std::int64_t i = 0; i < n; ++i) tv[static_cast<std::size_t>(i)] = (i * 7) % c;
  tv[3] = -100;
  Tensor target = Tensor::from_vector(tv);

  std::uint64_t syncs = 0;  // host waits inside the guarded region
  auto step = [&](Device dev, bool guarded) {
    Tensor xx = leaf(x, dev), ww = leaf(w, dev);
    Tensor gg = leaf(gamma, dev), bb = leaf(beta, dev);
    Tensor tt = target.to(dev);
    Tensor loss;
    {
      cuda::SyncPolicyGuard guard(guarded ? cuda::SyncPolicy::error : cuda::sync_policy());
      const std::uint64_t before = cuda::sync_count();
      Tensor h = layer_norm(xx, {d}, gg, bb);
      loss = cross_entropy(matmul(h, ww), tt, {.label_smoothing = 0.05});
      loss.backward();
      // and a softmax / log_softmax / mse / bce on the way, all sync-free
      Tensor p = softmax(h, 1);
      Tensor q = log_softmax(h, 0);
      Tensor extra = mse_loss(p, q) + binary_cross_entropy_with_logits(h, p.detach());
      (void)extra;
      syncs = cuda::sync_count() - before;
    }
    return std::vector<Tensor>{loss, xx.grad(), ww.grad(), gg.grad(), bb.grad()};
  };
  std::vector<Tensor> g;
  CHECK_NOTHROW(g = step(gpu(), true));
  CHECK(syncs == 0);
  auto c_ = step(Device::cpu(), false);
  REQUIRE(g.size() == c_.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("result ", i);
    CHECK_NOTHROW(testing::assert_close(g[i], c_[i], {.rtol = 1e-3, .atol = 1e-5}));
  }
}
