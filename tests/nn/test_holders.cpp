// Module holders and containers on the CPU: a user module through ModuleHolder/BRRR_MODULE
// (net->member access, several inputs and outputs, default name()), register_module with
// handles, ModuleList/ModuleDict/ParameterList (names in the state dict, iteration, errors),
// apply() order and custom init, zero_grad both ways.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
import brrr;

#include "nn/module_holder.hpp"
#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

struct NetImpl : nn::ModuleImpl {
  NetImpl(std::int64_t in, std::int64_t hidden)
      : scale(register_parameter("scale", ones({1}))),
        fc1(register_module("fc1", nn::Linear(in, hidden))),
        fc2(register_module("fc2", nn::Linear(hidden, 1))) {}
  Tensor forward(const Tensor& x) override { return fc2(relu(fc1(x))) * scale; }
  // Two inputs, two outputs.
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const Tensor& y) { return {forward(x), forward(y)}; }
  Tensor scale;
  nn::Linear fc1, fc2;
};
BRRR_MODULE(Net);

struct WrapperImpl : nn::ModuleImpl {
  WrapperImpl() { inner = register_module("inner", Net(3, 4)); }
  Tensor forward(const Tensor& x) override { return inner(x); }
  Net inner{nullptr};
};
using Wrapper = nn::ModuleHolder<WrapperImpl>;

}  // namespace

TEST_CASE("a user module through its holder: members, forwards, name, traversal") {
  FRESH_SEED();
  Net net(3, 4);
  CHECK(net->fc1.weight().shape() == Shape{4, 3});
  CHECK(net.type_name() == "Net");
  CHECK(net->name() == "Net");
  Tensor x = randn({5, 3}), y = randn({2, 3});
  Tensor expected = matmul(relu(matmul(x, net->fc1.weight().t()) + net->fc1.bias()), net->fc2.weight().t()) +
                    net->fc2.bias();
  testing::assert_close(net(x), expected);
  auto [a, b] = net(x, y);
  CHECK(a.shape() == Shape{5, 1});
  CHECK(b.shape() == Shape{2, 1});
  testing::assert_close(std::get<1>(net->forward(x, y)), net(y));
  // As a Module: named parameters in registration order, children's under their names.
  std::vector<std::string> names;
  for (const auto& [n, _] : net.named_parameters()) names.push_back(n);
  CHECK(join(names) == "scale,fc1.weight,fc1.bias,fc2.weight,fc2.bias");
  nn::Sequential seq{net, nn::ReLU()};
  testing::assert_close(seq(x), relu(net(x)));
  // A holder of a holder, made empty then assigned by register_module.
  Wrapper w;
  CHECK(w->inner->fc1.weight().shape() == Shape{4, 3});
  CHECK(w.state_dict().count("inner.fc2.bias") == 1);
  CHECK(w.named_modules().size() == 4);  // "", inner, inner.fc1, inner.fc2
  CHECK(w.named_modules()[2].first == "inner.fc1");
  CHECK(w.as<WrapperImpl>() != nullptr);
  CHECK(w.as<NetImpl>() == nullptr);
  Net empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_BRRR_ERROR(empty->fc1, ErrorKind::value, "empty");
  CHECK_BRRR_ERROR(empty(x), ErrorKind::value, "empty");
}

TEST_CASE("zero_grad and apply") {
  FRESH_SEED();
  Net net(3, 4);
  net(randn({2, 3})).sum().backward();
  for (const Tensor& p : net.parameters()) CHECK(p.grad().defined());
  net.zero_grad(false);
  for (const Tensor& p : net.parameters()) {
    REQUIRE(p.grad().defined());
    for (double v : values(p.grad())) CHECK(v == 0.0);
  }
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK(!p.grad().defined());

  // apply visits children first (PyTorch's order) and can initialise layers by kind.
  std::vector<std::string> order;
  net.apply([&](nn::Module& m) {
    order.push_back(m.type_name());
    if (m.type_name() == "Linear")
      for (const auto& [n, p] : m.named_parameters()) nn::init::constant_(p, n == "weight" ? 0.5 : -1.0);
  });
  CHECK(join(order) == "Linear,Linear,Net");
  for (double v : values(net->fc1.weight())) CHECK(v == 0.5);
  for (double v : values(net->fc2.bias())) CHECK(v == -1.0);
}

TEST_CASE("ModuleList, ModuleDict and ParameterList register their entries") {
  FRESH_SEED();
  nn::ModuleList list{nn::Linear(2, 3), nn::Linear(3, 3)};
  list.push_back(nn::Linear(3, 1));
  CHECK(list.size() == 3);
  Tensor h = randn({4, 2});
  Tensor manual = h;
  for (const nn::Module& m : list) manual = m(manual);
  CHECK(manual.shape() == Shape{4, 1});
  CHECK(list.state_dict().count("2.weight") == 1);
  CHECK(list.parameters().size() == 6);
  nn::ModuleList more{nn::ReLU()};
  list.extend(more);
  CHECK(list.size() == 4);
  CHECK(list[3].type_name() == "ReLU");
  CHECK_BRRR_ERROR(list[4], ErrorKind::index, "ModuleList", "4", "4 modules");
  CHECK_BRRR_ERROR(list.push_back(nn::Module()), ErrorKind::value, "empty");
  Net net(2, 2);
  list.push_back(net);
  CHECK(list.at<NetImpl>(4)->fc1.weight().shape() == Shape{2, 2});
  CHECK_BRRR_ERROR(list.at<NetImpl>(0), ErrorKind::value, "not of the type");

  nn::ModuleDict dict{{"encoder", nn::Linear(4, 2)}, {"act", nn::Tanh()}};
  dict.insert("decoder", nn::Linear(2, 4));
  CHECK(join(dict.keys()) == "encoder,act,decoder");
  CHECK(dict.contains("act"));
  CHECK(!dict.contains("missing"));
  CHECK(dict["decoder"].named_parameters().size() == 2);
  CHECK(dict.state_dict().count("encoder.bias") == 1);
  CHECK_BRRR_ERROR(dict["missing"], ErrorKind::index, "missing");
  CHECK_BRRR_ERROR(dict.insert("act", nn::ReLU()), ErrorKind::value, "act", "already registered");

  nn::ParameterList params{randn({2}), randn({3, 3})};
  params.append(zeros({1}));
  CHECK(params.size() == 3);
  CHECK(params[1].shape() == Shape{3, 3});
  CHECK(params[2].requires_grad());
  CHECK(params.state_dict().count("2") == 1);
  CHECK_BRRR_ERROR(params[3], ErrorKind::index, "ParameterList");
  // Printing shows the entries.
  CHECK(dict.to_string().find("(encoder): Linear(in_features=4") != std::string::npos);
}
