// Elementwise ops on the CPU, values: every binary, comparison, where and unary op against a
// float64 reference computed element by element with <cmath> (f32, f64, bf16/f16 for a few
// ops, integer dtypes where they apply); NumPy broadcasting ([3,1]+[1,4], [5,4,3]+[3],
// scalars, 0-d tensors); non-contiguous inputs (transposed, sliced with a step, expanded with
// stride 0); zero-size and single-element shapes. The cases are tests/ops/elementwise_cases.hpp;
// dtypes and errors are test_promotion.cpp, gradients test_elementwise_grad.cpp.
//
// Inputs are fresh on every run (a random seed, printed on failure); set BRRR_TEST_SEED to
// replay one.
#include <doctest/doctest.h>

#include <algorithm>
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
// Values against the float64 reference
// =========================================================================================

TEST_CASE("unary ops: f32 and f64 against a float64 reference") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const UnaryCase& c : unary_cases()) {
      Tensor x = domain_input(c.domain, {7, 9}, dtype);
      check_unary(c.op(x), x, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype,
                  c.name + " " + to_string(dtype));
    }
  }
}

TEST_CASE("unary ops: bf16 and f16 compute in f32 and round once") {
  FRESH_SEED();
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (const UnaryCase& c : unary_cases()) {
      Tensor x = domain_input(c.domain, {6, 5}, dtype);
      check_unary(c.op(x), x, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype,
                  c.name + " " + to_string(dtype));
    }
  }
}

TEST_CASE("binary ops: f32, f64, bf16, f16 against a float64 reference") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const BinaryCase& c : binary_cases()) {
      Tensor a = c.positive_a ? domain_input(Domain::positive, {6, 7}, dtype) : mul(randn({6, 7}, {.dtype = dtype}), 2);
      Tensor b = randn({6, 7}, {.dtype = dtype});
      check_binary(c.op(a, b), a, b, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype,
                   c.name + " " + to_string(dtype));
    }
  }
}

TEST_CASE("tensor-scalar ops: every form, f32, f64, bf16, f16") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const ScalarCase& c : scalar_cases()) {
      Tensor a = domain_input(c.positive ? Domain::positive : Domain::normal, {5, 6}, dtype);
      check_unary(c.op(a), a, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype,
                  c.name + " " + to_string(dtype));
    }
  }
}

TEST_CASE("comparisons: tensor and scalar forms give bool, with ties, every dtype") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    // whole numbers in [-4, 4]: many ties between a and b
    Tensor a = is_floating_point(dtype) ? rounded(mul(randn({6, 8}, {.dtype = DType::f64}), 2)).to(dtype)
                                        : randint(-4, 5, {6, 8}, {.dtype = dtype});
    Tensor b = is_floating_point(dtype) ? rounded(mul(randn({6, 8}, {.dtype = DType::f64}), 2)).to(dtype)
                                        : randint(-4, 5, {6, 8}, {.dtype = dtype});
    b.slice(0, 0, 1).copy_(a.slice(0, 0, 1));  // ties for certain (some seeds drew none)
    V av = host(a), bv = host(b);
    // Every 7th element of b copied from a: random draws alone leave no tie in about one run
    // in a hundred (seed 4130888642781959233).
    for (std::size_t i = 0; i < bv.size(); i += 7) bv[i] = av[i];
    b = make(dtype, bv, {6, 8});
    std::int64_t ties = 0;
    for (std::size_t i = 0; i < av.size(); ++i) ties += av[i] == bv[i];
    CHECK(ties > 0);
    for (const CompareCase& c : compare_cases()) {
      std::string what = c.name + " " + to_string(dtype);
      check_binary(c.op(a, b), a, b, [&](double x, double y) { return c.ref(x, y) ? 1.0 : 0.0; }, {}, DType::boolean,
                   what);
      // broadcast: a column against a row
      Tensor col = a.slice(1, 0, 1), row = b.slice(0, 2, 3);
      check_binary(c.op(col, row), col, row, [&](double x, double y) { return c.ref(x, y) ? 1.0 : 0.0; }, {},
                   DType::boolean, what + " broadcast");
      // integral scalar (a tie for many elements) and a floating scalar between integers
      check_unary(c.op_scalar(a, 1), a, [&](double x) { return c.ref(x, 1) ? 1.0 : 0.0; }, {}, DType::boolean,
                  what + " vs 1");
      check_unary(c.op_scalar(a, 1.5), a, [&](double x) { return c.ref(x, 1.5) ? 1.0 : 0.0; }, {}, DType::boolean,
                  what + " vs 1.5 (computed in f32 for integers, not truncated)");
      check_unary(c.op_scalar(a, -2), a, [&](double x) { return c.ref(x, -2) ? 1.0 : 0.0; }, {}, DType::boolean,
                  what + " vs -2");
    }
  }
  // bool operands
  Tensor p = gt(randn({10}), 0.0), q = gt(randn({10}), 0.0);
  for (const CompareCase& c : compare_cases())
    check_binary(c.op(p, q), p, q, [&](double x, double y) { return c.ref(x, y) ? 1.0 : 0.0; }, {}, DType::boolean,
                 c.name + " bool");
  // mixed dtypes compare in the promoted dtype: i64 with f32 -> f32
  Tensor i = randint(-3, 4, {12}, {.dtype = DType::i64});
  Tensor f = mul(randn({12}), 2);
  check_binary(lt(i, f), i, f, [](double x, double y) { return x < y ? 1.0 : 0.0; }, {}, DType::boolean, "lt(i64, f32)");
  check_binary(ge(f, i), f, i, [](double x, double y) { return x >= y ? 1.0 : 0.0; }, {}, DType::boolean, "ge(f32, i64)");
}

TEST_CASE("where: tensor and scalar forms, broadcasting, promotion, integers") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean}) {
    INFO(to_string(dtype));
    Tensor cond = gt(randn({5, 6}), 0.0);
    Tensor a = dtype == DType::boolean ? gt(randn({5, 6}), 0.0)
                                       : (is_floating_point(dtype) ? randn({5, 6}, {.dtype = dtype})
                                                                   : randint(-100, 100, {5, 6}, {.dtype = dtype}));
    Tensor b = dtype == DType::boolean ? gt(randn({5, 6}), 0.0)
                                       : (is_floating_point(dtype) ? randn({5, 6}, {.dtype = dtype})
                                                                   : randint(-100, 100, {5, 6}, {.dtype = dtype}));
    Tensor out = where(cond, a, b);
    CHECK(out.dtype() == dtype);
    V cv = host(cond), av = host(a), bv = host(b), e(cv.size());
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = cv[i] != 0 ? av[i] : bv[i];
    expect_values(out, e, {}, "where same shapes");
    // non-contiguous operands
    Tensor ct = cond.t(), at = a.t(), bt = b.t();
    Tensor out_t = where(ct, at, bt);
    REQUIRE(out_t.shape() == Shape{6, 5});
    expect_values(out_t.t(), e, {}, "where transposed");
  }
  // broadcast: cond [3, 1], a [1, 4], b [4] -> [3, 4]
  Tensor cond = gt(randn({3, 1}), 0.0);
  Tensor a = randn({1, 4}), b = randn({4});
  Tensor out = where(cond, a, b);
  REQUIRE(out.shape() == Shape{3, 4});
  V cv = host(cond), av = host(a), bv = host(b), e;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) e.push_back(cv[i] != 0 ? av[j] : bv[j]);
  expect_values(out, e, {}, "where broadcast");
  // both branches seen
  Tensor c2 = make(DType::boolean, {1, 0, 1, 0});
  Tensor x = randn({4});
  V xv = host(x);
  expect_values(where(c2, x, -1.5), {xv[0], -1.5, xv[2], -1.5}, {}, "where(cond, x, scalar)");
  // promotion: f32 with f64 -> f64; i32 with f32 -> f32; int with a floating scalar -> f32
  Tensor xf64 = randn({4}, {.dtype = DType::f64});
  CHECK(where(c2, x, xf64).dtype() == DType::f64);
  expect_values(where(c2, x, xf64), {xv[0], host(xf64)[1], xv[2], host(xf64)[3]}, {}, "where f32/f64");
  Tensor xi = make(DType::i32, {7, -8, 9, -10});
  CHECK(where(c2, xi, x).dtype() == DType::f32);
  CHECK(where(c2, xi, 2).dtype() == DType::i32);
  expect_values(where(c2, xi, 2), {7, 2, 9, 2}, {}, "where(i32, 2)");
  CHECK(where(c2, xi, 0.5).dtype() == DType::f32);
  expect_values(where(c2, xi, 0.5), {7, 0.5, 9, 0.5}, {}, "where(i32, 0.5)");
  // 0-d operands
  Tensor z = full({}, 3.25, {.dtype = DType::f32});
  expect_values(where(c2, z, x), {3.25, xv[1], 3.25, xv[3]}, {}, "where 0-d branch");
  Tensor zc = full({}, 1.0, {.dtype = DType::boolean});
  CHECK(where(zc, x, z).shape() == Shape{4});
  expect_values(where(zc, x, z), xv, {}, "where 0-d condition");
}

TEST_CASE("integer dtypes: add/sub/mul/neg/abs/relu/sign/clamp/maximum/minimum/pow stay integer") {
  FRESH_SEED();
  for (DType dtype : {DType::i32, DType::i64}) {
    std::string dn = to_string(dtype);
    Tensor a = randint(-50, 51, {6, 7}, {.dtype = dtype});
    Tensor b = randint(-50, 51, {6, 7}, {.dtype = dtype});
    Tensor row = randint(-50, 51, {7}, {.dtype = dtype});
    check_binary(add(a, b), a, b, [](double x, double y) { return x + y; }, {}, dtype, "add " + dn);
    check_binary(sub(a, b), a, b, [](double x, double y) { return x - y; }, {}, dtype, "sub " + dn);
    check_binary(mul(a, b), a, b, [](double x, double y) { return x * y; }, {}, dtype, "mul " + dn);
    check_binary(a + row, a, row, [](double x, double y) { return x + y; }, {}, dtype, "add broadcast " + dn);
    check_binary(a.t() * b.t(), a.t(), b.t(), [](double x, double y) { return x * y; }, {}, dtype, "mul t " + dn);
    check_binary(maximum(a, b), a, b, [](double x, double y) { return std::max(x, y); }, {}, dtype, "max " + dn);
    check_binary(minimum(a, b), a, b, [](double x, double y) { return std::min(x, y); }, {}, dtype, "min " + dn);
    check_unary(add(a, 7), a, [](double x) { return x + 7; }, {}, dtype, "add(a, 7) " + dn);
    check_unary(sub(3, a), a, [](double x) { return 3 - x; }, {}, dtype, "sub(3, a) " + dn);
    check_unary(a * 2, a, [](double x) { return x * 2; }, {}, dtype, "a * 2 " + dn);
    check_unary(-3 * a, a, [](double x) { return -3 * x; }, {}, dtype, "-3 * a " + dn);
    check_unary(neg(a), a, [](double x) { return -x; }, {}, dtype, "neg " + dn);
    check_unary(-a, a, [](double x) { return -x; }, {}, dtype, "unary - " + dn);
    check_unary(abs(a), a, [](double x) { return std::fabs(x); }, {}, dtype, "abs " + dn);
    check_unary(relu(a), a, [](double x) { return std::max(x, 0.0); }, {}, dtype, "relu " + dn);
    check_unary(sign(a), a, ref_sign, {}, dtype, "sign " + dn);
    check_unary(clamp(a, -10, 20), a, [](double x) { return ref_clamp(x, -10, 20); }, {}, dtype, "clamp " + dn);
    check_unary(clamp_min(a, 5), a, [](double x) { return std::max(x, 5.0); }, {}, dtype, "clamp_min " + dn);
    check_unary(clamp_max(a, -5), a, [](double x) { return std::min(x, -5.0); }, {}, dtype, "clamp_max " + dn);
    // fractional bounds on integers round inward: [-10.5, 20.5] -> [-10, 20]
    check_unary(clamp(a, -10.5, 20.5), a, [](double x) { return ref_clamp(x, -10, 20); }, {}, dtype,
                "clamp fractional " + dn);
    // integer powers stay integer
    Tensor small = randint(-5, 6, {20}, {.dtype = dtype});
    Tensor e = randint(0, 5, {20}, {.dtype = dtype});
    check_binary(pow(small, e), small, e, [](double x, double y) { return std::pow(x, y); }, {}, dtype, "pow " + dn);
    check_unary(pow(small, 3), small, [](double x) { return x * x * x; }, {}, dtype, "pow(a, 3) " + dn);
    check_unary(pow(2, e), e, [](double y) { return std::pow(2.0, y); }, {}, dtype, "pow(2, e) " + dn);
  }
}

TEST_CASE("bool tensors: add is logical or, mul logical and; sub and signed unary ops refuse bool") {
  FRESH_SEED();
  Tensor p = gt(randn({16}), 0.0), q = gt(randn({16}), 0.0);
  check_binary(add(p, q), p, q, [](double x, double y) { return (x != 0 || y != 0) ? 1.0 : 0.0; }, {}, DType::boolean,
               "bool add");
  check_binary(mul(p, q), p, q, [](double x, double y) { return (x != 0 && y != 0) ? 1.0 : 0.0; }, {}, DType::boolean,
               "bool mul");
  check_binary(maximum(p, q), p, q, [](double x, double y) { return std::max(x, y); }, {}, DType::boolean, "bool max");
  check_binary(where(p, p, q), p, q, [](double x, double y) { return x != 0 ? x : y; }, {}, DType::boolean,
               "bool where");
  CHECK_BRRR_ERROR(sub(p, q), ErrorKind::dtype, "sub", "bool");
  CHECK_BRRR_ERROR(neg(p), ErrorKind::dtype, "neg", "bool");
  CHECK_BRRR_ERROR(-p, ErrorKind::dtype, "neg", "bool");
  CHECK_BRRR_ERROR(abs(p), ErrorKind::dtype, "abs", "bool");
  CHECK_BRRR_ERROR(relu(p), ErrorKind::dtype, "relu", "bool");
  CHECK_BRRR_ERROR(sign(p), ErrorKind::dtype, "sign", "bool");
  CHECK_BRRR_ERROR(clamp(p, 0, 1), ErrorKind::dtype, "clamp", "bool");
  // floating functions of bool and integer tensors compute in f32
  check_unary(exp(p), p, [](double x) { return std::exp(x); }, math_tol(DType::f32), DType::f32, "exp(bool)");
  Tensor i = randint(1, 100, {12}, {.dtype = DType::i32});
  check_unary(sqrt(i), i, [](double x) { return std::sqrt(x); }, exact_tol(DType::f32), DType::f32, "sqrt(i32)");
  check_unary(log(i), i, [](double x) { return std::log(x); }, math_tol(DType::f32), DType::f32, "log(i32)");
  Tensor l = randint(-3, 4, {12}, {.dtype = DType::i64});
  check_unary(sigmoid(l), l, ref_sigmoid, math_tol(DType::f32), DType::f32, "sigmoid(i64)");
  check_unary(gelu(l), l, ref_gelu_erf, math_tol(DType::f32), DType::f32, "gelu(i64)");
}

// =========================================================================================
// Broadcasting, layouts, sizes
// =========================================================================================

TEST_CASE("broadcasting: [3,1]+[1,4], [5,4,3]+[3], scalars, 0-d tensors, size-1 dims") {
  FRESH_SEED();
  struct Pair {
    Shape a, b;
  };
  std::vector<Pair> pairs = {{{3, 1}, {1, 4}},  {{5, 4, 3}, {3}},    {{3}, {5, 4, 3}}, {{5, 1, 3}, {4, 1}},
                             {{2, 3}, {}},      {{}, {2, 3}},        {{}, {}},         {{1}, {}},
                             {{1, 1, 1}, {4}},  {{2, 1, 4, 1}, {3, 1, 5}}, {{1}, {6}}, {{6}, {1}}};
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const Pair& p : pairs) {
      Tensor a = randn(p.a, {.dtype = dtype}), b = randn(p.b, {.dtype = dtype});
      std::string what = to_string(p.a) + " with " + to_string(p.b) + " " + to_string(dtype);
      for (const BinaryCase& c : binary_cases()) {
        Tensor aa = c.positive_a ? add(abs(a), 0.1) : a;
        check_binary(c.op(aa, b), aa, b, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype, c.name + " " + what);
      }
      check_binary(eq(a, b), a, b, [](double x, double y) { return x == y ? 1.0 : 0.0; }, {}, DType::boolean,
                   "eq " + what);
      check_binary(lt(a, b), a, b, [](double x, double y) { return x < y ? 1.0 : 0.0; }, {}, DType::boolean,
                   "lt " + what);
    }
  }
  // 0-d op 0-d stays 0-d; tensor op scalar keeps the shape
  Tensor s = full({}, 1.5), t = full({}, -0.25);
  CHECK((s + t).dim() == 0);
  CHECK((s * t).item<float>() == -0.375f);
  CHECK(exp(s).dim() == 0);
  CHECK((s * 2).dim() == 0);
  // broadcasting is symmetric in shape
  Tensor a = randn({3, 1}), b = randn({1, 4});
  CHECK((a + b).shape() == Shape{3, 4});
  CHECK((b + a).shape() == Shape{3, 4});
  CHECK(testing::allclose(a + b, b + a));
  CHECK(broadcast_shapes({5, 4, 3}, {3}) == Shape{5, 4, 3});
  CHECK(broadcast_shapes({2, 1, 4, 1}, {3, 1, 5}) == Shape{2, 3, 4, 5});
  CHECK(broadcast_shapes({}, {}) == Shape{});
  CHECK(broadcast_shapes({0, 1}, {1, 4}) == Shape{0, 4});
  CHECK(broadcast_shapes({1}, {0}) == Shape{0});
}

TEST_CASE("non-contiguous inputs: transposed, sliced with a step, expanded (stride 0), every pair") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    auto la = layouts(dtype, /*positive=*/true);
    auto lb = layouts(dtype);
    CHECK_FALSE(la[1].second.is_contiguous());
    CHECK_FALSE(la[2].second.is_contiguous());
    CHECK(la[2].second.storage_offset() > 0);
    CHECK(la[4].second.stride(0) == 0);
    for (const auto& [na, a] : la) {
      for (const auto& [nb, b] : lb) {
        std::string what = na + " with " + nb + " " + to_string(dtype);
        for (const BinaryCase& c : binary_cases())
          check_binary(c.op(a, b), a, b, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype,
                       c.name + " " + what);
        check_binary(gt(a, b), a, b, [](double x, double y) { return x > y ? 1.0 : 0.0; }, {}, DType::boolean,
                     "gt " + what);
      }
      for (const UnaryCase& c : unary_cases())
        if (c.domain != Domain::above_minus_one)
          check_unary(c.op(a), a, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype, c.name + " " + na);
      check_unary(a * 0.5, a, [](double x) { return x * 0.5; }, exact_tol(dtype), dtype, "a * 0.5 " + na);
      check_unary(pow(2.0, a), a, [](double x) { return std::pow(2.0, x); }, math_tol(dtype), dtype, "2^a " + na);
    }
  }
  // integer layouts
  Tensor base = randint(-9, 10, {9, 5}, {.dtype = DType::i32});
  Tensor sl = base.slice(0, 1, 9, 2), tr = randint(-9, 10, {5, 4}, {.dtype = DType::i32}).t();
  check_binary(sl * tr, sl, tr, [](double x, double y) { return x * y; }, {}, DType::i32, "i32 slice * transpose");
  check_unary(abs(sl), sl, [](double x) { return std::fabs(x); }, {}, DType::i32, "abs i32 slice");
  // inputs are not modified
  V before = host(base);
  (void)add(base.t(), 1);
  CHECK(host(base) == before);
}

TEST_CASE("zero-size and single-element shapes") {
  FRESH_SEED();
  for (DType dtype : {DType::f32, DType::f64, DType::i64}) {
    INFO(to_string(dtype));
    Tensor e0 = zeros({0}, {.dtype = dtype});
    Tensor e03 = zeros({0, 3}, {.dtype = dtype});
    Tensor r3 = is_floating_point(dtype) ? randn({3}, {.dtype = dtype}) : randint(-5, 5, {3}, {.dtype = dtype});
    CHECK((e03 + r3).shape() == Shape{0, 3});
    CHECK((r3 * e03).shape() == Shape{0, 3});
    CHECK((e03 + r3).dtype() == dtype);
    CHECK(add(zeros({0, 1}, {.dtype = dtype}), zeros({1, 4}, {.dtype = dtype})).shape() == Shape{0, 4});
    CHECK(add(zeros({2, 0}, {.dtype = dtype}), zeros({2, 1}, {.dtype = dtype})).shape() == Shape{2, 0});
    CHECK(neg(e0).shape() == Shape{0});
    CHECK(abs(e03).shape() == Shape{0, 3});
    CHECK(exp(e03).shape() == Shape{0, 3});
    CHECK((e0 * 3).shape() == Shape{0});
    CHECK(eq(e03, r3).dtype() == DType::boolean);
    CHECK(eq(e03, r3).shape() == Shape{0, 3});
    CHECK(lt(e0, 1).shape() == Shape{0});
    CHECK(where(zeros({0, 3}, {.dtype = DType::boolean}), e03, r3).shape() == Shape{0, 3});
    CHECK(clamp(e0, 0, 1).numel() == 0);
    CHECK(host(e03 + r3).empty());
    CHECK_BRRR_ERROR(add(zeros({0}, {.dtype = dtype}), zeros({2}, {.dtype = dtype})), ErrorKind::shape, "[0]", "[2]");
  }
  // single elements: [1], [1, 1, 1], 0-d
  for (DType dtype : {DType::f32, DType::f64, DType::f16}) {
    Tensor a = randn({1}, {.dtype = dtype}), b = randn({1, 1, 1}, {.dtype = dtype}), s = randn({}, {.dtype = dtype});
    for (const BinaryCase& c : binary_cases()) {
      Tensor aa = c.positive_a ? add(abs(a), 0.1) : a;
      Tol tol = c.math ? math_tol(dtype) : exact_tol(dtype);
      check_binary(c.op(aa, b), aa, b, c.ref, tol, dtype, c.name + " [1] with [1,1,1] " + to_string(dtype));
      check_binary(c.op(aa, s), aa, s, c.ref, tol, dtype, c.name + " [1] with [] " + to_string(dtype));
    }
    for (const UnaryCase& c : unary_cases()) {
      Tensor x = c.domain == Domain::normal ? s : add(abs(s), 0.2);
      check_unary(c.op(x), x, c.ref, c.math ? math_tol(dtype) : exact_tol(dtype), dtype, c.name + " 0-d");
    }
  }
}
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

// =========================================================================================
// Gradients
// =========================================================================================

TEST_CASE("gradcheck: every differentiable unary op, and its second derivative") {
  FRESH_SEED();
  for (const UnaryCase& c : unary_cases()) {
    if (c.name == "sign") continue;  // gradient 0 everywhere: checked below
    Tensor x = domain_input(c.domain, {3, 4}, DType::f64);
    // away from the kinks of abs/relu (0) and of the clamps (their bounds)
    if (c.name == "abs" || c.name == "relu") x = away_from(x, 0.0, 0.05);
    if (c.name.rfind("clamp", 0) == 0)
      x = away_from(away_from(away_from(away_from(x, -0.5, 0.05), 0.7, 0.05), 0.25, 0.05), -0.75, 0.05);
    auto op = c.op;
    check_grad(c.name, [op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
    check_gradgrad(c.name, [op](const std::vector<Tensor>& in) { return op(in[0]); }, {x});
  }
  // sign: gradient zero
  Tensor x = randn({5}, {.dtype = DType::f64, .requires_grad = true});
  sign(x).sum().backward();
  REQUIRE(x.grad().defined());
  expect_values(x.grad(), V(5, 0.0), {}, "sign'");
}

TEST_CASE("gradcheck: binary ops, scalar forms and where, same shapes and broadcast") {
  FRESH_SEED();
  struct Shapes {
    Shape a, b;
  };
  std::vector<Shapes> shapes = {{{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{5, 4, 3}, {3}}, {{3}, {2, 1, 3}},
                                {{}, {2, 3}},     {{2, 3}, {}},     {{1}, {4, 1}}};
  for (const Shapes& s : shapes) {
    std::string where_ = to_string(s.a) + " with " + to_string(s.b);
    for (const BinaryCase& c : binary_cases()) {
      Tensor a = randn(s.a, {.dtype = DType::f64}), b = randn(s.b, {.dtype = DType::f64});
      if (c.positive_a) a = add(abs(a), 0.2);
      if (c.name == "div" || c.name == "operator/") b = away_from(b, 0.0, 0.3);
      auto op = c.op;
      Fn f = [op](const std::vector<Tensor>& in) { return op(in[0], in[1]); };
      check_grad(c.name + " " + where_, f, {a, b});
      check_gradgrad(c.name + " " + where_, f, {a, b});
    }
    // where: the condition is fixed, the branches broadcast
    Tensor cond = gt(randn(ref_broadcast(s.a, s.b)), 0.0);
    Tensor a = randn(s.a, {.dtype = DType::f64}), b = randn(s.b, {.dtype = DType::f64});
    check_grad("where " + where_, [cond](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
    check_grad("where scalar " + where_, [cond](const std::vector<Tensor>& in) { return where(cond, in[0], 2.5); },
               {randn(ref_broadcast(s.a, s.b), {.dtype = DType::f64})});
  }
  for (const ScalarCase& c : scalar_cases()) {
    Tensor a = domain_input(c.positive ? Domain::positive : Domain::normal, {3, 4}, DType::f64);
    if (c.name.find("/ a") != std::string::npos || c.name.find(", a)") != std::string::npos)
      a = away_from(a, 0.0, 0.3);  // s / a
    auto op = c.op;
    Fn f = [op](const std::vector<Tensor>& in) { return op(in[0]); };
    check_grad(c.name, f, {a});
    check_gradgrad(c.name, f, {a});
  }
  // a composite of several ops with broadcasting
  Tensor x = randn({4, 3}, {.dtype = DType::f64}), w = randn({3}, {.dtype = DType::f64}),
         bias = randn({4, 1}, {.dtype = DType::f64});
  check_grad("gelu(x * w + b)^2",
             [](const std::vector<Tensor>& in) { return pow(gelu(in[0] * in[1] + in[2]), 2.0); }, {x, w, bias});
}

TEST_CASE("gradients of broadcast inputs are summed back to each input's shape") {
  FRESH_SEED();
  Tensor a = randn({3, 1}, {.requires_grad = true});
  Tensor b = randn({1, 4}, {.requires_grad = true});
  Tensor c = randn({4}, {.requires_grad = true});
  Tensor s = randn({}, {.requires_grad = true});
  (a * b + c * s).sum().backward();
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(b.grad().shape() == Shape{1, 4});
  CHECK(c.grad().shape() == Shape{4});
  CHECK(s.grad().shape() == Shape{});
  V av = host(a), bv = host(b), cv = host(c);
  double sb = 0, sa = 0, sc = 0;
  for (double v : bv) sb += v;
  for (double v : av) sa += v;
  for (double v : cv) sc += v;
  expect_values(a.grad(), V(3, sb), {1e-6, 1e-6}, "d/da");
  expect_values(b.grad(), V(4, sa), {1e-6, 1e-6}, "d/db");
  expect_values(c.grad(), V(4, 3 * host(s)[0]), {1e-6, 1e-6}, "d/dc");
  expect_values(s.grad(), V(1, 3 * sc), {1e-6, 1e-6}, "d/ds");
}

TEST_CASE("mixed dtypes: each input's gradient in its own dtype") {
  FRESH_SEED();
  Tensor a = randn({3, 1}, {.dtype = DType::f32, .requires_grad = true});
  Tensor b = randn({4}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = a * b;
  CHECK(y.dtype() == DType::f64);
  y.sum().backward();
  REQUIRE(a.grad().defined());
  REQUIRE(b.grad().defined());
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f64);
  V av = host(a), bv = host(b);
  double sb = bv[0] + bv[1] + bv[2] + bv[3], sa = av[0] + av[1] + av[2];
  expect_values(a.grad(), V(3, sb), exact_tol(DType::f32), "f32 grad");
  expect_values(b.grad(), V(4, sa), {1e-15, 0}, "f64 grad");

  // every binary op, f32 x f64 and bf16 x f32
  for (auto [da, db] : {std::pair{DType::f32, DType::f64}, std::pair{DType::bf16, DType::f32},
                        std::pair{DType::f16, DType::f64}}) {
    for (const BinaryCase& c : binary_cases()) {
      INFO(c.name, " ", to_string(da), " x ", to_string(db));
      Tensor p = add(abs(randn({2, 3}, {.dtype = da})), 0.5).detach();
      Tensor q = add(randn({3}, {.dtype = db}), 3.0).detach();
      p.requires_grad_();
      q.requires_grad_();
      c.op(p, q).sum().backward();
      REQUIRE(p.grad().defined());
      REQUIRE(q.grad().defined());
      CHECK(p.grad().dtype() == da);
      CHECK(q.grad().dtype() == db);
      CHECK(p.grad().shape() == Shape{2, 3});
      CHECK(q.grad().shape() == Shape{3});
    }
  }
  // where with mixed branch dtypes, and an integer operand (no gradient for it)
  Tensor x = randn({4}, {.dtype = DType::f32, .requires_grad = true});
  Tensor z = randn({4}, {.dtype = DType::f64, .requires_grad = true});
  Tensor cond = make(DType::boolean, {1, 0, 0, 1});
  where(cond, x, z).sum().backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(z.grad().dtype() == DType::f64);
  expect_values(x.grad(), {1, 0, 0, 1}, {}, "where grad a");
  expect_values(z.grad(), {0, 1, 1, 0}, {}, "where grad b");
  Tensor k = make(DType::i32, {1, 2, 3, 4});
  Tensor w = randn({4}, {.requires_grad = true});
  (w * k + k).sum().backward();
  expect_values(w.grad(), {1, 2, 3, 4}, {}, "grad with an integer operand");
  CHECK_FALSE(k.requires_grad());
  // integer results are not recorded
  CHECK_FALSE(add(k, k).requires_grad());
  CHECK_FALSE(gt(w, 0.0).requires_grad());
}

TEST_CASE("kinks as PyTorch: relu'(0)=0, abs'(0)=0, ties split, clamp bounds included, pow at 0") {
  // relu'(0) = 0
  Tensor x = make(DType::f64, {-1.0, 0.0, 2.0, -0.0});
  x.requires_grad_();
  relu(x).sum().backward();
  expect_values(x.grad(), {0, 0, 1, 0}, {}, "relu'");
  // abs'(0) = 0
  Tensor y = make(DType::f64, {-2.0, 0.0, 3.0});
  y.requires_grad_();
  abs(y).sum().backward();
  expect_values(y.grad(), {-1, 0, 1}, {}, "abs'");
  // maximum/minimum ties: half to each input
  for (bool is_max : {true, false}) {
    Tensor a = make(DType::f64, {1.0, 2.0, 3.0}), b = make(DType::f64, {1.0, 5.0, -3.0});
    a.requires_grad_();
    b.requires_grad_();
    (is_max ? maximum(a, b) : minimum(a, b)).sum().backward();
    expect_values(a.grad(), is_max ? V{0.5, 0, 1} : V{0.5, 1, 0}, {}, is_max ? "maximum a" : "minimum a");
    expect_values(b.grad(), is_max ? V{0.5, 1, 0} : V{0.5, 0, 1}, {}, is_max ? "maximum b" : "minimum b");
  }
  // A NaN operand: nobody strictly loses, so both inputs get the whole gradient (PyTorch).
  for (bool is_max : {true, false}) {
    Tensor a = Tensor::from_vector(V{kNaN, 1.0, kNaN}).requires_grad_();
    Tensor b = Tensor::from_vector(V{2.0, kNaN, kNaN}).requires_grad_();
    (is_max ? maximum(a, b) : minimum(a, b)).sum().backward();
    expect_values(a.grad(), V{1, 1, 1}, {}, is_max ? "maximum NaN a" : "minimum NaN a");
    expect_values(b.grad(), V{1, 1, 1}, {}, is_max ? "maximum NaN b" : "minimum NaN b");
  }
  // maximum(x, x): both halves reach x
  Tensor m = randn({4}, {.dtype = DType::f64, .requires_grad = true});
  maximum(m, m).sum().backward();
  expect_values(m.grad(), V(4, 1.0), {}, "maximum(x, x)");
  // clamp: gradient 1 at the bounds (included), 0 outside
  Tensor c = make(DType::f64, {-2.0, -1.0, 0.5, 1.0, 2.0});
  c.requires_grad_();
  clamp(c, -1.0, 1.0).sum().backward();
  expect_values(c.grad(), {0, 1, 1, 1, 0}, {}, "clamp'");
  Tensor cm = make(DType::f64, {-1.0, 0.0, 1.0});
  cm.requires_grad_();
  (clamp_min(cm, 0.0) + clamp_max(cm, 0.0)).sum().backward();
  expect_values(cm.grad(), {1, 2, 1}, {}, "clamp_min' + clamp_max'");
  // where with NaN in the branch not taken: sqrt's backward makes 0 / NaN = NaN (PyTorch)
  Tensor w = make(DType::f64, {-1.0, -4.0});
  w.requires_grad_();
  Tensor out = where(gt(w, 0.0), sqrt(w), w);
  V ov = host(out);
  CHECK_FALSE(std::isnan(ov[0]));
  CHECK_FALSE(std::isnan(ov[1]));
  CHECK(ov == V{-1.0, -4.0});
  out.sum().backward();
  V wg = host(w.grad());
  CHECK(std::isnan(wg[0]));
  CHECK(std::isnan(wg[1]));
  // pow at a zero base: d/db 0^b = 0 for b >= 0; d/da a^b = 0 where b == 0 (PyTorch)
  Tensor pa = make(DType::f64, {0.0, 0.0, 1.5, 2.0});
  Tensor pb = make(DType::f64, {2.0, 0.0, 2.0, 0.0});
  pa.requires_grad_();
  pb.requires_grad_();
  pow(pa, pb).sum().backward();
  expect_values(pa.grad(), {0.0, 0.0, 3.0, 0.0}, {1e-15, 0}, "d/da a^b");
  expect_values(pb.grad(), {0.0, 0.0, 2.25 * std::log(1.5), std::log(2.0)}, {1e-15, 0}, "d/db a^b");
  // scalar base 0: d/dx 0^x = 0 for x >= 0
  Tensor e = make(DType::f64, {1.0, 2.0, 0.0});
  e.requires_grad_();
  pow(0.0, e).sum().backward();
  expect_values(e.grad(), {0.0, 0.0, 0.0}, {}, "d/dx 0^x");
  // scalar exponent 0: gradient 0 even at 0
  Tensor p0 = make(DType::f64, {0.0, 3.0});
  p0.requires_grad_();
  pow(p0, 0.0).sum().backward();
  expect_values(p0.grad(), {0.0, 0.0}, {}, "d/dx x^0");
}

TEST_CASE("exp f32 (the CPU's vectorised exp_f32): within 2 ulps of float64 over its whole range") {
  // Every 7th float between -104 and 89 would be too many: a dense grid of 2^20 points plus
  // the edges (overflow at 88.7228, the subnormal tail down to -103.97, NaN and infinities).
  std::vector<double> xs;
  const int n = 1 << 20;
  for (int i = 0; i < n; ++i) xs.push_back(-104.0 + 193.0 * i / n);
  for (double v : {0.0, -0.0, 1e-30, -1e-30, 88.72283935546875, 88.7228, 88.73, -87.3365, -103.97, -103.98, -200.0,
                   200.0, kInf, -kInf, kNaN})
    xs.push_back(v);
  const Tensor x = Tensor::from_vector(xs).to(DType::f32);
  const auto in = x.to_host<float>();
  for (const Tensor& got_t : {exp(x), exp(x.slice(0, 0, static_cast<std::int64_t>(xs.size()), 2))}) {
    const auto got = got_t.to_host<float>();
    const std::size_t step = got.size() == in.size() ? 1 : 2;
    int bad = 0;
    for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
      const double ref = std::exp(static_cast<double>(in[i * step]));
      const float r = static_cast<float>(ref), g = got[i];
      bool ok;
      if (std::isnan(ref)) ok = std::isnan(g);
      else if (std::isinf(r)) ok = std::isinf(g) && g > 0;
      else ok = std::abs(g - ref) <= 2 * std::max(std::abs(ref) * 0x1p-24, 0x1p-149);
      if (!ok) {
        ++bad;
        INFO("x = ", in[i * step], " got ", g, " expected ", ref);
        CHECK(ok);
      }
    }
    CHECK(bad == 0);
  }
}
=======
