// Concept 1 — asynchrony: the host enqueues, the GPU executes later.
//
// matmul(a, b) on a CUDA tensor does not compute anything on the host: it checks shapes,
// allocates the output from the caching allocator and enqueues a cuBLAS kernel on the
// current stream, then returns. The host is back long before the GPU has finished.
//
// What to look for: "host time to return" is microseconds; "GPU time" (two cuda::Events
// recorded around the matmul, read after the end event completed) is milliseconds. No
// host sync happens while enqueueing (sync_count does not move); the only wait is the
// explicit end.synchronize().
#include <chrono>
#include <cstdint>
#include <cstdio>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int main() {
  constexpr std::int64_t n = 8192;
  if (!cuda::is_available()) {
    std::printf(
        "concept_async: no CUDA device here, so nothing to measure.\n"
        "On a GPU it enqueues C = A @ B with A, B %lldx%lld f32 (%.1f GFLOP) and prints:\n"
        "  host time to return from matmul  ~0.01-0.1 ms  (only the enqueue)\n"
        "  GPU time between two events      ~10-20 ms     (the kernel itself)\n"
        "  host syncs during the enqueue    0\n"
        "The ratio GPU time / host time is how far ahead of the GPU the host runs.\n"
        "RESULT: n/a (no CUDA device)\n",
        static_cast<long long>(n), static_cast<long long>(n), 2.0 * n * n * n / 1e9);
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  Tensor a = randn({n, n}, {.device = dev});
  Tensor b = randn({n, n}, {.device = dev});
  { Tensor warm = matmul(a, b); }  // cuBLAS handle, workspace and output block: paid once
  cuda::synchronize(dev);

  cuda::Event start, end;
  std::uint64_t syncs0 = cuda::sync_count();
  auto t0 = Clock::now();
  start.record(dev);
  Tensor c = matmul(a, b);  // enqueue only
  end.record(dev);
  double host_ms = ms_since(t0);
  std::uint64_t enqueue_syncs = cuda::sync_count() - syncs0;

  auto t1 = Clock::now();
  end.synchronize();  // the host waits here, and only here
  double wait_ms = ms_since(t1);
  double gpu_ms = cuda::Event::elapsed_ms(start, end);

  std::printf("C = A @ B, %lldx%lld f32 on %s\n", static_cast<long long>(n), static_cast<long long>(n),
              dev.str().c_str());
  std::printf("  host time to return from matmul : %10.3f ms  (syncs during enqueue: %llu)\n", host_ms,
              static_cast<unsigned long long>(enqueue_syncs));
  std::printf("  GPU time (cuda::Event)          : %10.3f ms  (%.1f TFLOP/s)\n", gpu_ms,
              2.0 * n * n * n / (gpu_ms * 1e-3) / 1e12);
  std::printf("  host then waited in synchronize : %10.3f ms\n", wait_ms);
  std::printf("  the host was back %.0fx sooner than the GPU finished\n", gpu_ms / host_ms);
  std::printf("RESULT: %.3f ms host return vs %.3f ms GPU time (%.0fx)\n", host_ms, gpu_ms, gpu_ms / host_ms);
  return 0;
}
