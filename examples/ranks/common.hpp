// What the rank examples share: the device of a rank, timing that waits for the device, and
// printing from one rank. Include after `import brrr;`.
#pragma once

namespace ranks {

using namespace brrr;

/// One process per device: rank r of a node uses cuda:LOCAL_RANK, or the CPU without GPUs.
inline Device device_of_rank() {
  int count = cuda::device_count();
  if (count == 0) return Device::cpu();
  return Device::cuda(dist::local_rank() % count);
}

/// Milliseconds per call of f over `iters` calls (after `warmup`), the device included: CUDA
/// events on the current stream, or the host clock for CPU tensors (Gloo collectives block).
template <class F> double time_ms(Device dev, int warmup, int iters, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  dist::barrier();
  if (dev.is_cuda()) {
    cuda::synchronize(dev);
    cuda::Event start, end;
    start.record(dev);
    for (int i = 0; i < iters; ++i) f();
    end.record(dev);
    end.synchronize();
    return cuda::Event::elapsed_ms(start, end) / iters;
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

/// The slowest rank's value (the time a collective really took for the group).
inline double max_over_ranks(double v) {
  Tensor t = full({1}, v, {.dtype = DType::f64});
  dist::all_reduce(t, dist::ReduceOp::max);
  return t.item<double>();
}

/// The example's own check of its RESULT (the same on every rank: its inputs are reduced over
/// the ranks): says on rank 0 what failed, and gives the exit code, 1 when it failed, so that
/// brrr-run and CTest (examples/ranks/CMakeLists.txt) fail too.
inline int verdict(bool ok, const char* what) {
  if (!ok && dist::rank() == 0) std::printf("CHECK FAILED: %s\n", what);
  return ok ? 0 : 1;
}

/// "1.5 KiB", "64 MiB".
inline std::string bytes_text(double b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024 && u < 3) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, b == static_cast<std::int64_t>(b) ? "%.0f %s" : "%.1f %s", b, unit[u]);
  return buf;
}

}  // namespace ranks
