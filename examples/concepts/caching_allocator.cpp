// Concept 7 — the caching allocator.
//
// cudaMalloc is slow (a driver call, often tens of microseconds) and cudaFree synchronises
// the whole device. brrr, like PyTorch, keeps freed blocks in a per-stream cache
// (cuda/allocator.cpp): after the first cycle, allocating and freeing a tensor makes no
// CUDA call at all, and freeing never waits. empty_cache() hands wholly free segments back
// to the driver (cudaFree), so the next allocation pays cudaMalloc again.
//
// What to look for: cudaMalloc calls (memory_stats().num_cuda_malloc) and time per cycle with
// brrr's cache vs raw cudaMalloc/cudaFree; reserved bytes before and after empty_cache.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

constexpr int cycles = 2000;
constexpr std::int64_t sizes[] = {64 << 10, 1 << 20, 4 << 20, 16 << 20};  // bytes

static void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

int main() {
  if (!cuda::is_available()) {
    std::printf(
        "concept_caching_allocator: no CUDA device here, so nothing to measure.\n"
        "On a GPU it allocates and frees %d buffers of 64 KiB..16 MiB two ways and prints:\n"
        "  brrr (cached)          cudaMalloc calls: a few (first use only), ~1 us per cycle\n"
        "  raw cudaMalloc/Free    cudaMalloc calls %d,  tens of us per cycle\n"
        "  empty_cache            reserved bytes drop to 0; the next allocation calls cudaMalloc\n"
        "RESULT: n/a (no CUDA device)\n",
        cycles, cycles);
    return 0;
  }
  Device dev = Device::cuda(0);
  auto mib = [](std::uint64_t b) { return b / double(1 << 20); };

  // brrr: empty() draws from the cache; the Tensor's destructor returns the block to it.
  cuda::synchronize(dev);
  cuda::MemoryStats s0 = cuda::memory_stats(dev);
  auto t0 = Clock::now();
  for (int i = 0; i < cycles; ++i) {
    Tensor t = empty({sizes[i % 4] / 4}, {.device = dev});
  }
  double brrr_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  cuda::MemoryStats s1 = cuda::memory_stats(dev);
  std::uint64_t brrr_mallocs = s1.num_cuda_malloc - s0.num_cuda_malloc;

  // Raw CUDA runtime: every cycle asks the driver, and cudaFree waits for the device.
  check(cudaSetDevice(0), "cudaSetDevice");
  auto t1 = Clock::now();
  for (int i = 0; i < cycles; ++i) {
    void* p = nullptr;
    check(cudaMalloc(&p, static_cast<std::size_t>(sizes[i % 4])), "cudaMalloc");
    check(cudaFree(p), "cudaFree");
  }
  double raw_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();

  // empty_cache: give the cached segments back; the next allocation pays cudaMalloc again.
  std::uint64_t frees0 = s1.num_cuda_free;
  cuda::empty_cache(dev);
  cuda::MemoryStats s2 = cuda::memory_stats(dev);
  auto t2 = Clock::now();
  { Tensor t = empty({sizes[3] / 4}, {.device = dev}); }
  double after_empty_us = std::chrono::duration<double, std::micro>(Clock::now() - t2).count();
  cuda::MemoryStats s3 = cuda::memory_stats(dev);

  std::printf("%d alloc/free cycles of 64 KiB..16 MiB on %s\n", cycles, dev.str().c_str());
  std::printf("  %-24s cudaMalloc calls %6llu  %8.3f us per cycle\n", "brrr caching allocator",
              static_cast<unsigned long long>(brrr_mallocs), brrr_ms * 1e3 / cycles);
  std::printf("  %-24s cudaMalloc calls %6d  %8.3f us per cycle\n", "raw cudaMalloc/cudaFree", cycles,
              raw_ms * 1e3 / cycles);
  std::printf("  empty_cache: reserved %.1f MiB -> %.1f MiB (%llu cudaFree); next 16 MiB allocation: "
              "%llu cudaMalloc, %.1f us\n",
              mib(s1.reserved_bytes), mib(s2.reserved_bytes),
              static_cast<unsigned long long>(s2.num_cuda_free - frees0),
              static_cast<unsigned long long>(s3.num_cuda_malloc - s2.num_cuda_malloc), after_empty_us);
  std::printf("RESULT: %.1fx faster alloc/free with the cache (%.3f vs %.3f us per cycle, %llu vs %d cudaMalloc)\n",
              raw_ms / brrr_ms, brrr_ms * 1e3 / cycles, raw_ms * 1e3 / cycles,
              static_cast<unsigned long long>(brrr_mallocs), cycles);
  return 0;
}
