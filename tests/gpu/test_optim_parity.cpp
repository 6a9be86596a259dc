// Optimizers on the GPU against the CPU backend: several steps of SGD (momentum, dampening,
// nesterov, weight decay, maximize), Adam (amsgrad, weight decay, maximize) and AdamW on the
// same random parameters and gradients, in f32, f64 and bf16; more than 48 parameters (the
// multi-tensor kernel splits its launches) of sizes across chunk boundaries; a parameter
// whose gradient first appears late; clip_grad_norm_ (2-norm and inf-norm); and a full
// training step of an MLP (forward, cross_entropy, backward, clip_grad_norm_, AdamW step,
// zero_grad) under SyncPolicy::error with zero host syncs, then compared with the same steps
// on the CPU. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace brrr::optim;
using namespace test;

namespace {

using test::gpu;

// The same leaf parameters on the CPU and on the GPU (values copied from the CPU).
struct Twin {
  std::vector<Tensor> cpu, gpu;
};

Twin make_params(const std::vector<Shape>& shapes, DType dtype) {
  Twin t;
  for (const Shape& s : shapes) {
    Tensor c = randn(s, {.dtype = DType::f64}).to(dtype);
    c.requires_grad_(true);
    Tensor g = c.detach().clone().to(gpu());  // (clone: never share storage with the CPU twin)
    g.requires_grad_(true);
    t.cpu.push_back(c);
    t.gpu.push_back(g);
  }
  return t;
}

// Fresh random gradients, the same on both sides (drawn on the CPU). `skip` gets none.
void set_grads(Twin& t, std::int64_t skip = -1) {
  for (std::size_t k = 0; k < t.cpu.size(); ++k) {
    if (static_cast<std::int64_t>(k) == skip) {
      t.cpu[k].set_grad(Tensor());
      t.gpu[k].set_grad(Tensor());
      continue;
    }
    Tensor g = randn(t.cpu[k].shape(), {.dtype = DType::f64}).to(t.cpu[k].dtype());
    t.cpu[k].set_grad(g);
    t.gpu[k].set_grad(g.clone().to(gpu()));
  }
}

testing::CloseOptions tol_for(DType dt) { return test::close_options(test::Computed::accumulated, dt); }

void check_twin(const Twin& t, DType dt) {
  for (std::size_t k = 0; k < t.cpu.size(); ++k) {
    INFO("parameter ", k, " of shape ", to_string(t.cpu[k].shape()));
    CHECK_NOTHROW(testing::assert_close(t.gpu[k], t.cpu[k], tol_for(dt)));
  }
}

const std::vector<Shape> mixed_shapes = {{3, 5}, {7}, {}, {8192}, {8193}, {3, 8192}, {0, 4}, {130, 257}};

template <class Opt, class Options>
void parity(const Options& options, DType dt, const std::vector<Shape>& shapes, int steps) {
  Twin t = make_params(shapes, dt);
  Opt oc(t.cpu, options), og(t.gpu, options);
  for (int s = 0; s < steps; ++s) {
    CAPTURE(s);
    // parameter 1 skips the first two steps (its state starts late)
    set_grads(t, s < 2 ? 1 : -1);
    oc.step();
    og.step();
    check_twin(t, dt);
  }
}

}  // namespace

TEST_SUITE("gpu_optim") {

TEST_CASE("SGD: GPU matches CPU over several steps (f32, f64, bf16)") {
  manual_seed(21);
  std::vector<SGDOptions> cases = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.02, .nesterov = true},
      {.lr = 0.05, .momentum = 0.5, .nesterov = true, .maximize = true},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      CAPTURE(dt);
      CAPTURE(c);
      parity<SGD>(cases[c], dt, mixed_shapes, 4);
    }
  }
}

TEST_CASE("Adam and AdamW: GPU matches CPU over several steps (f32, f64, bf16)") {
  manual_seed(22);
  std::vector<AdamOptions> cases = {
      {},
      {.lr = 0.01, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.1},
      {.lr = 0.02, .weight_decay = 0.05, .amsgrad = true},
      {.lr = 0.01, .amsgrad = true, .maximize = true},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      CAPTURE(dt);
      CAPTURE(c);
      parity<Adam>(cases[c], dt, mixed_shapes, 4);
      parity<AdamW>(cases[c], dt, mixed_shapes, 4);
    }
  }
}

TEST_CASE("Adam: the hand-worked amsgrad example on the GPU") {
  for (bool ams : {false, true}) {
    CAPTURE(ams);
    Tensor p = zeros({1}, {.device = gpu(), .requires_grad = true});
    Adam opt({p}, {.lr = 1, .eps = 0, .amsgrad = ams});
    std::vector<double> expected = ams ? std::vector<double>{-1, -1.669723, -2.187162}
                                       : std::vector<double>{-1, -1.670058, -2.188015};
    double g[3] = {1, 0, 0};
    for (int s = 0; s < 3; ++s) {
      p.set_grad(full({1}, g[s], {.device = gpu()}));
      opt.step();
      CHECK(p.to(Device::cpu()).item<float>() == doctest::Approx(expected[s]).epsilon(1e-6));
    }
  }
}

TEST_CASE("optimizers: more than 48 parameters (several launches) and mixed dtypes on the GPU") {
  manual_seed(23);
  std::vector<Shape> shapes;
  for (int i = 0; i < 110; ++i) shapes.push_back({1 + (i * 37) % 300, 1 + i % 5});
  shapes.push_back({20000});
  parity<SGD>(SGDOptions{.lr = 0.1, .momentum = 0.9}, DType::f32, shapes, 3);
  parity<Adam>(AdamOptions{.lr = 0.01, .amsgrad = true}, DType::f32, shapes, 3);

  // f32 and bf16 parameters in one optimizer: two groups, two kernels
  Twin a = make_params({{5, 5}, {9000}}, DType::f32);
  Twin b = make_params({{4, 7}, {10000}}, DType::bf16);
  std::vector<Tensor> pc = a.cpu, pg = a.gpu;
  pc.insert(pc.end(), b.cpu.begin(), b.cpu.end());
  pg.insert(pg.end(), b.gpu.begin(), b.gpu.end());
  AdamW oc(pc, {.lr = 0.05}), og(pg, {.lr = 0.05});
  for (int s = 0; s < 3; ++s) {
    set_grads(a);
    set_grads(b);
    oc.step();
    og.step();
    check_twin(a, DType::f32);
    check_twin(b, DType::bf16);
  }
}

TEST_CASE("optimizers: the step bumps versions, zero_grad works on the GPU") {
  manual_seed(24);
  Twin t = make_params({{4}, {2, 3}}, DType::f32);
  std::uint64_t v0 = t.gpu[0].storage().version();
  SGD opt(t.gpu, {.lr = 0.1});
  set_grads(t);
  opt.step();
  CHECK(t.gpu[0].storage().version() == v0 + 1);
  opt.zero_grad(false);
  CHECK(t.gpu[0].grad().defined());
  CHECK(testing::allclose(t.gpu[0].grad(), zeros({4})));
  opt.zero_grad();
  CHECK_FALSE(t.gpu[1].grad().defined());
}

TEST_CASE("clip_grad_norm_: GPU matches CPU (2-norm, inf-norm, bf16) without a sync") {
  manual_seed(25);
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity(), 1.0}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      CAPTURE(norm_type);
      CAPTURE(dt);
      Twin t = make_params({{30, 40}, {17}, {8193}}, dt);
      set_grads(t);
      for (double max_norm : {1e-2, 1e6}) {
        Tensor nc = clip_grad_norm_(t.cpu, max_norm, norm_type);
        Tensor ng;
        {
          cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
          ng = clip_grad_norm_(t.gpu, max_norm, norm_type);
        }
        CHECK(ng.device() == gpu());
        CHECK(ng.dim() == 0);
        CHECK_NOTHROW(testing::assert_close(ng, nc, {.rtol = 1e-4, .atol = 1e-6}));
        for (std::size_t k = 0; k < t.cpu.size(); ++k)
          CHECK_NOTHROW(testing::assert_close(t.gpu[k].grad(), t.cpu[k].grad(), tol_for(dt)));
      }
    }
  }
}

TEST_CASE("a full training step (forward, cross_entropy, backward, clip, AdamW) makes no host sync") {
  manual_seed(26);
  const std::int64_t batch = 32, in = 20, hidden = 64, classes = 5;
  // weights as raw leaves (no nn module), the same values on both devices
  std::vector<Shape> shapes = {{in, hidden}, {hidden}, {hidden, hidden}, {hidden}, {hidden, classes}, {classes}};
  Twin t = make_params(shapes, DType::f32);
  for (std::size_t k = 0; k < t.cpu.size(); ++k) {
    NoGradGuard ng;
    mul_(t.cpu[k], 0.2);
    mul_(t.gpu[k], 0.2);
  }
  Tensor xc = randn({batch, in});
  Tensor yc = randint(0, classes, {batch});
  Tensor xg = xc.to(gpu()), yg = yc.to(gpu());

  auto forward = [&](const std::vector<Tensor>& w, const Tensor& x) {
    Tensor h = relu(matmul(x, w[0]) + w[1]);
    h = relu(matmul(h, w[2]) + w[3]);
    return matmul(h, w[4]) + w[5];
  };
  AdamW oc(t.cpu, {.lr = 1e-2}), og(t.gpu, {.lr = 1e-2});
  auto train_step = [&](AdamW& opt, const std::vector<Tensor>& w, const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = cross_entropy(forward(w, x), y);
    loss.backward();
    Tensor norm = clip_grad_norm_(w, 1.0);
    opt.step();
    return std::make_pair(loss.detach(), norm);
  };

  // warm up (allocator caches, cuBLAS handles), then steps under SyncPolicy::error
  train_step(og, t.gpu, xg, yg);
  train_step(oc, t.cpu, xc, yc);
  cuda::synchronize(gpu());
  std::vector<Tensor> losses_g, norms_g, losses_c, norms_c;
  std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    for (int s = 0; s < 5; ++s) {
      auto [l, n] = train_step(og, t.gpu, xg, yg);
      losses_g.push_back(l);
      norms_g.push_back(n);
    }
  }
  CHECK(cuda::sync_count() == syncs);
  for (int s = 0; s < 5; ++s) {
    auto [l, n] = train_step(oc, t.cpu, xc, yc);
    losses_c.push_back(l);
    norms_c.push_back(n);
  }
  for (int s = 0; s < 5; ++s) {
    CAPTURE(s);
    CHECK_NOTHROW(testing::assert_close(losses_g[s], losses_c[s], {.rtol = 1e-4, .atol = 1e-5}));
    CHECK_NOTHROW(testing::assert_close(norms_g[s], norms_c[s], {.rtol = 1e-4, .atol = 1e-5}));
  }
  // the loss went down and the parameters agree
  CHECK(losses_g.back().to(Device::cpu()).item<float>() < losses_g.front().to(Device::cpu()).item<float>());
  for (std::size_t k = 0; k < t.cpu.size(); ++k)
    CHECK_NOTHROW(testing::assert_close(t.gpu[k], t.cpu[k], {.rtol = 1e-3, .atol = 1e-4}));
}

}  // TEST_SUITE
