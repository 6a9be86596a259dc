// Concept 4 — overlap copies with compute on two streams, ordered by an event.
//
// A stream runs its work in order, so on one stream "copy batch i+1" waits for "compute on
// batch i". Enqueue the copies on a second (transfer) stream from pinned memory with
// non_blocking and they run on the copy engine while the SMs compute. The compute stream
// must not start on a batch before its copy is done: an Event recorded on the transfer
// stream after the copy, and compute.wait(event), order them on the device — the host
// never waits. record_stream tells the allocator that the batch is used on the compute
// stream too. data/loader.cpp's DataLoader does exactly this.
//
// What to look for: the two-stream loop takes about max(copy, compute) per batch instead
// of copy + compute; the speedup is at most 2x (when both are equal).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

constexpr int batches = 12;
constexpr std::int64_t n = 4096;  // a batch is n x n f32 = 64 MiB; compute: one n^3 matmul

template <class Loop> static std::pair<double, double> measure(Device dev, Loop&& loop) {
  cuda::synchronize(dev);
  cuda::Event start, end;
  auto t0 = Clock::now();
  start.record(dev);
  loop();
  end.record(dev);
  end.synchronize();
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return {wall, cuda::Event::elapsed_ms(start, end)};
}

int main(int argc, char** argv) {
  // --stream-check: the same program under cuda::set_stream_check(true), as a test that the
  // pattern is ordered correctly (exits 77, "skipped", without a CUDA device).
  bool checked = argc > 1 && std::strcmp(argv[1], "--stream-check") == 0;
  if (checked && !cuda::is_available()) {
    std::printf("concept_two_streams --stream-check: no CUDA device, skipped\n");
    return 77;
  }
  if (checked) {
    cuda::set_stream_check(true);
    std::printf("stream check: on\n");
  }
  if (!cuda::is_available()) {
    std::printf(
        "concept_two_streams: no CUDA device here, so nothing to measure.\n"
        "On a GPU it copies %d pinned batches of %lldx%lld f32 (64 MiB) to the device and\n"
        "multiplies each by a %lldx%lld weight, and prints the time of:\n"
        "  serial: copy then compute, one stream          ~ batches * (copy + compute)\n"
        "  two streams: copy i+1 while computing on i     ~ batches * max(copy, compute)\n"
        "RESULT: n/a (no CUDA device)\n",
        batches, static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n),
        static_cast<long long>(n));
    return 0;
  }
  Device dev = Device::cuda(0);
  manual_seed(0);
  std::vector<Tensor> host;
  for (int i = 0; i < batches; ++i) host.push_back(randn({n, n}).pin_memory());
  Tensor w = randn({n, n}, {.device = dev}) * (1.0 / n);
  cuda::Stream compute = cuda::current_stream(dev);
  cuda::Stream transfer = cuda::Stream::create(dev);
  Tensor sink = zeros({n, n}, {.device = dev});  // keeps every result used

  auto serial = [&] {
    for (int i = 0; i < batches; ++i) {
      Tensor x = host[i].to(dev, {.non_blocking = true});  // on the compute stream
      add_(sink, matmul(x, w));
    }
  };
  // Starts copying batch i on the transfer stream; returns it with its "copied" event.
  auto start_copy = [&](int i) {
    cuda::StreamGuard on_transfer(transfer);
    Tensor x = host[i].to(dev, {.non_blocking = true});
    cuda::record_stream(x, compute);
    cuda::Event copied(false);
    copied.record(transfer);
    return std::pair{x, copied};
  };
  auto overlapped = [&] {
    auto [x, copied] = start_copy(0);
    for (int i = 0; i < batches; ++i) {
      compute.wait(copied);  // device-side: compute on x only after its copy
      Tensor cur = x;
      if (i + 1 < batches) std::tie(x, copied) = start_copy(i + 1);
      add_(sink, matmul(cur, w));
    }
  };

  serial();  // warm-up: cuBLAS, allocator segments on both streams
  overlapped();
  auto [serial_wall, serial_gpu] = measure(dev, serial);
  auto [overlap_wall, overlap_gpu] = measure(dev, overlapped);
  double copy_gpu = measure(dev, [&] { Tensor x = host[0].to(dev, {.non_blocking = true}); }).second;
  double mm_gpu = measure(dev, [&] { add_(sink, matmul(w, w)); }).second;

  std::printf("%d batches of %lldx%lld f32 on %s (one copy %.3f ms, one matmul %.3f ms)\n", batches,
              static_cast<long long>(n), static_cast<long long>(n), dev.str().c_str(), copy_gpu, mm_gpu);
  std::printf("  %-34s events %9.3f ms  wall %9.3f ms\n", "serial (one stream)", serial_gpu, serial_wall);
  std::printf("  %-34s events %9.3f ms  wall %9.3f ms\n", "copy i+1 || compute i (two streams)", overlap_gpu,
              overlap_wall);
  std::printf("  ideal overlap: %.3f ms\n", batches * (copy_gpu > mm_gpu ? copy_gpu : mm_gpu));
  std::printf("RESULT: %.2fx speedup from two streams (%.3f ms vs %.3f ms)\n", serial_wall / overlap_wall,
              serial_wall, overlap_wall);
  return 0;
}
