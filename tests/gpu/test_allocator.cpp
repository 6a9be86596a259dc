// The caching device allocator: steady state without cudaMalloc, statistics, empty_cache,
// record_stream across streams, out-of-memory errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using gpu_test::StreamGate;

namespace {

using test::gpu;

constexpr std::uint64_t MiB = 1 << 20;

// `bytes` bytes of device memory (bool elements are one byte each).
Tensor device_bytes(std::int64_t bytes) { return empty({bytes}, {.dtype = DType::boolean, .device = gpu()}); }

}  // namespace

TEST_CASE("allocator: 10 000 mixed alloc/free cycles make no cudaMalloc after warm-up") {
  Device dev = gpu();
  cuda::synchronize(dev);
  // From a few bytes to 12 MiB: small pool (<= 1 MiB), large pool (20 MiB segments) and
  // oversize requests with a segment of their own. Four tensors stay alive at any time.
  const std::vector<std::int64_t> sizes = {1,         7,         100,     512,     513,     4096,
                                           65536,     300000,    1 << 20, (1 << 20) + 4, 2500000,
                                           3 << 20,   4 << 20,   6000000, 8 << 20, 777,   123456, 12 << 20};
  std::vector<Tensor> ring(4);
  auto before = cuda::memory_stats(dev);
  long i = 0;
  auto cycle = [&] {
    ring[static_cast<std::size_t>(i % 4)] = device_bytes(sizes[static_cast<std::size_t>((i * 7) % 18)]);
    ++i;
  };
  for (int k = 0; k < 2 * 18 * 4; ++k) cycle();  // warm-up: two rounds of the pattern
  auto warm = cuda::memory_stats(dev);
  for (int k = 0; k < 10000; ++k) cycle();
  auto after = cuda::memory_stats(dev);
  MESSAGE("cudaMalloc calls: " << warm.num_cuda_malloc - before.num_cuda_malloc << " in the warm-up, "
                               << after.num_cuda_malloc - warm.num_cuda_malloc << " in 10000 cycles; reserved "
                               << after.reserved_bytes / MiB << " MiB");
  CHECK(after.num_cuda_malloc == warm.num_cuda_malloc);
  CHECK(after.num_allocs == warm.num_allocs + 10000);
  CHECK(after.reserved_bytes == warm.reserved_bytes);
  for (Tensor& t : ring) t = Tensor();
  CHECK(cuda::memory_stats(dev).allocated_bytes == before.allocated_bytes);
}

TEST_CASE("allocator: allocated and peak statistics") {
  Device dev = gpu();
  cuda::synchronize(dev);
  // No cached blocks: each request below is cut exactly from a fresh segment (a cached block
  // a little larger than asked would be handed out whole and counted whole).
  cuda::empty_cache(dev);
  cuda::reset_peak_memory_stats(dev);
  auto base = cuda::memory_stats(dev);
  CHECK(base.peak_allocated_bytes == base.allocated_bytes);
  CHECK(base.peak_reserved_bytes == base.reserved_bytes);
  CHECK(base.reserved_bytes >= base.allocated_bytes);
  {
    Tensor a = empty({1 << 20}, {.device = dev});  // 4 MiB
    Tensor b = empty({2 << 20}, {.device = dev});  // 8 MiB
    auto s = cuda::memory_stats(dev);
    CHECK(s.allocated_bytes == base.allocated_bytes + 12 * MiB);
    CHECK(s.num_allocs == base.num_allocs + 2);
    CHECK(s.peak_allocated_bytes == base.allocated_bytes + 12 * MiB);
    CHECK(s.reserved_bytes >= s.allocated_bytes);
  }
  auto s = cuda::memory_stats(dev);
  CHECK(s.allocated_bytes == base.allocated_bytes);                // back to the baseline
  CHECK(s.peak_allocated_bytes == base.allocated_bytes + 12 * MiB);  // the peak stays
  CHECK(s.peak_reserved_bytes >= s.reserved_bytes);
  // Sizes round up to 512 bytes; zero-size tensors take no block.
  {
    Tensor one = empty({1}, {.device = dev});
    Tensor none = empty({0, 3}, {.device = dev});
    CHECK(cuda::memory_stats(dev).allocated_bytes == base.allocated_bytes + 512);
    CHECK(none.numel() == 0);
  }
  cuda::reset_peak_memory_stats(dev);
  CHECK(cuda::memory_stats(dev).peak_allocated_bytes == base.allocated_bytes);
}

TEST_CASE("allocator: empty_cache returns cached segments to the driver") {
  Device dev = gpu();
  cuda::synchronize(dev);
  { Tensor t = empty({64 << 20}, {.device = dev}); }  // 256 MiB, freed into the cache
  auto before = cuda::memory_stats(dev);
  CHECK(before.reserved_bytes >= 256 * MiB);
  cuda::empty_cache(dev);
  auto after = cuda::memory_stats(dev);
  CHECK(after.num_cuda_free > before.num_cuda_free);
  CHECK(after.reserved_bytes + 256 * MiB <= before.reserved_bytes);
  CHECK(after.reserved_bytes >= after.allocated_bytes);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  // The next allocation needs the driver again, then the cache serves it.
  { Tensor t = empty({64 << 20}, {.device = dev}); }
  auto again = cuda::memory_stats(dev);
  CHECK(again.num_cuda_malloc == after.num_cuda_malloc + 1);
  { Tensor t = empty({64 << 20}, {.device = dev}); }
  CHECK(cuda::memory_stats(dev).num_cuda_malloc == again.num_cuda_malloc);
}

TEST_CASE("allocator: a block freed on its own stream is reused at once") {
  Device dev = gpu();
  cuda::synchronize(dev);
  cuda::empty_cache(dev);
  void* first = nullptr;
  {
    Tensor t = empty({1 << 18}, {.device = dev});  // 1 MiB
    first = t.data_ptr();
  }
  Tensor u = empty({1 << 18}, {.device = dev});
  CHECK(u.data_ptr() == first);  // same stream: stream order makes the reuse safe
}

TEST_CASE("allocator: record_stream keeps a block from reuse while another stream uses it") {
  Device dev = gpu();
  cuda::synchronize(dev);
  cuda::empty_cache(dev);  // a fresh start: no cached blocks anywhere
  cuda::Stream A = cuda::Stream::create(dev), B = cuda::Stream::create(dev);
  const std::int64_t n = 1 << 20;  // 4 MiB of f32
  Tensor big = full({64 << 20}, 2.0, {.device = dev});  // 256 MiB, for B's long work
  {
    // B's pool gets its segments now, outside the gated region (no cudaMalloc while B is held).
    cuda::StreamGuard g(B);
    Tensor warm = big.clone().clone();
    Tensor warm_small = empty({n}, {.device = dev});
  }
  cuda::synchronize(dev);

  cuda::StreamGuard on_a(A);
  Tensor t = full({n}, 5.0, {.device = dev});  // allocated and written on A
  void* first = t.data_ptr();
  cuda::Event written;
  written.record(A);
  Tensor out;
  {
    StreamGate gate(B.handle());  // B's work stays pending until the gate opens
    B.wait(written);
    {
      cuda::StreamGuard on_b(B);
      Tensor chain = big;
      for (int i = 0; i < 10; ++i) chain = chain.clone();  // long work on B
      out = t.clone();                                   // B reads t
    }
    cuda::record_stream(t, B);
    cuda::record_stream(big, B);
    t = Tensor();  // dropped while B's read of it is still pending

    Tensor u = empty({n}, {.device = dev});  // same size, same stream A, right away
    CHECK_FALSE(B.query());
    CHECK(u.data_ptr() != first);  // the block waits for B
    gate.open();
    B.synchronize();
    CHECK_FALSE(gate.timed_out());
    Tensor w = empty({n}, {.device = dev});  // B is done: the block is free again
    CHECK(w.data_ptr() == first);
  }
  std::vector<float> got = out.to_host<float>();
  CHECK(got.size() == static_cast<std::size_t>(n));
  CHECK(got.front() == 5.0f);
  CHECK(got.back() == 5.0f);

  // record_stream needs a CUDA tensor from brrr's allocator.
  CHECK_THROWS_AS(cuda::record_stream(full({3}, 1.0), B), Error);
}

TEST_CASE("allocator: out of memory throws Error(out_of_memory) naming the request, then works on") {
  if (gpu_test::under_sanitizer()) {
    MESSAGE("skipped under compute-sanitizer: the failing 1 TiB cudaMalloc is reported as a tool error");
    return;
  }
  Device dev = gpu();
  Tensor held = empty({16 << 20}, {.device = dev});  // 64 MiB in a tensor while it fails
  auto before = cuda::memory_stats(dev);
  const std::int64_t tib = std::int64_t(1) << 40;
  try {
    Tensor huge = empty({tib}, {.dtype = DType::boolean, .device = dev});
    FAIL("a 1 TiB allocation must fail");
  } catch (const Error& e) {
    std::string m = e.what();
    MESSAGE(m);
    CHECK(e.kind() == ErrorKind::out_of_memory);
    CHECK(m.find("1099511627776 bytes") != std::string::npos);  // what was asked
    CHECK(m.find("1048576.00 MiB") != std::string::npos);
    CHECK(m.find("holds") != std::string::npos);  // what brrr holds
    CHECK(m.find("reserved") != std::string::npos);
    CHECK(m.find("cuda:0") != std::string::npos);
  }
  auto after = cuda::memory_stats(dev);
  CHECK(after.num_ooms > before.num_ooms);
  CHECK(after.allocated_bytes == before.allocated_bytes);
  // The allocator still works.
  Tensor t = full({1000}, 3.0, {.device = dev});
  std::vector<float> v = t.to_host<float>();
  CHECK(v.size() == 1000);
  CHECK(v[999] == 3.0f);
  CHECK(held.numel() == 16 << 20);
}
