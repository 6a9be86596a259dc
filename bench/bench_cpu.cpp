// bench_cpu: the CPU backend's workloads of issue 18, each timed as the median wall time of
// repeated runs on the CPU (f32): GEMM at the three forward shapes of the Fashion-MNIST MLP,
// sum of 16M, softmax of [4096, 1024], exp of 4M, randn of 1M, and a whole training step
// of that MLP (784-512-256-10, batch 128, two dropouts, cross_entropy with label smoothing
// 0.1, AdamW); max_pool2d(2) forward + backward at the Fashion-MNIST CNN's two pool shapes
// ([128, 32, 28, 28] and [128, 64, 14, 14]); the convolution of that CNN's second layer
// (32 -> 64 channels, 3x3, padding 1, 14x14, batch 128) forward and forward + backward, and a
// whole training step of the Fashion-MNIST CNN (examples/fashion_mnist.cpp:
// conv32-pool-conv64-pool-fc128 with two dropouts, same loss and optimizer).
// bench/torch_cpu.py is its PyTorch twin: same workloads, same method.
// usage: bench_cpu [threads [prefix]]   (threads default: get_num_threads(); with a prefix,
// only the rows whose names start with it run, e.g. for a profiler); prints "name ms" lines,
// then one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include "common.hpp"
#include "ops/cpu/isa/kernels.hpp"  // the CPU capability in use, printed

using namespace brrr;

namespace {

// Median milliseconds of f over `reps` runs after `warmup` untimed ones.
double wall_ms(int warmup, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(ms);
}

const char* only = "";  // the rows to run: names starting with this

// r[name] = wall_ms(...), for the rows selected by `only`.
void timed(std::map<std::string, double>& r, const std::string& name, int warmup, int reps,
           const std::function<void()>& f) {
  if (name.rfind(only, 0) == 0) r[name] = wall_ms(warmup, reps, f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) set_num_threads(std::atoi(argv[1]));
  if (argc > 2) only = argv[2];
  manual_seed(0);
  std::map<std::string, double> r;
  const std::int64_t shapes[3][3] = {{128, 784, 512}, {128, 512, 256}, {128, 256, 10}};
  for (auto& s : shapes) {
    Tensor a = randn({s[0], s[1]}), b = randn({s[1], s[2]});
    std::string name = "gemm_" + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
    timed(r, name, 5, 50, [&] { (void)matmul(a, b); });
  }
  {
    Tensor x = randn({1 << 24});
    timed(r, "sum_16M", 3, 20, [&] { (void)sum(x); });
  }
  {
    Tensor x = randn({4096, 1024});
    timed(r, "softmax_4096x1024", 3, 20, [&] { (void)softmax(x, -1); });
  }
  {
    Tensor x = randn({1 << 22});
    timed(r, "exp_4M", 3, 20, [&] { (void)exp(x); });
  }
  timed(r, "randn_1M", 3, 20, [&] { (void)randn({1 << 20}); });
  for (std::int64_t c : {32, 64}) {
    std::int64_t hw = c == 32 ? 28 : 14;
    Tensor x = randn({128, c, hw, hw}, {.requires_grad = true});
    Tensor g = randn({128, c, hw / 2, hw / 2});
    std::string name = "max_pool2d_fwd_bwd_128x" + std::to_string(c) + "x" + std::to_string(hw) + "x" + std::to_string(hw);
    timed(r, name, 3, 20, [&] {
      Tensor y = max_pool2d(x, 2);
      (void)autograd::grad({y}, {x}, {g});
    });
  }
  {
    nn::Sequential model{nn::Flatten(), nn::Linear(784, 512), nn::ReLU(), nn::Dropout(0.2),
                         nn::Linear(512, 256), nn::ReLU(), nn::Dropout(0.2), nn::Linear(256, 10)};
    optim::AdamW opt(model.parameters(), optim::AdamOptions{.lr = 1e-3, .weight_decay = 0.05});
    Tensor x = randn({128, 1, 28, 28});
    Tensor y = randint(0, 10, {128});
    timed(r, "mlp_step", 5, 40, [&] {
      Tensor loss = cross_entropy(model(x), y, {.label_smoothing = 0.1});
      opt.zero_grad();
      loss.backward();
      opt.step();
    });
  }
  {
    Tensor x = randn({128, 32, 14, 14}, {.requires_grad = true});
    Tensor w = randn({64, 32, 3, 3}, {.requires_grad = true}), b = randn({64}, {.requires_grad = true});
    timed(r, "conv2d_b128_32to64_14x14_fwd", 3, 20, [&] {
      NoGradGuard g;
      (void)conv2d(x, w, b, {.padding = 1});
    });
    timed(r, "conv2d_b128_32to64_14x14_fwd_bwd", 3, 20, [&] {
      for (const Tensor& t : {x, w, b}) t.set_grad({});
      conv2d(x, w, b, {.padding = 1}).sum().backward();
    });
  }
  {
    nn::Sequential model{nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                         nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                         nn::Flatten(), nn::Dropout(0.25), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                         nn::Dropout(0.25), nn::Linear(128, 10)};
    optim::AdamW opt(model.parameters(), optim::AdamOptions{.lr = 1e-3, .weight_decay = 0.05});
    Tensor x = randn({128, 1, 28, 28});
    Tensor y = randint(0, 10, {128});
    timed(r, "cnn_step", 3, 15, [&] {
      Tensor loss = cross_entropy(model(x), y, {.label_smoothing = 0.1});
      opt.zero_grad();
      loss.backward();
      opt.step();
    });
  }
  std::printf("threads %d\ncapability %s\n", get_num_threads(), backend::cpu::isa().name);
  for (auto& [k, v] : r) std::printf("%s %.4f\n", k.c_str(), v);
  std::string json = "{";
  for (auto& [k, v] : r) json += (json.size() > 1 ? ", \"" : "\"") + k + "_ms\": " + std::to_string(v);
  std::printf("%s}\n", json.c_str());
}
