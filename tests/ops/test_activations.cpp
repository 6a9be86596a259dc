// Activations on the CPU: every op of torch.nn.functional's set (leaky_relu, elu, selu, celu,
// softplus, hardtanh, relu6, hardswish, hardsigmoid, mish, logsigmoid, softsign, glu)
// against PyTorch fixtures (outputs and input gradients at the kinks, thresholds and
// saturation points, in f64 and f32), gradients and second derivatives against central
// differences, integer promotion, dropout2d's per-channel masks, the nn:: modules and the
// errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/torch_fixtures.hpp"

using namespace brrr;
using namespace test;

namespace {

using Fn = std::function<Tensor(const Tensor&)>;

// The fixture cases of make_torch_fixtures.py's ACTIVATIONS, as brrr calls.
const std::map<std::string, Fn>& cases() {
  static const std::map<std::string, Fn> m = {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x); }},
      {"leaky_relu_0.2", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"elu", [](const Tensor& x) { return elu(x); }},
      {"elu_0.5", [](const Tensor& x) { return elu(x, 0.5); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"celu", [](const Tensor& x) { return celu(x); }},
      {"celu_2", [](const Tensor& x) { return celu(x, 2.0); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"softplus_2_5", [](const Tensor& x) { return softplus(x, 2.0, 5.0); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x); }},
      {"hardtanh_-2_3", [](const Tensor& x) { return hardtanh(x, -2.0, 3.0); }},
      {"relu6", [](const Tensor& x) { return relu6(x); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"logsigmoid", [](const Tensor& x) { return logsigmoid(x); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }},
      {"glu", [](const Tensor& x) { return glu(x.view({8, 8}), -1); }},
      {"glu_0", [](const Tensor& x) { return glu(x.view({8, 8}), 0); }},
  };
  return m;
}

}  // namespace

TEST_CASE("activations match PyTorch: values and gradients at kinks and thresholds (f64, f32)") {
  for (const auto& [name, fn] : cases()) {
    Fn f = fn;
    // PyTorch's hardsigmoid gradient multiplies by 1/6 rounded to float even in f64
    // (docs/semantics.md); brrr's is exact.
    const double rtol = name == "hardsigmoid" ? 1e-7 : 1e-10;
    replay("activations.safetensors", name, [f](const std::vector<Tensor>& in) { return f(in[0]); }, DType::f64,
           Device::cpu(), {.rtol = rtol, .atol = 1e-12});
    replay("activations.safetensors", name, [f](const std::vector<Tensor>& in) { return f(in[0]); }, DType::f32,
           Device::cpu(), {.rtol = 2e-6, .atol = 2e-6});
  }
}

TEST_CASE("activations: bf16 and f16 compute in f32 and round once") {
  Tensor x = make(DType::f64, {-4.0, -2.5, -1.0, -0.25, 0.0, 0.5, 1.5, 3.5, 8.0}, {9});
  for (const auto& [name, fn] : cases()) {
    if (name.rfind("glu", 0) == 0) continue;
    INFO(name);
    for (DType d : {DType::bf16, DType::f16}) {
      Tensor got = fn(x.to(d));
      CHECK(got.dtype() == d);
      Tensor want = fn(x.to(d).to(DType::f32)).to(d);  // the same math in f32, rounded once
      CHECK(values(got) == values(want));
    }
  }
}

TEST_CASE("activations: gradients and second derivatives against central differences") {
  FRESH_SEED();
  // Away from the kinks (finite differences across a kink are meaningless).
  std::mt19937_64 rng(seed_);
  std::vector<double> v = normal_values(rng, 24, 2.0);
  for (double& e : v)
    for (double k : {0.0, 3.0, -3.0, 6.0, -1.0, 1.0, -2.0})
      if (std::abs(e - k) < 1e-3) e += 0.01;
  Tensor x = make(DType::f64, v, {4, 6});
  for (const auto& [name, fn] : cases()) {
    INFO(name);
    Fn f = fn;
    if (name.rfind("glu", 0) == 0) {
      CHECK(autograd::gradcheck([f](const std::vector<Tensor>& in) { return f(in[0].reshape({64})); },
                                {make(DType::f64, normal_values(rng, 64), {64})}));
      continue;
    }
    CHECK(autograd::gradcheck([f](const std::vector<Tensor>& in) { return f(in[0]); }, {x}));
    // Second derivatives (create_graph; the rules are Tensor ops): the derivative of the
    // analytic gradient against central differences of it (elementwise, so diagonal).
    auto first = [&f](const Tensor& at, bool create_graph) {
      Tensor xi = at.detach().clone().requires_grad_();
      return std::pair{xi, autograd::grad({f(xi).sum()}, {xi}, {}, create_graph, create_graph)[0]};
    };
    auto [xi, g] = first(x, true);
    if (!g.requires_grad()) continue;  // piecewise linear: the gradient is constant
    Tensor gg = autograd::grad({g.sum()}, {xi})[0];
    const double eps = 1e-6;
    Tensor fd = div(sub(first(add(x, eps), false).second, first(sub(x, eps), false).second), 2 * eps);
    testing::assert_close(gg, fd, {.rtol = 1e-5, .atol = 1e-6});
  }
}

TEST_CASE("activations: hand-checked values and PyTorch's gradient conventions") {
  Tensor x = make(DType::f64, {-3.0, 0.0, 3.0, 6.0, -1.0, 1.0}, {6}).requires_grad_();
  CHECK(values(hardswish(x)) == std::vector<double>{0.0, 0.0, 3.0, 6.0, -1.0 / 3.0, 2.0 / 3.0});
  CHECK(values(hardsigmoid(x)) == std::vector<double>{0.0, 0.5, 1.0, 1.0, 1.0 / 3.0, 2.0 / 3.0});
  CHECK(values(relu6(x)) == std::vector<double>{0.0, 0.0, 3.0, 6.0, 0.0, 1.0});
  // hardtanh's gradient excludes the bounds, clamp's includes them.
  hardtanh(x).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0.0, 1.0, 0.0, 0.0, 0.0, 0.0});
  // leaky_relu's gradient at 0 is the slope.
  Tensor z = make(DType::f64, {0.0}, {1}).requires_grad_();
  leaky_relu(z, 0.3).sum().backward();
  CHECK(values(z.grad()) == std::vector<double>{0.3});
  // NaN propagates through every activation.
  Tensor n = make(DType::f32, {std::nan("")}, {1});
  for (const auto& [name, fn] : cases()) {
    if (name.rfind("glu", 0) == 0) continue;
    INFO(name);
    CHECK(std::isnan(values(fn(n))[0]));
  }
  // logsigmoid and softplus stay finite and exact far out.
  Tensor far = make(DType::f32, {-200.0, 200.0}, {2});
  CHECK(values(logsigmoid(far)) == std::vector<double>{-200.0, 0.0});
  CHECK(values(softplus(far)) == std::vector<double>{0.0, 200.0});
}

TEST_CASE("activations: integer and bool inputs compute in f32") {
  Tensor i = make(DType::i64, {-2, 0, 5}, {3});
  Tensor y = leaky_relu(i, 0.5);
  CHECK(y.dtype() == DType::f32);
  CHECK(values(y) == std::vector<double>{-1.0, 0.0, 5.0});
  CHECK(relu6(make(DType::i32, {-1, 7}, {2})).dtype() == DType::f32);
  CHECK(values(softsign(make(DType::boolean, {1, 0}, {2}))) == std::vector<double>{0.5, 0.0});
}

TEST_CASE("activations: errors") {
  Tensor x = randn({2, 3});
  CHECK_BRRR_ERROR(celu(x, 0.0), ErrorKind::value, "celu", "alpha");
  CHECK_BRRR_ERROR(softplus(x, 0.0), ErrorKind::value, "softplus", "beta");
  CHECK_BRRR_ERROR(hardtanh(x, 1.0, -1.0), ErrorKind::value, "hardtanh", "min_val", "max_val");
  CHECK_BRRR_ERROR(glu(x, 1), ErrorKind::shape, "glu", "even", "[2, 3]");
  CHECK_BRRR_ERROR(glu(x, 2), ErrorKind::index, "glu");
  CHECK_BRRR_ERROR(glu(full({}, 1.0), 0), ErrorKind::shape, "glu", "0-d");
  CHECK_BRRR_ERROR(leaky_relu(Tensor()), ErrorKind::value, "leaky_relu");
}

TEST_CASE("dropout2d zeroes whole channels and scales the rest") {
  FRESH_SEED();
  Tensor x = ones({8, 16, 3, 5}, {.dtype = DType::f64}).requires_grad_();
  const double p = 0.3;
  Tensor y = dropout2d(x, p);
  std::vector<double> v = values(y);
  std::int64_t kept = 0;
  for (std::int64_t nc = 0; nc < 8 * 16; ++nc) {
    double first = v[static_cast<std::size_t>(nc * 15)];
    CHECK((first == 0.0 || std::abs(first - 1.0 / (1.0 - p)) < 1e-15));
    for (std::int64_t k = 1; k < 15; ++k) CHECK(v[static_cast<std::size_t>(nc * 15 + k)] == first);
    kept += first != 0.0;
  }
  // 128 channels, keep probability 0.7: mean 89.6, sd 5.2; 6 sd either way.
  CHECK(kept > 58);
  CHECK(kept < 121);
  // The gradient is the same noise.
  y.sum().backward();
  CHECK(values(x.grad()) == v);
  // Unbatched [C, H, W]: one draw per channel.
  std::vector<double> u = values(dropout2d(ones({32, 2, 2}), 0.5));
  for (std::int64_t c = 0; c < 32; ++c)
    for (std::int64_t k = 1; k < 4; ++k) CHECK(u[static_cast<std::size_t>(c * 4 + k)] == u[static_cast<std::size_t>(c * 4)]);
  // Identity in eval mode and for p == 0; zeros for p == 1.
  Tensor r = randn({2, 3, 4, 4});
  CHECK(dropout2d(r, 0.5, false).is_same(r));
  CHECK(dropout2d(r, 0.0).is_same(r));
  CHECK(values(dropout2d(r, 1.0)) == std::vector<double>(96, 0.0));
  // The same seed gives the same mask.
  manual_seed(5);
  std::vector<double> a = values(dropout2d(ones({4, 8, 2, 2}), 0.5));
  manual_seed(5);
  CHECK(values(dropout2d(ones({4, 8, 2, 2}), 0.5)) == a);
  CHECK_BRRR_ERROR(dropout2d(r, 1.5), ErrorKind::value, "dropout2d", "1.5");
  CHECK_BRRR_ERROR(dropout2d(randn({2, 3}), 0.5), ErrorKind::shape, "dropout2d", "[2, 3]");
  CHECK_BRRR_ERROR(dropout2d(ones({2, 3, 4, 4}, {.dtype = DType::i64}), 0.5), ErrorKind::dtype, "dropout2d");
}

TEST_CASE("activation modules: forward, printing, argument checks") {
  Tensor x = make(DType::f32, {-2.0, -0.5, 0.0, 0.5, 4.0, 7.0}, {6});
  struct M {
    nn::Module m;
    Fn f;
    std::string shown;
  };
  std::vector<M> ms = {
      {nn::LeakyReLU(0.1), [](const Tensor& t) { return leaky_relu(t, 0.1); }, "LeakyReLU(negative_slope=0.1)"},
      {nn::ELU(), [](const Tensor& t) { return elu(t); }, "ELU(alpha=1)"},
      {nn::SELU(), [](const Tensor& t) { return selu(t); }, "SELU()"},
      {nn::CELU(0.5), [](const Tensor& t) { return celu(t, 0.5); }, "CELU(alpha=0.5)"},
      {nn::Softplus(2.0, 10.0), [](const Tensor& t) { return softplus(t, 2.0, 10.0); }, "Softplus(beta=2, threshold=10)"},
      {nn::Hardtanh(-0.5, 2.0), [](const Tensor& t) { return hardtanh(t, -0.5, 2.0); }, "Hardtanh(min_val=-0.5, max_val=2)"},
      {nn::ReLU6(), [](const Tensor& t) { return relu6(t); }, "ReLU6()"},
      {nn::Hardswish(), [](const Tensor& t) { return hardswish(t); }, "Hardswish()"},
      {nn::Hardsigmoid(), [](const Tensor& t) { return hardsigmoid(t); }, "Hardsigmoid()"},
      {nn::Mish(), [](const Tensor& t) { return mish(t); }, "Mish()"},
      {nn::LogSigmoid(), [](const Tensor& t) { return logsigmoid(t); }, "LogSigmoid()"},
      {nn::Softsign(), [](const Tensor& t) { return softsign(t); }, "Softsign()"},
      {nn::GLU(0), [](const Tensor& t) { return glu(t, 0); }, "GLU(dim=0)"},
  };
  for (const M& m : ms) {
    INFO(m.shown);
    CHECK(m.m.to_string() == m.shown);
    CHECK(values(m.m(x)) == values(m.f(x)));
    CHECK(m.m.num_parameters() == 0);
  }
  nn::Dropout2d d(0.25);
  CHECK(d.to_string() == "Dropout2d(p=0.25)");
  Tensor r = randn({2, 4, 3, 3});
  d.eval();
  CHECK(d(r).is_same(r));
  CHECK_BRRR_ERROR(nn::Dropout2d(-0.1), ErrorKind::value, "Dropout2d");
  CHECK_BRRR_ERROR(nn::CELU(0.0), ErrorKind::value, "CELU");
  CHECK_BRRR_ERROR(nn::Softplus(0.0), ErrorKind::value, "Softplus");
  CHECK_BRRR_ERROR(nn::Hardtanh(2.0, 1.0), ErrorKind::value, "Hardtanh");
}
