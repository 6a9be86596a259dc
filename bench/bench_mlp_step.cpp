// bench_mlp_step: one training step of an MLP 784-1024-1024-10 on a batch of 256 (f32, TF32
// off; the step itself is bench::MlpStep in common.hpp, shared with bench_ops): forward from
// raw weight tensors, cross_entropy, backward, SGD momentum 0.9 (one multi-tensor launch for
// the six parameters). Timing: 10 warm-up steps, then CUDA events around each of 50 steps;
// the median is reported. Unlike bench_ops, it also checks that the timed steps make no host
// sync (SyncPolicy::error) and prints the minimum. Prints one JSON object on the last line:
// {"mlp_step_784_1024_1024_10_b256_sgd_ms": ...}.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "common.hpp"

using namespace brrr;

int main() {
  if (!cuda::is_available()) {
    std::puts("bench_mlp_step: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  set_allow_tf32(false);
  bench::MlpStep step(dev);

  for (int i = 0; i < 10; ++i) (void)step();
  cuda::synchronize(dev);
  float first_loss = step().item<float>();

  std::vector<double> ms;
  std::uint64_t syncs = cuda::sync_count();
  for (int i = 0; i < 50; ++i) {
    cuda::Event start, stop;
    {
      cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
      start.record(dev);
      (void)step();
      stop.record(dev);
    }
    stop.synchronize();
    ms.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  std::uint64_t step_syncs = cuda::sync_count() - syncs - 50;  // minus the 50 stop.synchronize()

  // Host time to enqueue one step (no waiting): below the GPU time, the GPU is the bottleneck.
  cuda::synchronize(dev);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) (void)step();
  double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50;
  cuda::synchronize(dev);
  float last_loss = step().item<float>();

  double med = bench::median(ms);
  std::printf("mlp_step_784_1024_1024_10_b256_sgd: median %.4f ms, min %.4f ms over %zu steps\n", med,
              *std::min_element(ms.begin(), ms.end()), ms.size());
  std::printf("host enqueue time per step: %.4f ms\n", host_ms);
  std::printf("loss %.4f -> %.4f; host syncs inside the timed steps: %llu\n", first_loss, last_loss,
              static_cast<unsigned long long>(step_syncs));
  std::printf("{\"mlp_step_784_1024_1024_10_b256_sgd_ms\": %.4f}\n", med);
  return 0;
}
