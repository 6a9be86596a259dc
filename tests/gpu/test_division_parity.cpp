// GPU parity of the rounding divisions (ops/binary.cpp, ops/cuda/elementwise.cu):
// floor_divide, div with rounding_mode, remainder and fmod on CUDA give the CPU's results
// exactly (integers) or to the last bit of the dtype (floats: fmod is exact, and the
// quotient is computed by the same formula), for random operands of every dtype, broadcast
// and strided; the values; and an integer division by zero on CUDA is a deferred
// device error: no throw and no host wait at the call, Error(value) at the next sync point.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

using test::gpu;

V host_values(const Tensor& t) { return t.to(Device::cpu()).to(DType::f64).contiguous().to_host<double>(); }

Tensor from(const V& v, DType d, Shape shape) { return Tensor::from_vector(v, std::move(shape)).to(d); }

using Op = Tensor (*)(const Tensor&, const Tensor&);
Tensor trunc_div(const Tensor& a, const Tensor& b) { return div(a, b, "trunc"); }
Tensor floor_div(const Tensor& a, const Tensor& b) { return floor_divide(a, b); }
Tensor rem(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor fm(const Tensor& a, const Tensor& b) { return fmod(a, b); }

}  // namespace

TEST_CASE("gpu rounding divisions: the issue's values") {
  for (DType d : {DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO("dtype ", to_string(d));
    Tensor a = from({-3, 3, -7, 7}, d, {4}).to(gpu()), b = from({2, -2, 2, -2}, d, {4}).to(gpu());
    CHECK(host_values(floor_divide(a, b)) == V{-2, -2, -4, -4});
    CHECK(host_values(div(a, b, "trunc")) == V{-1, -1, -3, -3});
    CHECK(host_values(remainder(a, b)) == V{1, -1, 1, -1});
    CHECK(host_values(fmod(a, b)) == V{-1, 1, -1, 1});
    CHECK(host_values(div(a, b)) == V{-1.5, -1.5, -3.5, -3.5});
    CHECK(host_values(remainder(a, -2)) == V{-1, -1, -1, -1});
    CHECK(host_values(remainder(5, b)) == V{1, -1, 1, -1});
  }
}

TEST_CASE("gpu rounding divisions: parity with the CPU on random, broadcast and strided operands") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> num(-100000, 100000), den(-300, 300);
  std::normal_distribution<double> real(0, 50);
  const std::int64_t rows = 64, cols = 257;
  V av(rows * cols), bv(cols), fav(rows * cols), fbv(cols);
  for (auto& x : av) x = num(rng);
  for (auto& x : bv) do x = den(rng); while (x == 0);
  for (auto& x : fav) x = real(rng);
  for (auto& x : fbv) x = real(rng) / 10;
  fbv[3] = 0;  // float division by zero: inf / NaN on both backends
  const Op ops[] = {floor_div, trunc_div, rem, fm};
  const char* names[] = {"floor_divide", "div trunc", "remainder", "fmod"};
  for (DType d : {DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const bool integral = d == DType::i32 || d == DType::i64;
    Tensor a = from(integral ? av : fav, d, {rows, cols}), b = from(integral ? bv : fbv, d, {cols});
    for (int k = 0; k < 4; ++k) {
      INFO("dtype ", to_string(d), " op ", names[k]);
      // Broadcast [rows, cols] with [cols]; and a transposed (strided) dividend.
      Tensor c1 = ops[k](a, b), g1 = ops[k](a.to(gpu()), b.to(gpu()));
      Tensor c2 = ops[k](a.t(), b.view({cols, 1})), g2 = ops[k](a.to(gpu()).t(), b.to(gpu()).view({cols, 1}));
      CHECK(g1.dtype() == d);
      CHECK_NOTHROW(testing::assert_close(g1, c1, {.rtol = 0, .atol = 0, .equal_nan = true}));
      CHECK_NOTHROW(testing::assert_close(g2, c2, {.rtol = 0, .atol = 0, .equal_nan = true}));
    }
  }
}

TEST_CASE("gpu rounding divisions: gradients match the CPU") {
  Tensor a = from({-7.5, 7.25, 3.5, -1.25}, DType::f32, {4}), b = from({2, 2, -1.5, 0.5}, DType::f32, {4});
  auto run = [&](Device dev) {
    Tensor x = a.detach().to(dev).clone().requires_grad_(), y = b.detach().to(dev).clone().requires_grad_();
    (sum(remainder(x, y)) + sum(fmod(x, y)) * 2.0 + sum(floor_divide(x, y))).backward();
    return std::pair{host_values(x.grad()), host_values(y.grad())};
  };
  auto [cx, cy] = run(Device::cpu());
  auto [gx, gy] = run(gpu());
  CHECK(gx == cx);
  CHECK(gy == cy);
  CHECK(cx == V{3, 3, 3, 3});
}

TEST_CASE("gpu integer division by zero: a deferred device error, no host wait at the call") {
  for (DType d : {DType::i32, DType::i64}) {
    INFO("dtype ", to_string(d));
    Tensor a = from({5, -5, 6}, d, {3}).to(gpu()), b = from({1, 0, 2}, d, {3}).to(gpu());
    Tensor out;
    {
      cuda::SyncPolicyGuard no_waits(cuda::SyncPolicy::error);
      CHECK_NOTHROW(out = floor_divide(a, b));
    }
    try {
      cuda::synchronize(gpu());
      FAIL("no error at the sync point");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::value);
      CHECK(std::string(e.what()).find("floor_divide") != std::string::npos);
      CHECK(std::string(e.what()).find("division by zero") != std::string::npos);
    }
    // The flag is cleared once reported; a number dividend (remainder(3, b)) reports too.
    CHECK(host_values(remainder(a, from({2, 2, 2}, d, {3}).to(gpu()))) == V{1, 1, 0});
    (void)remainder(3, b);
    CHECK_THROWS_AS(cuda::synchronize(gpu()), Error);
    // A zero number divisor is known on the host: an error at the call on every device.
    CHECK_THROWS_AS((void)fmod(a, 0), Error);
  }
}
