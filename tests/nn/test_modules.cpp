// brrr.nn modules on the CPU: Linear against a float64 matmul done here, parameter names,
// shapes and counts of containers, train/eval, Dropout, LayerNorm, Embedding, Conv2d and
// MaxPool2d shapes, state dicts (round trip, errors, strict=false), to(dtype) keeping the
// parameter handles, printing, custom modules with buffers, tied weights, safetensors
// checkpoints, CausalSelfAttention (against a float64 reference written here, causality,
// gradcheck of the input, central differences on its parameters) and a few hand-written SGD
// steps on an MLP that lower the loss.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
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

void check_close(const V& actual, const V& expected, double atol, double rtol = 0) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    INFO("element ", i, ": ", actual[i], " vs ", expected[i]);
    CHECK(std::abs(actual[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

// y[r][o] = sum_i x[r][i] w[o][i] + b[o] in float64.
V ref_linear(const V& x, const V& w, const V& b, std::int64_t rows, std::int64_t in, std::int64_t out) {
  V y(static_cast<std::size_t>(rows * out));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
      for (std::int64_t i = 0; i < in; ++i)
        acc += x[static_cast<std::size_t>(r * in + i)] * w[static_cast<std::size_t>(o * in + i)];
      y[static_cast<std::size_t>(r * out + o)] = acc;
    }
  return y;
}

// Names joined with ", " (doctest prints strings, not vectors of them).
std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, _] : named) out.push_back(n);
  return join(out);
}

// A custom layer: a scale parameter and a running-count buffer, y = x * scale.
class ScaleImpl final : public nn::ModuleImpl {
public:
  explicit ScaleImpl(std::int64_t n) {
    scale = register_parameter("scale", ones({n}));
    register_buffer("count", zeros({1}));
    register_buffer("steps", zeros({1}, {.dtype = DType::i64}));
  }
  Tensor forward(const Tensor& x) override { return mul(x, scale); }
  std::string name() const override { return "Scale()"; }
  Tensor scale;
};

class Scale : public nn::Module {
public:
  explicit Scale(std::int64_t n) { impl_ = std::make_shared<ScaleImpl>(n); }
};

std::filesystem::path temp_file(const std::string& stem) {
  return std::filesystem::temp_directory_path() /
         (stem + "_" + std::to_string(fresh_seed() % 1000000007ULL) + ".safetensors");
}

}  // namespace

TEST_CASE("Linear: forward equals x W^T + b computed in float64") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Linear fc(5, 3);
  CHECK(fc.weight().shape() == Shape{3, 5});
  CHECK(fc.bias().shape() == Shape{3});
  for (Shape xs : {Shape{4, 5}, Shape{2, 3, 5}, Shape{5}}) {
    Tensor x = randn(xs);
    Tensor y = fc(x);
    Shape ys = xs;
    ys.back() = 3;
    CHECK(y.shape() == ys);
    std::int64_t rows = x.numel() / 5;
    check_close(values(y), ref_linear(values(x), values(fc.weight()), values(fc.bias()), rows, 5, 3), 1e-5, 1e-5);
  }
  // Non-contiguous input (a transposed view).
  Tensor xt = randn({5, 4}).t();
  check_close(values(fc(xt)),
              ref_linear(values(xt.contiguous()), values(fc.weight()), values(fc.bias()), 4, 5, 3), 1e-5, 1e-5);

  nn::Linear nb(4, 2, false);
  CHECK_FALSE(nb.bias().defined());
  CHECK(names_of(nb.named_parameters()) == join({"weight"}));
  Tensor x = randn({3, 4});
  check_close(values(nb(x)), ref_linear(values(x), values(nb.weight()), {}, 3, 4, 2), 1e-5, 1e-5);

  CHECK_BRRR_ERROR(fc(randn({2, 4})), ErrorKind::shape, "Linear", "[2, 4]", "5");
  CHECK_BRRR_ERROR(nn::Linear(-1, 2), ErrorKind::value, "Linear");
}

TEST_CASE("Linear: gradients of a loss reach W and b (float64 reference)") {
  manual_seed(fresh_seed());
  nn::Linear fc(3, 2);
  fc.to(DType::f64);
  Tensor x = randn({4, 3}, {.dtype = DType::f64});
  Tensor loss = sum(fc(x));
  loss.backward();
  // d/dW sum(x W^T + b) = ones[4, 2]^T x, d/db = 4 for each output.
  V xv = values(x), gw(6, 0.0);
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 3; ++i)
      for (int r = 0; r < 4; ++r) gw[static_cast<std::size_t>(o * 3 + i)] += xv[static_cast<std::size_t>(r * 3 + i)];
  check_close(values(fc.weight().grad()), gw, 1e-12);
  check_close(values(fc.bias().grad()), V{4, 4}, 1e-12);
}

TEST_CASE("Sequential: parameter names, shapes, count, children and indexing") {
  nn::Sequential mlp{nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)};
  CHECK(mlp.size() == 3);
  auto named = mlp.named_parameters();
  CHECK(names_of(named) == join({"0.weight", "0.bias", "2.weight", "2.bias"}));
  std::vector<std::string> shapes;
  for (const auto& [_, t] : named) shapes.push_back(to_string(t.shape()));
  CHECK(join(shapes) == "[8, 4], [8], [2, 8], [2]");
  CHECK(mlp.num_parameters() == 4 * 8 + 8 + 8 * 2 + 2);
  CHECK(mlp.parameters().size() == 4);
  for (const Tensor& p : mlp.parameters()) {
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    CHECK(p.dtype() == DType::f32);
  }
  auto children = mlp.named_children();
  REQUIRE(children.size() == 3);
  CHECK(children[0].first == "0");
  CHECK(children[1].first == "1");
  CHECK(children[2].first == "2");
  CHECK(mlp.children().size() == 3);
  CHECK(mlp[0].impl() == children[0].second.impl());
  CHECK(mlp[1].parameters().empty());
  CHECK_BRRR_ERROR(mlp[3], ErrorKind::index, "Sequential", "3");

  // Handles share state: the Linear seen through mlp[2] is the one in the container.
  nn::Linear last(2, 2);
  nn::Sequential s;
  s.push_back(last).push_back(nn::Tanh());
  CHECK(s.size() == 2);
  CHECK(s.parameters()[0].is_same(last.weight()));

  // Forward equals the layers applied by hand.
  manual_seed(fresh_seed());
  Tensor x = randn({5, 4});
  check_close(values(mlp(x)), values(mlp[2](relu(mlp[0](x)))), 0);

  // Nested containers prefix names.
  nn::Sequential outer{nn::Sequential{nn::Linear(2, 3)}, nn::GELU(), nn::Linear(3, 1, false)};
  CHECK(names_of(outer.named_parameters()) == join({"0.0.weight", "0.0.bias", "2.weight"}));

  // An empty Sequential is the identity.
  nn::Sequential empty_seq;
  CHECK(empty_seq.size() == 0);
  CHECK(empty_seq(x).is_same(x));
  CHECK_BRRR_ERROR(empty_seq.push_back(nn::Module()), ErrorKind::value, "Sequential");
}

TEST_CASE("Module: an empty handle throws Error(value)") {
  nn::Module m;
  CHECK_FALSE(m.defined());
  CHECK_BRRR_ERROR(m(zeros({1})), ErrorKind::value, "empty");
  CHECK_BRRR_ERROR(m.parameters(), ErrorKind::value, "empty");
  CHECK_BRRR_ERROR(m.state_dict(), ErrorKind::value, "empty");
  CHECK_BRRR_ERROR(m.train(), ErrorKind::value, "empty");
}

TEST_CASE("Module: train/eval propagate to every descendant") {
  nn::Sequential inner{nn::Linear(2, 2), nn::Dropout(0.5)};
  nn::Sequential model{inner, nn::ReLU(), nn::Sequential{nn::Dropout(0.1)}};
  std::function<void(const nn::Module&, bool)> all_are = [&](const nn::Module& m, bool mode) {
    CHECK(m.is_training() == mode);
    for (const auto& c : m.children()) all_are(c, mode);
  };
  all_are(model, true);
  model.eval();
  all_are(model, false);
  CHECK_FALSE(inner[1].is_training());
  model.train();
  all_are(model, true);
  inner.train(false);  // a subtree only
  CHECK(model.is_training());
  CHECK_FALSE(inner.is_training());
  CHECK_FALSE(inner[0].is_training());
  CHECK(model[2].is_training());
}

TEST_CASE("Dropout: identity in eval mode, inverted dropout in training mode") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Dropout drop(0.5);
  Tensor x = randn({64, 32});
  drop.eval();
  Tensor y = drop(x);
  CHECK(values(y) == values(x));
  drop.train();
  Tensor z = drop(x);
  V xv = values(x), zv = values(z);
  std::int64_t zeros_seen = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    if (zv[i] == 0) ++zeros_seen;
    else CHECK(zv[i] == doctest::Approx(2 * xv[i]).epsilon(1e-6));
  }
  double frac = static_cast<double>(zeros_seen) / static_cast<double>(xv.size());
  CHECK(frac > 0.4);
  CHECK(frac < 0.6);
  // The same seed gives the same mask as brrr::dropout.
  manual_seed(seed + 1);
  Tensor a = drop(x);
  manual_seed(seed + 1);
  Tensor b = dropout(x, 0.5, true);
  CHECK(values(a) == values(b));
  CHECK_BRRR_ERROR(nn::Dropout(1.5), ErrorKind::value, "Dropout", "1.5");
  CHECK(nn::Dropout(0.25).to_string() == "Dropout(p=0.25)");
}

TEST_CASE("Activations, Flatten and Lambda apply their functions") {
  manual_seed(fresh_seed());
  Tensor x = randn({2, 3, 4});
  CHECK(values(nn::ReLU()(x)) == values(relu(x)));
  CHECK(values(nn::Tanh()(x)) == values(tanh(x)));
  CHECK(values(nn::Sigmoid()(x)) == values(sigmoid(x)));
  CHECK(values(nn::GELU()(x)) == values(gelu(x)));
  CHECK(values(nn::GELU("tanh")(x)) == values(gelu(x, "tanh")));
  CHECK_BRRR_ERROR(nn::GELU("fast"), ErrorKind::value, "GELU", "fast");
  CHECK(nn::Flatten()(x).shape() == Shape{2, 12});
  CHECK(nn::Flatten(0)(x).shape() == Shape{24});
  CHECK(nn::Flatten(1, 1)(x).shape() == Shape{2, 3, 4});
  nn::Lambda twice([](const Tensor& t) { return mul(t, 2.0); }, "Twice");
  CHECK(values(twice(x)) == values(mul(x, 2.0)));
  CHECK(twice.to_string() == "Twice()");
  CHECK(twice.parameters().empty());
  CHECK_BRRR_ERROR(nn::Lambda(nullptr), ErrorKind::value, "Lambda");
}

TEST_CASE("LayerNorm: ones/zeros parameters and the layer_norm op") {
  manual_seed(fresh_seed());
  nn::LayerNorm ln({6});
  CHECK(values(ln.weight()) == V(6, 1.0));
  CHECK(values(ln.bias()) == V(6, 0.0));
  CHECK(names_of(ln.named_parameters()) == join({"weight", "bias"}));
  Tensor x = randn({3, 6});
  Tensor y = ln(x);
  // Each row: zero mean, unit (biased) variance up to eps.
  V yv = values(y);
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 6; ++c) m += yv[static_cast<std::size_t>(r * 6 + c)];
    m /= 6;
    for (int c = 0; c < 6; ++c) v += std::pow(yv[static_cast<std::size_t>(r * 6 + c)] - m, 2);
    v /= 6;
    CHECK(std::abs(m) < 1e-5);
    CHECK(v == doctest::Approx(1.0).epsilon(1e-3));
  }
  nn::LayerNorm plain({2, 3}, 1e-6, false);
  CHECK(plain.parameters().empty());
  CHECK_FALSE(plain.weight().defined());
  CHECK(plain(randn({4, 2, 3})).shape() == Shape{4, 2, 3});
  CHECK(ln.to_string() == "LayerNorm((6,), eps=1e-05, elementwise_affine=true)");
}

TEST_CASE("Embedding: N(0, 1) table, padding row zero, lookup") {
  manual_seed(fresh_seed());
  nn::Embedding emb(10, 4, 3);
  CHECK(emb.weight().shape() == Shape{10, 4});
  V w = values(emb.weight());
  for (int j = 0; j < 4; ++j) CHECK(w[static_cast<std::size_t>(3 * 4 + j)] == 0.0);
  int nonzero = 0;
  for (double v : w) nonzero += v != 0.0;
  CHECK(nonzero == 36);
  Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{1, 3, 9, 1}, {2, 2});
  Tensor y = emb(idx);
  CHECK(y.shape() == Shape{2, 2, 4});
  V yv = values(y);
  const std::int64_t rows[] = {1, 3, 9, 1};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      CHECK(yv[static_cast<std::size_t>(i * 4 + j)] == w[static_cast<std::size_t>(rows[i] * 4 + j)]);
  // The padding row gets no gradient.
  sum(y).backward();
  V g = values(emb.weight().grad());
  for (int j = 0; j < 4; ++j) {
    CHECK(g[static_cast<std::size_t>(3 * 4 + j)] == 0.0);
    CHECK(g[static_cast<std::size_t>(1 * 4 + j)] == 2.0);
  }
  // A negative padding index counts from the end.
  nn::Embedding neg(5, 2, -1);
  V nw = values(neg.weight());
  CHECK(nw[8] == 0.0);
  CHECK(nw[9] == 0.0);
  CHECK(neg.to_string() == "Embedding(5, 2, padding_idx=4)");
  CHECK_BRRR_ERROR(nn::Embedding(5, 2, 5), ErrorKind::index, "padding_idx", "5");
}

TEST_CASE("Conv2d and MaxPool2d: parameter shapes and output shapes") {
  manual_seed(fresh_seed());
  nn::Conv2d conv(3, 8, 3, {.padding = {1, 1}});
  CHECK(conv.weight().shape() == Shape{8, 3, 3, 3});
  CHECK(conv.bias().shape() == Shape{8});
  nn::Conv2d grouped(4, 6, {3, 1}, {.stride = {2, 1}, .groups = 2}, false);
  CHECK(grouped.weight().shape() == Shape{6, 2, 3, 1});
  CHECK_FALSE(grouped.bias().defined());
  CHECK_BRRR_ERROR(nn::Conv2d(3, 6, 3, {.groups = 2}), ErrorKind::value, "Conv2d", "groups");
  Tensor x = randn({2, 3, 8, 8});
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 8, 8, 8});
  check_close(values(y), values(conv2d(x, conv.weight(), conv.bias(), {.padding = {1, 1}})), 0);
  Tensor p = nn::MaxPool2d(2)(y);
  CHECK(p.shape() == Shape{2, 8, 4, 4});
  check_close(values(p), values(max_pool2d(y, {.kernel_size = {2, 2}})), 0);
  nn::Sequential cnn{nn::Conv2d(3, 4, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                     nn::Linear(4 * 4 * 4, 5)};
  Tensor out = cnn(x);
  CHECK(out.shape() == Shape{2, 5});
  sum(out).backward();
  for (const auto& [n, t] : cnn.named_parameters()) {
    INFO(n);
    REQUIRE(t.grad().defined());
    CHECK(t.grad().shape() == t.shape());
  }
}

TEST_CASE("state_dict: round trip through load_state_dict") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Sequential model{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2), nn::Sequential{Scale(2)}};
  nn::StateDict sd = model.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, _] : sd) keys.push_back(k);
  CHECK(join(keys) == join({"0.bias", "0.weight", "2.bias", "2.weight", "3.0.count", "3.0.scale",
                                         "3.0.steps"}));
  for (const auto& [k, t] : sd) CHECK_FALSE(t.requires_grad());
  // The state dict's tensors share storage with the module: snapshot them by cloning.
  nn::StateDict saved;
  for (const auto& [k, t] : sd) saved.emplace(k, t.clone());
  {
    NoGradGuard g;
    for (const Tensor& p : model.parameters()) add_(p, ones_like(p), 1.0);
  }
  CHECK(values(model.state_dict().at("0.weight")) != values(saved.at("0.weight")));
  CHECK(values(sd.at("0.weight")) == values(model.state_dict().at("0.weight")));  // shared storage
  model.load_state_dict(saved);
  for (const auto& [k, t] : model.state_dict()) {
    INFO(k);
    CHECK(values(t) == values(saved.at(k)));
  }
  // Loading keeps the parameter handles and their leaf status.
  CHECK(model.parameters()[0].requires_grad());
  CHECK(model.parameters()[0].is_leaf());

  // Values of another dtype convert on load.
  nn::StateDict as_f64;
  for (const auto& [k, t] : saved) as_f64.emplace(k, is_floating_point(t.dtype()) ? t.to(DType::f64) : t);
  {
    NoGradGuard g;
    for (const Tensor& p : model.parameters()) add_(p, ones_like(p), 1.0);
  }
  model.load_state_dict(as_f64);
  CHECK(model.parameters()[0].dtype() == DType::f32);
  CHECK(values(model.state_dict().at("2.weight")) == values(saved.at("2.weight")));
}

TEST_CASE("load_state_dict: missing, unexpected and mis-shaped keys") {
  nn::Sequential model{nn::Linear(8, 2), nn::ReLU(), nn::Linear(2, 3)};
  nn::StateDict good;
  for (const auto& [k, t] : model.state_dict()) good.emplace(k, t.clone());

  nn::StateDict missing = good;
  missing.erase("0.bias");
  CHECK_BRRR_ERROR(model.load_state_dict(missing), ErrorKind::value, "load_state_dict", "missing", "'0.bias'");

  nn::StateDict unexpected = good;
  unexpected.emplace("extra.weight", zeros({1}));
  CHECK_BRRR_ERROR(model.load_state_dict(unexpected), ErrorKind::value, "load_state_dict", "unexpected",
                   "'extra.weight'");

  nn::StateDict both = missing;
  both.emplace("4.weight", zeros({1}));
  CHECK_BRRR_ERROR(model.load_state_dict(both), ErrorKind::value, "missing", "'0.bias'", "unexpected", "'4.weight'");

  nn::StateDict bad_shape = good;
  bad_shape["0.weight"] = zeros({3, 8});
  CHECK_BRRR_ERROR(model.load_state_dict(bad_shape), ErrorKind::shape, "load_state_dict", "'0.weight'", "[3, 8]",
                   "[2, 8]");
  // A shape mismatch is an error even when not strict.
  CHECK_BRRR_ERROR(model.load_state_dict(bad_shape, false), ErrorKind::shape, "'0.weight'");

  // A failed load changes nothing.
  for (const auto& [k, t] : model.state_dict()) CHECK(values(t) == values(good.at(k)));

  // strict = false loads what matches and ignores the rest.
  nn::StateDict partial;
  partial.emplace("2.bias", full({3}, 7.0));
  partial.emplace("nothing.here", zeros({5}));
  model.load_state_dict(partial, false);
  CHECK(values(model[2].state_dict().at("bias")) == V{7, 7, 7});
  CHECK(values(model.state_dict().at("0.weight")) == values(good.at("0.weight")));
}

TEST_CASE("Module::to(dtype) converts in place and keeps the parameter handles") {
  manual_seed(fresh_seed());
  nn::Sequential model{nn::Linear(3, 4), nn::Tanh(), Scale(4)};
  std::vector<Tensor> before = model.parameters();
  V w0 = values(before[0]);
  Tensor x = randn({2, 3});
  sum(model(x)).backward();
  CHECK(before[0].grad().defined());
  model.to(DType::f64);
  std::vector<Tensor> after = model.parameters();
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(before[i].is_same(after[i]));
    CHECK(before[i].dtype() == DType::f64);  // the copy taken before .to() sees the change
    CHECK(before[i].requires_grad());
    CHECK(before[i].is_leaf());
    CHECK_FALSE(before[i].grad().defined());  // f32 gradients dropped
  }
  CHECK(values(before[0]) == w0);  // exact widening
  auto buffers = model.named_buffers();
  REQUIRE(buffers.size() == 2);
  CHECK(buffers[0].first == "2.count");
  CHECK(buffers[0].second.dtype() == DType::f64);
  CHECK(buffers[1].second.dtype() == DType::i64);  // integer buffers stay
  Tensor y = model(x.to(DType::f64));
  CHECK(y.dtype() == DType::f64);
  sum(y).backward();
  CHECK(before[0].grad().dtype() == DType::f64);
  // An update through the old handle reaches the module (what an optimizer does).
  {
    NoGradGuard g;
    add_(before[0], before[0].grad(), -0.1);
  }
  CHECK(values(model.parameters()[0]) == values(before[0]));
  model.to(Device::cpu());  // already there: nothing changes
  CHECK(model.parameters()[0].is_same(before[0]));
  CHECK_BRRR_ERROR(model.to(DType::i32), ErrorKind::dtype, "i32");
  model.to(DType::f32);
  CHECK(before[1].dtype() == DType::f32);
}

TEST_CASE("Custom modules: parameters, buffers, registration errors, tied weights") {
  Scale s(3);
  CHECK(names_of(s.named_parameters()) == join({"scale"}));
  CHECK(names_of(s.named_buffers()) == join({"count", "steps"}));
  CHECK(s.num_parameters() == 3);
  auto impl = std::make_shared<ScaleImpl>(2);
  CHECK_BRRR_ERROR(impl->register_parameter("scale", ones({1})), ErrorKind::value, "scale", "already");
  CHECK_BRRR_ERROR(impl->register_parameter("a.b", ones({1})), ErrorKind::value, "a.b");
  CHECK_BRRR_ERROR(impl->register_parameter("idx", zeros({1}, {.dtype = DType::i64})), ErrorKind::dtype, "idx");
  CHECK_BRRR_ERROR(impl->register_parameter("u", Tensor()), ErrorKind::value, "u");
  CHECK_BRRR_ERROR(impl->register_module("c", nullptr), ErrorKind::value, "c");
  // A non-leaf registered as a parameter becomes a leaf of its own.
  Tensor base = ones({2}, {.requires_grad = true});
  Tensor& p = impl->register_parameter("derived", mul(base, 2.0));
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());
  // The base module's forward throws.
  struct Bare final : nn::ModuleImpl {
    std::string name() const override { return "Bare()"; }
  };
  CHECK_BRRR_ERROR(nn::Module(std::make_shared<Bare>())(ones({1})), ErrorKind::value, "Bare()", "forward");

  // Tied weights: one tensor under two names appears once in parameters(), twice in the
  // state dict.
  nn::Linear a(4, 4), b(4, 4, false);
  b.impl()->own_parameters()[0].second = a.weight();
  nn::Sequential tied{a, b};
  CHECK(tied.parameters().size() == 2);
  CHECK(tied.num_parameters() == 16 + 4);
  CHECK(tied.state_dict().size() == 3);
  Tensor x = ones({1, 4});
  CHECK(values(tied(x)) == values(b(a(x))));
  CHECK(values(b(x)) == values(matmul(x, a.weight().t())));  // b uses a's weight
  tied.to(DType::f64);
  CHECK(b.weight().dtype() == DType::f64);
  CHECK(b.weight().is_same(a.weight()));
}

TEST_CASE("Module::to_string prints the tree like PyTorch") {
  nn::Sequential model{nn::Linear(784, 256), nn::ReLU(), nn::Sequential{nn::Linear(256, 10, false)},
                       nn::CausalSelfAttention(8, 2)};
  std::string expected =
      "Sequential(\n"
      "  (0): Linear(in_features=784, out_features=256, bias=true)\n"
      "  (1): ReLU()\n"
      "  (2): Sequential(\n"
      "    (0): Linear(in_features=256, out_features=10, bias=false)\n"
      "  )\n"
      "  (3): CausalSelfAttention(\n"
      "    embed_dim=8, num_heads=2, dropout=0\n"
      "    (qkv): Linear(in_features=8, out_features=24, bias=true)\n"
      "    (proj): Linear(in_features=8, out_features=8, bias=true)\n"
      "  )\n"
      ")";
  CHECK(model.to_string() == expected);
  CHECK(nn::Sequential().to_string() == "Sequential()");
  CHECK(nn::Conv2d(3, 8, 5, {.stride = {2, 2}, .padding = {1, 1}}).to_string() ==
        "Conv2d(3, 8, kernel_size=(5, 5), stride=(2, 2), padding=(1, 1))");
  CHECK(nn::MaxPool2d(2).to_string() ==
        "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=false)");
}

TEST_CASE("nn::save / nn::load: a safetensors checkpoint round trip") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Sequential model{nn::Linear(3, 5), nn::GELU(), nn::LayerNorm({5}), nn::Linear(5, 2), Scale(2)};
  auto path = temp_file("brrr_nn_ckpt");
  nn::save(model, path.string());
  REQUIRE(std::filesystem::exists(path));
  nn::StateDict saved;
  for (const auto& [k, t] : model.state_dict()) saved.emplace(k, t.clone());
  manual_seed(seed + 1);
  nn::Sequential other{nn::Linear(3, 5), nn::GELU(), nn::LayerNorm({5}), nn::Linear(5, 2), Scale(2)};
  CHECK(values(other.state_dict().at("0.weight")) != values(saved.at("0.weight")));
  nn::load(other, path.string());
  for (const auto& [k, t] : other.state_dict()) {
    INFO(k);
    CHECK(t.dtype() == saved.at(k).dtype());
    CHECK(values(t) == values(saved.at(k)));
  }
  // A checkpoint of another architecture names the file and the keys.
  nn::Sequential wrong{nn::Linear(3, 5)};
  CHECK_BRRR_ERROR(nn::load(wrong, path.string()), ErrorKind::value, path.string(), "unexpected", "'3.weight'");
  nn::Sequential bad_shape{nn::Linear(3, 4), nn::GELU(), nn::LayerNorm({5}), nn::Linear(5, 2), Scale(2)};
  CHECK_BRRR_ERROR(nn::load(bad_shape, path.string()), ErrorKind::shape, path.string(), "'0.weight'", "[5, 3]",
                   "[4, 3]", "'0.bias'", "[5]", "[4]");
  std::filesystem::remove(path);
  CHECK_BRRR_ERROR(nn::load(other, path.string()), ErrorKind::io, path.string());
}

// ---------------------------------------------------------------------------------------------
// CausalSelfAttention
// ---------------------------------------------------------------------------------------------

namespace {

// The float64 reference of CausalSelfAttention (dropout 0) for x [B, T, E].
V ref_attention(const V& x, std::int64_t B, std::int64_t T, std::int64_t E, std::int64_t H, const V& wqkv,
                const V& bqkv, const V& wp, const V& bp) {
  const std::int64_t D = E / H;
  V out(static_cast<std::size_t>(B * T * E));
  auto at = [](const V& v, std::int64_t i) { return v[static_cast<std::size_t>(i)]; };
  for (std::int64_t b = 0; b < B; ++b) {
    V xb(x.begin() + b * T * E, x.begin() + (b + 1) * T * E);
    V qkv = ref_linear(xb, wqkv, bqkv, T, E, 3 * E);  // [T, 3E]
    V y(static_cast<std::size_t>(T * E), 0.0);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i) {
        V s(static_cast<std::size_t>(i + 1));
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j <= i; ++j) {
          double acc = 0;
          for (std::int64_t d = 0; d < D; ++d)
            acc += at(qkv, i * 3 * E + h * D + d) * at(qkv, j * 3 * E + E + h * D + d);
          s[static_cast<std::size_t>(j)] = acc / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<std::size_t>(j)]);
        }
        double z = 0;
        for (auto& v : s) z += (v = std::exp(v - mx));
        for (std::int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (std::int64_t j = 0; j <= i; ++j) acc += s[static_cast<std::size_t>(j)] / z * at(qkv, j * 3 * E + 2 * E + h * D + d);
          y[static_cast<std::size_t>(i * E + h * D + d)] = acc;
        }
      }
    V ob = ref_linear(y, wp, bp, T, E, E);
    std::copy(ob.begin(), ob.end(), out.begin() + b * T * E);
  }
  return out;
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  return {};
}

}  // namespace

TEST_CASE("CausalSelfAttention: parameters, output shape and a float64 reference") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  const std::int64_t B = 2, T = 5, E = 8, H = 2;
  nn::CausalSelfAttention attn(E, H);
  CHECK(names_of(attn.named_parameters()) ==
        join({"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  CHECK(param(attn, "qkv.weight").shape() == Shape{3 * E, E});
  CHECK(param(attn, "proj.weight").shape() == Shape{E, E});
  CHECK(attn.num_parameters() == 3 * E * E + 3 * E + E * E + E);
  Tensor x = randn({B, T, E});
  Tensor y = attn(x);
  CHECK(y.shape() == Shape{B, T, E});
  V ref = ref_attention(values(x), B, T, E, H, values(param(attn, "qkv.weight")), values(param(attn, "qkv.bias")),
                        values(param(attn, "proj.weight")), values(param(attn, "proj.bias")));
  check_close(values(y), ref, 1e-5, 1e-4);
  // In f64 the agreement is much tighter.
  attn.to(DType::f64);
  Tensor x64 = x.to(DType::f64);
  check_close(values(attn(x64)), ref_attention(values(x64), B, T, E, H, values(param(attn, "qkv.weight")),
                                               values(param(attn, "qkv.bias")), values(param(attn, "proj.weight")),
                                               values(param(attn, "proj.bias"))),
              1e-12, 1e-10);
  // T = 1: the only key is the token itself.
  Tensor one = randn({3, 1, E}, {.dtype = DType::f64});
  CHECK(attn(one).shape() == Shape{3, 1, E});

  CHECK_BRRR_ERROR(nn::CausalSelfAttention(10, 3), ErrorKind::value, "CausalSelfAttention", "10", "3");
  CHECK_BRRR_ERROR(attn(randn({2, 4}, {.dtype = DType::f64})), ErrorKind::shape, "CausalSelfAttention", "[2, 4]");
  CHECK_BRRR_ERROR(attn(randn({2, 4, 6}, {.dtype = DType::f64})), ErrorKind::shape, "[2, 4, 6]");
}

TEST_CASE("CausalSelfAttention: position t never sees later positions") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  const std::int64_t B = 2, T = 6, E = 12, H = 3;
  nn::CausalSelfAttention attn(E, H);
  Tensor x = randn({B, T, E});
  V y = values(attn(x));
  for (std::int64_t t : {0, 2, 5}) {
    INFO("changed position ", t);
    Tensor x2 = x.clone();
    x2.narrow(1, t, 1).copy_(randn({B, 1, E}));
    V y2 = values(attn(x2));
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t s = 0; s < T; ++s) {
        bool same = true;
        for (std::int64_t e = 0; e < E; ++e) {
          std::size_t i = static_cast<std::size_t>((b * T + s) * E + e);
          same = same && y[i] == y2[i];
        }
        if (s < t) CHECK(same);
        else if (s == t) CHECK_FALSE(same);
      }
  }
}

TEST_CASE("CausalSelfAttention: gradients (gradcheck of the input, central differences on parameters)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  const std::int64_t B = 2, T = 4, E = 6, H = 2;
  nn::CausalSelfAttention attn(E, H);
  attn.to(DType::f64);
  Tensor x = randn({B, T, E}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck([&](const std::vector<Tensor>& in) { return attn(in[0]); }, {x}));

  // d loss / d parameter against central differences on a few elements of each parameter.
  Tensor r = randn({B, T, E}, {.dtype = DType::f64});
  auto loss = [&] { return sum(mul(attn(x), r)); };
  loss().backward();
  std::mt19937_64 rng(seed);
  const double eps = 1e-6;
  for (const auto& [name, p] : attn.named_parameters()) {
    Tensor flat = p.view({-1});
    Tensor g = p.grad();
    REQUIRE(g.defined());
    V gv = values(g);
    std::uniform_int_distribution<std::int64_t> pick(0, p.numel() - 1);
    for (int n = 0; n < 4; ++n) {
      std::int64_t i = pick(rng);
      INFO(name, "[", i, "]");
      NoGradGuard no_grad;
      double orig = flat.narrow(0, i, 1).item<double>();
      flat.narrow(0, i, 1).fill_(orig + eps);
      double up = loss().item<double>();
      flat.narrow(0, i, 1).fill_(orig - eps);
      double down = loss().item<double>();
      flat.narrow(0, i, 1).fill_(orig);
      double numeric = (up - down) / (2 * eps);
      CHECK(gv[static_cast<std::size_t>(i)] == doctest::Approx(numeric).epsilon(1e-5).scale(1e-3));
    }
  }
}

TEST_CASE("CausalSelfAttention: attention dropout only in training mode") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::CausalSelfAttention attn(8, 2, 0.5);
  nn::CausalSelfAttention plain(8, 2, 0.0);
  plain.load_state_dict(attn.state_dict());
  Tensor x = randn({2, 5, 8});
  V ref = values(plain(x));
  attn.eval();
  check_close(values(attn(x)), ref, 0);
  attn.train();
  V dropped = values(attn(x));
  CHECK(dropped != ref);
}

TEST_CASE("An MLP trained by hand-written SGD steps lowers the loss") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Sequential mlp{nn::Linear(3, 16), nn::Tanh(), nn::Linear(16, 1)};
  Tensor X = randn({64, 3});
  Tensor w_true = Tensor::from_vector(std::vector<float>{1.5f, -2.0f, 0.5f}, {3, 1});
  Tensor Y = add(matmul(X, w_true), 0.3);
  auto loss_fn = [&] {
    Tensor d = sub(mlp(X), Y);
    return mean(mul(d, d));
  };
  const double lr = 0.05;
  double first = 0, last = 0;
  std::vector<Tensor> params = mlp.parameters();
  for (int step = 0; step < 60; ++step) {
    for (const Tensor& p : params) p.set_grad(Tensor());
    Tensor loss = loss_fn();
    double value = loss.item<float>();
    if (step == 0) first = value;
    last = value;
    loss.backward();
    NoGradGuard g;
    for (const Tensor& p : params) add_(p, p.grad(), -lr);
  }
  INFO("first ", first, " last ", last);
  CHECK(std::isfinite(last));
  CHECK(last < 0.5 * first);
}
