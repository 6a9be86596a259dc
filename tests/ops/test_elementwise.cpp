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
#include <cstring>
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

TEST_CASE("exp f32 (the CPU's vectorised exp_f32): within 2 ulps of float64 over its whole range") {
  // A grid of 2^20 points over [-104, 89] plus the edges (overflow at 88.7228, the subnormal
  // tail down to -103.97, NaN and infinities), contiguous and strided.
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
  // The strided path (gathered through the same vector kernel) gives the contiguous bits.
  const auto whole = exp(x).to_host<float>();
  const auto strided = exp(x.slice(0, 1, static_cast<std::int64_t>(xs.size()), 3)).to_host<float>();
  REQUIRE(strided.size() == (xs.size() - 1 + 2) / 3);
  int differ = 0;
  for (std::size_t i = 0; i < strided.size(); ++i)
    differ += std::memcmp(&strided[i], &whole[1 + 3 * i], sizeof(float)) != 0;
  CHECK(differ == 0);
}
