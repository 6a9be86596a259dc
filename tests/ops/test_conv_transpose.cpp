// conv_transpose2d and conv1d on the CPU: against PyTorch fixtures (stride, padding,
// output_padding, groups, dilation, bias, unbatched; outputs and input/weight/bias
// gradients in f64 and f32), against conv2d's input gradient (its definition), gradients
// against central differences, the nn::ConvTranspose2d / nn::Conv1d modules and the errors.
#include <doctest/doctest.h>

#include <array>
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

struct Case {
  ConvTranspose2dOptions o;
  bool bias;
};
// make_torch_fixtures.py's CONV_TRANSPOSE, in order.
const std::vector<Case> cases = {
    {{.stride = {1, 1}, .padding = {0, 0}, .output_padding = {0, 0}, .groups = 1, .dilation = {1, 1}}, true},
    {{.stride = {2, 2}, .padding = {1, 1}, .output_padding = {0, 0}, .groups = 1, .dilation = {1, 1}}, true},
    {{.stride = {2, 3}, .padding = {1, 0}, .output_padding = {1, 2}, .groups = 2, .dilation = {1, 1}}, false},
    {{.stride = {1, 2}, .padding = {0, 1}, .output_padding = {0, 1}, .groups = 3, .dilation = {2, 1}}, true},
    {{.stride = {1, 1}, .padding = {2, 1}, .output_padding = {1, 0}, .groups = 1, .dilation = {2, 2}}, true},
};

}  // namespace

TEST_CASE("conv_transpose2d and conv1d match PyTorch (f64, f32)") {
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case ", i);
    const Case c = cases[i];
    FixtureFn f = [c](const std::vector<Tensor>& in) {
      return conv_transpose2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.o);
    };
    replay("convs.safetensors", "conv_transpose2d_" + std::to_string(i), f);
    replay("convs.safetensors", "conv_transpose2d_" + std::to_string(i), f, DType::f32, Device::cpu(),
           {.rtol = 1e-4, .atol = 1e-4});
  }
  replay("convs.safetensors", "conv_transpose2d_unbatched", [](const std::vector<Tensor>& in) {
    return conv_transpose2d(in[0], in[1], {}, {.stride = {2, 2}, .padding = {1, 1}});
  });
  replay("convs.safetensors", "conv1d", [](const std::vector<Tensor>& in) {
    return conv1d(in[0], in[1], in[2], {.stride = 2, .padding = 1});
  });
  replay("convs.safetensors", "conv1d_groups", [](const std::vector<Tensor>& in) {
    return conv1d(in[0], in[1], {}, {.stride = 1, .padding = 2, .dilation = 2, .groups = 2});
  });
}

TEST_CASE("conv_transpose2d is conv2d's input gradient") {
  FRESH_SEED();
  Tensor x = randn({2, 4, 5, 6}, {.dtype = DType::f64});
  Tensor w = randn({4, 3, 3, 2}, {.dtype = DType::f64});
  ConvTranspose2dOptions o{.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}};
  Tensor y = conv_transpose2d(x, w, {}, o);
  CHECK(y.shape() == Shape{2, 3, 10, 7});
  Tensor z = zeros(y.shape(), {.dtype = DType::f64}).requires_grad_();
  Tensor c = conv2d(z, w, {}, {.stride = o.stride, .padding = o.padding});
  CHECK(c.shape() == x.shape());
  Tensor gz = autograd::grad({c}, {z}, {x})[0];
  testing::assert_close(y, gz, {.rtol = 1e-12, .atol = 1e-12});
}

TEST_CASE("conv_transpose2d, conv1d: gradcheck, non-contiguous input") {
  FRESH_SEED();
  Tensor x = randn({1, 4, 3, 3}, {.dtype = DType::f64}), w = randn({4, 1, 2, 3}, {.dtype = DType::f64});
  Tensor b = randn({2}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2], {.stride = {2, 1}, .padding = {0, 1}, .groups = 2});
      },
      {x, w, b}));
  Tensor x1 = randn({2, 2, 7}, {.dtype = DType::f64}), w1 = randn({3, 2, 3}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], {}, {.padding = 1}); },
                            {x1, w1}));
  Tensor xt = randn({2, 4, 5, 3}, {.dtype = DType::f64}).transpose(2, 3);
  Tensor wt = randn({4, 2, 3, 3}, {.dtype = DType::f64});
  testing::assert_close(conv_transpose2d(xt, wt, {}, {.stride = {2, 2}}),
                        conv_transpose2d(xt.contiguous(), wt, {}, {.stride = {2, 2}}));
}

TEST_CASE("ConvTranspose2d and Conv1d modules") {
  manual_seed(1);
  nn::ConvTranspose2d up(8, 4, 4, {.stride = {2, 2}, .padding = {1, 1}});
  CHECK(up.weight().shape() == Shape{8, 4, 4, 4});
  CHECK(up.bias().shape() == Shape{4});
  CHECK(up.to_string() == "ConvTranspose2d(8, 4, kernel_size=(4, 4), stride=(2, 2), padding=(1, 1))");
  // PyTorch's init: bound 1/sqrt(fan_in), fan_in = 4 * 16 = 64.
  for (double v : values(up.bias())) CHECK(std::abs(v) <= 0.125);
  Tensor x = randn({2, 8, 5, 5});
  Tensor y = up(x);
  CHECK(y.shape() == Shape{2, 4, 10, 10});
  testing::assert_close(y, conv_transpose2d(x, up.weight(), up.bias(), {.stride = {2, 2}, .padding = {1, 1}}));
  nn::Conv1d c1(3, 6, 5, {.padding = 2, .groups = 3}, false);
  CHECK(c1.weight().shape() == Shape{6, 1, 5});
  CHECK(c1.to_string() == "Conv1d(3, 6, kernel_size=(5,), stride=(1,), padding=(2,), groups=3, bias=false)");
  CHECK(c1(randn({2, 3, 10})).shape() == Shape{2, 6, 10});
  CHECK_BRRR_ERROR(nn::ConvTranspose2d(3, 4, 3, {.groups = 2}), ErrorKind::value, "ConvTranspose2d");
  CHECK_BRRR_ERROR(nn::Conv1d(3, 4, 0), ErrorKind::value, "Conv1d");
}

TEST_CASE("conv_transpose2d and conv1d errors") {
  Tensor x = randn({1, 4, 3, 3}), w = randn({4, 2, 3, 3});
  CHECK_BRRR_ERROR(conv_transpose2d(randn({4, 3}), w), ErrorKind::shape, "conv_transpose2d", "[4, 3]");
  CHECK_BRRR_ERROR(conv_transpose2d(x, randn({3, 2, 3, 3})), ErrorKind::shape, "conv_transpose2d", "channels");
  CHECK_BRRR_ERROR(conv_transpose2d(x, w, randn({3})), ErrorKind::shape, "bias", "[2]");
  CHECK_BRRR_ERROR(conv_transpose2d(x, w.to(DType::f64)), ErrorKind::dtype, "conv_transpose2d");
  CHECK_BRRR_ERROR(conv_transpose2d(x, w, {}, {.output_padding = {1, 1}}), ErrorKind::value, "output_padding");
  CHECK_BRRR_ERROR(conv_transpose2d(x, w, {}, {.stride = {0, 1}}), ErrorKind::value, "stride");
  CHECK_BRRR_ERROR(conv_transpose2d(x, w, {}, {.padding = {3, 3}}), ErrorKind::shape, "non-positive");
  CHECK_BRRR_ERROR(conv1d(x, randn({2, 4, 3})), ErrorKind::shape, "conv1d");
  CHECK_BRRR_ERROR(conv1d(randn({1, 4, 5}), randn({2, 4, 3, 3})), ErrorKind::shape, "conv1d", "weight");
}
