// Concept 6 — timing asynchronous work: events, not a bare host clock.
//
// Because ops only enqueue, a host clock read before and after them measures the enqueue,
// not the work. Two correct ways: cuda::Events recorded on the stream around the work (the
// GPU stamps them as it reaches them; Event::elapsed_ms after the end event completed), or
// a host clock stopped after cuda::synchronize (correct, but it also counts the enqueue
// overhead, the wait's wake-up, and it stalls the pipeline, so use it outside hot loops).
//
// What to look for: the bare host clock reports a tiny number; events and host clock +
// synchronize agree with each other and with the FLOP count.
#include <chrono>
#include <cstdint>
#include <cstdio>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t n = 4096;
constexpr int reps = 10;

static double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int main() {
  if (!cuda::is_available()) {
    std::printf(
        "concept_events_vs_host_clock: no CUDA device here, so nothing to measure.\n"
        "On a GPU it times %d matmuls of %lldx%lld f32 three ways and prints:\n"
        "  host clock around the enqueue       ~0.1 ms   (wrong: only the enqueue)\n"
        "  cuda::Event pair                    ~20-40 ms (the GPU's own time)\n"
        "  host clock + cuda::synchronize      about the same as the events, a bit more\n"
        "RESULT: n/a (no CUDA device)\n",
        reps, static_cast<long long>(n), static_cast<long long>(n));
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  Tensor a = randn({n, n}, {.device = dev});
  Tensor b = randn({n, n}, {.device = dev}) * (1.0 / n);
  auto work = [&] {
    Tensor c = a;
    for (int i = 0; i < reps; ++i) c = matmul(c, b);
    return c;
  };
  (void)work();  // warm-up
  cuda::synchronize(dev);

  // 1. Host clock around the enqueue only.
  auto t0 = Clock::now();
  Tensor r1 = work();
  double naive_ms = ms_since(t0);
  cuda::synchronize(dev);

  // 2. Events on the stream.
  cuda::Event start, end;
  start.record(dev);
  Tensor r2 = work();
  end.record(dev);
  end.synchronize();
  double event_ms = cuda::Event::elapsed_ms(start, end);

  // 3. Host clock with a synchronize before stopping it.
  auto t1 = Clock::now();
  Tensor r3 = work();
  cuda::synchronize(dev);
  double synced_ms = ms_since(t1);

  double gflop = reps * 2.0 * n * n * n / 1e9;
  std::printf("%d matmuls %lldx%lld f32 (%.0f GFLOP) on %s\n", reps, static_cast<long long>(n),
              static_cast<long long>(n), gflop, dev.str().c_str());
  std::printf("  %-34s %9.3f ms  -> %9.1f TFLOP/s (impossible)\n", "host clock around the enqueue", naive_ms,
              gflop / naive_ms / 1e3);
  std::printf("  %-34s %9.3f ms  -> %9.1f TFLOP/s\n", "cuda::Event pair", event_ms, gflop / event_ms / 1e3);
  std::printf("  %-34s %9.3f ms  -> %9.1f TFLOP/s\n", "host clock + cuda::synchronize", synced_ms,
              gflop / synced_ms / 1e3);
  std::printf("RESULT: %.3f ms by events vs %.3f ms by a bare host clock (%.3f ms host clock + sync)\n", event_ms,
              naive_ms, synced_ms);
  return 0;
}
