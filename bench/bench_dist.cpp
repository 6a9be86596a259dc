// bench_dist: the ranks' benchmark (docs/benchmarks.md, "Ranks"). Started by brrr-run, one
// rank per GPU (or CPU ranks with Gloo):
//   allreduce_<bytes>_us / _algbw_GBps / _busbw_GBps   f32 all-reduce (sum) from 4 KiB to 1 GiB
//       (--max-mib caps it), median of CUDA-event-timed repeats, the slowest rank's;
//       busbw = algbw * 2 (n-1) / n (nccl-tests), 0 on one rank: there only the overhead shows
//   cnn_step_ms / ddp_cnn_step_ms        one SGD step of the Fashion-MNIST CNN of
//       examples/fashion_mnist.cpp (batch 128 per rank, synthetic data on the device), plain
//       and wrapped in nn::DistributedDataParallel (default buckets)
//   mlp_step_ms / ddp_mlp_step_ms        the same for bench_ops' MLP 784-1024-1024-10 as
//       nn::Linear layers, batch 256 per rank, SGD momentum 0.9
//   ddp_step_syncs                       host syncs made by the timed DDP steps (0 expected)
// bench/torch_dist.py measures the same in PyTorch (torch.distributed, DistributedDataParallel);
// bench/compare_dist.sh runs both. Prints a table, then one JSON object (rank 0) last.
//
//   brrr-run --nproc-per-node N build/release/bench/bench_dist [--max-mib 1024]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

using namespace brrr;

namespace {

double slowest(double v) {
  Tensor t = full({1}, v, {.dtype = DType::f64});
  dist::all_reduce(t, dist::ReduceOp::max);
  return t.item<double>();
}

// Median milliseconds of f on dev (CUDA events; the host clock on the CPU).
double median_ms(Device dev, int warmup, int reps, const std::function<void()>& f) {
  if (dev.is_cuda()) return bench::time_ms(dev, warmup, reps, f);
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(ms);
}

nn::Sequential cnn() {
  return nn::Sequential{nn::Conv2d(1, 32, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d(32, 64, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Dropout(0.25), nn::Linear(64 * 7 * 7, 128), nn::ReLU(),
                        nn::Dropout(0.25), nn::Linear(128, 10)};
}
nn::Sequential mlp() {
  return nn::Sequential{nn::Linear(784, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 10)};
}

// Median step time of `model` (plain, or under DDP), and the syncs of the timed steps.
std::pair<double, double> step_ms(Device dev, nn::Module model, bool ddp, Shape input, std::int64_t batch, int reps) {
  model.to(dev);
  nn::Module run = model;
  if (ddp) run = nn::DistributedDataParallel(model);
  optim::SGD opt(run.parameters(), {.lr = 0.01, .momentum = 0.9});
  Shape shape{batch};
  shape.insert(shape.end(), input.begin(), input.end());
  Tensor x = randn(shape, {.device = dev});
  Tensor y = randint(0, 10, {batch}, {.device = dev});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(run(x), y).backward();
    opt.step();
  };
  for (int i = 0; i < 5; ++i) step();
  dist::barrier();
  std::uint64_t syncs = dev.is_cuda() ? cuda::sync_count() : 0;
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    if (dev.is_cuda()) {
      cuda::Event start, stop;
      start.record(dev);
      step();
      stop.record(dev);
      stop.synchronize();  // one counted sync per repeat, for the timing itself
      ms.push_back(cuda::Event::elapsed_ms(start, stop));
    } else {
      auto t0 = std::chrono::steady_clock::now();
      step();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  double step_syncs = dev.is_cuda() ? static_cast<double>(cuda::sync_count() - syncs) - reps : 0;
  return {slowest(bench::median(ms)), step_syncs};
}

}  // namespace

int main(int argc, char** argv) {
  double max_mib = 1024;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--max-mib") max_mib = std::atof(argv[i + 1]);
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = cuda::device_count() > 0 ? Device::cuda(dist::local_rank() % cuda::device_count()) : Device::cpu();
  set_allow_tf32(false);
  std::map<std::string, double> out;
  out["world_size"] = n;
  if (r == 0)
    std::printf("%d ranks on %s (%s)\n%12s %12s %12s %12s\n", n, dev.str().c_str(), dev.is_cuda() ? "NCCL" : "Gloo",
                "bytes", "time us", "algbw GB/s", "busbw GB/s");
  for (double bytes = 4096; bytes <= max_mib * (1 << 20); bytes *= 4) {
    Tensor t = ones({static_cast<std::int64_t>(bytes / 4)}, {.device = dev});
    int reps = bytes <= (64 << 20) ? 20 : 5;
    double ms = slowest(median_ms(dev, 3, reps, [&] { dist::all_reduce(t); }));
    double algbw = bench::gbps(bytes, ms), busbw = algbw * 2.0 * (n - 1) / n;
    std::string key = "allreduce_" + std::to_string(static_cast<long long>(bytes));
    out[key + "_us"] = ms * 1e3;
    out[key + "_algbw_GBps"] = algbw;
    out[key + "_busbw_GBps"] = busbw;
    if (r == 0) std::printf("%12.0f %12.1f %12.2f %12.2f\n", bytes, ms * 1e3, algbw, busbw);
  }
  manual_seed(0);
  int reps = dev.is_cuda() ? 50 : 5;
  out["cnn_step_ms"] = step_ms(dev, cnn(), false, {1, 28, 28}, 128, reps).first;
  manual_seed(0);
  auto [ddp_cnn, cnn_syncs] = step_ms(dev, cnn(), true, {1, 28, 28}, 128, reps);
  out["ddp_cnn_step_ms"] = ddp_cnn;
  manual_seed(0);
  out["mlp_step_ms"] = step_ms(dev, mlp(), false, {784}, 256, reps).first;
  manual_seed(0);
  auto [ddp_mlp, mlp_syncs] = step_ms(dev, mlp(), true, {784}, 256, reps);
  out["ddp_mlp_step_ms"] = ddp_mlp;
  out["ddp_step_syncs"] = cnn_syncs + mlp_syncs;
  if (r == 0) {
    std::printf("CNN step %.3f ms, with DDP %.3f ms; MLP step %.3f ms, with DDP %.3f ms; syncs in DDP steps %.0f\n",
                out["cnn_step_ms"], out["ddp_cnn_step_ms"], out["mlp_step_ms"], out["ddp_mlp_step_ms"],
                out["ddp_step_syncs"]);
    bench::print_json(out);
  }
  dist::destroy_process_group();
  return 0;
}
