// CausalSelfAttention on the CPU (against a float64 reference written here, causality,
// gradcheck of the input, central differences on its parameters, dropout), and a few
// hand-written SGD steps on an MLP that lower the loss.
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
