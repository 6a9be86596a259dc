// Joining and splitting (cat, stack, split, chunk) and the autograd of every view: values
// against hand-computed references, dtype promotion, PyTorch's legacy [0] rule, error
// messages, graph nodes recorded only when needed, gradients against central differences,
// and create_graph through the views (the embed op's own backward).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/gradient_check.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;



Tensor ar(std::int64_t n, Shape shape, DType dtype = DType::f64, double start = 0) {
  return make(dtype, iota(n, start), std::move(shape));
}

using Views = std::vector<Tensor>;

}  // namespace

// --- cat ---------------------------------------------------------------------------------

TEST_CASE("cat: values along every dim, negative dims, non-contiguous inputs") {
  Tensor a = ar(6, {2, 3});          // [[0, 1, 2], [3, 4, 5]]
  Tensor b = ar(3, {1, 3}, DType::f64, 10);  // [[10, 11, 12]]
  Tensor c0 = cat({a, b}, 0);
  CHECK(c0.shape() == Shape{3, 3});
  CHECK(values(c0) == V{0, 1, 2, 3, 4, 5, 10, 11, 12});
  CHECK(values(cat({a, b}, -2)) == values(c0));
  Tensor d = ar(4, {2, 2}, DType::f64, 20);  // [[20, 21], [22, 23]]
  Tensor c1 = cat({a, d}, 1);
  CHECK(c1.shape() == Shape{2, 5});
  CHECK(values(c1) == V{0, 1, 2, 20, 21, 3, 4, 5, 22, 23});
  CHECK(values(cat({a, d}, -1)) == values(c1));
  // transposed and sliced inputs
  Tensor at = ar(6, {3, 2}).t();  // [[0, 2, 4], [1, 3, 5]]
  Tensor sl = ar(12, {2, 6}).slice(1, 0, 6, 2);  // [[0, 2, 4], [6, 8, 10]]
  CHECK(values(cat({at, sl}, 0)) == V{0, 2, 4, 1, 3, 5, 0, 2, 4, 6, 8, 10});
  // three inputs, one of them empty along dim
  Tensor e = empty({2, 0}, {.dtype = DType::f64});
  CHECK(values(cat({a, e, d}, 1)) == values(c1));
  // a single input: a copy
  Tensor one = cat({a});
  CHECK(values(one) == values(a));
  CHECK(!one.storage().is_same(a.storage()));
  // 3-d along the middle dim
  Tensor x = ar(8, {2, 2, 2}), y = ar(4, {2, 1, 2}, DType::f64, 100);
  CHECK(values(cat({x, y}, 1)) == V{0, 1, 2, 3, 100, 101, 4, 5, 6, 7, 102, 103});
}

TEST_CASE("cat: dtypes promote; legacy [0] inputs are skipped") {
  Tensor i = make(DType::i32, {1, 2}, {2});
  Tensor f = make(DType::f32, {0.5}, {1});
  Tensor c = cat({i, f});
  CHECK(c.dtype() == DType::f32);
  CHECK(values(c) == V{1, 2, 0.5});
  CHECK(cat({make(DType::i32, {1}, {1}), make(DType::i64, {2}, {1})}).dtype() == DType::i64);
  CHECK(cat({make(DType::bf16, {1}, {1}), make(DType::f16, {2}, {1})}).dtype() == DType::f32);
  CHECK(values(cat({make(DType::boolean, {1, 0}, {2}), make(DType::boolean, {1}, {1})})) == V{1, 0, 1});
  // [0] tensors do not take part in the shape checks (PyTorch's legacy rule) but in the dtype.
  Tensor a = ar(6, {2, 3}, DType::f32);
  Tensor z = empty({0}, {.dtype = DType::f64});
  Tensor s = cat({z, a, z}, 1);
  CHECK(s.shape() == Shape{2, 3});
  CHECK(s.dtype() == DType::f64);
  CHECK(values(s) == values(a));
  CHECK(cat({z, z}).shape() == Shape{0});
  // a [2, 0] tensor is not legacy: it must match
  CHECK_BRRR_ERROR(cat({a, empty({0, 0})}, 1), ErrorKind::shape, "cat", "[2, 3]", "[0, 0]");
}

TEST_CASE("cat: errors") {
  CHECK_BRRR_ERROR(cat({}), ErrorKind::value, "cat", "non-empty");
  CHECK_BRRR_ERROR(cat({ar(6, {2, 3}), ar(8, {2, 4})}, 0), ErrorKind::shape,
                   "cat: sizes of tensors must match except in dim 0; tensor 0 has shape [2, 3] and tensor 1 has "
                   "shape [2, 4] (dim 1: 3 vs 4)");
  CHECK_BRRR_ERROR(cat({ar(6, {2, 3}), ar(3, {3})}, 0), ErrorKind::shape, "cat", "same number of dims", "[2, 3]", "[3]");
  CHECK_BRRR_ERROR(cat({ar(6, {2, 3}), ar(6, {2, 3})}, 2), ErrorKind::index, "cat", "dim 2");
  CHECK_BRRR_ERROR(cat({ar(6, {2, 3}), ar(6, {2, 3})}, -3), ErrorKind::index, "cat", "dim -3");
  CHECK_BRRR_ERROR(cat({full({}, 1.0), full({}, 2.0)}), ErrorKind::shape, "cat", "zero-dimensional");
  CHECK_BRRR_ERROR(cat({ar(2, {2}), Tensor()}), ErrorKind::value, "cat", "tensor 1", "undefined");
}

// --- stack ---------------------------------------------------------------------------------

TEST_CASE("stack: new dim at every position") {
  Tensor a = ar(4, {2, 2}), b = ar(4, {2, 2}, DType::f64, 10);
  Tensor s0 = stack({a, b});
  CHECK(s0.shape() == Shape{2, 2, 2});
  CHECK(values(s0) == V{0, 1, 2, 3, 10, 11, 12, 13});
  Tensor s1 = stack({a, b}, 1);
  CHECK(s1.shape() == Shape{2, 2, 2});
  CHECK(values(s1) == V{0, 1, 10, 11, 2, 3, 12, 13});
  Tensor s2 = stack({a, b}, 2);
  CHECK(s2.shape() == Shape{2, 2, 2});
  CHECK(values(s2) == V{0, 10, 1, 11, 2, 12, 3, 13});
  CHECK(values(stack({a, b}, -1)) == values(s2));
  CHECK(values(stack({a, b}, -3)) == values(s0));
  // 0-d tensors stack into a vector; [0] tensors are not skipped
  CHECK(values(stack({full({}, 1.0), full({}, 2.0)})) == V{1, 2});
  CHECK(stack({empty({0}), empty({0})}).shape() == Shape{2, 0});
  CHECK(stack({make(DType::i32, {1}, {1}), make(DType::f32, {2}, {1})}).dtype() == DType::f32);
}

TEST_CASE("stack: errors") {
  CHECK_BRRR_ERROR(stack({}), ErrorKind::value, "stack", "non-empty");
  CHECK_BRRR_ERROR(stack({ar(4, {2, 2}), ar(6, {2, 3})}), ErrorKind::shape,
                   "stack: expects each tensor to be of equal shape, but got [2, 2] at entry 0 and [2, 3] at entry 1");
  CHECK_BRRR_ERROR(stack({ar(4, {2, 2}), ar(4, {2, 2})}, 3), ErrorKind::index, "stack", "dim 3");
}

// --- split and chunk ---------------------------------------------------------------------

TEST_CASE("split by size and by sizes: views of the input") {
  Tensor x = ar(10, {5, 2});
  Views parts = split(x, 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].shape() == Shape{2, 2});
  CHECK(parts[2].shape() == Shape{1, 2});
  CHECK(values(parts[0]) == V{0, 1, 2, 3});
  CHECK(values(parts[1]) == V{4, 5, 6, 7});
  CHECK(values(parts[2]) == V{8, 9});
  for (const Tensor& p : parts) CHECK(p.storage().is_same(x.storage()));
  CHECK(parts[1].storage_offset() == 4);
  Views cols = split(x, 1, 1);
  REQUIRE(cols.size() == 2);
  CHECK(values(cols[1]) == V{1, 3, 5, 7, 9});
  CHECK(cols[1].stride(0) == 2);
  CHECK(split(x, 5).size() == 1);
  CHECK(split(x, 7).size() == 1);
  Views bysz = split(x, std::vector<std::int64_t>{1, 0, 4});
  REQUIRE(bysz.size() == 3);
  CHECK(bysz[1].shape() == Shape{0, 2});
  CHECK(values(bysz[2]) == V{2, 3, 4, 5, 6, 7, 8, 9});
  Views neg = split(x, std::vector<std::int64_t>{1, 1}, -1);
  CHECK(values(neg[0]) == V{0, 2, 4, 6, 8});
  // an empty dim: one empty part
  Views e = split(empty({0, 3}), 2);
  REQUIRE(e.size() == 1);
  CHECK(e[0].shape() == Shape{0, 3});
  CHECK(split(empty({0, 3}), 0).size() == 1);
}

TEST_CASE("split: errors") {
  Tensor x = ar(10, {5, 2});
  CHECK_BRRR_ERROR(split(x, std::vector<std::int64_t>{2, 2}), ErrorKind::value,
                   "split: split sizes [2, 2] must sum to the size 5 of dim 0 (shape [5, 2])");
  CHECK_BRRR_ERROR(split(x, std::vector<std::int64_t>{6, -1}), ErrorKind::value, "split", "non-negative");
  CHECK_BRRR_ERROR(split(x, 0), ErrorKind::value, "split", "split_size", "0");
  CHECK_BRRR_ERROR(split(x, -1), ErrorKind::value, "split", "-1");
  CHECK_BRRR_ERROR(split(x, 2, 2), ErrorKind::index, "split", "dim 2");
  CHECK_BRRR_ERROR(split(full({}, 1.0), 1), ErrorKind::shape, "split", "0-d");
}

TEST_CASE("chunk: ceil(size / chunks) per chunk, fewer chunks when small") {
  Tensor x = ar(5, {5});
  Views c = chunk(x, 3);
  REQUIRE(c.size() == 3);
  CHECK(values(c[0]) == V{0, 1});
  CHECK(values(c[1]) == V{2, 3});
  CHECK(values(c[2]) == V{4});
  Views c4 = chunk(ar(6, {6}), 4);  // ceil(6/4) = 2 -> 3 chunks
  CHECK(c4.size() == 3);
  CHECK(chunk(ar(2, {2}), 5).size() == 2);
  Views e = chunk(empty({0}), 3);  // PyTorch: `chunks` empty chunks
  CHECK(e.size() == 3);
  Views m = chunk(ar(12, {3, 4}), 2, 1);
  REQUIRE(m.size() == 2);
  CHECK(values(m[1]) == V{2, 3, 6, 7, 10, 11});
  CHECK(m[1].storage().is_same(m[0].storage()));
  CHECK_BRRR_ERROR(chunk(x, 0), ErrorKind::value, "chunk", "0");
  CHECK_BRRR_ERROR(chunk(full({}, 1.0), 2), ErrorKind::shape, "chunk");
}

// --- graph nodes of the views -----------------------------------------------------------

TEST_CASE("views record a node only when their input requires grad, and stay views") {
  Tensor x = ar(12, {3, 4});
  CHECK(x.view({4, 3}).grad_fn().get() == nullptr);
  CHECK(x.t().grad_fn().get() == nullptr);
  x.requires_grad_();
  struct Named {
    Tensor t;
    const char* name;
  };
  std::vector<Named> views = {
      {x.view({4, 3}), "ViewBackward"},
      {x.reshape({2, 6}), "ReshapeBackward"},
      {x.t().reshape({12}), "ReshapeBackward"},  // the copying path
      {x.flatten(), "ReshapeBackward"},
      {x.unsqueeze(1), "UnsqueezeBackward"},
      {x.unsqueeze(0).squeeze(), "SqueezeBackward"},
      {x.unsqueeze(0).squeeze(0), "SqueezeBackward"},
      {x.permute({1, 0}), "PermuteBackward"},
      {x.transpose(0, 1), "TransposeBackward"},
      {x.t(), "TransposeBackward"},
      {x.slice(1, 0, 4, 2), "SliceBackward"},
      {x.narrow(0, 1, 2), "SliceBackward"},
      {x.select(0, 1), "SelectBackward"},
      {x.unsqueeze(0).expand({2, 3, 4}), "ExpandBackward"},
      {x.broadcast_to({2, 3, 4}), "ExpandBackward"},
      {x.as_strided({2, 2}, {4, 1}, 1), "AsStridedBackward"},
      {x.t().contiguous(), "ContiguousBackward"},
  };
  for (const Named& v : views) {
    INFO(v.name);
    REQUIRE(v.t.grad_fn().get() != nullptr);
    CHECK(v.t.grad_fn()->name() == v.name);
    CHECK(v.t.requires_grad());
    CHECK(!v.t.is_leaf());
  }
  // still pure metadata: the same storage
  CHECK(x.view({4, 3}).storage().is_same(x.storage()));
  CHECK(x.t().storage().is_same(x.storage()));
  CHECK(x.select(0, 2).storage().is_same(x.storage()));
  // contiguous() of a contiguous tensor is the tensor itself
  CHECK(x.contiguous().is_same(x));
  {
    NoGradGuard g;
    CHECK(x.view({4, 3}).grad_fn().get() == nullptr);
    CHECK(x.slice(0, 0, 1).grad_fn().get() == nullptr);
  }
  // split/chunk parts share one node, SplitBackward (its gradient is one cat), output k each
  Views parts = split(x, 1);
  for (std::size_t k = 0; k < parts.size(); ++k) {
    REQUIRE(parts[k].grad_fn().get() != nullptr);
    CHECK(parts[k].grad_fn()->name() == "SplitBackward");
    CHECK(parts[k].grad_fn().get() == parts[0].grad_fn().get());
    CHECK(parts[k].output_nr() == static_cast<std::uint32_t>(k));
    CHECK(parts[k].storage().is_same(x.storage()));
  }
  CHECK(chunk(x, 2)[1].grad_fn()->name() == "SplitBackward");
  Tensor c = cat({x, x});
  REQUIRE(c.grad_fn().get() != nullptr);
  CHECK(c.grad_fn()->name() == "CatBackward");
  CHECK(cat({ar(2, {2}), ar(2, {2})}).grad_fn().get() == nullptr);
}

TEST_CASE("view gradients: hand-computed") {
  // y = x[1:3:1, ::2]; dL/dx = R embedded at those positions.
  Tensor x = ar(12, {3, 4});
  x.requires_grad_();
  Tensor y = x.slice(0, 1, 3).slice(1, 0, 4, 2);  // [[4, 6], [8, 10]]
  CHECK(values(y) == V{4, 6, 8, 10});
  y.backward(Tensor::from_vector(V{1, 2, 3, 4}, {2, 2}));
  CHECK(values(x.grad()) == V{0, 0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0});
  // select, then expand: gradient sums over the expanded dim
  Tensor z = ar(6, {2, 3});
  z.requires_grad_();
  Tensor e = z.select(0, 1).expand({4, 3});
  e.backward(ones({4, 3}, {.dtype = DType::f64}));
  CHECK(values(z.grad()) == V{0, 0, 0, 4, 4, 4});
  // permute back
  Tensor p = ar(6, {1, 2, 3});
  p.requires_grad_();
  p.permute({2, 0, 1}).backward(ar(6, {3, 1, 2}));
  // g of shape [3, 1, 2] with g[c][0][b] = 2c + b; the input's [0][b][c] gets it
  CHECK(values(p.grad()) == V{0, 2, 4, 1, 3, 5});
}

TEST_CASE("view gradients against central differences") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  using Fn = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    Shape shape;
    Fn f;
  };
  std::vector<Case> cases = {
      {"view", {3, 4}, [](const Tensor& x) { return x.view({2, 6}); }},
      {"view -1", {3, 4}, [](const Tensor& x) { return x.view({-1}); }},
      {"reshape (copy)", {3, 4}, [](const Tensor& x) { return x.t().reshape({12}); }},
      {"flatten", {2, 3, 2}, [](const Tensor& x) { return x.flatten(1); }},
      {"squeeze", {1, 3, 1}, [](const Tensor& x) { return x.squeeze(); }},
      {"squeeze dim", {3, 1}, [](const Tensor& x) { return x.squeeze(1); }},
      {"unsqueeze", {3}, [](const Tensor& x) { return x.unsqueeze(-1); }},
      {"permute", {2, 3, 4}, [](const Tensor& x) { return x.permute({2, 0, 1}); }},
      {"transpose", {2, 3, 4}, [](const Tensor& x) { return x.transpose(0, 2); }},
      {"t", {2, 3}, [](const Tensor& x) { return x.t(); }},
      {"t 1-d", {3}, [](const Tensor& x) { return x.t(); }},
      {"slice step", {7, 2}, [](const Tensor& x) { return x.slice(0, 1, 7, 3); }},
      {"slice negative", {5}, [](const Tensor& x) { return x.slice(0, -3, 100); }},
      {"narrow", {3, 5}, [](const Tensor& x) { return x.narrow(1, 1, 3); }},
      {"select", {3, 4}, [](const Tensor& x) { return x.select(1, -1); }},
      {"select of a transpose", {3, 4}, [](const Tensor& x) { return x.t().select(0, 2); }},
      {"expand", {3, 1}, [](const Tensor& x) { return x.expand({2, 3, 4}); }},
      {"broadcast_to", {4}, [](const Tensor& x) { return x.broadcast_to({3, 4}); }},
      {"as_strided", {3, 4}, [](const Tensor& x) { return x.as_strided({2, 2}, {1, 4}, 5); }},
      {"as_strided of a view", {4, 4}, [](const Tensor& x) { return x.t().slice(0, 1, 4).as_strided({3}, {5}, 1); }},
      {"contiguous", {3, 4}, [](const Tensor& x) { return x.t().contiguous(); }},
      {"view chain", {2, 3, 4}, [](const Tensor& x) { return x.permute({1, 0, 2}).slice(2, 1, 4).reshape({-1}).narrow(0, 2, 9); }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    check_gradients([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{c.f(x[0])}; }, {c.shape}, rng);
  }
}

TEST_CASE("cat/stack/split/chunk gradients against central differences") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{cat({x[0], x[1]}, 1)}; },
                  {{2, 3}, {2, 2}}, rng);
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{cat({x[0], x[1], x[0]}, 0)}; },
                  {{2, 3}, {1, 3}}, rng);
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{cat({x[0].t(), x[1]}, -1)}; },
                  {{3, 2}, {2, 2}}, rng);
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{cat({x[1], x[0]})}; }, {{0}, {2, 3}},
                  rng);
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{stack({x[0], x[1]}, 1)}; },
                  {{2, 3}, {2, 3}}, rng);
  check_gradients([](const std::vector<Tensor>& x) { return split(x[0], 2, 1); }, {{2, 5}}, rng);
  check_gradients([](const std::vector<Tensor>& x) { return split(x[0], std::vector<std::int64_t>{1, 3}); }, {{4, 2}},
                  rng);
  check_gradients([](const std::vector<Tensor>& x) { return chunk(x[0], 3); }, {{7}}, rng);
  // only some parts used: the others' gradient is zero
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{chunk(x[0], 2)[1]}; }, {{4, 3}}, rng);
  // a part of size 0, parts used twice, second order (create_graph through the cat)
  check_gradients([](const std::vector<Tensor>& x) { return split(x[0], std::vector<std::int64_t>{2, 0, 1}, 1); },
                  {{2, 3}}, rng);
  check_gradients(
      [](const std::vector<Tensor>& x) {
        Views q = split(x[0], 2, -1);
        return std::vector<Tensor>{q[0] * q[1] + q[0]};
      },
      {{3, 4}}, rng);
  Tensor x = randn({3, 4}, {.dtype = DType::f64, .requires_grad = true});
  Views q = split(x, 2, 1);
  Tensor y = sum(q[0] * q[0] * q[1]);
  Tensor g = autograd::grad({y}, {x}, {}, true, true)[0];
  Tensor gg = autograd::grad({sum(g * g)}, {x})[0];
  // y = sum a^2 b: dy/da = 2ab, dy/db = a^2; d(sum g^2)/da = 8ab^2 + 4a^3, /db = 8a^2 b
  V xv = values(x), want(12);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) {
      const double a = xv[static_cast<std::size_t>(r * 4 + c)], b = xv[static_cast<std::size_t>(r * 4 + c + 2)];
      want[static_cast<std::size_t>(r * 4 + c)] = 8 * a * b * b + 4 * a * a * a;
      want[static_cast<std::size_t>(r * 4 + c + 2)] = 8 * a * a * b;
    }
  V got = values(gg);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
}

TEST_CASE("split backward: one cat of the parts' gradients, in the input's dtype") {
  Tensor x = make(DType::f32, {1, 2, 3, 4, 5, 6}, {2, 3});
  x.requires_grad_();
  Views q = split(x, std::vector<std::int64_t>{1, 2}, 1);
  (q[1] * 2.0).sum().backward();  // q[0] gets no gradient: zeros in its place
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().is_contiguous());
  CHECK(values(x.grad()) == V{0, 2, 2, 0, 2, 2});
  x.set_grad(Tensor());
  (q[0].to(DType::f64) * 3.0 + sum(q[1], {1}, true).to(DType::f64)).sum().backward();
  CHECK(values(x.grad()) == V{3, 1, 1, 3, 1, 1});
}

TEST_CASE("cat: gradients come back in each input's dtype; the legacy [0] input gets [0]") {
  Tensor a = make(DType::f32, {1, 2}, {2});
  Tensor b = make(DType::f64, {3}, {1});
  Tensor z = empty({0}, {.dtype = DType::f64});
  a.requires_grad_();
  b.requires_grad_();
  z.requires_grad_();
  Tensor c = cat({a, z, b});
  CHECK(c.dtype() == DType::f64);
  c.backward(Tensor::from_vector(V{1, 2, 3}));
  CHECK(a.grad().dtype() == DType::f32);
  CHECK(values(a.grad()) == V{1, 2});
  CHECK(values(b.grad()) == V{3});
  REQUIRE(z.grad().defined());
  CHECK(z.grad().shape() == Shape{0});
}

TEST_CASE("create_graph through views: the embed's backward re-applies the view") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  using Fn = std::function<Tensor(const Tensor&)>;
  struct Case {
    const char* name;
    Shape shape;
    Fn f;
  };
  std::vector<Case> cases = {
      {"slice", {4, 5}, [](const Tensor& x) { return x.slice(1, 1, 5, 2); }},
      {"select", {4, 5}, [](const Tensor& x) { return x.select(0, 2); }},
      {"narrow of a transpose", {4, 5}, [](const Tensor& x) { return x.t().narrow(0, 1, 3); }},
      {"as_strided", {4, 5}, [](const Tensor& x) { return x.as_strided({2, 3}, {5, 2}, 3); }},
      {"reshape", {4, 5}, [](const Tensor& x) { return x.reshape({2, 10}); }},
      {"permute", {4, 5}, [](const Tensor& x) { return x.permute({1, 0}); }},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    // L1 = <R, f(x)>, g = dL1/dx = f^T(R), recorded; L2 = <S, g>; dL2/dR = f(S).
    Tensor x = Tensor::from_vector(normal_values(rng, numel_of(c.shape)), c.shape);
    x.requires_grad_();
    Tensor y = c.f(x);
    Tensor r = Tensor::from_vector(normal_values(rng, y.numel()), y.shape());
    r.requires_grad_();
    std::vector<Tensor> g = autograd::grad({y}, {x}, {r}, false, true);
    REQUIRE(g[0].requires_grad());
    CHECK(g[0].shape() == c.shape);
    Tensor s = Tensor::from_vector(normal_values(rng, numel_of(c.shape)), c.shape);
    g[0].backward(s);
    REQUIRE(r.grad().defined());
    Tensor want;
    {
      NoGradGuard ng;
      want = c.f(s);
    }
    CHECK(values(r.grad()) == values(want));
    // and the first derivative itself: f^T(R), checked by <f^T(R), s> == <R, f(s)>
    double lhs = 0, rhs = 0;
    V gv = values(g[0]), sv = values(s), rv = values(r), fs = values(want);
    for (std::size_t i = 0; i < gv.size(); ++i) lhs += gv[i] * sv[i];
    for (std::size_t i = 0; i < rv.size(); ++i) rhs += rv[i] * fs[i];
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
  }
}

TEST_CASE("as_strided: backward through overlapping elements sums them (PyTorch)") {
  Tensor x = ar(6, {6});
  x.requires_grad_();
  Tensor y = x.as_strided({3, 2}, {1, 1}, 0);  // [[0, 1], [1, 2], [2, 3]]: shared positions
  y.backward(ones({3, 2}, {.dtype = DType::f64}));
  CHECK(values(x.grad()) == std::vector<double>{1, 2, 2, 1, 0, 0});  // more in test_pytorch_conventions.cpp
}

TEST_CASE("views of views of a leaf accumulate into the leaf") {
  Tensor x = ar(4, {4});
  x.requires_grad_();
  std::vector<Tensor> parts = chunk(x, 2);
  Tensor both = cat({parts[1], parts[0]});  // [2, 3, 0, 1]
  CHECK(values(both) == V{2, 3, 0, 1});
  both.backward(Tensor::from_vector(V{10, 20, 30, 40}));
  CHECK(values(x.grad()) == V{30, 40, 10, 20});
}

TEST_CASE("views, cat and stack: autograd::gradcheck") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = Tensor::from_vector(normal_values(rng, 24), {2, 3, 4});
  Tensor y = Tensor::from_vector(normal_values(rng, 8), {2, 1, 4});
  using F = std::function<Tensor(const std::vector<Tensor>&)>;
  const F fs[] = {
      [](const std::vector<Tensor>& v) { return v[0].permute({2, 0, 1}).reshape({4, -1}); },
      [](const std::vector<Tensor>& v) { return v[0].slice(2, 1, 4, 2).select(1, 2); },
      [](const std::vector<Tensor>& v) { return v[1].expand({3, 2, 3, 4}); },
      [](const std::vector<Tensor>& v) { return v[0].as_strided({3, 3}, {5, 2}, 4); },
      [](const std::vector<Tensor>& v) { return cat({v[0], v[1]}, 1); },
      [](const std::vector<Tensor>& v) { return stack({v[0].narrow(1, 0, 1), v[1]}, -1); },
      [](const std::vector<Tensor>& v) { return split(v[0], 2, 2)[1].transpose(0, 2).contiguous(); },
  };
  for (const F& f : fs) CHECK(autograd::gradcheck(f, {x, y}));
}
