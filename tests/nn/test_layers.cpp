// brrr.nn's layers on the CPU: Dropout, activations, Flatten, Lambda, LayerNorm, Embedding,
// Conv2d and MaxPool2d (parameters and output shapes).
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
#include "tests/nn/modules_cases.hpp"

using namespace modules_test;

using namespace brrr;
using namespace test;

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
