// The rounding divisions (ops/binary.cpp): floor_divide, div with rounding_mode, remainder,
// fmod. The issue's exact values on every integer and floating dtype, the defining
// identities (a = b q + r, the remainder's sign and bound) on random inputs, IEEE results of
// float division by zero, integer division by zero as brrr::Error, and gradients against
// finite differences. docs/semantics.md, "Division and powers".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;

namespace {

using V = std::vector<double>;

V values(const Tensor& t) { return t.to(DType::f64).contiguous().to_host<double>(); }

Tensor make(DType d, const V& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  return Tensor::from_vector(v, shape).to(d);
}

const V a_issue = {-3, 3, -7, 7}, b_issue = {2, -2, 2, -2};

}  // namespace

TEST_CASE("rounding divisions: the issue's values on every integer and floating dtype") {
  for (DType d : {DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO("dtype ", to_string(d));
    Tensor a = make(d, a_issue), b = make(d, b_issue);
    CHECK(floor_divide(a, b).dtype() == d);
    CHECK(values(floor_divide(a, b)) == V{-2, -2, -4, -4});
    CHECK(values(div(a, b, "floor")) == V{-2, -2, -4, -4});
    CHECK(values(div(a, b, "trunc")) == V{-1, -1, -3, -3});
    CHECK(values(remainder(a, b)) == V{1, -1, 1, -1});
    CHECK(values(fmod(a, b)) == V{-1, 1, -1, 1});
    CHECK(values(div(a, b)) == V{-1.5, -1.5, -3.5, -3.5});  // true division (f32 for integers)
    // With a number divisor, and a number dividend for remainder.
    CHECK(values(floor_divide(a, 2)) == V{-2, 1, -4, 3});
    CHECK(values(div(a, -2, "trunc")) == V{1, -1, 3, -3});
    CHECK(values(remainder(a, -2)) == V{-1, -1, -1, -1});
    CHECK(values(fmod(a, 2)) == V{-1, 1, -1, 1});
    CHECK(values(remainder(5, b)) == V{1, -1, 1, -1});
  }
}

TEST_CASE("rounding divisions: identities on random inputs, broadcasting and promotion") {
  std::uint64_t seed = test::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> num(-1000, 1000), den(-37, 37);
  const std::int64_t n = 3000;
  V av(n), bv(n);
  for (std::int64_t i = 0; i < n; ++i) {
    av[i] = num(rng);
    do bv[i] = den(rng);
    while (bv[i] == 0);
  }
  for (DType d : {DType::i32, DType::i64, DType::f64}) {
    INFO("dtype ", to_string(d));
    Tensor a = make(d, av), b = make(d, bv);
    V q = values(floor_divide(a, b)), t = values(div(a, b, "trunc")), r = values(remainder(a, b)), f = values(fmod(a, b));
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = av[i], y = bv[i];
      CHECK(q[i] == std::floor(x / y));
      CHECK(t[i] == std::trunc(x / y));
      CHECK(r[i] == x - y * q[i]);
      CHECK(f[i] == x - y * t[i]);
      CHECK(std::abs(r[i]) < std::abs(y));
      CHECK((r[i] == 0 || (r[i] < 0) == (y < 0)));  // sign of the divisor
      CHECK((f[i] == 0 || (f[i] < 0) == (x < 0)));  // sign of the dividend
    }
  }
  // Random real operands: the float remainder satisfies its bound and sign, and a ~ b q + r.
  std::normal_distribution<double> g(0, 10);
  V xs(n), ys(n);
  for (std::int64_t i = 0; i < n; ++i) xs[i] = g(rng), ys[i] = g(rng) + (i % 2 ? 0.5 : -0.5);
  Tensor x = make(DType::f64, xs), y = make(DType::f64, ys);
  V q = values(floor_divide(x, y)), r = values(remainder(x, y)), f = values(fmod(x, y));
  for (std::int64_t i = 0; i < n; ++i) {
    CHECK(std::abs(xs[i] - (ys[i] * q[i] + r[i])) <= 1e-12 * (1 + std::abs(xs[i])));
    CHECK(std::abs(r[i]) <= std::abs(ys[i]));
    CHECK((r[i] == 0 || (r[i] < 0) == (ys[i] < 0)));
    CHECK(f[i] == std::fmod(xs[i], ys[i]));
  }
  // Broadcasting [3, 1] with [4]; i32 with i64 promotes to i64; i32 with f32 to f32.
  Tensor col = make(DType::i32, {-7, 0, 7}, {3, 1});
  Tensor row = make(DType::i64, {2, -2, 3, -3});
  Tensor out = floor_divide(col, row);
  CHECK(out.shape() == Shape{3, 4});
  CHECK(out.dtype() == DType::i64);
  CHECK(values(out) == V{-4, 3, -3, 2, 0, 0, 0, 0, 3, -4, 2, -3});
  CHECK(remainder(make(DType::i32, {7}), make(DType::f32, {2.5})).dtype() == DType::f32);
  CHECK(values(remainder(make(DType::i32, {7}), make(DType::f32, {2.5}))) == V{2});
  // Strided operands (a transposed view).
  Tensor m = make(DType::i64, {-5, 6, -7, 8, -9, 10}, {2, 3});
  CHECK(values(remainder(m.t(), 4)) == V{3, 0, 2, 3, 1, 2});
}

TEST_CASE("rounding divisions by zero: IEEE values for floats, brrr::Error for integers") {
  Tensor x = make(DType::f64, {1, -1, 0});
  Tensor z = zeros({3}, {.dtype = DType::f64});
  const double inf = std::numeric_limits<double>::infinity();
  V fd = values(floor_divide(x, z)), td = values(div(x, z, "trunc"));
  CHECK(fd[0] == inf);
  CHECK(fd[1] == -inf);
  CHECK(std::isnan(fd[2]));
  CHECK(td[0] == inf);
  CHECK(td[1] == -inf);
  for (double v : values(remainder(x, z))) CHECK(std::isnan(v));
  for (double v : values(fmod(x, z))) CHECK(std::isnan(v));
  // PyTorch's signed zero: -3 // 4 rounds to -1, but 0 // -4 is -0.0.
  CHECK(std::signbit(values(floor_divide(make(DType::f64, {0}), make(DType::f64, {-4})))[0]));
  for (DType d : {DType::i32, DType::i64}) {
    INFO("dtype ", to_string(d));
    Tensor a = make(d, {5, -5, 6}), b = make(d, {1, 0, 2});
    auto expect_error = [](auto&& f, const char* op) {
      try {
        (void)f();
        FAIL("no brrr::Error");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::value);
        CHECK(std::string(e.what()).find(op) != std::string::npos);
        CHECK(std::string(e.what()).find("division by zero") != std::string::npos);
      }
    };
    expect_error([&] { return floor_divide(a, b); }, "floor_divide");
    expect_error([&] { return div(a, b, "trunc"); }, "div");
    expect_error([&] { return remainder(a, b); }, "remainder");
    expect_error([&] { return fmod(a, b); }, "fmod");
    expect_error([&] { return floor_divide(a, 0); }, "floor_divide");
    expect_error([&] { return remainder(3, b); }, "remainder");
    CHECK(values(div(a, b)) == V{5, -std::numeric_limits<double>::infinity(), 3});  // true division
  }
  // The minimum divided by -1 wraps instead of trapping (as PyTorch's).
  Tensor mn = full({1}, static_cast<double>(std::numeric_limits<std::int32_t>::min()), {.dtype = DType::i32});
  CHECK(floor_divide(mn, -1).to_host<std::int32_t>()[0] == std::numeric_limits<std::int32_t>::min());
  CHECK(remainder(mn, -1).to_host<std::int32_t>()[0] == 0);
}

TEST_CASE("rounding divisions: bad arguments") {
  Tensor a = make(DType::f32, {1, 2});
  try {
    (void)div(a, a, "round");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::value);
    CHECK(std::string(e.what()).find("\"round\"") != std::string::npos);
  }
  Tensor bools = make(DType::boolean, {1, 0});
  CHECK_THROWS_AS((void)floor_divide(bools, bools), Error);
  // A bool tensor with an integral number promotes to i64 first (PyTorch), so that is defined.
  CHECK(remainder(bools, 1).dtype() == DType::i64);
  CHECK_THROWS_AS((void)fmod(a, make(DType::f32, {1, 2, 3})), Error);  // shapes do not broadcast
}

TEST_CASE("rounding divisions: gradients") {
  std::uint64_t seed = test::fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  // Operands whose quotient stays away from whole numbers (the jumps of floor and trunc).
  std::uniform_real_distribution<double> frac(0.2, 0.8);
  std::uniform_int_distribution<int> whole(-4, 4);
  V bv = {1.5, -2.25, 3.0, -0.75, 2.0, -1.25}, av(bv.size());
  for (std::size_t i = 0; i < bv.size(); ++i) av[i] = (whole(rng) + frac(rng)) * bv[i];
  Tensor a = make(DType::f64, av, {2, 3}), b = make(DType::f64, bv, {2, 3});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return remainder(in[0], in[1]); }, {a, b}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return fmod(in[0], in[1]); }, {a, b}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return remainder(in[0], 1.75); }, {a}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return remainder(2.3, in[0]); }, {b}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return fmod(in[0], -1.5); }, {a}));
  // floor/trunc division: gradient 0 for both operands (PyTorch).
  Tensor x = make(DType::f64, av).requires_grad_(), y = make(DType::f64, bv).requires_grad_();
  (sum(floor_divide(x, y)) + sum(div(x, y, "trunc")) + sum(floor_divide(x, 2.0))).backward();
  CHECK(values(x.grad()) == V(av.size(), 0.0));
  CHECK(values(y.grad()) == V(bv.size(), 0.0));
  // remainder's d/db = -floor(a / b) exactly; fmod's = -trunc(a / b).
  Tensor p = make(DType::f64, {-7, 7}).requires_grad_(), q = make(DType::f64, {2, 2}).requires_grad_();
  sum(remainder(p, q)).backward();
  CHECK(values(p.grad()) == V{1, 1});
  CHECK(values(q.grad()) == V{4, -3});
  Tensor p2 = make(DType::f64, {-7, 7}).requires_grad_(), q2 = make(DType::f64, {2, 2}).requires_grad_();
  sum(fmod(p2, q2)).backward();
  CHECK(values(q2.grad()) == V{3, -3});
}
