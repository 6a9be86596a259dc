// bench_runtime: the CUDA runtime's two costs a training loop feels most.
//   (a) a cached allocation + free of a 1 MiB device tensor (empty() and drop), in ns per
//       pair (median over batches), next to raw cudaMallocAsync/cudaFreeAsync and
//       cudaMalloc/cudaFree pairs of the same size;
//   (b) host <-> device bandwidth of a 256 MiB tensor from pinned (non_blocking) and pageable
//       host memory, measured with cuda::Event, and whether the host blocked (host time to
//       return from the call vs the copy's event time);
//   (c) the stream check's cost (cuda::set_stream_check): host time to enqueue a 1024-element
//       add (bench_ops' enqueue_add_1024_us method) and one MLP training step (bench_ops'
//       step, host time with the queue drained between batches, and device time by events),
//       with the check off and on, alternating, median of 3 rounds. bench_stream_check has the
//       host-only cost of the bookkeeping itself.
// Prints a human table, then one JSON object on the last line. bench_ops measures the brrr
// pair and the two H2D copies the same way, next to PyTorch and LibTorch (bench/compare.sh).
//
// usage: bench_runtime [--iters N]   (N alloc/free pairs, default 100000)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>
#include "common.hpp"

using namespace brrr;

namespace {

using Clock = std::chrono::steady_clock;

double ns_since(Clock::time_point t0) { return std::chrono::duration<double, std::nano>(Clock::now() - t0).count(); }

using bench::median;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

using PairResult = bench::HostTiming;

// Runs `pair` `iters` times in batches of `batch` after a warm-up (bench::host_ns_per_call).
PairResult time_pairs(long iters, long batch, const std::function<void()>& pair) {
  return bench::host_ns_per_call(std::min<long>(iters / 10 + 1, 10000), iters / batch, batch, pair);
}

struct CopyResult {
  std::string name;
  double event_ms = 0, host_ms = 0, gbps = 0;
  std::uint64_t syncs_per_copy = 0;
  bool host_blocked = false;
};

// Times `reps` copies made by `copy` (which enqueues on the current stream of `dev`): the
// events bracket the copy on that stream; the host clock measures how long the call took to
// return. Medians over the reps.
CopyResult time_copy(const std::string& name, Device dev, std::size_t bytes, int reps, const std::function<void()>& copy) {
  copy();  // warm-up: allocator segments and pinned blocks exist from now on
  cuda::synchronize(dev);
  cuda::Stream s = cuda::current_stream(dev);
  std::vector<double> ev, host;
  std::uint64_t syncs = 0;
  for (int r = 0; r < reps; ++r) {
    cuda::Event start, end;
    start.record(s);
    std::uint64_t c0 = cuda::sync_count();
    auto t0 = Clock::now();
    copy();
    double h = ns_since(t0) / 1e6;
    syncs += cuda::sync_count() - c0;
    end.record(s);
    end.synchronize();
    ev.push_back(cuda::Event::elapsed_ms(start, end));
    host.push_back(h);
  }
  CopyResult res;
  res.name = name;
  res.event_ms = median(ev);
  res.host_ms = median(host);
  res.gbps = static_cast<double>(bytes) / (res.event_ms * 1e-3) / 1e9;
  res.syncs_per_copy = syncs / static_cast<std::uint64_t>(reps);
  // Blocked: the call returned only after (most of) the copy had run.
  res.host_blocked = res.host_ms > 0.5 * res.event_ms;
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  long iters = 100000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atol(argv[i + 1]);
  const long batch = 1000;

  // Host-only reference: the Tensor handle's own cost (shape, layout, storage, one small heap
  // block) on the CPU, so the device numbers can be read against it.
  PairResult cpu_pair = time_pairs(iters, batch, [] { Tensor t = empty({16}); (void)t; });

  if (!cuda::is_available()) {
    std::printf("no CUDA device: only the host reference ran\n");
    std::printf("cpu empty({16}) + drop: median %.1f ns per pair\n", cpu_pair.median_ns);
    std::printf("{\"gpu\": null, \"cpu_empty_pair_ns\": %.1f}\n", cpu_pair.median_ns);
    return 0;
  }

  Device dev = Device::cuda(0);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);

  // --- (a) allocation pairs ---------------------------------------------------------------
  const std::int64_t n_1mib = (1 << 20) / 4;  // f32 elements in 1 MiB
  auto pair = [&] { Tensor t = empty({n_1mib}, {.device = dev}); (void)t; };
  pair();  // the first pair makes the segment; the count below covers everything after it
  auto stats0 = cuda::memory_stats(dev);
  PairResult brrr_pair = time_pairs(iters, batch, pair);
  auto stats1 = cuda::memory_stats(dev);
  std::uint64_t mallocs_during = stats1.num_cuda_malloc - stats0.num_cuda_malloc;

  auto stream = static_cast<cudaStream_t>(cuda::current_stream(dev).handle());
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  std::uint64_t keep = UINT64_MAX;  // keep freed memory in the pool (no release at sync)
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  PairResult async_pair = time_pairs(iters, batch, [&] {
    void* p = nullptr;
    check(cudaMallocAsync(&p, 1 << 20, stream), "cudaMallocAsync");
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
  });
  PairResult malloc_pair = time_pairs(1000, 100, [&] {
    void* p = nullptr;
    check(cudaMalloc(&p, 1 << 20), "cudaMalloc");
    check(cudaFree(p), "cudaFree");
  });
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  // --- (b) 256 MiB transfers ----------------------------------------------------------------
  const std::int64_t n = (256 << 20) / 4;
  const std::size_t bytes = static_cast<std::size_t>(n) * 4;
  const int reps = 10;
  Tensor pinned = full({n}, 1.5, {.pinned = true});
  Tensor pageable = full({n}, 2.5);
  Tensor on_dev = full({n}, 3.5, {.device = dev});
  std::vector<CopyResult> copies;
  copies.push_back(time_copy("H2D pinned, non_blocking", dev, bytes, reps, [&] {
    Tensor d = pinned.to(dev, {.non_blocking = true});
    (void)d;
  }));
  copies.push_back(time_copy("H2D pageable", dev, bytes, reps, [&] {
    Tensor d = pageable.to(dev);
    (void)d;
  }));
  Tensor pinned_out = empty({n}, {.pinned = true});
  copies.push_back(time_copy("D2H pinned, non_blocking", dev, bytes, reps, [&] {
    pinned_out.copy_(on_dev, {.non_blocking = true});
  }));
  Tensor pageable_out = empty({n});
  copies.push_back(time_copy("D2H pageable", dev, bytes, reps, [&] { pageable_out.copy_(on_dev); }));
  // The copies must have moved the right numbers.
  cuda::synchronize(dev);
  bool values_ok = pinned_out.slice(0, n - 4, n).to_host<float>() == std::vector<float>(4, 3.5f) &&
                   pageable_out.slice(0, 0, 4).to_host<float>() == std::vector<float>(4, 3.5f) &&
                   pinned.to(dev).slice(0, n - 2, n).to_host<float>() == std::vector<float>(2, 1.5f);

  // --- (c) the stream check's cost --------------------------------------------------------------
  struct CheckCost {
    std::vector<double> add_us, step_host_ms, step_gpu_ms;
  } cost[2];  // [0] off, [1] on
  {
    set_allow_tf32(false);
    auto drain = [&] { cuda::synchronize(dev); };
    Tensor a = randn({1024}, {.device = dev}), b = randn({1024}, {.device = dev});
    bench::MlpStep step(dev);
    for (int round = 0; round < 3; ++round)
      for (int on = 0; on < 2; ++on) {
        cuda::StreamCheckGuard check(on == 1);
        CheckCost& c = cost[on];
        c.add_us.push_back(bench::host_ns_per_call(2000, 50, 200, [&] { Tensor r = a + b; }, drain).median_ns / 1e3);
        c.step_host_ms.push_back(bench::host_ns_per_call(5, 20, 5, [&] { (void)step(); }, drain).median_ns / 1e6);
        c.step_gpu_ms.push_back(bench::time_ms(dev, 3, 20, [&] { (void)step(); }));
        cuda::synchronize(dev);
      }
  }
  double add_off = median(cost[0].add_us), add_on = median(cost[1].add_us);
  double step_off = median(cost[0].step_host_ms), step_on = median(cost[1].step_host_ms);
  double gpu_off = median(cost[0].step_gpu_ms), gpu_on = median(cost[1].step_gpu_ms);

  // --- report -----------------------------------------------------------------------------
  std::printf("brrr bench_runtime on %s (CUDA driver API %d.%d, runtime %d.%d)\n\n", prop.name, driver / 1000,
              (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
  std::printf("%-44s %12s %12s %12s\n", "alloc + free of 1 MiB (ns per pair)", "median", "p10", "p90");
  auto row = [](const char* name, const PairResult& r) {
    std::printf("%-44s %12.1f %12.1f %12.1f\n", name, r.median_ns, r.p10_ns, r.p90_ns);
  };
  row("brrr empty({262144}, cuda) + drop", brrr_pair);
  row("cudaMallocAsync + cudaFreeAsync", async_pair);
  row("cudaMalloc + cudaFree", malloc_pair);
  row("(host reference) brrr empty({16}, cpu) + drop", cpu_pair);
  std::printf("cudaMalloc calls during the brrr pairs: %llu (target 0); target <= 200 ns: %s\n\n",
              static_cast<unsigned long long>(mallocs_during), brrr_pair.median_ns <= 200 ? "met" : "NOT met");
  std::printf("%-28s %10s %10s %10s %8s %8s\n", "256 MiB copy", "event ms", "host ms", "GB/s", "syncs", "blocked");
  for (const CopyResult& c : copies)
    std::printf("%-28s %10.3f %10.3f %10.1f %8llu %8s\n", c.name.c_str(), c.event_ms, c.host_ms, c.gbps,
                static_cast<unsigned long long>(c.syncs_per_copy), c.host_blocked ? "yes" : "no");
  std::printf("values after the copies: %s\n\n", values_ok ? "ok" : "WRONG");
  std::printf("%-52s %10s %10s %8s\n", "stream check (median of 3 rounds)", "off", "on", "on/off");
  std::printf("%-52s %10.3f %10.3f %8.2f\n", "enqueue a + b, 1024 f32 (us, host)", add_off, add_on, add_on / add_off);
  std::printf("%-52s %10.4f %10.4f %8.2f\n", "MLP 784-1024-1024-10 step, host enqueue (ms)", step_off, step_on,
              step_on / step_off);
  std::printf("%-52s %10.4f %10.4f %8.2f\n\n", "MLP step, device time by events (ms)", gpu_off, gpu_on, gpu_on / gpu_off);

  std::printf("{\"gpu\": \"%s\", \"cuda_driver_api\": %d, \"cuda_runtime\": %d, \"alloc_pair_ns\": {\"brrr_median\": %.1f, "
              "\"brrr_p10\": %.1f, \"brrr_p90\": %.1f, \"pairs\": %ld, \"cuda_malloc_calls\": %llu, "
              "\"cudaMallocAsync_median\": %.1f, \"cudaMalloc_median\": %.1f, \"cpu_empty_median\": %.1f}, \"copies_256MiB\": [",
              prop.name, driver, runtime, brrr_pair.median_ns, brrr_pair.p10_ns, brrr_pair.p90_ns, brrr_pair.calls,
              static_cast<unsigned long long>(mallocs_during), async_pair.median_ns, malloc_pair.median_ns,
              cpu_pair.median_ns);
  for (std::size_t i = 0; i < copies.size(); ++i) {
    const CopyResult& c = copies[i];
    std::printf("%s{\"name\": \"%s\", \"event_ms\": %.3f, \"host_ms\": %.3f, \"GBps\": %.2f, \"syncs\": %llu, "
                "\"host_blocked\": %s}",
                i ? ", " : "", c.name.c_str(), c.event_ms, c.host_ms, c.gbps,
                static_cast<unsigned long long>(c.syncs_per_copy), c.host_blocked ? "true" : "false");
  }
  std::printf("], \"stream_check\": {\"enqueue_add_1024_us_off\": %.3f, \"enqueue_add_1024_us_on\": %.3f, "
              "\"mlp_step_host_ms_off\": %.4f, \"mlp_step_host_ms_on\": %.4f, \"mlp_step_gpu_ms_off\": %.4f, "
              "\"mlp_step_gpu_ms_on\": %.4f}, \"values_ok\": %s}\n",
              add_off, add_on, step_off, step_on, gpu_off, gpu_on, values_ok ? "true" : "false");
  return values_ok ? 0 : 1;
}
