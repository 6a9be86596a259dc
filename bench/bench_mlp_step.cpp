// bench_mlp_step: one training step of an MLP 784-1024-1024-10 on a batch of 256 (f32, TF32
// off): forward (matmul + add + relu, built from raw weight tensors, no nn module),
// cross_entropy, backward, SGD with momentum 0.9 (one multi-tensor launch for the six
// parameters). Timing: 10 warm-up steps, then CUDA events around each of 50 steps; the median
// is reported. Also checks that the steps make no host sync (SyncPolicy::error). Prints one
// JSON object on the last line: {"mlp_step_784_1024_1024_10_b256_sgd_ms": ...}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>
import brrr;

using namespace brrr;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A weight [in, out] with PyTorch nn.Linear's default init range U(-1/sqrt(in), 1/sqrt(in)).
Tensor uniform_weight(Shape shape, std::int64_t fan_in, Device dev) {
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  Tensor w = rand(std::move(shape), {.device = dev}) * (2 * bound) - bound;
  w.requires_grad_(true);
  return w;
}

}  // namespace

int main() {
  if (!cuda::is_available()) {
    std::puts("bench_mlp_step: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  set_allow_tf32(false);
  const std::int64_t batch = 256, d_in = 784, d_h = 1024, d_out = 10;

  std::vector<Tensor> params = {
      uniform_weight({d_in, d_h}, d_in, dev),  uniform_weight({d_h}, d_in, dev),
      uniform_weight({d_h, d_h}, d_h, dev),    uniform_weight({d_h}, d_h, dev),
      uniform_weight({d_h, d_out}, d_h, dev),  uniform_weight({d_out}, d_h, dev),
  };
  Tensor x = randn({batch, d_in}, {.device = dev});
  Tensor y = randint(0, d_out, {batch}, {.device = dev});
  optim::SGD opt(params, {.lr = 0.01, .momentum = 0.9});

  auto step = [&] {
    opt.zero_grad();
    Tensor h = relu(matmul(x, params[0]) + params[1]);
    h = relu(matmul(h, params[2]) + params[3]);
    Tensor logits = matmul(h, params[4]) + params[5];
    Tensor loss = cross_entropy(logits, y);
    loss.backward();
    opt.step();
    return loss;
  };

  for (int i = 0; i < 10; ++i) step();
  cuda::synchronize(dev);
  float first_loss = 0, last_loss = 0;
  first_loss = step().to(Device::cpu()).item<float>();

  std::vector<double> ms;
  std::uint64_t syncs = cuda::sync_count();
  for (int i = 0; i < 50; ++i) {
    cuda::Event start, stop;
    {
      cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
      start.record(dev);
      step();
      stop.record(dev);
    }
    stop.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  std::uint64_t step_syncs = cuda::sync_count() - syncs - 50;  // minus the 50 stop.synchronize()

  // Host time to enqueue one step (no waiting): below the GPU time, the GPU is the bottleneck.
  cuda::synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) step();
  double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
  cuda::synchronize(dev);
  last_loss = step().to(Device::cpu()).item<float>();

  double med = median(ms);
  std::printf("mlp_step_784_1024_1024_10_b256_sgd: median %.4f ms, min %.4f ms over %zu steps\n", med,
              *std::min_element(ms.begin(), ms.end()), ms.size());
  std::printf("host enqueue time per step: %.4f ms\n", host_ms);
  std::printf("loss %.4f -> %.4f; host syncs inside the timed steps: %llu\n", first_loss, last_loss,
              static_cast<unsigned long long>(step_syncs));
  std::printf("{\"mlp_step_784_1024_1024_10_b256_sgd_ms\": %.4f}\n", med);
  return 0;
}
