// fused_mlp on the CPU (the GEMMs with the activation epilogue run as separate kernels there):
// the output and the five gradients against the float64 composite for every float dtype, with
// and without biases, 2-D and 3-D inputs, odd sizes, autocast bf16; gradients against central
// differences and gradcheck; create_graph's second derivatives equal the composite's;
// approximate "none" is the composite; empty rows; the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/gradient_check.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/fused_mlp_cases.hpp"

using namespace brrr;
using namespace test;

namespace {

using Fs = std::vector<Tensor>;

Tensor composite(const Fs& x, const std::string& approximate = "tanh") {
  return linear(gelu(linear(x[0], x[1], x[2]), approximate), x[3], x[4]);
}

}  // namespace

TEST_CASE("fused_mlp against the float64 composite: dtypes, biases, 2-D and 3-D inputs, autocast") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16})
    for (bool bias : {true, false}) {
      check_fused_mlp({.lead = {12}, .in = 8, .hidden = 24, .out = 8, .fc_bias = bias, .proj_bias = bias, .dtype = d},
                      Device::cpu(), rng);
      check_fused_mlp({.lead = {2, 5}, .in = 7, .hidden = 13, .out = 3, .fc_bias = bias, .proj_bias = !bias, .dtype = d},
                      Device::cpu(), rng);
    }
  check_fused_mlp({.lead = {4, 8}, .in = 16, .hidden = 64, .out = 16, .dtype = DType::f32, .autocast = DType::bf16},
                  Device::cpu(), rng);
  check_fused_mlp({.lead = {9}, .in = 5, .hidden = 11, .out = 6, .fc_bias = false, .proj_bias = false,
                   .dtype = DType::f32, .autocast = DType::bf16},
                  Device::cpu(), rng);
}

TEST_CASE("fused_mlp: the fused node equals the composite in float64") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Fs a = {f64_tensor(normal_values(rng, 30), {2, 3, 5}), f64_tensor(normal_values(rng, 35), {7, 5}),
          f64_tensor(normal_values(rng, 7), {7}), f64_tensor(normal_values(rng, 28), {4, 7}),
          f64_tensor(normal_values(rng, 4), {4})};
  Fs b;
  for (Tensor& t : a) {
    b.push_back(t.clone().requires_grad_());
    t.requires_grad_();
  }
  Tensor y = fused_mlp(a[0], a[1], a[2], a[3], a[4]);
  Tensor want = composite(b);
  REQUIRE(y.shape() == Shape{2, 3, 4});
  const Tensor r = Tensor::from_vector(normal_values(rng, 24), {2, 3, 4});
  y.backward(r);
  want.backward(r);
  testing::assert_close(y, want, close_options(Computed::math, DType::f64));
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("input ", i);
    REQUIRE(a[i].grad().defined() == b[i].grad().defined());
    if (a[i].grad().defined())
      testing::assert_close(a[i].grad(), b[i].grad(), close_options(Computed::math, DType::f64));
  }
}

TEST_CASE("fused_mlp: gradients against central differences and gradcheck") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  check_gradients([](const Fs& x) { return Fs{fused_mlp(x[0], x[1], x[2], x[3], x[4])}; },
                  {{6, 3}, {5, 3}, {5}, {2, 5}, {2}}, rng);
  check_gradients([](const Fs& x) { return Fs{fused_mlp(x[0], x[1], Tensor(), x[2], Tensor())}; },
                  {{2, 3, 4}, {9, 4}, {3, 9}}, rng);
  Fs in = {f64_tensor(normal_values(rng, 12), {4, 3}), f64_tensor(normal_values(rng, 15), {5, 3}),
           f64_tensor(normal_values(rng, 5), {5}), f64_tensor(normal_values(rng, 10), {2, 5}),
           f64_tensor(normal_values(rng, 2), {2})};
  CHECK(autograd::gradcheck([](const Fs& x) { return fused_mlp(x[0], x[1], x[2], x[3], x[4]); }, in));
}

TEST_CASE("fused_mlp: create_graph gives the composite's second derivatives") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const Shape shapes[] = {{5, 3}, {6, 3}, {6}, {4, 6}, {4}};
  Fs a, b;
  for (const Shape& s : shapes) {
    Tensor t = f64_tensor(normal_values(rng, numel_of(s)), s);
    a.push_back(t.clone().requires_grad_());
    b.push_back(t.clone().requires_grad_());
  }
  const Tensor r = Tensor::from_vector(normal_values(rng, 20), {5, 4});
  // The gradients as recorded functions of the inputs, then the gradient of their squares.
  auto second = [&](Fs& x, bool fused) {
    Tensor y = fused ? fused_mlp(x[0], x[1], x[2], x[3], x[4]) : composite(x);
    Fs g = autograd::grad({y}, x, {r}, false, true);
    Tensor s = zeros({}, {.dtype = DType::f64});
    for (const Tensor& t : g)  // (proj_bias's, sum(r), depends on no input)
      if (t.requires_grad()) s = add(s, sum(mul(t, t)));
    s.backward();
    return g;
  };
  Fs ga = second(a, true), gb = second(b, false);
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("input ", i);
    CHECK(ga[i].requires_grad() == gb[i].requires_grad());
    CHECK(ga[i].requires_grad() == (i != 4));
    testing::assert_close(ga[i], gb[i], close_options(Computed::math, DType::f64));
    REQUIRE(a[i].grad().defined() == b[i].grad().defined());
    if (a[i].grad().defined())
      testing::assert_close(a[i].grad(), b[i].grad(), close_options(Computed::math, DType::f64));
  }
}

TEST_CASE("fused_mlp: approximate \"none\" is the composite; empty rows; errors") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Fs x = {Tensor::from_vector(normal_values(rng, 12), {4, 3}).to(DType::f32),
          Tensor::from_vector(normal_values(rng, 15), {5, 3}).to(DType::f32),
          Tensor::from_vector(normal_values(rng, 5), {5}).to(DType::f32),
          Tensor::from_vector(normal_values(rng, 10), {2, 5}).to(DType::f32),
          Tensor::from_vector(normal_values(rng, 2), {2}).to(DType::f32)};
  testing::assert_close(fused_mlp(x[0], x[1], x[2], x[3], x[4], "none"), composite(x, "none"),
                        {.rtol = 0, .atol = 0});

  // No rows: an empty output, zero weight gradients.
  Tensor e = zeros({0, 3}).requires_grad_();
  Tensor w1 = x[1].clone().requires_grad_(), w2 = x[3].clone().requires_grad_();
  Tensor y = fused_mlp(e, w1, Tensor(), w2, Tensor());
  CHECK(y.shape() == Shape{0, 2});
  y.sum().backward();
  CHECK(values(w1.grad()) == std::vector<double>(15, 0.0));
  CHECK(values(w2.grad()) == std::vector<double>(10, 0.0));
  CHECK(e.grad().shape() == Shape{0, 3});

  // No input features: x [2, 3, 0] gives gelu(b1) W2^T + b2 in every row, and linear under
  // autocast takes such an input too.
  {
    Tensor x0 = zeros({2, 3, 0});
    Tensor w10 = zeros({5, 0});
    Tensor y0 = fused_mlp(x0, w10, x[2], x[3], x[4]);
    REQUIRE(y0.shape() == Shape{2, 3, 2});
    const Tensor row = linear(gelu(x[2], "tanh").unsqueeze(0), x[3], x[4]);
    for (std::int64_t i = 0; i < 6; ++i)
      testing::assert_close(y0.reshape({6, 2}).select(0, i), row.squeeze(0), close_options(Computed::math, DType::f32));
    AutocastGuard ac(DType::bf16);
    CHECK(linear(x0, zeros({4, 0})).shape() == Shape{2, 3, 4});
  }

  auto throws = [&](const std::function<void()>& f, ErrorKind kind) {
    try {
      f();
      FAIL("no error");
    } catch (const Error& err) {
      CHECK(err.kind() == kind);
      CHECK(std::string(err.what()).find("fused_mlp") != std::string::npos);
    }
  };
  throws([&] { (void)fused_mlp(x[0], x[3], Tensor(), x[1], Tensor()); }, ErrorKind::shape);  // in mismatch
  throws([&] { (void)fused_mlp(x[0], x[1], Tensor(), x[1], Tensor()); }, ErrorKind::shape);  // hidden mismatch
  throws([&] { (void)fused_mlp(x[0], x[1], x[4], x[3], Tensor()); }, ErrorKind::shape);      // fc_bias size
  throws([&] { (void)fused_mlp(x[0], x[1], x[2], x[3], x[2]); }, ErrorKind::shape);          // proj_bias size
  throws([&] { (void)fused_mlp(x[0], x[1], x[2], x[3], x[4], "erf"); }, ErrorKind::value);
  throws([&] { (void)fused_mlp(Tensor(), x[1], x[2], x[3], x[4]); }, ErrorKind::value);
}

TEST_CASE("fused_mlp: dtype and device errors name fused_mlp and every tensor's dtype") {
  Tensor x = randn({4, 3}), w1 = randn({5, 3}), b1 = randn({5}), w2 = randn({2, 5}), b2 = randn({2});
  const auto i64 = [](const Tensor& t) { return t.to(DType::i64); };
  const auto f64 = [](const Tensor& t) { return t.to(DType::f64); };
  // These reached the composite's matmul, whose error named matmul and two operands only (or,
  // for a bias, were silently promoted: an f64 proj_bias gave an f64 output).
  CHECK_BRRR_ERROR(fused_mlp(i64(x), w1, b1, w2, b2), ErrorKind::dtype, "fused_mlp", "input", "i64");
  CHECK_BRRR_ERROR(fused_mlp(x, w1, i64(b1), w2, b2), ErrorKind::dtype, "fused_mlp", "fc_bias", "i64");
  CHECK_BRRR_ERROR(fused_mlp(x, w1, b1, i64(w2), b2, "none"), ErrorKind::dtype, "fused_mlp", "proj_weight");
  CHECK_BRRR_ERROR(fused_mlp(x, f64(w1), b1, w2, b2), ErrorKind::dtype, "fused_mlp", "one floating dtype",
                   "input f32", "fc_weight f64");
  CHECK_BRRR_ERROR(fused_mlp(x, w1, b1, w2, f64(b2), "none"), ErrorKind::dtype, "fused_mlp", "proj_bias f64");
  CHECK_BRRR_ERROR(fused_mlp(x.to(DType::bf16), w1, Tensor(), w2, Tensor()), ErrorKind::dtype, "fused_mlp",
                   "input bf16", "fc_weight f32");
  {
    // Under autocast f32/bf16/f16 all count as the autocast dtype; f64 stays f64 (not cast).
    AutocastGuard ac(DType::bf16);
    Tensor y = fused_mlp(x, w1.to(DType::f16), b1, w2, b2.to(DType::bf16));
    CHECK(y.dtype() == DType::bf16);
    testing::assert_close(y.to(DType::f32),
                          linear(gelu(linear(x, w1.to(DType::f16), b1), "tanh"), w2, b2.to(DType::bf16)).to(DType::f32),
                          {.rtol = 0, .atol = 0});
    CHECK_BRRR_ERROR(fused_mlp(x, f64(w1), b1, w2, b2), ErrorKind::dtype, "fused_mlp", "autocast", "fc_weight f64");
    CHECK_BRRR_ERROR(fused_mlp(i64(x), w1, b1, w2, b2), ErrorKind::dtype, "fused_mlp", "input");
  }
  // One dtype throughout, f64 included, still runs (fused and composite).
  Tensor y64 = fused_mlp(f64(x), f64(w1), f64(b1), f64(w2), Tensor(), "none");
  CHECK(y64.dtype() == DType::f64);
}
