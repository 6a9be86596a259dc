// Seeded random draws and factories: the GPU gives the CPU's numbers, and device factories
// never make the host wait.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;

namespace {

using test::gpu;

const std::vector<DType> all_dtypes = {DType::f32, DType::f64, DType::bf16, DType::f16,
                                       DType::i32, DType::i64, DType::boolean};

std::vector<unsigned char> bytes_of(const Tensor& t) {
  Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(Device::cpu());
  std::vector<unsigned char> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

// Same shape, dtype and bytes (a CPU tensor against a GPU one).
void check_identical(const Tensor& cpu, const Tensor& cuda) {
  CHECK(cpu.device().is_cpu());
  CHECK(cuda.device().is_cuda());
  CHECK(cpu.shape() == cuda.shape());
  CHECK(cpu.dtype() == cuda.dtype());
  CHECK(bytes_of(cpu) == bytes_of(cuda));
}

}  // namespace

TEST_CASE("random: the same seed gives bit-identical rand, randn and randint on CPU and GPU (f32)") {
  Device dev = gpu();
  for (std::uint64_t seed : {std::uint64_t(0), std::uint64_t(42), std::uint64_t(123456789012345)}) {
    CAPTURE(seed);
    manual_seed(seed);
    Tensor cr = rand({1000, 37}), gr = rand({1000, 37}, {.device = dev});
    check_identical(cr, gr);
    Tensor cn = randn({(1 << 20) + 3}), gn = randn({(1 << 20) + 3}, {.device = dev});
    check_identical(cn, gn);
    // Options given explicitly replace randint's default {.dtype = i64} as a whole: a bare
    // {.device = dev} would mean f32 (TensorOptions' own default), so the dtype is spelled out.
    Tensor ci = randint(-5, 17, {333}), gi = randint(-5, 17, {333}, {.dtype = DType::i64, .device = dev});
    check_identical(ci, gi);
    Tensor ci32 = randint(0, 1000000, {4, 5}, {.dtype = DType::i32});
    Tensor gi32 = randint(0, 1000000, {4, 5}, {.dtype = DType::i32, .device = dev});
    check_identical(ci32, gi32);
    Tensor cf = randint(0, 10, {100}, {.dtype = DType::f32});
    Tensor gf = randint(0, 10, {100}, {.dtype = DType::f32, .device = dev});
    check_identical(cf, gf);

    // The values are what they claim to be.
    for (float v : gr.to_host<float>()) REQUIRE((v >= 0.0f && v < 1.0f));
    for (std::int64_t v : gi.to_host<std::int64_t>()) REQUIRE((v >= -5 && v < 17));
    std::vector<float> normals = gn.to_host<float>();
    double mean = 0, var = 0;
    for (float v : normals) mean += v;
    mean /= static_cast<double>(normals.size());
    for (float v : normals) var += (v - mean) * (v - mean);
    var /= static_cast<double>(normals.size());
    CHECK(std::abs(mean) < 0.01);
    CHECK(std::abs(var - 1.0) < 0.01);
  }
}

TEST_CASE("random: rand and randn in f64, bf16 and f16 are bit-identical") {
  Device dev = gpu();
  manual_seed(7);
  for (DType dt : {DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(to_string(dt));
    Tensor c = rand({4097}, {.dtype = dt});
    Tensor g = rand({4097}, {.dtype = dt, .device = dev});
    check_identical(c, g);
  }
  // Normals too: our own log and sin/cos with explicit FMAs and roundings on both sides
  // (ops/normal_math.hpp), so no math library can make them differ.
  for (DType dt : {DType::f64, DType::bf16, DType::f16}) {
    CAPTURE(to_string(dt));
    Tensor cn = randn({100003}, {.dtype = dt});
    Tensor gn = randn({100003}, {.dtype = dt, .device = dev});
    check_identical(cn, gn);
  }
  Tensor ci = randint(-1000, 1000, {999}, {.dtype = DType::f64});
  Tensor gi = randint(-1000, 1000, {999}, {.dtype = DType::f64, .device = dev});
  check_identical(ci, gi);
}

TEST_CASE("random: sequences of draws stay identical (offsets advance the same on both sides)") {
  Device dev = gpu();
  manual_seed(2024);
  // Interleaved: each side's generator advances only with its own draws.
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    check_identical(rand({1000}), rand({1000}, {.device = dev}));
    check_identical(randn({333}), randn({333}, {.device = dev}));
    check_identical(randint(0, 10, {77}), randint(0, 10, {77}, {.dtype = DType::i64, .device = dev}));
    check_identical(rand({5}, {.dtype = DType::f64}), rand({5}, {.dtype = DType::f64, .device = dev}));
    check_identical(randn({17}, {.dtype = DType::f64}), randn({17}, {.dtype = DType::f64, .device = dev}));
    check_identical(randn({6}, {.dtype = DType::f16}), randn({6}, {.dtype = DType::f16, .device = dev}));
    check_identical(randint(-5, 5, {9}, {.dtype = DType::i32}),
                    randint(-5, 5, {9}, {.dtype = DType::i32, .device = dev}));
    check_identical(rand({11}, {.dtype = DType::bf16}), rand({11}, {.dtype = DType::bf16, .device = dev}));
    check_identical(rand({13}, {.dtype = DType::f16}), rand({13}, {.dtype = DType::f16, .device = dev}));
    check_identical(rand({3, 0}), rand({3, 0}, {.device = dev}));  // zero-size draws nothing
  }
  // All GPU draws first, then all CPU draws: still the same numbers.
  manual_seed(99);
  Tensor g1 = rand({100}, {.device = dev}), g2 = randn({50}, {.device = dev}), g3 = randint(0, 3, {7}, {.dtype = DType::i64, .device = dev});
  Tensor c1 = rand({100}), c2 = randn({50}), c3 = randint(0, 3, {7});
  check_identical(c1, g1);
  check_identical(c2, g2);
  check_identical(c3, g3);
  // Consecutive draws differ; re-seeding repeats them.
  manual_seed(5);
  Tensor a = rand({1000}, {.device = dev});
  Tensor b = rand({1000}, {.device = dev});
  manual_seed(5);
  Tensor a2 = rand({1000}, {.device = dev});
  CHECK(bytes_of(a) != bytes_of(b));
  CHECK(bytes_of(a) == bytes_of(a2));
}

TEST_CASE("random: different seeds give different numbers") {
  Device dev = gpu();
  manual_seed(1);
  std::vector<float> x = rand({1000}, {.device = dev}).to_host<float>();
  manual_seed(2);
  std::vector<float> y = rand({1000}, {.device = dev}).to_host<float>();
  std::size_t same = 0;
  for (std::size_t i = 0; i < x.size(); ++i) same += x[i] == y[i];
  CHECK(same < 10);
  manual_seed(1);
  std::vector<float> z = randn({1000}, {.device = dev}).to_host<float>();
  manual_seed(3);
  std::vector<float> w = randn({1000}, {.device = dev}).to_host<float>();
  CHECK(z != w);
}

TEST_CASE("factories: zeros, ones, full, arange and eye on the GPU equal the CPU's for every dtype") {
  Device dev = gpu();
  for (DType dt : all_dtypes) {
    CAPTURE(to_string(dt));
    TensorOptions c{.dtype = dt}, g{.dtype = dt, .device = dev};
    check_identical(zeros({3, 5}, c), zeros({3, 5}, g));
    check_identical(ones({3, 5}, c), ones({3, 5}, g));
    check_identical(full({4, 1, 3}, 2.5, c), full({4, 1, 3}, 2.5, g));
    check_identical(full({7}, -7.75, c), full({7}, -7.75, g));
    check_identical(full({2, 2}, 1e10, c), full({2, 2}, 1e10, g));  // saturates / overflows alike
    check_identical(arange(0.0, 20.0, 1.0, c), arange(0.0, 20.0, 1.0, g));
    check_identical(arange(-3.0, 7.5, 0.5, c), arange(-3.0, 7.5, 0.5, g));
    check_identical(arange(10.0, 0.0, -0.75, c), arange(10.0, 0.0, -0.75, g));
    check_identical(eye(4, 6, c), eye(4, 6, g));
    check_identical(eye(5, -1, c), eye(5, -1, g));
    check_identical(eye(6, 2, c), eye(6, 2, g));
    check_identical(zeros({0, 4}, c), zeros({0, 4}, g));
  }
  check_identical(arange(20), arange(20, {.dtype = DType::i64, .device = dev}));
  Tensor e = eye(3, -1, {.device = dev});
  CHECK(e.to_host<float>() == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  Tensor f = full({2, 3}, 0.5, {.dtype = DType::f16, .device = dev});
  CHECK(static_cast<float>(f.select(0, 1).select(0, 2).item<half>()) == 0.5f);
}

TEST_CASE("factories: device factories and random draws need no host sync") {
  Device dev = gpu();
  cuda::synchronize(dev);
  std::uint64_t c = cuda::sync_count();
  {
    // Under SyncPolicy::error any host sync would throw.
    cuda::SyncPolicyGuard guard(cuda::SyncPolicy::error);
    manual_seed(3);
    Tensor a = zeros({256, 256}, {.device = dev});
    Tensor b = ones({256}, {.dtype = DType::bf16, .device = dev});
    Tensor d = full({8, 8}, 3.0, {.dtype = DType::i64, .device = dev});
    Tensor e = randn({1 << 16}, {.device = dev});
    Tensor f = rand({1000}, {.dtype = DType::f64, .device = dev});
    Tensor g = randint(0, 10, {100}, {.device = dev});
    Tensor h = arange(1000, {.dtype = DType::i64, .device = dev});
    Tensor i = arange(0.0, 1.0, 0.01, {.device = dev});
    Tensor j = eye(64, 32, {.device = dev});
    Tensor k = empty({1 << 20}, {.device = dev});
    Tensor l = zeros_like(e);
    Tensor m = full_like(a, 2.0);
    CHECK(e.numel() == 1 << 16);
  }
  CHECK(cuda::sync_count() == c);
}
