// brrr.nn's state on the CPU: state dicts (round trip, missing/unexpected/mis-shaped keys),
// to(dtype) keeping the parameter handles, custom modules (parameters, buffers, tied
// weights), printing, safetensors checkpoints.
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
