// bench_graph_step: bench::MlpStep (MLP 784-1024-1024-10, batch 256, f32, TF32 off, cross
// entropy, SGD momentum 0.9; bench/common.hpp) eager, and the same step captured once with
// cuda::GraphedStep and replayed. Timing as bench_mlp_step and bench/torch_graph_step.py (its
// PyTorch twin, torch.cuda.graph): 10 warm-up calls, then CUDA events around each of 50
// calls, median reported; plus the mean of 1000 back-to-back replays between two events (the
// throughput a training loop gets) and the host time to enqueue one replay. The replays must
// make no host sync (SyncPolicy::error) and leave the allocator's statistics unchanged; the
// graph's node count gives the device time per node. Prints one JSON object on the last line.
// `--tf32` runs the same step with TF32 GEMMs (set_allow_tf32(true)); the twin takes the same flag.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>
#include "common.hpp"

using namespace brrr;

int main(int argc, char** argv) {
  const bool tf32 = argc > 1 && std::string(argv[1]) == "--tf32";
  if (!cuda::is_available()) {
    std::puts("bench_graph_step: no CUDA device; nothing to measure");
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  set_allow_tf32(tf32);
  bench::MlpStep step(dev);

  // Eager, as bench_mlp_step.
  const double eager_ms = bench::time_ms(dev, 10, 50, [&] { (void)step(); });

  // Captured: 3 eager warm-up steps inside GraphedStep, then one capture.
  auto before = cuda::memory_stats(dev);
  cuda::GraphedStep graphed(dev, [&] { return std::vector<Tensor>{step()}; });
  auto after_capture = cuda::memory_stats(dev);
  const double nodes = static_cast<double>(graphed.graph().num_nodes());
  float first_loss = graphed()[0].item<float>();

  std::vector<double> single;
  std::uint64_t syncs = cuda::sync_count();
  for (int i = 0; i < 10; ++i) graphed();
  for (int i = 0; i < 50; ++i) {
    cuda::Event start, stop;
    {
      cuda::SyncPolicyGuard no_syncs(cuda::SyncPolicy::error);
      start.record(dev);
      graphed();
      stop.record(dev);
    }
    stop.synchronize();
    single.push_back(cuda::Event::elapsed_ms(start, stop));
  }
  const std::uint64_t replay_syncs = cuda::sync_count() - syncs - 50;  // minus the stop.synchronize()

  cuda::synchronize(dev);
  auto steady = cuda::memory_stats(dev);
  const int n = 1000;
  cuda::Event start, stop;
  auto t0 = std::chrono::steady_clock::now();
  start.record(dev);
  for (int i = 0; i < n; ++i) graphed();
  stop.record(dev);
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / n;
  stop.synchronize();
  const double throughput_ms = cuda::Event::elapsed_ms(start, stop) / n;
  auto end = cuda::memory_stats(dev);
  float last_loss = graphed()[0].item<float>();
  const bool flat = end.allocated_bytes == steady.allocated_bytes && end.reserved_bytes == steady.reserved_bytes &&
                    end.num_cuda_malloc == steady.num_cuda_malloc && end.num_allocs == steady.num_allocs;

  const double graphed_ms = bench::median(single);
  std::printf("mlp_step_784_1024_1024_10_b256_sgd (%s) eager: median %.4f ms\n", tf32 ? "tf32" : "f32", eager_ms);
  std::printf("graphed: median %.4f ms (min %.4f) per replay over 50; %.4f ms per replay over %d back to back\n",
              graphed_ms, *std::min_element(single.begin(), single.end()), throughput_ms, n);
  std::printf("graph nodes %.0f: %.3f us of device time per node (back to back); host enqueue %.4f ms per replay\n",
              nodes, throughput_ms * 1e3 / nodes, host_ms);
  std::printf("capture: %llu cudaMalloc calls during the capture, %.2f MiB more reserved than before the warm-up\n",
              static_cast<unsigned long long>(after_capture.num_capture_cuda_malloc - before.num_capture_cuda_malloc),
              static_cast<double>(after_capture.reserved_bytes - before.reserved_bytes) / (1 << 20));
  std::printf("loss %.4f -> %.4f over %d replays; host syncs inside the timed replays: %llu; allocator stats %s\n",
              first_loss, last_loss, n + 61, static_cast<unsigned long long>(replay_syncs),
              flat ? "flat" : "NOT FLAT");
  bench::print_json({{"tf32", tf32 ? 1.0 : 0.0},
                     {"mlp_step_eager_ms", eager_ms},
                     {"mlp_step_graphed_ms", graphed_ms},
                     {"mlp_step_graphed_back_to_back_ms", throughput_ms},
                     {"graph_nodes", nodes},
                     {"graph_us_per_node", throughput_ms * 1e3 / nodes},
                     {"graph_host_enqueue_ms", host_ms}});
  return flat && replay_syncs == 0 ? 0 : 1;
}
