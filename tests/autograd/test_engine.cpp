// The backward engine: scalar and non-scalar roots, accumulation, retain_graph, create_graph
// (higher-order gradients), autograd::grad (allow_unused), grad mode, detach, version
// counters of saved tensors, in-place writes into leaves, a 100000-op chain (no recursion),
// diamonds, which leaves receive gradients, dtype conversions.
//
// Inputs are fresh on every run (a random seed, printed on failure); set BRRR_TEST_SEED to
// replay one.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

// StringMaker for vectors, toString for DType/ErrorKind, CHECK_BRRR_ERROR.
#include "tests/tensor/helpers.hpp"

namespace {

using V = std::vector<double>;

V host(const Tensor& t) { return t.to(DType::f64).to_host<double>(); }

/// |got - expected| <= atol + rtol |expected| for every element, one CHECK.
void expect_near(const Tensor& got_t, const V& expected, double rtol = 1e-12, double atol = 1e-12,
                 const std::string& what = "") {
  INFO(what);
  REQUIRE(got_t.defined());
  V got = host(got_t);
  REQUIRE(got.size() == expected.size());
  std::size_t bad = 0;
  std::ostringstream first;
  first.precision(17);
  for (std::size_t i = 0; i < got.size(); ++i) {
    bool ok = std::fabs(got[i] - expected[i]) <= atol + rtol * std::fabs(expected[i]);
    if (!ok && bad++ == 0) first << "element " << i << ": got " << got[i] << ", expected " << expected[i];
  }
  CHECK_MESSAGE(bad == 0, bad << " elements differ; " << first.str());
}

/// An f64 leaf requiring grad with random normal values.
Tensor leaf(const Shape& shape, DType dtype = DType::f64) {
  return randn(shape, {.dtype = dtype, .requires_grad = true});
}

V map(const V& v, double (*f)(double)) {
  V r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = f(v[i]);
  return r;
}

}  // namespace

TEST_CASE("backward from a scalar: d/dx sum(x * x + 3 x) = 2x + 3") {
  FRESH_SEED();
  Tensor x = leaf({3, 4});
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK_FALSE(x.grad().defined());
  Tensor y = (x * x + 3 * x).sum();
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  REQUIRE(y.grad_fn() != nullptr);
  y.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().shape() == Shape{3, 4});
  CHECK(x.grad().dtype() == DType::f64);
  CHECK_FALSE(x.grad().requires_grad());
  V xv = host(x), e(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) e[i] = 2 * xv[i] + 3;
  expect_near(x.grad(), e);
  // a [1]-shaped output also counts as a scalar
  Tensor z = leaf({1});
  (z * 5).backward();
  expect_near(z.grad(), {5});
}

TEST_CASE("backward from a non-scalar needs a gradient of the output's shape") {
  FRESH_SEED();
  Tensor x = leaf({2, 3});
  Tensor y = x * x;
  CHECK_BRRR_ERROR(y.backward(), ErrorKind::autograd, "backward", "non-scalar", "[2, 3]");
  CHECK_BRRR_ERROR(y.backward(ones({3, 2}, {.dtype = DType::f64})), ErrorKind::shape, "backward", "[3, 2]",
                   "[2, 3]");
  Tensor g = randn({2, 3}, {.dtype = DType::f64});
  y.backward(g);
  V xv = host(x), gv = host(g), e(6);
  for (std::size_t i = 0; i < 6; ++i) e[i] = 2 * xv[i] * gv[i];
  expect_near(x.grad(), e);
  // through autograd::backward with several outputs: gradients add up
  Tensor a = leaf({4});
  Tensor o1 = a * 2, o2 = exp(a);
  autograd::backward({o1, o2}, {ones({4}, {.dtype = DType::f64}), full({4}, 3.0, {.dtype = DType::f64})});
  V av = host(a), e2(4);
  for (std::size_t i = 0; i < 4; ++i) e2[i] = 2 + 3 * std::exp(av[i]);
  expect_near(a.grad(), e2);
  CHECK_BRRR_ERROR(autograd::backward({o1.sum(), o2.sum()}, {Tensor()}), ErrorKind::autograd, "2 outputs",
                   "1 gradients");
}

TEST_CASE("backward of something that does not require grad throws") {
  Tensor x = randn({3});
  CHECK_BRRR_ERROR(x.sum().backward(), ErrorKind::autograd, "does not require grad");
  Tensor w = leaf({3});
  {
    NoGradGuard g;
    CHECK_BRRR_ERROR((w * 2).sum().backward(), ErrorKind::autograd, "does not require grad");
  }
}

TEST_CASE("gradients accumulate across backward calls; set_grad replaces or clears") {
  FRESH_SEED();
  Tensor x = leaf({5});
  V xv = host(x);
  (x * x).sum().backward();
  (x * x).sum().backward();
  V e(5);
  for (std::size_t i = 0; i < 5; ++i) e[i] = 4 * xv[i];
  expect_near(x.grad(), e, 1e-12, 1e-12, "two graphs");
  // the same graph twice with retain_graph
  Tensor z = leaf({5});
  Tensor y = exp(z).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  V zv = host(z), ez(5);
  for (std::size_t i = 0; i < 5; ++i) ez[i] = 2 * std::exp(zv[i]);
  expect_near(z.grad(), ez, 1e-12, 1e-12, "retained graph twice");
  // the accumulated gradient is a fresh tensor: the first one handed out is not modified
  Tensor first = x.grad();
  V before = host(first);
  (x * 1.0).sum().backward();
  CHECK(host(first) == before);
  for (std::size_t i = 0; i < 5; ++i) e[i] += 1;
  expect_near(x.grad(), e);
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  (x * 2.0).sum().backward();
  expect_near(x.grad(), V(5, 2.0));
  CHECK_BRRR_ERROR(x.set_grad(zeros({4}, {.dtype = DType::f64})), ErrorKind::shape, "set_grad", "[4]", "[5]");
}

TEST_CASE("retain_graph: a second backward through freed saved tensors throws") {
  FRESH_SEED();
  Tensor x = leaf({4});
  Tensor y = exp(x).sum();
  y.backward();
  CHECK_BRRR_ERROR(y.backward(), ErrorKind::autograd, "second time", "retain_graph");
  Tensor a = leaf({3}), b = leaf({3});
  Tensor c = (a * b).sum();
  autograd::grad({c}, {a});
  CHECK_BRRR_ERROR(autograd::grad({c}, {a}), ErrorKind::autograd, "second time");
  // retained: works any number of times
  Tensor p = leaf({3});
  Tensor q = tanh(p).sum();
  for (int i = 0; i < 3; ++i) q.backward({}, true);
  V pv = host(p), e(3);
  for (std::size_t i = 0; i < 3; ++i) e[i] = 3 * (1 - std::tanh(pv[i]) * std::tanh(pv[i]));
  expect_near(p.grad(), e);
}

TEST_CASE("create_graph: second derivatives through autograd::grad") {
  FRESH_SEED();
  // d2/dx2 x^3 = 6x
  Tensor x = leaf({6});
  V xv = host(x);
  Tensor y = pow(x, 3.0).sum();
  std::vector<Tensor> g1 = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true);
  REQUIRE(g1.size() == 1);
  CHECK(g1[0].requires_grad());
  V e1(6), e2(6);
  for (std::size_t i = 0; i < 6; ++i) e1[i] = 3 * xv[i] * xv[i], e2[i] = 6 * xv[i];
  expect_near(g1[0], e1, 1e-12, 1e-12, "3x^2");
  std::vector<Tensor> g2 = autograd::grad({g1[0].sum()}, {x});
  expect_near(g2[0], e2, 1e-12, 1e-12, "6x");
  CHECK_FALSE(x.grad().defined());  // autograd::grad does not accumulate
  // the same with x * x * x (three uses of x)
  Tensor y3 = (x * x * x).sum();
  Tensor h1 = autograd::grad({y3}, {x}, {}, false, true)[0];
  expect_near(autograd::grad({h1.sum()}, {x})[0], e2, 1e-12, 1e-12, "x*x*x");
  // tanh'' = -2 tanh (1 - tanh^2), and the third derivative against a central difference
  Tensor t = leaf({5});
  V tv = host(t), et(5);
  for (std::size_t i = 0; i < 5; ++i) {
    double th = std::tanh(tv[i]);
    et[i] = -2 * th * (1 - th * th);
  }
  Tensor d1 = autograd::grad({tanh(t).sum()}, {t}, {}, false, true)[0];
  Tensor d2 = autograd::grad({d1.sum()}, {t}, {}, false, true)[0];
  expect_near(d2, et, 1e-12, 1e-12, "tanh''");
  Tensor d3 = autograd::grad({d2.sum()}, {t})[0];
  V e3(5);
  for (std::size_t i = 0; i < 5; ++i) {
    double th = std::tanh(tv[i]), s = 1 - th * th;
    e3[i] = -2 * s * s + 4 * th * th * s;  // d/dx (-2 t (1 - t^2)) = (-2 + 6 t^2)(1 - t^2)
  }
  expect_near(d3, e3, 1e-10, 1e-10, "tanh'''");
  // backward(create_graph) leaves a differentiable .grad()
  Tensor s = leaf({4});
  V sv = host(s);
  (s * s * s).sum().backward({}, false, /*create_graph=*/true);
  REQUIRE(s.grad().defined());
  CHECK(s.grad().requires_grad());
  Tensor gg = autograd::grad({s.grad().sum()}, {s})[0];
  V es(4);
  for (std::size_t i = 0; i < 4; ++i) es[i] = 6 * sv[i];
  expect_near(gg, es);
  // mixed second derivative: d/dy (d/dx x^2 y) = 2x
  Tensor a = leaf({3}), b = leaf({3});
  Tensor ga = autograd::grad({(a * a * b).sum()}, {a}, {}, false, true)[0];
  Tensor gab = autograd::grad({ga.sum()}, {b})[0];
  V av = host(a);
  expect_near(gab, {2 * av[0], 2 * av[1], 2 * av[2]});
}

TEST_CASE("autograd::grad: several inputs, allow_unused, intermediate tensors, grad_outputs") {
  FRESH_SEED();
  Tensor x = leaf({3}), z = leaf({3});
  Tensor y = (x * 2.0).sum();
  CHECK_BRRR_ERROR(autograd::grad({y}, {x, z}, {}, true), ErrorKind::autograd, "input 1", "not used",
                   "allow_unused");
  std::vector<Tensor> g = autograd::grad({y}, {x, z}, {}, false, false, /*allow_unused=*/true);
  REQUIRE(g.size() == 2);
  expect_near(g[0], V(3, 2.0));
  CHECK_FALSE(g[1].defined());
  CHECK_FALSE(x.grad().defined());
  CHECK_FALSE(z.grad().defined());
  // an input that does not require grad
  CHECK_BRRR_ERROR(autograd::grad({(x * 2).sum()}, {randn({3})}), ErrorKind::autograd, "input 0",
                   "does not require grad");
  // gradient with respect to an intermediate tensor
  Tensor h = x * 3.0;
  Tensor out = (h * h).sum();
  Tensor gh = autograd::grad({out}, {h})[0];
  V hv = host(h);
  expect_near(gh, {2 * hv[0], 2 * hv[1], 2 * hv[2]});
  // grad_outputs weight a non-scalar output
  Tensor w = randn({3}, {.dtype = DType::f64});
  Tensor gx = autograd::grad({exp(x)}, {x}, {w})[0];
  V xv = host(x), wv = host(w);
  expect_near(gx, {wv[0] * std::exp(xv[0]), wv[1] * std::exp(xv[1]), wv[2] * std::exp(xv[2])});
}

TEST_CASE("NoGradGuard and GradModeGuard: no recording inside, restored after") {
  FRESH_SEED();
  Tensor x = leaf({4});
  CHECK(autograd::is_grad_enabled());
  {
    NoGradGuard g;
    CHECK_FALSE(autograd::is_grad_enabled());
    Tensor y = exp(x) * x + 1;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(x.to(DType::f32).requires_grad());
    CHECK_FALSE(x.t().requires_grad());
    {
      NoGradGuard nested;
      CHECK_FALSE(autograd::is_grad_enabled());
    }
    CHECK_FALSE(autograd::is_grad_enabled());
    {
      GradModeGuard on(true);
      CHECK((x * 2).requires_grad());
    }
    CHECK_FALSE(autograd::is_grad_enabled());
  }
  CHECK(autograd::is_grad_enabled());
  CHECK((x * 2).requires_grad());
  {
    GradModeGuard off(false);
    CHECK_FALSE((x * 2).requires_grad());
  }
  CHECK(autograd::is_grad_enabled());
  // a guard restores the mode even when an exception leaves its scope
  try {
    NoGradGuard g;
    throw Error(ErrorKind::value, "test");
  } catch (const Error&) {
  }
  CHECK(autograd::is_grad_enabled());
}

TEST_CASE("detach: same storage, cut from the graph") {
  FRESH_SEED();
  Tensor x = leaf({4});
  Tensor h = x * 2.0;
  Tensor d = h.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.grad_fn() == nullptr);
  CHECK(d.data_ptr() == h.data_ptr());
  CHECK(d.storage().is_same(h.storage()));
  CHECK(host(d) == host(h));
  // gradient flows only through the attached factor: d/dx (x.detach() * x) = x
  (x.detach() * x).sum().backward();
  expect_near(x.grad(), host(x));
  // a detached leaf can require grad on its own
  Tensor e = x.detach();
  e.requires_grad_();
  (e * 3.0).sum().backward();
  expect_near(e.grad(), V(4, 3.0));
  expect_near(x.grad(), host(x));  // unchanged
}

TEST_CASE("requires_grad_: floating leaves only") {
  Tensor i = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 3});
  CHECK_BRRR_ERROR(i.requires_grad_(), ErrorKind::dtype, "requires_grad_", "i32");
  Tensor l = Tensor::from_vector(std::vector<std::int64_t>{1, 2});
  CHECK_BRRR_ERROR(l.requires_grad_(true), ErrorKind::dtype, "i64");
  CHECK_BRRR_ERROR(zeros({2}, {.dtype = DType::boolean}).requires_grad_(), ErrorKind::dtype, "bool");
  CHECK_BRRR_ERROR(zeros({2}, {.dtype = DType::i64, .requires_grad = true}), ErrorKind::dtype, "i64");
  CHECK_NOTHROW(i.requires_grad_(false));
  Tensor x = leaf({2});
  Tensor y = x * x;
  CHECK_BRRR_ERROR(y.requires_grad_(false), ErrorKind::autograd, "leaves", "MulBackward", "detach");
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor t = zeros({2}, {.dtype = d});
    t.requires_grad_();
    CHECK(t.requires_grad());
    t.requires_grad_(false);
    CHECK_FALSE(t.requires_grad());
  }
}

TEST_CASE("version counter: a saved tensor modified in place makes backward throw") {
  FRESH_SEED();
  // exp saves its output
  Tensor a = leaf({4});
  Tensor b = exp(a);
  {
    NoGradGuard g;
    b.fill_(1);
  }
  CHECK_BRRR_ERROR(b.sum().backward(), ErrorKind::autograd, "modified in place", "saved for backward");
  // mul saves its inputs: an intermediate y = x * 2, z = y * y
  Tensor x = leaf({3});
  Tensor y = x * 2.0;
  Tensor z = (y * y).sum();
  {
    NoGradGuard g;
    y.fill_(0.5);
  }
  CHECK_BRRR_ERROR(z.backward(), ErrorKind::autograd, "modified in place", "MulBackward");
  // a saved leaf, modified through a view (views share the version counter)
  Tensor p = leaf({2, 3});
  Tensor q = (p * p).sum();
  {
    NoGradGuard g;
    p.slice(1, 0, 1).fill_(2.0);
  }
  CHECK_BRRR_ERROR(q.backward(), ErrorKind::autograd, "modified in place");
  // copy_ also bumps it
  Tensor r = leaf({3});
  Tensor s = sigmoid(r);
  Tensor loss = s.sum();
  {
    NoGradGuard g;
    s.copy_(zeros({3}, {.dtype = DType::f64}));
  }
  CHECK_BRRR_ERROR(loss.backward(), ErrorKind::autograd, "modified in place");
  // an in-place change of a tensor that was not saved is fine
  Tensor u = leaf({3});
  Tensor v = u * 2.0;  // saves nothing
  Tensor w = v + 1.0;
  {
    NoGradGuard g;
    v.fill_(7);
  }
  CHECK_NOTHROW(w.sum().backward());
  expect_near(u.grad(), V(3, 2.0));
  CHECK(a.storage().version() == 0);
  CHECK(b.storage().version() == 1);
}

TEST_CASE("in-place writes into a tensor that requires grad: refused unless under NoGradGuard") {
  FRESH_SEED();
  Tensor x = leaf({3});
  CHECK_BRRR_ERROR(x.fill_(1.0), ErrorKind::autograd, "fill_", "requires grad", "NoGradGuard");
  CHECK_BRRR_ERROR(x.copy_(zeros({3}, {.dtype = DType::f64})), ErrorKind::autograd, "copy_", "requires grad");
  Tensor y = x * 2;
  CHECK_BRRR_ERROR(y.fill_(0), ErrorKind::autograd, "fill_");
  Tensor plain = zeros({3}, {.dtype = DType::f64});
  CHECK_BRRR_ERROR(plain.copy_(x), ErrorKind::autograd, "copy_", "source requires grad");
  std::uint64_t v0 = x.storage().version();
  {
    NoGradGuard g;
    x.fill_(0.25);
  }
  CHECK(x.storage().version() == v0 + 1);
  CHECK(host(x) == V(3, 0.25));
  CHECK(x.requires_grad());
  (x * x).sum().backward();
  expect_near(x.grad(), V(3, 0.5));
}

TEST_CASE("a chain of 100000 ops: backward and destruction need no recursion") {
  Tensor x = full({4}, 1.0, {.dtype = DType::f64, .requires_grad = true});
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = y * 1.0001;
    Tensor loss = y.sum();
    loss.backward();
    double expected = std::pow(1.0001, 100000);
    expect_near(x.grad(), V(4, expected), 1e-9, 0, "1.0001^100000");
    expect_near(y, V(4, expected), 1e-9, 0);
  }  // the chain is freed here
  // the same chain with ops that save tensors, kept alive by its output until the end
  Tensor w = full({2}, 0.5, {.dtype = DType::f64, .requires_grad = true});
  Tensor h = w;
  for (int i = 0; i < 50000; ++i) h = (i % 2 == 0) ? h * w : h / w;
  h.sum().backward();
  // h = w^(25000 - 25000) * w = w  => dh/dw = 1; the intermediate products stay moderate
  expect_near(h, V(2, 0.5), 1e-9);
  expect_near(w.grad(), V(2, 1.0), 1e-6, 1e-9);
}

TEST_CASE("diamonds: a tensor used twice gets the sum of both paths") {
  FRESH_SEED();
  Tensor x = leaf({5});
  V xv = host(x);
  Tensor a = x * 2.0, b = x * 3.0;
  (a * b).sum().backward();  // 6 x^2 -> 12 x
  expect_near(x.grad(), map(xv, [](double v) { return 12 * v; }));
  // x used twice in one op, and a longer diamond: y = exp(x); z = y * sin(x) + y
  Tensor p = leaf({5});
  V pv = host(p);
  Tensor y = exp(p);
  Tensor z = y * sin(p) + y + p * p;
  z.sum().backward();
  V e(5);
  for (std::size_t i = 0; i < 5; ++i)
    e[i] = std::exp(pv[i]) * std::sin(pv[i]) + std::exp(pv[i]) * std::cos(pv[i]) + std::exp(pv[i]) + 2 * pv[i];
  expect_near(p.grad(), e);
  // a wide fan-out: the same leaf in 50 terms
  Tensor q = leaf({3});
  Tensor acc = zeros({3}, {.dtype = DType::f64});
  for (int k = 1; k <= 50; ++k) acc = acc + q * static_cast<double>(k);
  acc.sum().backward();
  expect_near(q.grad(), V(3, 50 * 51 / 2.0));
}

TEST_CASE("only leaves that require grad receive gradients") {
  FRESH_SEED();
  Tensor a = leaf({3});
  Tensor b = randn({3}, {.dtype = DType::f64});  // no requires_grad
  Tensor c = leaf({3});
  (a * b).sum().backward();
  expect_near(a.grad(), host(b));
  CHECK_FALSE(b.grad().defined());
  CHECK_FALSE(c.grad().defined());  // not part of this graph
  // a branch with no leaf requiring grad records nothing
  Tensor n = exp(b) * 2;
  CHECK_FALSE(n.requires_grad());
  CHECK(n.grad_fn() == nullptr);
  // non-leaves do not keep a .grad()
  Tensor x = leaf({2});
  Tensor h = x * 2.0;
  (h * h).sum().backward();
  CHECK_FALSE(h.grad().defined());
  CHECK(x.grad().defined());
}

TEST_CASE("to(dtype) records a conversion: the gradient comes back in the leaf's dtype") {
  FRESH_SEED();
  Tensor x = randn({4}, {.dtype = DType::f32, .requires_grad = true});
  Tensor y = x.to(DType::f64);
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "ToBackward");
  y.sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f32);
  expect_near(x.grad(), V(4, 1.0), 0, 0);
  // weighted, through f64 math
  Tensor w = randn({4}, {.dtype = DType::f64});
  Tensor x2 = randn({4}, {.dtype = DType::f32, .requires_grad = true});
  (x2.to(DType::f64) * w).sum().backward();
  CHECK(x2.grad().dtype() == DType::f32);
  V wv = host(w), e(4);
  for (std::size_t i = 0; i < 4; ++i) e[i] = static_cast<float>(wv[i]);
  expect_near(x2.grad(), e, 0, 0);
  // bf16 leaf -> f32
  Tensor b = randn({3}, {.dtype = DType::bf16, .requires_grad = true});
  (b.to(DType::f32) * 2.0).sum().backward();
  CHECK(b.grad().dtype() == DType::bf16);
  expect_near(b.grad(), V(3, 2.0), 0, 0);
  // a conversion to an integer dtype is not recorded
  CHECK_FALSE(x.to(DType::i32).requires_grad());
  // same dtype: the same tensor
  CHECK(x.to(DType::f32).is_same(x));
}

TEST_CASE("engine order: nodes run after every consumer of their output") {
  FRESH_SEED();
  // y is consumed by two later nodes created in different orders; the gradient reaching y
  // must be complete before y's node runs (it would be wrong otherwise)
  Tensor x = leaf({3});
  Tensor y = tanh(x);
  Tensor u = y * 2.0;
  Tensor v = exp(u) + y;
  Tensor w = v * y;
  w.sum().backward();
  V xv = host(x), e(3);
  for (std::size_t i = 0; i < 3; ++i) {
    double t = std::tanh(xv[i]), dt = 1 - t * t;
    // w = (exp(2t) + t) t ; dw/dt = 2 exp(2t) t + exp(2t) + 2t
    e[i] = (2 * std::exp(2 * t) * t + std::exp(2 * t) + 2 * t) * dt;
  }
  expect_near(x.grad(), e);
}
