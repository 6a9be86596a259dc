// Issue 16's surface on cuda:0 against the CPU: x.index with slices, index tensors and masks,
// index_put_ (accumulate too) and their gradients; compound assignment (one kernel and the
// recorded path) under SyncPolicy::error; the batch transforms (the same seed gives the same
// crops and flips on both devices, no host sync); autograd::Function on the GPU; item<T>()
// converting from a CUDA tensor; pinned = true with a GPU is pinned; an optimizer state dict
// saved from the GPU loads on the CPU and continues identically to a CPU-only run's state.
// Without a CUDA device the suite exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace brrr::indexing;
using namespace test;

namespace {
void same(const Tensor& a, const Tensor& b, double tol = 0) {
  testing::assert_close(a, b, {.rtol = tol, .atol = tol});
}
}  // namespace

TEST_CASE("index and index_put_ on the GPU match the CPU") {
  FRESH_SEED();
  Tensor x = randn({4, 5, 6}, {.dtype = DType::f64});
  Tensor xg = x.to(gpu());
  Tensor i1 = Tensor::from_vector(std::vector<std::int64_t>{3, -1, 0});
  Tensor i2 = Tensor::from_vector(std::vector<std::int64_t>{2, 2, 5});
  same(xg.index({Slice(1, None, 2), Ellipsis, 3}), x.index({Slice(1, None, 2), Ellipsis, 3}));
  same(xg.index({i1.to(gpu()), Slice(), i2.to(gpu())}), x.index({i1, Slice(), i2}));
  same(xg.index({Slice(), i1.to(gpu()) + 1, i2.to(gpu())}), x.index({Slice(), i1 + 1, i2}));
  same(xg.index({xg > 0}), x.index({x > 0}));
  Tensor v = randn({3, 5}, {.dtype = DType::f64});
  Tensor a = x.clone(), ag = xg.clone();
  a.index_put_({i1, Slice(), i2}, v, true);
  ag.index_put_({i1.to(gpu()), Slice(), i2.to(gpu())}, v.to(gpu()), true);
  same(ag, a, 1e-12);
  ag.index_put_({ag < 0}, 0.0);
  a.index_put_({a < 0}, 0.0);
  same(ag, a);
  // Gradients through index on the GPU.
  Tensor w = x.clone().requires_grad_(), wg = xg.clone().requires_grad_();
  (w.index({i1, Slice(), i2}) * 2.0).sum().backward();
  (wg.index({i1.to(gpu()), Slice(), i2.to(gpu())}) * 2.0).sum().backward();
  same(wg.grad(), w.grad());
}

TEST_CASE("compound assignment on the GPU: one kernel, no host sync; the recorded path") {
  FRESH_SEED();
  Tensor x = randn({64, 32}, {.device = gpu()}), y = randn({32}, {.device = gpu()});
  Tensor xc = x.to(Device::cpu()), yc = y.to(Device::cpu());
  cuda::synchronize();
  {
    cuda::set_sync_policy(cuda::SyncPolicy::error);
    x += y;
    x *= 0.5;
    x -= y * y;
    x /= 3;
    cuda::set_sync_policy(cuda::SyncPolicy::allow);
  }
  xc += yc;
  xc *= 0.5;
  xc -= yc * yc;
  xc /= 3;
  same(x, xc, 1e-6);
  Tensor p = randn({8}, {.device = gpu()}).requires_grad_();
  Tensor h = p * 2.0;
  h *= p;  // h = 2 p^2, recorded
  h.sum().backward();
  same(p.grad(), p.detach() * 4.0, 1e-6);
}

TEST_CASE("transforms: the same seed gives the same batch on CPU and GPU, without a sync") {
  FRESH_SEED();
  Tensor x = rand({16, 3, 12, 12});
  data::transforms::Compose t{data::transforms::RandomCrop(10, 2), data::transforms::RandomHorizontalFlip(),
                              data::transforms::Normalize({0.5, 0.4, 0.3}, {0.2, 0.2, 0.2})};
  Tensor xg = x.to(gpu());
  (void)t(xg);  // the Normalize constants reach the device once
  manual_seed(seed_ + 1);
  Tensor c = t(x);
  manual_seed(seed_ + 1);
  cuda::synchronize();
  cuda::set_sync_policy(cuda::SyncPolicy::error);
  Tensor g = t(xg);
  cuda::set_sync_policy(cuda::SyncPolicy::allow);
  same(g, c, 1e-6);
}

namespace {
struct Square : autograd::Function<Square> {
  static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return x * x;
  }
  static autograd::tensor_list backward(autograd::AutogradContext* ctx, autograd::tensor_list g) {
    return {g[0] * ctx->get_saved_variables()[0] * 2.0};
  }
};
}  // namespace

TEST_CASE("autograd::Function, item<T>() and pinned memory with a GPU") {
  FRESH_SEED();
  Tensor x = randn({5}, {.device = gpu()}).requires_grad_();
  Square::apply(x).sum().backward();
  same(x.grad(), x.detach() * 2.0, 1e-6);
  CHECK(full({}, 3.75, {.device = gpu()}).item<std::int64_t>() == 3);
  CHECK(full({}, 7, {.dtype = DType::i32, .device = gpu()}).item<double>() == 7.0);
  CHECK(empty({4}, {.pinned = true}).is_pinned());
}

TEST_CASE("an optimizer state dict moves between devices") {
  FRESH_SEED();
  Tensor pc = randn({6}).requires_grad_();
  Tensor pg = pc.detach().to(gpu()).requires_grad_();
  optim::Adam oc({pc}), og({pg});
  for (int s = 0; s < 3; ++s) {
    Tensor g = randn({6});
    pc.set_grad(g);
    pg.set_grad(g.to(gpu()));
    oc.step();
    og.step();
  }
  optim::Adam loaded({pc});
  loaded.load_state_dict(og.state_dict());
  auto a = oc.state_dict(), b = loaded.state_dict();
  for (const auto& [k, v] : a) {
    INFO("key ", k);
    same(b.at(k), v, 1e-6);
  }
}
