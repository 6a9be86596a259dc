// Elementwise ops on the CPU, gradients: gradcheck of every differentiable op (first and
// second derivatives, tensor and scalar forms, where), broadcast inputs, mixed dtypes, and
// PyTorch's kink conventions. Cases: tests/ops/elementwise_cases.hpp.
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

TEST_CASE("gelu_backward: one kernel equal to the recorded rule (f64), close in f32/bf16/f16; backward uses it") {
  FRESH_SEED();
  for (const char* approx : {"none", "tanh"}) {
    INFO("approximate ", approx);
    Tensor x = randn({6, 50}, {.dtype = DType::f64}) * 3.0;
    Tensor g = randn({6, 50}, {.dtype = DType::f64});
    // The recorded Tensor-op rule (create_graph) against the kernel.
    Tensor xx = x.detach().clone().requires_grad_();
    Tensor rule = autograd::grad({sum(gelu(xx, approx) * g)}, {xx}, {}, true, true)[0].detach();
    expect_values(gelu_backward(g, x, approx), host(rule), math_tol(DType::f64), "gelu_backward f64");
    // backward() without create_graph gives the kernel's values.
    Tensor xk = x.detach().clone().requires_grad_();
    (gelu(xk, approx) * g).sum().backward();
    expect_values(xk.grad(), host(rule), math_tol(DType::f64), "gelu backward f64");
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      INFO(to_string(dt));
      // |x| <= 3: further out, tanh's 1 - t^2 cancels in f32 (PyTorch's formula too), leaving
      // absolute errors of ~1e-6 |g| in results near 0.
      Tensor xd = clamp(x, -3.0, 3.0).to(dt), gd = g.to(dt);
      Tensor got = gelu_backward(gd, xd, approx);
      CHECK(got.dtype() == dt);
      // f32 arithmetic on the rounded inputs, rounded once.
      Tensor want = gelu_backward(gd.to(DType::f64), xd.to(DType::f64), approx);
      expect_values(got, host(want), math_tol(dt), "gelu_backward low precision");
    }
  }
  // Broadcast and promoted like any binary op; PyTorch's approximate strings only.
  CHECK(gelu_backward(ones({3, 1}), zeros({4})).shape() == Shape{3, 4});
  expect_values(gelu_backward(ones({2}), zeros({2})), {0.5, 0.5}, exact_tol(DType::f32), "gelu'(0) = 1/2");
  CHECK_BRRR_ERROR(gelu_backward(ones({2}), ones({2}), "Tanh"), ErrorKind::value, "gelu_backward", "\"Tanh\"");
}
