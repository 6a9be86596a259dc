// Elementwise ops on the CPU, dtypes and edges: PyTorch's type promotion table and its effect
// on op results, the errors (shapes, dtypes, arguments, devices), NaN/inf propagation and
// domain limits. Cases: tests/ops/elementwise_cases.hpp.
//
// Inputs are fresh on every run (a random seed, printed on failure); set BRRR_TEST_SEED to
// replay one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
import brrr;

using namespace brrr;

// doctest prints Shapes (std::vector) and DTypes by value.
// StringMaker for vectors, toString for DType/ErrorKind, CHECK_BRRR_ERROR.
#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/elementwise_cases.hpp"

using namespace elementwise_test;

// =========================================================================================
// Type promotion
// =========================================================================================

TEST_CASE("promote_types: the full table (PyTorch)") {
  const DType order[] = {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean};
  using D = DType;
  // rows and columns in `order`
  const DType table[7][7] = {
      {D::f32, D::f64, D::f32, D::f32, D::f32, D::f32, D::f32},
      {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
      {D::f32, D::f64, D::bf16, D::f32, D::bf16, D::bf16, D::bf16},
      {D::f32, D::f64, D::f32, D::f16, D::f16, D::f16, D::f16},
      {D::f32, D::f64, D::bf16, D::f16, D::i32, D::i64, D::i32},
      {D::f32, D::f64, D::bf16, D::f16, D::i64, D::i64, D::i64},
      {D::f32, D::f64, D::bf16, D::f16, D::i32, D::i64, D::boolean},
  };
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) {
      INFO(to_string(order[i]), " with ", to_string(order[j]));
      CHECK(promote_types(order[i], order[j]) == table[i][j]);
    }
  // the named pairs
  CHECK(promote_types(DType::i32, DType::i64) == DType::i64);
  CHECK(promote_types(DType::i64, DType::f16) == DType::f16);
  CHECK(promote_types(DType::f16, DType::bf16) == DType::f32);
  CHECK(promote_types(DType::boolean, DType::i32) == DType::i32);
  CHECK(promote_types(DType::f32, DType::f64) == DType::f64);
  // result_type(tensor, scalar): floating scalars make bool/integers f32; integral scalars
  // keep the tensor's dtype (bool becomes i64)
  for (DType d : order) {
    INFO(to_string(d));
    CHECK(result_type(d, Scalar(2.5)) == (is_floating_point(d) ? d : DType::f32));
    CHECK(result_type(d, Scalar(2)) == (d == DType::boolean ? DType::i64 : d));
    CHECK(result_type(d, Scalar(std::int64_t{1} << 40)) == (d == DType::boolean ? DType::i64 : d));
    CHECK(result_type(d, Scalar(2.5f)) == (is_floating_point(d) ? d : DType::f32));
  }
}

TEST_CASE("type promotion in ops: values and dtypes") {
  FRESH_SEED();
  // i32 + i64 -> i64
  Tensor i32 = randint(-1000, 1000, {8}, {.dtype = DType::i32});
  Tensor i64 = randint(-1000, 1000, {8}, {.dtype = DType::i64});
  check_binary(i32 + i64, i32, i64, [](double x, double y) { return x + y; }, {}, DType::i64, "i32 + i64");
  check_binary(i64 * i32, i64, i32, [](double x, double y) { return x * y; }, {}, DType::i64, "i64 * i32");
  // i64 + f16 -> f16 (the integer converted to f16 first)
  Tensor small = randint(-50, 50, {8}, {.dtype = DType::i64});
  Tensor h = randn({8}, {.dtype = DType::f16});
  check_binary(small + h, small, h, [](double x, double y) { return x + y; }, exact_tol(DType::f16), DType::f16,
               "i64 + f16");
  // f16 + bf16 -> f32 (exact: both convert exactly)
  Tensor bf = randn({8}, {.dtype = DType::bf16});
  check_binary(h + bf, h, bf, [](double x, double y) { return x + y; }, exact_tol(DType::f32), DType::f32,
               "f16 + bf16");
  check_binary(bf * h, bf, h, [](double x, double y) { return x * y; }, exact_tol(DType::f32), DType::f32,
               "bf16 * f16");
  // bool + i32 -> i32
  Tensor p = gt(randn({8}), 0.0);
  check_binary(p + i32, p, i32, [](double x, double y) { return x + y; }, {}, DType::i32, "bool + i32");
  // f32 + f64 -> f64, computed from the f32 value
  Tensor f = randn({8}), d = randn({8}, {.dtype = DType::f64});
  check_binary(f + d, f, d, [](double x, double y) { return x + y; }, exact_tol(DType::f64), DType::f64, "f32 + f64");
  check_binary(maximum(d, f), d, f, [](double x, double y) { return std::max(x, y); }, {}, DType::f64, "max(f64, f32)");
  // int tensor / int tensor -> f32 true division (and by zero: inf, nan)
  Tensor n = make(DType::i32, {7, -7, 1, -1, 0, 9});
  Tensor m = make(DType::i32, {2, 2, 0, 0, 0, -4});
  CHECK(div(n, m).dtype() == DType::f32);
  expect_values(div(n, m), {3.5, -3.5, kInf, -kInf, kNaN, -2.25}, {}, "i32 / i32");
  expect_values(n / make(DType::i64, {2, 2, 2, 2, 2, 2}), {3.5, -3.5, 0.5, -0.5, 0, 4.5}, {}, "i32 / i64");
  check_binary(i64 / i32, i64, i32, [](double x, double y) { return x / y; }, exact_tol(DType::f32), DType::f32,
               "i64 / i32 random");
  CHECK(div(n, 2).dtype() == DType::f32);
  expect_values(div(n, 2), {3.5, -3.5, 0.5, -0.5, 0, 4.5}, {}, "i32 / 2");
  expect_values(div(3, make(DType::i64, {2, -4})), {1.5, -0.75}, {}, "3 / i64");
  CHECK(div(p, p).dtype() == DType::f32);
  // int tensor + 2.5 -> f32; int tensor * 2 stays int; bool tensor + 1 -> i64
  CHECK((i32 + 2.5).dtype() == DType::f32);
  check_unary(i32 + 2.5, i32, [](double x) { return x + 2.5; }, exact_tol(DType::f32), DType::f32, "i32 + 2.5");
  CHECK((i64 * 0.5).dtype() == DType::f32);
  CHECK((i32 * 2).dtype() == DType::i32);
  check_unary(i32 * 2, i32, [](double x) { return x * 2; }, {}, DType::i32, "i32 * 2");
  CHECK((i64 - 3).dtype() == DType::i64);
  CHECK((p + 1).dtype() == DType::i64);
  check_unary(p + 1, p, [](double x) { return x + 1; }, {}, DType::i64, "bool + 1");
  CHECK((p * 2.0).dtype() == DType::f32);
  // floating tensors keep their dtype with any scalar
  CHECK((h * 3).dtype() == DType::f16);
  CHECK((bf + 0.5).dtype() == DType::bf16);
  CHECK((f + std::int64_t{5}).dtype() == DType::f32);
  // pow: integer with a floating exponent -> f32; 2.0 ^ int -> f32; int ^ int stays
  CHECK(pow(i32, 0.5).dtype() == DType::f32);
  CHECK(pow(2.0, i32).dtype() == DType::f32);
  CHECK(pow(2, i32).dtype() == DType::i32);
  CHECK(pow(i64, i32).dtype() == DType::i64);
  CHECK(pow(f, i64).dtype() == DType::f32);
  // comparisons and where follow the same promotion, comparisons return bool
  CHECK(eq(i32, f).dtype() == DType::boolean);
  CHECK(where(p, i32, i64).dtype() == DType::i64);
  CHECK(where(p, h, bf).dtype() == DType::f32);
  // 0-d tensors promote like any tensor (brrr does not give them PyTorch's lower priority)
  CHECK((f + full({}, 1.0, {.dtype = DType::f64})).dtype() == DType::f64);
  // unary floating functions of integers give f32, the others keep the dtype
  CHECK(exp(i64).dtype() == DType::f32);
  CHECK(tanh(i32).dtype() == DType::f32);
  CHECK(abs(i64).dtype() == DType::i64);
  CHECK(clamp(i32, 0, 5).dtype() == DType::i32);
}

TEST_CASE("f32 with bf16/f16: one kernel reads both dtypes, the same bits as widening first") {
  FRESH_SEED();
  using Op = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Op> ops[] = {{"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
                                            {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
                                            {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
                                            {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }}};
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor f = randn({6, 70});
    // contiguous, a broadcast row, a broadcast column, a transposed (strided) view
    const Tensor others[] = {randn({6, 70}, {.dtype = low}), randn({1, 70}, {.dtype = low}),
                             randn({6, 1}, {.dtype = low}), randn({70, 6}, {.dtype = low}).t()};
    for (const auto& [name, op] : ops) {
      for (const Tensor& h : others) {
        INFO(name, " f32 with ", to_string(low), " of shape ", h.shape());
        for (bool f32_first : {true, false}) {
          Tensor got = f32_first ? op(f, h) : op(h, f);
          Tensor want = f32_first ? op(f, h.to(DType::f32)) : op(h.to(DType::f32), f);
          REQUIRE(got.dtype() == DType::f32);
          CHECK(test::values(got) == test::values(want));
        }
      }
    }
  }
  // Gradients come back in each operand's dtype.
  Tensor a = randn({4, 5}).requires_grad_(), b = randn({4, 5}, {.dtype = DType::bf16}).requires_grad_();
  sum(mul(add(a, b), b)).backward();
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::bf16);
}

// =========================================================================================
// Errors
// =========================================================================================

TEST_CASE("errors: shapes, dtypes, arguments, devices") {
  Tensor a = randn({2, 3}), b = randn({4});
  CHECK_BRRR_ERROR(add(a, b), ErrorKind::shape, "add", "[2, 3]", "[4]");
  CHECK_BRRR_ERROR(a * b, ErrorKind::shape, "mul", "[2, 3]", "[4]");
  CHECK_BRRR_ERROR(maximum(randn({3, 2}), randn({3})), ErrorKind::shape, "maximum", "[3, 2]", "[3]");
  CHECK_BRRR_ERROR(lt(randn({5, 4, 3}), randn({4, 1, 2})), ErrorKind::shape, "lt", "[5, 4, 3]", "[4, 1, 2]");
  CHECK_BRRR_ERROR(where(gt(a, 0.0), a, b), ErrorKind::shape, "where", "[2, 3]", "[4]");
  CHECK_BRRR_ERROR(broadcast_shapes({2, 3}, {3, 2}, "myop"), ErrorKind::shape, "myop", "[2, 3]", "[3, 2]");
  // where: the condition must be bool
  CHECK_BRRR_ERROR(where(a, a, a), ErrorKind::dtype, "where", "condition must be bool", "f32");
  CHECK_BRRR_ERROR(where(make(DType::i32, {1, 0}), randn({2}), 0.0), ErrorKind::dtype, "where", "i32");
  // gelu's approximate string
  CHECK_BRRR_ERROR(gelu(a, "bad"), ErrorKind::value, "gelu", "approximate", "\"bad\"");
  CHECK_BRRR_ERROR(gelu(a, "Tanh"), ErrorKind::value, "gelu", "\"Tanh\"");
  // clamp needs a bound, and no NaN bound
  CHECK_BRRR_ERROR(clamp(a, std::nullopt, std::nullopt), ErrorKind::value, "clamp", "at least one");
  CHECK_BRRR_ERROR(clamp(a, kNaN, 1.0), ErrorKind::value, "clamp", "NaN");
  // undefined tensors
  CHECK_BRRR_ERROR(add(Tensor(), a), ErrorKind::value, "add", "undefined");
  CHECK_BRRR_ERROR(exp(Tensor()), ErrorKind::value, "exp", "undefined");
  CHECK_BRRR_ERROR(mul(Tensor(), 2), ErrorKind::value, "mul", "undefined");
  // mixed devices: only constructible with a GPU
  if (cuda::is_available()) {
    Tensor g = randn({2, 3}, {.device = Device::cuda(0)});
    CHECK_BRRR_ERROR(add(a, g), ErrorKind::device, "add", "cpu", "cuda:0");
    CHECK_BRRR_ERROR(where(gt(a, 0.0), a, g), ErrorKind::device, "where", "cuda:0");
  } else {
    MESSAGE("no CUDA device: the mixed-device error is checked in the GPU suite");
  }
}

// =========================================================================================
// Edge cases: NaN, infinities, signed zeros, domain errors
// =========================================================================================

TEST_CASE("edge cases: NaN and infinity propagation, domain limits") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(to_string(dtype));
    Tensor x = make(dtype, {kNaN, 1.0, -2.0, kInf, -kInf, 0.0});
    Tensor one = make(dtype, {1.0, kNaN, -3.0, 0.0, 0.0, -0.0});
    // maximum/minimum propagate NaN from either side (PyTorch)
    expect_values(maximum(x, one), {kNaN, kNaN, -2.0, kInf, 0.0, 0.0}, {});
    expect_values(minimum(x, one), {kNaN, kNaN, -3.0, 0.0, -kInf, 0.0}, {});
    // relu, clamp keep NaN; sign(NaN) is 0 (as PyTorch's sign)
    expect_values(relu(x), {kNaN, 1.0, 0.0, kInf, 0.0, 0.0}, {});
    expect_values(clamp(x, -1.0, 1.0), {kNaN, 1.0, -1.0, 1.0, -1.0, 0.0}, {});
    expect_values(clamp_min(x, 0.5), {kNaN, 1.0, 0.5, kInf, 0.5, 0.5}, {});
    expect_values(sign(x), {0.0, 1.0, -1.0, 1.0, -1.0, 0.0}, {});
    expect_values(abs(x), {kNaN, 1.0, 2.0, kInf, kInf, 0.0}, {});
    // clamp with min > max gives max everywhere (PyTorch)
    expect_values(clamp(make(dtype, {-5, 0, 5}), 2.0, 1.0), {1, 1, 1}, {});
    // domain limits
    expect_values(log(make(dtype, {0.0, -1.0, 1.0, kInf})), {-kInf, kNaN, 0.0, kInf}, {});
    expect_values(log1p(make(dtype, {-1.0, -2.0, 0.0})), {-kInf, kNaN, 0.0}, {});
    expect_values(sqrt(make(dtype, {-1.0, 0.0, kInf})), {kNaN, 0.0, kInf}, {});
    expect_values(rsqrt(make(dtype, {0.0, -1.0, kInf})), {kInf, kNaN, 0.0}, {});
    expect_values(div(make(dtype, {1.0, -1.0, 0.0}), make(dtype, {0.0, 0.0, 0.0})), {kInf, -kInf, kNaN}, {});
    expect_values(pow(make(dtype, {0.0, 0.0, -8.0, 2.0, kNaN}), make(dtype, {0.0, -1.0, 1.0 / 3, kInf, 0.0})),
                  {1.0, kInf, kNaN, kInf, 1.0}, {});
    expect_values(exp(make(dtype, {-kInf, kInf, 1000.0})), {0.0, kInf, kInf}, {});
    expect_values(tanh(make(dtype, {-kInf, kInf, 50.0})), {-1.0, 1.0, 1.0}, {});
    expect_values(sigmoid(make(dtype, {-1000.0, 1000.0, 0.0, kInf, -kInf})), {0.0, 1.0, 0.5, 1.0, 0.0}, {});
    expect_values(silu(make(dtype, {-1000.0, 1000.0, 0.0})), {0.0, 1000.0, 0.0}, {});
    expect_values(gelu(make(dtype, {kInf, 0.0, -100.0})), {kInf, 0.0, 0.0}, {});
    expect_values(erf(make(dtype, {kInf, -kInf, 0.0})), {1.0, -1.0, 0.0}, {});
    expect_values(add(x, kNaN), {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN}, {});
    expect_values(eq(x, x), {0, 1, 1, 1, 1, 1}, {});  // NaN != NaN
    expect_values(ne(x, x), {1, 0, 0, 0, 0, 0}, {});
    expect_values(lt(x, kInf), {0, 1, 1, 0, 1, 1}, {});
  }
  // signed zero: abs(-0.0) is +0.0, neg(0.0) is -0.0
  Tensor z = make(DType::f64, {-0.0, 0.0});
  V za = host(abs(z)), zn = host(neg(z));
  CHECK_FALSE(std::signbit(za[0]));
  CHECK_FALSE(std::signbit(za[1]));
  CHECK(std::signbit(zn[1]));
  Tensor zf = make(DType::f32, {-0.0});
  CHECK_FALSE(std::signbit(host(abs(zf))[0]));
  // integer powers with a negative exponent give 0 (no error)
  expect_values(pow(make(DType::i64, {2, 3, -2}), -1), {0, 0, 0}, {});
  // integers: clamp bounds beyond the type's range saturate
  expect_values(clamp(make(DType::i32, {-7, 7}), -1e12, 1e12), {-7, 7}, {});
  expect_values(clamp(make(DType::i32, {-7, 7}), 3.0e9, std::nullopt),
                {2147483647.0, 2147483647.0}, {});
  // bf16/f16 overflow to inf when rounding
  expect_values(mul(make(DType::f16, {60000.0}), 2), {kInf}, {});
  expect_values(exp(make(DType::f16, {12.0})), {kInf}, {});
}
