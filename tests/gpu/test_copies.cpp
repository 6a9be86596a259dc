// Copies between host and device: round trips for every dtype, dtype conversions on the
// device against the CPU reference, non-contiguous views, pinned asynchronous transfers.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using gpu_test::StreamGate;

namespace {

using test::gpu;

const std::vector<DType> all_dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

// The bytes of a CPU tensor, row-major.
std::vector<unsigned char> bytes_of(const Tensor& cpu) {
  REQUIRE(cpu.device().is_cpu());
  Tensor c = cpu.contiguous();
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

// 30 x 40 f64 values (never all zero): fractions of both signs, values past the i32 and f16
// ranges, tiny ones, exact integers, zeros.
Tensor base_values() {
  std::vector<double> v(1200);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>((i * 7919) % 2001) - 1000.0) * 0.37;
  v[0] = 0.0;
  v[1] = -0.0;
  v[2] = 3e9;
  v[3] = -1e12;
  v[4] = 70000.0;
  v[5] = 1e-8;
  v[6] = 0.1;
  v[7] = -2.5;
  v[8] = 255.0;
  v[9] = 1.0;
  return Tensor::from_vector(v, {30, 40});
}

}  // namespace

TEST_CASE("copies: H2D, D2D and D2H round trips are exact for every dtype") {
  Device dev = gpu();
  Tensor base = base_values();
  for (DType dt : all_dtypes) {
    CAPTURE(to_string(dt));
    Tensor h = base.to(dt);
    Tensor d = h.to(dev);  // H2D
    CHECK(d.device() == dev);
    CHECK(d.dtype() == dt);
    CHECK(d.shape() == h.shape());
    Tensor d2 = d.clone();  // D2D (a new block)
    CHECK(d2.data_ptr() != d.data_ptr());
    Tensor d3 = empty(h.shape(), {.dtype = dt, .device = dev});
    d3.copy_(d2);                          // D2D through copy_
    Tensor back = d3.to(Device::cpu());    // D2H
    CHECK(back.device().is_cpu());
    CHECK(bytes_of(back) == bytes_of(h));
    // to(device) of a tensor already there is the same tensor.
    CHECK(d.to(dev).is_same(d));
  }
  // Zero-size tensors copy nothing and keep their shape.
  Tensor z = empty({0, 5}, {.device = dev});
  CHECK(z.to(Device::cpu()).shape() == Shape{0, 5});
  CHECK(z.to_host<float>().empty());
}

TEST_CASE("copies: every dtype conversion on the device equals the CPU's") {
  Device dev = gpu();
  Tensor base = base_values();
  for (DType from : all_dtypes) {
    Tensor h = base.to(from);
    Tensor d = h.to(dev);
    for (DType to : all_dtypes) {
      CAPTURE(to_string(from));
      CAPTURE(to_string(to));
      Tensor expect = h.to(to);
      Tensor got = d.to(to).to(Device::cpu());
      CHECK(bytes_of(got) == bytes_of(expect));
      // The same conversion from a non-contiguous (transposed) source.
      Tensor got_t = d.transpose(0, 1).to(to).to(Device::cpu());
      CHECK(bytes_of(got_t) == bytes_of(h.transpose(0, 1).to(to)));
    }
  }
}

TEST_CASE("copies: non-contiguous device tensors reach the host with the right values") {
  Device dev = gpu();
  Tensor h = arange(0.0, 24.0 * 40.0, 1.0, {.dtype = DType::f32}).view({24, 40});
  Tensor d = h.to(dev);

  Tensor dt = d.transpose(0, 1);
  CHECK_FALSE(dt.is_contiguous());
  Tensor back = dt.to(Device::cpu());
  CHECK(back.shape() == Shape{40, 24});
  CHECK(back.is_contiguous());
  CHECK(back.to_host<float>() == h.transpose(0, 1).to_host<float>());
  CHECK(dt.to_host<float>() == h.transpose(0, 1).to_host<float>());

  Tensor ds = d.slice(1, 3, 37, 4).slice(0, 5, 20);
  CHECK(ds.to(Device::cpu()).to_host<float>() == h.slice(1, 3, 37, 4).slice(0, 5, 20).to_host<float>());
  CHECK(ds.to_host<float>() == h.slice(1, 3, 37, 4).slice(0, 5, 20).to_host<float>());

  Tensor dp = d.view({4, 6, 40}).permute({2, 0, 1}).slice(0, 1, 40, 3);
  CHECK(dp.to_host<float>() == h.view({4, 6, 40}).permute({2, 0, 1}).slice(0, 1, 40, 3).to_host<float>());

  // Every dtype through a transposed view.
  for (DType t : all_dtypes) {
    CAPTURE(to_string(t));
    Tensor hv = base_values().to(t);
    Tensor dv = hv.to(dev).transpose(0, 1).slice(0, 1, 40, 2);
    CHECK(bytes_of(dv.to(Device::cpu())) == bytes_of(hv.transpose(0, 1).slice(0, 1, 40, 2)));
  }

  // Host to a non-contiguous device destination, and device to a non-contiguous host one.
  Tensor g = zeros({40, 24}, {.device = dev});
  g.transpose(0, 1).copy_(h);
  CHECK(g.to_host<float>() == h.transpose(0, 1).to_host<float>());
  Tensor c = zeros({40, 24});
  c.transpose(0, 1).copy_(d);
  CHECK(c.to_host<float>() == h.transpose(0, 1).to_host<float>());
  // Broadcasting copies: a row from the host over every row on the device.
  Tensor row = arange(0.0, 40.0, 1.0, {.dtype = DType::f32});
  Tensor rows = zeros({24, 40}, {.device = dev});
  rows.copy_(row);
  CHECK(rows.select(0, 17).to_host<float>() == row.to_host<float>());
}

TEST_CASE("copies: transposed copies (the tiled path) equal the CPU's for every shape and dtype") {
  // ops/cuda/copy.cu moves [batch,] rows x cols transposes through 32 x 32 tiles: shapes below,
  // at and past a tile, not multiples of 32, batched, from sliced (padded) sources, into a
  // transposed destination, and with a dtype conversion; each against the CPU, exactly.
  Device dev = gpu();
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  const auto values = [&](Shape shape) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& x : v) x = u(rng);
    return Tensor::from_vector(v, shape);
  };
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{1, 7}, {5, 3}, {32, 32}, {33, 31}, {64, 96},
                                                                     {384, 1536}, {1000, 3}, {3, 1000}, {129, 257}};
  for (auto [r, c] : shapes) {
    for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i64, DType::boolean}) {
      CAPTURE(r);
      CAPTURE(c);
      CAPTURE(to_string(t));
      Tensor h = values({r, c}).to(t);
      Tensor d = h.to(dev);
      CHECK(bytes_of(d.t().contiguous().to(Device::cpu())) == bytes_of(h.t().contiguous()));
      // Into a transposed destination (the unit stride on the other dim of each side).
      Tensor into = zeros({c, r}, {.dtype = t, .device = dev});
      into.t().copy_(d);
      CHECK(bytes_of(into.to(Device::cpu())) == bytes_of(h.t().contiguous()));
    }
    // A sliced source (leading dimension past the rows), converting f32 -> bf16 and bf16 -> f32.
    Tensor h = values({r + 5, c + 3}).to(DType::f32);
    Tensor hs = h.slice(0, 2, 2 + r).slice(1, 1, 1 + c);
    Tensor ds = h.to(dev).slice(0, 2, 2 + r).slice(1, 1, 1 + c);
    CHECK(bytes_of(ds.t().to(DType::bf16).to(Device::cpu())) == bytes_of(hs.t().to(DType::bf16)));
    Tensor hb = hs.to(DType::bf16);
    CHECK(bytes_of(hb.to(dev).t().to(DType::f32).to(Device::cpu())) == bytes_of(hb.t().to(DType::f32)));
  }
  // Batched: [B, R, C] -> [B, C, R], and a batch dim with its own stride (a slice of batches).
  for (std::int64_t b : {1, 3, 70}) {
    CAPTURE(b);
    Tensor h = values({2 * b, 45, 70}).to(DType::f32);
    Tensor d = h.to(dev);
    CHECK(bytes_of(d.transpose(1, 2).contiguous().to(Device::cpu())) == bytes_of(h.transpose(1, 2).contiguous()));
    Tensor dh = d.slice(0, 0, 2 * b, 2).transpose(1, 2).contiguous();
    CHECK(bytes_of(dh.to(Device::cpu())) == bytes_of(h.slice(0, 0, 2 * b, 2).transpose(1, 2).contiguous()));
  }
}

TEST_CASE("copies: to_host and item on views read exactly the view's elements") {
  Device dev = gpu();
  Tensor h = arange(0.0, 24.0 * 40.0, 1.0, {.dtype = DType::f32}).view({24, 40});
  Tensor d = h.to(dev);

  // A contiguous view with an offset: numel elements from the offset, no more.
  std::vector<float> mid = d.view({-1}).slice(0, 100, 110).to_host<float>();
  CHECK(mid == std::vector<float>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109});
  // The last two elements of the storage.
  std::vector<float> tail = d.slice(0, 23, 24).slice(1, 38, 40).to_host<float>();
  CHECK(tail == std::vector<float>{958, 959});
  // A strided view: only its elements, in row-major order of the view.
  std::vector<float> col = d.select(1, 7).to_host<float>();
  REQUIRE(col.size() == 24);
  for (std::size_t i = 0; i < col.size(); ++i) CHECK(col[i] == static_cast<float>(i * 40 + 7));
  // item on views (0-d and single-element).
  CHECK(d.select(0, 7).select(0, 9).item<float>() == 289.0f);
  CHECK(d.slice(0, 23, 24).slice(1, 39, 40).item<float>() == 959.0f);
  CHECK(d.transpose(0, 1).select(0, 5).select(0, 3).item<float>() == 125.0f);
  // Every dtype's item.
  CHECK(d.to(DType::f64).select(0, 2).select(0, 1).item<double>() == 81.0);
  CHECK(d.to(DType::i64).select(0, 2).select(0, 1).item<std::int64_t>() == 81);
  CHECK(d.to(DType::i32).select(0, 0).select(0, 5).item<std::int32_t>() == 5);
  CHECK(static_cast<float>(d.to(DType::bf16).select(0, 0).select(0, 3).item<bfloat16>()) == 3.0f);
  CHECK(static_cast<float>(d.to(DType::f16).select(0, 0).select(0, 3).item<half>()) == 3.0f);
  CHECK(d.to(DType::boolean).select(0, 0).select(0, 0).item<bool>() == false);
  CHECK(d.to(DType::boolean).select(0, 0).select(0, 1).item<bool>() == true);
  // Wrong element type and more than one element are errors, not reads.
  CHECK_THROWS_AS((void)d.to_host<double>(), Error);
  CHECK_THROWS_AS((void)d.select(0, 0).item<float>(), Error);
}

TEST_CASE("copies: pinned non_blocking H2D returns before the copy ends; pageable copies sync") {
  Device dev = gpu();
  const std::int64_t n = 64 << 20;  // 256 MiB of f32
  Tensor pinned = full({n}, 1.25, {.pinned = true});
  Tensor pageable = full({n}, 2.5);
  CHECK(pinned.is_pinned());
  CHECK_FALSE(pageable.is_pinned());
  cuda::Stream s = cuda::current_stream(dev);
  {
    // Warm-up: the destination's segment and the pinned path exist before timing.
    Tensor w = pinned.to(dev, {.non_blocking = true});
  }
  cuda::synchronize(dev);

  // Pinned + non_blocking: enqueued, no host sync; the host is back long before the copy ends.
  cuda::Event start, end;
  start.record(s);
  std::uint64_t c0 = cuda::sync_count();
  auto t0 = std::chrono::steady_clock::now();
  Tensor d = pinned.to(dev, {.non_blocking = true});
  double host_ms = gpu_test::ms_since(t0);
  end.record(s);
  CHECK(cuda::sync_count() == c0);
  end.synchronize();
  float copy_ms = cuda::Event::elapsed_ms(start, end);
  MESSAGE("256 MiB pinned H2D: host returned after " << host_ms << " ms, the copy took " << copy_ms << " ms ("
                                                     << 268.435456 / copy_ms << " GB/s)");
  if (gpu_test::under_sanitizer())
    MESSAGE("timing ratio not checked under compute-sanitizer");
  else
    CHECK(host_ms < 0.5 * copy_ms);
  CHECK(d.slice(0, n - 3, n).to_host<float>() == std::vector<float>(3, 1.25f));
  CHECK(d.slice(0, 0, 2).to_host<float>() == std::vector<float>(2, 1.25f));

  // Deterministic form of the same fact: with the stream held at a gate, the call still
  // returns (a blocking copy would wait for the gate).
  {
    Tensor small = full({1 << 18}, 4.5, {.pinned = true});
    StreamGate gate(s.handle());
    auto t1 = std::chrono::steady_clock::now();
    Tensor ds = small.to(dev, {.non_blocking = true});
    double ms = gpu_test::ms_since(t1);
    CHECK_FALSE(gate.timed_out());
    CHECK(ms < 5000.0);
    CHECK_FALSE(s.query());
    gate.open();
    CHECK(ds.slice(0, 0, 4).to_host<float>() == std::vector<float>(4, 4.5f));
    // The pinned source was dropped after an async copy: its block is reused only after the
    // copy completes (an event guards it). Dropping it now is safe.
  }

  // Pageable: host-blocking, counted once.
  c0 = cuda::sync_count();
  Tensor d2 = pageable.to(dev);
  CHECK(cuda::sync_count() == c0 + 1);
  CHECK(d2.slice(0, n - 2, n).to_host<float>() == std::vector<float>(2, 2.5f));

  // Pinned without non_blocking waits too (as PyTorch's non_blocking=false does).
  c0 = cuda::sync_count();
  Tensor d3 = pinned.to(dev);
  CHECK(cuda::sync_count() == c0 + 1);

  // D2H: non_blocking lands in pinned memory without a sync; the default waits.
  c0 = cuda::sync_count();
  Tensor h_async = d.to(Device::cpu(), {.non_blocking = true});
  CHECK(h_async.is_pinned());
  CHECK(cuda::sync_count() == c0);
  s.synchronize();
  CHECK(h_async.slice(0, n - 2, n).to_host<float>() == std::vector<float>(2, 1.25f));
  c0 = cuda::sync_count();
  Tensor h_sync = d2.to(Device::cpu());
  CHECK(cuda::sync_count() == c0 + 1);
  CHECK_FALSE(h_sync.is_pinned());
  CHECK(h_sync.slice(0, 0, 2).to_host<float>() == std::vector<float>(2, 2.5f));

  // pin_memory and the pinned allocator's statistics.
  auto ps = cuda::pinned_memory_stats();
  CHECK(ps.reserved_bytes >= ps.allocated_bytes);
  CHECK(ps.allocated_bytes >= 512u << 20);  // pinned (256 MiB) and h_async (256 MiB) are alive
  Tensor pm = full({10}, 1.0).pin_memory();
  CHECK(pm.is_pinned());
  CHECK(pm.pin_memory().is_same(pm));
  CHECK_THROWS_AS((void)d.pin_memory(), Error);
}
