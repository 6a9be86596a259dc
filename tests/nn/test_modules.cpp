// brrr.nn's Module on the CPU: Linear against a float64 matmul done here, parameter names,
// shapes and counts of containers, empty handles, train/eval. State dicts, to(dtype), custom
// modules, printing and checkpoints are test_modules_state.cpp; the layers test_layers.cpp;
// attention and training test_attention.cpp.
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
