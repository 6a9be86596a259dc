// brrr.nn on the GPU against the CPU: a model built on the CPU with a seed and moved to the
// GPU (.to(Device::cuda(0))) gives the same forward outputs and parameter gradients (an MLP,
// a small CNN Conv2d-ReLU-MaxPool2d-Flatten-Linear, a CausalSelfAttention block with and
// without attention dropout); init on a CUDA tensor equals init on a CPU tensor for the same
// seed; Module::to keeps the parameter handles; state dicts load across devices; a training
// step (forward, backward, update) runs under SyncPolicy::error. Without a CUDA device the
// suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using test::gpu;

// f32 math on two backends (different summation orders in GEMMs and reductions).
testing::CloseOptions f32_tol() { return {.rtol = 1e-4, .atol = 1e-5}; }

// Builds the same model twice from one seed: one stays on the CPU, one moves to the GPU.
// Checks that the parameters match exactly after the move.
template <class Make>
std::pair<nn::Module, nn::Module> twin(std::uint64_t seed, Make make) {
  manual_seed(seed);
  nn::Module cpu_model = make();
  manual_seed(seed);
  nn::Module gpu_model = make();
  gpu_model.to(gpu());
  auto a = cpu_model.named_parameters(), b = gpu_model.named_parameters();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    CHECK(b[i].second.device() == gpu());
    CHECK(b[i].second.is_leaf());
    CHECK(b[i].second.requires_grad());
    testing::assert_close(b[i].second, a[i].second, {.rtol = 0, .atol = 0});
  }
  return {cpu_model, gpu_model};
}

// Forward both models on the same input, backward a weighted sum, compare outputs and every
// parameter gradient.
void check_parity(const nn::Module& cpu_model, const nn::Module& gpu_model, const Tensor& x,
                  testing::CloseOptions tol = f32_tol()) {
  Tensor y_cpu = cpu_model(x);
  Tensor y_gpu = gpu_model(x.to(gpu()));
  CHECK(y_gpu.device() == gpu());
  testing::assert_close(y_gpu, y_cpu, tol);
  Tensor r = randn(y_cpu.shape());
  sum(mul(y_cpu, r)).backward();
  sum(mul(y_gpu, r.to(gpu()))).backward();
  auto a = cpu_model.named_parameters(), b = gpu_model.named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    REQUIRE(a[i].second.grad().defined());
    REQUIRE(b[i].second.grad().defined());
    CHECK(b[i].second.grad().device() == gpu());
    testing::assert_close(b[i].second.grad(), a[i].second.grad(), tol);
  }
}

}  // namespace

TEST_CASE("MLP: same forward and gradients on CPU and GPU") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  auto [cpu_model, gpu_model] = twin(seed, [] {
    return nn::Sequential{nn::Linear(20, 64), nn::ReLU(), nn::Linear(64, 32), nn::GELU(), nn::Linear(32, 10)};
  });
  manual_seed(seed + 1);
  check_parity(cpu_model, gpu_model, randn({16, 20}));
}

TEST_CASE("Small CNN: Conv2d-ReLU-MaxPool2d-Flatten-Linear parity") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  auto [cpu_model, gpu_model] = twin(seed, [] {
    return nn::Sequential{nn::Conv2d(3, 8, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                          nn::Linear(8 * 6 * 6, 10)};
  });
  manual_seed(seed + 1);
  check_parity(cpu_model, gpu_model, randn({4, 3, 12, 12}));
}

TEST_CASE("CausalSelfAttention block: parity without and with attention dropout") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  auto make = [] {
    return nn::Sequential{nn::LayerNorm({32}), nn::CausalSelfAttention(32, 4), nn::Linear(32, 32)};
  };
  {
    auto [cpu_model, gpu_model] = twin(seed, make);
    manual_seed(seed + 1);
    check_parity(cpu_model, gpu_model, randn({3, 7, 32}));
  }
  {
    // Dropout masks come from each device's generator at the same offset: identical.
    auto [cpu_model, gpu_model] = twin(seed, [] { return nn::CausalSelfAttention(16, 2, 0.3); });
    manual_seed(seed + 2);
    Tensor x = randn({2, 9, 16});
    manual_seed(seed + 3);  // resets the CPU and GPU generators alike
    check_parity(cpu_model, gpu_model, x);
  }
}

TEST_CASE("init on a CUDA tensor equals init on a CPU tensor for the same seed") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  using Init = std::function<void(const Tensor&)>;
  std::vector<std::pair<const char*, Init>> inits = {
      {"normal_", [](const Tensor& t) { nn::init::normal_(t, 0.5, 0.02); }},
      {"uniform_", [](const Tensor& t) { nn::init::uniform_(t, -3, 2); }},
      {"xavier_uniform_", [](const Tensor& t) { nn::init::xavier_uniform_(t); }},
      {"xavier_normal_", [](const Tensor& t) { nn::init::xavier_normal_(t, 1.5); }},
      {"kaiming_uniform_", [](const Tensor& t) { nn::init::kaiming_uniform_(t, std::sqrt(5.0)); }},
      {"kaiming_normal_", [](const Tensor& t) { nn::init::kaiming_normal_(t, 0, "fan_out", "relu"); }},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (const auto& [name, fn] : inits) {
      INFO(name, " ", to_string(dt));
      Tensor c = empty({33, 17, 3}, {.dtype = dt});
      Tensor g = empty({33, 17, 3}, {.dtype = dt, .device = gpu()});
      manual_seed(seed);
      fn(c);
      manual_seed(seed);
      fn(g);
      // Same words, same transform, the same f32/f64 scale-and-shift on both sides.
      testing::assert_close(g, c, {.rtol = 1e-6, .atol = 1e-7});
    }
  }
}

TEST_CASE("Module::to(cuda) keeps handles; state dicts load across devices") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Sequential model{nn::Linear(5, 6), nn::Tanh(), nn::Linear(6, 2)};
  std::vector<Tensor> before = model.parameters();
  model.to(gpu());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(before[i].device() == gpu());
    CHECK(before[i].is_same(model.parameters()[i]));
  }
  // An optimizer-style update through a handle taken before .to() reaches the GPU model.
  Tensor x = randn({4, 5}, {.device = gpu()});
  sum(model(x)).backward();
  Tensor w_before = before[0].clone();
  {
    NoGradGuard g;
    add_(before[0], before[0].grad(), -0.5);
  }
  testing::assert_close(model.parameters()[0], sub(w_before, mul(before[0].grad(), 0.5)), f32_tol());

  // GPU state into a CPU model and back.
  manual_seed(seed + 1);
  nn::Sequential cpu_copy{nn::Linear(5, 6), nn::Tanh(), nn::Linear(6, 2)};
  cpu_copy.load_state_dict(model.state_dict());
  for (const auto& [k, t] : cpu_copy.state_dict()) {
    CHECK(t.device() == Device::cpu());
    testing::assert_close(t, model.state_dict().at(k), {.rtol = 0, .atol = 0});
  }
  testing::assert_close(model(x), cpu_copy(x.to(Device::cpu())), f32_tol());
  model.to(Device::cpu());
  CHECK(before[2].device() == Device::cpu());
}

TEST_CASE("A training step runs under SyncPolicy::error") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Sequential model{nn::Conv2d(1, 4, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 3 * 3, 16),
                       nn::Dropout(0.1), nn::Linear(16, 3)};
  model.to(gpu());
  nn::CausalSelfAttention attn(8, 2, 0.1);
  attn.to(gpu());
  std::vector<Tensor> params = model.parameters();
  for (const Tensor& p : attn.parameters()) params.push_back(p);
  Tensor loss;
  {
    cuda::SyncPolicyGuard guard(cuda::SyncPolicy::error);
    for (int step = 0; step < 3; ++step) {
      for (const Tensor& p : params) p.set_grad(Tensor());
      Tensor x = randn({8, 1, 8, 8}, {.device = gpu()});
      Tensor s = randn({2, 5, 8}, {.device = gpu()});
      loss = add(mean(mul(model(x), model(x))), mean(attn(s)));
      loss.backward();
      NoGradGuard g;
      for (const Tensor& p : params) add_(p, p.grad(), -0.01);
    }
  }
  CHECK(std::isfinite(loss.item<float>()));
}
