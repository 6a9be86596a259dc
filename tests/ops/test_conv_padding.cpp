// conv2d / conv1d on the CPU kernel path (ops/conv_gemm.cpp): against PyTorch fixtures
// (make_conv_fixtures.py: stride, dilation, groups, depthwise, 1x1, padding "same" with odd,
// even and dilated kernels, "valid", nn.Conv2d/Conv1d padding modes), also on non-contiguous
// inputs and in f32; several chunks of samples against one sample at a time; gradients
// (first and second order, the second through create_graph's recorded path) against central
// differences; conv_transpose2d's kernel path; the modules' options and the errors.
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

const char* file = "conv2d.safetensors";

// The same values in a non-row-major layout (W and H exchanged in memory).
Tensor strided(const Tensor& t) { return t.dim() >= 3 ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t; }

// make_conv_fixtures.py's CONV2D, in order.
const std::vector<std::pair<std::string, Conv2dOptions>> conv2d_cases = {
    {"basic", {.stride = 1, .padding = 1}},
    {"stride_dilation", {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}}},
    {"groups", {.stride = 2, .padding = 1, .dilation = {1, 2}, .groups = 2}},
    {"depthwise", {.padding = {0, 1}, .groups = 4}},
    {"kernel_1x1", {}},
    {"same_3x3", {.padding = "same"}},
    {"same_even_4x2", {.padding = "same"}},
    {"same_dilated", {.padding = "same", .dilation = {2, 3}}},
    {"same_groups", {.padding = "same", .groups = 2}},
    {"valid", {.padding = "valid"}},
};

// MODES_2D: each mode with three geometries.
std::vector<Conv2dOptions> mode_cases() {
  std::vector<Conv2dOptions> r;
  for (const char* mode : {"zeros", "reflect", "replicate", "circular"}) {
    r.push_back({.padding = {1, 2}, .padding_mode = mode});
    r.push_back({.padding = "same", .padding_mode = mode});
    r.push_back({.stride = 2, .padding = {2, 1}, .dilation = {1, 2}, .padding_mode = mode});
  }
  return r;
}

// CONV1D.
const std::vector<std::pair<std::string, Conv1dOptions>> conv1d_cases = {
    {"same", {.padding = "same"}},
    {"same_dilated", {.padding = "same", .dilation = 2}},
    {"valid", {.stride = 2, .padding = "valid"}},
    {"reflect", {.padding = 2, .padding_mode = "reflect"}},
    {"replicate_same", {.padding = "same", .padding_mode = "replicate"}},
    {"circular", {.stride = 2, .padding = 3, .groups = 2, .padding_mode = "circular"}},
};

Tensor bias_of(const std::vector<Tensor>& in) { return in.size() > 2 ? in[2] : Tensor(); }

}  // namespace

TEST_CASE("conv2d matches PyTorch: groups, dilation, stride, padding same/valid (f64, f32, strided inputs)") {
  for (const auto& [name, o] : conv2d_cases) {
    INFO("case ", name);
    auto f = [o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], bias_of(in), o); };
    auto f_strided = [o](const std::vector<Tensor>& in) {
      return conv2d(strided(in[0]), strided(in[1]), bias_of(in), o);
    };
    replay(file, "conv2d_" + name, f);
    replay(file, "conv2d_" + name, f_strided);
    replay(file, "conv2d_" + name, f, DType::f32, Device::cpu(), {.rtol = 1e-4, .atol = 1e-4});
  }
  replay(file, "conv2d_unbatched_same",
         [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {.padding = "same"}); });
}

TEST_CASE("conv2d padding_mode zeros / reflect / replicate / circular matches nn.Conv2d") {
  const std::vector<Conv2dOptions> cases = mode_cases();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    INFO("case ", i, ": padding_mode ", cases[i].padding_mode);
    const Conv2dOptions o = cases[i];
    replay(file, "conv2d_mode_" + std::to_string(i),
           [o](const std::vector<Tensor>& in) { return conv2d(strided(in[0]), in[1], in[2], o); });
  }
}

TEST_CASE("conv1d padding same/valid and padding modes match nn.Conv1d") {
  for (const auto& [name, o] : conv1d_cases) {
    INFO("case ", name);
    auto f = [o](const std::vector<Tensor>& in) { return conv1d(in[0], in[1], in[2], o); };
    replay(file, "conv1d_" + name, f);
    replay(file, "conv1d_" + name, f, DType::f32, Device::cpu(), {.rtol = 1e-4, .atol = 1e-4});
  }
}

TEST_CASE("conv2d over several chunks of samples equals one sample at a time (forward and gradients)") {
  FRESH_SEED();
  // 64 x 64 positions of 12 x 3 x 3 rows: ~442K column elements per sample, two samples per
  // chunk of 2^20, so five samples make three chunks (the last one short).
  for (std::int64_t groups : {1, 3}) {
    INFO("groups ", groups);
    Tensor x = randn({5, 12, 64, 64}, {.dtype = DType::f64, .requires_grad = true});
    Tensor w = randn({6, 12 / groups, 3, 3}, {.dtype = DType::f64, .requires_grad = true});
    Tensor b = randn({6}, {.dtype = DType::f64, .requires_grad = true});
    const Conv2dOptions o{.stride = {1, 2}, .padding = "valid", .groups = groups};
    Tensor y = conv2d(x, w, b, o);
    Tensor up = randn(y.shape(), {.dtype = DType::f64});
    autograd::backward({y}, {up});
    Tensor gw_sum = zeros(w.shape(), {.dtype = DType::f64}), gb_sum = zeros({6}, {.dtype = DType::f64});
    for (std::int64_t n = 0; n < 5; ++n) {
      Tensor xn = x.detach().narrow(0, n, 1).clone().requires_grad_();
      Tensor wn = w.detach().clone().requires_grad_(), bn = b.detach().clone().requires_grad_();
      Tensor yn = conv2d(xn, wn, bn, o);
      autograd::backward({yn}, {up.narrow(0, n, 1)});
      testing::assert_close(y.detach().narrow(0, n, 1), yn.detach(), {.rtol = 1e-12, .atol = 1e-12});
      testing::assert_close(x.grad().narrow(0, n, 1), xn.grad(), {.rtol = 1e-12, .atol = 1e-12});
      gw_sum = gw_sum + wn.grad();
      gb_sum = gb_sum + bn.grad();
    }
    testing::assert_close(w.grad(), gw_sum, {.rtol = 1e-10, .atol = 1e-10});
    testing::assert_close(b.grad(), gb_sum, {.rtol = 1e-10, .atol = 1e-10});
  }
}

TEST_CASE("conv2d / conv1d / conv_transpose2d kernel paths: gradcheck, first and second order") {
  FRESH_SEED();
  auto x = [](Shape s) { return randn(std::move(s), {.dtype = DType::f64}); };
  // Groups with asymmetric "same" padding, a reflect-padded stride, and conv1d circular.
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {.padding = "same", .groups = 2}); },
      {x({2, 4, 5, 4}), x({4, 2, 2, 3}), x({4})}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], in[2], {.stride = 2, .padding = {1, 2}, .dilation = {2, 1}, .padding_mode = "reflect"});
      },
      {x({2, 3, 6, 5}), x({2, 3, 2, 2}), x({2})}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return conv1d(in[0], in[1], {}, {.padding = "same", .dilation = 2, .padding_mode = "circular"});
      },
      {x({2, 3, 8}), x({2, 3, 4})}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return conv_transpose2d(in[0], in[1], in[2],
                                {.stride = {2, 1}, .padding = {1, 0}, .output_padding = {1, 0}, .groups = 2});
      },
      {x({2, 4, 3, 3}), x({4, 1, 3, 2}), x({2})}));
  // Second order: the gradients under create_graph are recorded ops (unfold/fold + matmul).
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        GradModeGuard grad_mode(true);  // gradcheck's finite differences run under no_grad
        Tensor y = conv2d(in[0], in[1], {}, {.padding = "same", .groups = 2});
        auto g = autograd::grad({(y * y).sum()}, {in[0], in[1]}, {}, true, true);
        return cat({g[0].flatten(), g[1].flatten()});
      },
      {x({1, 4, 4, 3}), x({2, 2, 2, 2})}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        GradModeGuard grad_mode(true);
        Tensor y = conv_transpose2d(in[0], in[1], {}, {.stride = {2, 2}, .padding = {1, 1}});
        auto g = autograd::grad({(y * y).sum()}, {in[0], in[1]}, {}, true, true);
        return cat({g[0].flatten(), g[1].flatten()});
      },
      {x({1, 2, 3, 3}), x({2, 3, 3, 3})}));
}

TEST_CASE("conv2d kernel path: bf16/f16 close to f32, empty batch, zero-size and 1x1 outputs") {
  FRESH_SEED();
  Tensor x = randn({3, 4, 6, 6}), w = randn({5, 4, 3, 3}), b = randn({5});
  Tensor want = conv2d(x, w, b, {.padding = "same"});
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    Tensor got = conv2d(x.to(dt), w.to(dt), b.to(dt), {.padding = "same"});
    CHECK(got.dtype() == dt);
    testing::assert_close(got.to(DType::f32), want, {.rtol = 5e-2, .atol = 2e-1});
  }
  Tensor e = conv2d(randn({0, 4, 6, 6}), w, b);
  CHECK(e.shape() == Shape{0, 5, 4, 4});
  Tensor xe = randn({2, 4, 3, 3}, {.requires_grad = true});
  Tensor we = randn({5, 4, 3, 3}, {.requires_grad = true});
  Tensor y = conv2d(xe, we, {}, {.padding = "valid"});
  CHECK(y.shape() == Shape{2, 5, 1, 1});
  y.sum().backward();
  Tensor gx = xe.grad();
  // Each input cell's gradient is the sum of the weights that read it: the whole kernel.
  testing::assert_close(gx.narrow(0, 0, 1), we.detach().sum(0, true), {.rtol = 1e-5, .atol = 1e-5});
  testing::assert_close(we.grad(), xe.detach().sum(0, true).expand({5, 4, 3, 3}), {.rtol = 1e-5, .atol = 1e-5});
}

TEST_CASE("nn::Conv2d / nn::Conv1d padding options: forward, printing") {
  manual_seed(4);
  nn::Conv2d c(3, 4, 3, {.padding = "same", .padding_mode = "reflect"});
  Tensor x = randn({2, 3, 5, 6});
  Tensor y = c(x);
  CHECK(y.shape() == Shape{2, 4, 5, 6});
  testing::assert_close(y, conv2d(pad(x, {1, 1, 1, 1}, "reflect"), c.weight(), c.bias()));
  CHECK(c.to_string() == "Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=same, padding_mode=reflect)");
  nn::Conv1d c1(2, 3, 4, {.padding = "valid", .padding_mode = "circular"});
  CHECK(c1(randn({1, 2, 9})).shape() == Shape{1, 3, 6});
  CHECK(c1.to_string() == "Conv1d(2, 3, kernel_size=(4,), stride=(1,), padding=valid, padding_mode=circular)");
  CHECK(nn::Conv2d(3, 4, 3, {.padding = 1}).to_string() == "Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
}

TEST_CASE("conv padding errors name the op") {
  Tensor x = randn({1, 3, 5, 5}), w = randn({2, 3, 3, 3});
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.stride = 2, .padding = "same"}), ErrorKind::value, "conv2d", "same", "stride");
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.padding = 1, .padding_mode = "mirror"}), ErrorKind::value, "conv2d", "mirror");
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.padding = 5, .padding_mode = "reflect"}), ErrorKind::value, "conv2d", "reflect");
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.padding = -1}), ErrorKind::value, "conv2d", "padding");
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.padding = "full"}), ErrorKind::value, "padding", "full");
  CHECK_BRRR_ERROR(conv1d(randn({1, 3, 8}), randn({2, 3, 3}), {}, {.stride = 2, .padding = "same"}), ErrorKind::value,
                   "conv1d", "same");
  CHECK_BRRR_ERROR(conv1d(randn({1, 3, 8}), randn({2, 3, 3}), {}, {.padding_mode = "wrap"}), ErrorKind::value, "conv1d",
                   "wrap");
  CHECK_BRRR_ERROR(nn::Conv2d(3, 4, 3, {.stride = 2, .padding = "same"}), ErrorKind::value, "Conv2d", "same");
  CHECK_BRRR_ERROR(nn::Conv2d(3, 4, 3, {.padding_mode = "mirror"}), ErrorKind::value, "Conv2d", "mirror");
  CHECK_BRRR_ERROR(nn::Conv1d(3, 4, 3, {.stride = 3, .padding = "same"}), ErrorKind::value, "Conv1d", "same");
}

TEST_CASE("Linear and Conv2d weight gradients arrive contiguous and are stored without a copy") {
  manual_seed(5);
  nn::Linear fc(6, 4);
  nn::Conv2d conv(3, 4, 3, {.padding = "same"});
  for (const Tensor& w : {fc.weight(), conv.weight()}) {
    const void* seen = nullptr;
    auto handle = w.register_hook([&seen](const Tensor& g) {
      seen = g.data_ptr();
      return Tensor();
    });
    Tensor y = w.dim() == 2 ? fc(randn({3, 6})) : conv(randn({2, 3, 5, 5}));
    y.sum().backward();
    REQUIRE(w.grad().defined());
    CHECK(w.grad().is_contiguous());
    CHECK(w.grad().data_ptr() == seen);  // AccumulateGrad kept the tensor that arrived
  }
}
