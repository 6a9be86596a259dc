// Concept 2 — create data where it is used.
//
// randn(shape, {.device = dev}) runs a cuRAND kernel on the current stream: the numbers are
// born in GPU memory and nothing crosses the PCIe/NVLink bus. randn(shape).to(dev) draws
// them on the CPU (one core, Box-Muller in double), then copies numel*4 bytes from
// pageable host memory to the device, which also blocks the host (a counted sync).
//
// What to look for: the wall time of each (host clock, including a final synchronize), the
// GPU-side time (cuda::Events around the work), the bytes moved across the bus (0 vs
// numel*4) and the host syncs each path made.
#include <chrono>
#include <cstdint>
#include <cstdio>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

struct Timing {
  double wall_ms, gpu_ms;
  std::uint64_t syncs;
};

template <class F> static Timing measure(Device dev, F&& make) {
  cuda::synchronize(dev);
  cuda::Event start, end;
  std::uint64_t syncs0 = cuda::sync_count();
  auto t0 = Clock::now();
  start.record(dev);
  Tensor t = make();
  end.record(dev);
  std::uint64_t syncs = cuda::sync_count() - syncs0;  // before our own wait below
  end.synchronize();
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return {wall, cuda::Event::elapsed_ms(start, end), syncs};
}

int main() {
  const Shape shape = {4096, 4096};
  const double mib = 4096.0 * 4096.0 * 4 / (1 << 20);
  if (!cuda::is_available()) {
    std::printf(
        "concept_device_vs_host_create: no CUDA device here, so nothing to measure.\n"
        "On a GPU it creates a 4096x4096 f32 normal tensor (%.0f MiB) two ways and prints:\n"
        "  randn(shape, {.device = dev})  wall ~0.1-1 ms,  bus bytes 0,          host syncs 0\n"
        "  randn(shape).to(dev)           wall ~100s of ms, bus bytes %.0f MiB,  host syncs 1\n"
        "(the CPU draw dominates; the pageable copy adds ~10 ms and blocks the host).\n"
        "RESULT: n/a (no CUDA device)\n",
        mib, mib);
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  { Tensor warm = randn({1024}, {.device = dev}); }  // cuRAND state, allocator segment
  { Tensor warm = randn({1024}).to(dev); }

  Timing on_device = measure(dev, [&] { return randn(shape, {.device = dev}); });
  Timing via_host = measure(dev, [&] { return randn(shape).to(dev); });
  // The GPU-side part of the second path, alone: the copy of an already drawn tensor.
  Tensor drawn = randn(shape);
  Timing copy_only = measure(dev, [&] { return drawn.to(dev); });

  std::printf("randn %s f32 (%.0f MiB)\n", to_string(shape).c_str(), mib);
  std::printf("  %-30s wall %9.3f ms  events %9.3f ms  bus bytes %10d  host syncs %llu\n",
              "randn(shape, {.device = dev})", on_device.wall_ms, on_device.gpu_ms, 0,
              static_cast<unsigned long long>(on_device.syncs));
  std::printf("  %-30s wall %9.3f ms  events %9.3f ms  bus bytes %10lld  host syncs %llu\n",
              "randn(shape).to(dev)", via_host.wall_ms, via_host.gpu_ms,
              static_cast<long long>(drawn.nbytes()), static_cast<unsigned long long>(via_host.syncs));
  std::printf("  %-30s wall %9.3f ms  events %9.3f ms  (the copy alone)\n", "drawn.to(dev)", copy_only.wall_ms,
              copy_only.gpu_ms);
  std::printf("  creating on the device is %.0fx faster end to end\n", via_host.wall_ms / on_device.wall_ms);
  std::printf("RESULT: %.0fx faster on the device (%.3f ms vs %.3f ms, 0 vs %lld bytes moved)\n",
              via_host.wall_ms / on_device.wall_ms, on_device.wall_ms, via_host.wall_ms,
              static_cast<long long>(drawn.nbytes()));
  return 0;
}
