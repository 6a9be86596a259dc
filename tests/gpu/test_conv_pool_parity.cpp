// conv2d, unfold/fold, max_pool2d / avg_pool2d / adaptive_avg_pool2d on the GPU against the
// CPU backend: forward and backward (input, weight, bias gradients) over stride, padding,
// dilation, groups, bias, non-square kernels, unbatched and non-contiguous inputs, ceil_mode
// and count_include_pad; f32 and f64 (bf16 conv2d forward with a loose tolerance); a small
// CNN (conv-relu-maxpool-conv-relu-avgpool) forward + backward under SyncPolicy::error;
// conv2d / conv1d with padding "same" / "valid" and every padding_mode.
// Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

using A2 = std::array<std::int64_t, 2>;

using test::gpu;

testing::CloseOptions tol(DType d) { return test::close_options(test::Computed::conv_parity, d); }

Tensor cpu_randn(Shape shape, DType dtype) { return randn(std::move(shape), {.dtype = DType::f64}).to(dtype); }

// A fresh leaf requiring grad with t's values on `dev`.
Tensor leaf(const Tensor& t, Device dev) { return t.detach().to(dev).clone().requires_grad_(); }

// Runs f on CPU and GPU copies of `inputs` (leaves), backpropagates the same random upstream
// gradient, and compares the outputs and every input's gradient.
void parity(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
            DType dtype) {
  std::vector<Tensor> cin, gin;
  for (const Tensor& t : inputs) {
    cin.push_back(leaf(t, Device::cpu()));
    gin.push_back(leaf(t, gpu()));
  }
  Tensor yc = f(cin), yg = f(gin);
  REQUIRE(yg.device() == gpu());
  CHECK(yg.dtype() == dtype);
  CHECK_NOTHROW(testing::assert_close(yg, yc, tol(dtype)));
  Tensor up = cpu_randn(yc.shape(), dtype);
  sum(mul(yc, up)).backward();
  sum(mul(yg, up.to(gpu()))).backward();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO("gradient of input ", i);
    REQUIRE(gin[i].grad().defined());
    CHECK(gin[i].grad().device() == gpu());
    CHECK_NOTHROW(testing::assert_close(gin[i].grad(), cin[i].grad(), tol(dtype)));
  }
}

struct ConvCase {
  std::int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
};

const std::vector<ConvCase> conv_cases = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},   {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},
    {1, 2, 9, 8, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},   {2, 2, 9, 9, 2, 3, 3, 1, 1, 2, 2, 2, 2, 1, true},
    {1, 4, 8, 7, 4, 3, 2, 2, 1, 1, 0, 1, 1, 2, true},   {2, 4, 6, 6, 8, 1, 3, 1, 2, 0, 1, 1, 1, 4, false},
    {1, 4, 10, 9, 4, 2, 3, 2, 2, 2, 1, 2, 1, 4, true},  {3, 6, 5, 5, 6, 5, 1, 1, 1, 2, 0, 1, 1, 2, false},
    {2, 3, 5, 11, 5, 2, 5, 3, 2, 0, 2, 1, 2, 1, true},  {4, 16, 20, 20, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
};

}  // namespace

TEST_CASE("conv2d parity: forward and backward (f32, f64)") {
  manual_seed(21);
  for (const ConvCase& k : conv_cases)
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(to_string(dt), " c=", k.c, " h=", k.h, " w=", k.w, " o=", k.o, " k=", k.kh, "x", k.kw, " s=", k.sh, ",",
           k.sw, " p=", k.ph, ",", k.pw, " d=", k.dh, ",", k.dw, " groups=", k.groups);
      Conv2dOptions opt{.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}, .dilation = {k.dh, k.dw}, .groups = k.groups};
      Tensor x = cpu_randn({k.n, k.c, k.h, k.w}, dt), w = cpu_randn({k.o, k.c / k.groups, k.kh, k.kw}, dt);
      if (k.bias)
        parity([opt](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], opt); },
               {x, w, cpu_randn({k.o}, dt)}, dt);
      else
        parity([opt](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], {}, opt); }, {x, w}, dt);
      // unbatched and non-contiguous (channels-last storage permuted back) inputs
      parity([opt](const std::vector<Tensor>& in) { return conv2d(in[0].select(0, 0), in[1], {}, opt); }, {x, w}, dt);
      parity([opt](const std::vector<Tensor>& in) { return conv2d(in[0].permute({0, 3, 1, 2}), in[1], {}, opt); },
             {x.permute({0, 2, 3, 1}).contiguous(), w}, dt);
    }
}

TEST_CASE("conv2d / conv1d parity: padding same / valid and padding_mode (f32, f64)") {
  manual_seed(23);
  const std::vector<Conv2dOptions> opts = {
      {.padding = "same"},                                     // odd kernel
      {.padding = "same", .dilation = {2, 1}},                 // asymmetric after dilation
      {.stride = 2, .padding = "valid"},
      {.padding = {1, 2}, .padding_mode = "reflect"},
      {.padding = "same", .padding_mode = "replicate"},
      {.stride = 2, .padding = {2, 1}, .dilation = {1, 2}, .padding_mode = "circular"},
      {.padding = "same", .groups = 2, .padding_mode = "zeros"},
  };
  for (DType dt : {DType::f32, DType::f64})
    for (std::size_t i = 0; i < opts.size(); ++i) {
      INFO(to_string(dt), " case ", i);
      const Conv2dOptions o = opts[i];
      // 4x3 kernels: even height, so "same" is asymmetric (1 row before, 2 after).
      Tensor x = cpu_randn({2, 4, 7, 6}, dt), w = cpu_randn({6, 4 / o.groups, 4, 3}, dt), b = cpu_randn({6}, dt);
      parity([o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); }, {x, w, b}, dt);
      parity([o](const std::vector<Tensor>& in) { return conv2d(in[0].transpose(2, 3), in[1], {}, o); },
             {x.transpose(2, 3).contiguous(), w}, dt);
    }
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = cpu_randn({2, 4, 9}, dt), w = cpu_randn({3, 4, 4}, dt), b = cpu_randn({3}, dt);
    for (const char* mode : {"zeros", "reflect", "replicate", "circular"}) {
      INFO(to_string(dt), " conv1d ", mode);
      const std::string m = mode;
      parity([m](const std::vector<Tensor>& in) {
        return conv1d(in[0], in[1], in[2], {.padding = "same", .dilation = 2, .padding_mode = m});
      }, {x, w, b}, dt);
    }
  }
}

TEST_CASE("conv2d parity: bf16 forward (loose tolerance)") {
  manual_seed(22);
  for (const ConvCase& k : conv_cases) {
    INFO("c=", k.c, " o=", k.o, " groups=", k.groups);
    Conv2dOptions opt{.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}, .dilation = {k.dh, k.dw}, .groups = k.groups};
    Tensor x = cpu_randn({k.n, k.c, k.h, k.w}, DType::bf16), w = cpu_randn({k.o, k.c / k.groups, k.kh, k.kw}, DType::bf16);
    Tensor b = cpu_randn({k.o}, DType::bf16);
    Tensor want = conv2d(x.to(DType::f64), w.to(DType::f64), b.to(DType::f64), opt);
    Tensor got = conv2d(x.to(gpu()), w.to(gpu()), b.to(gpu()), opt);
    CHECK(got.dtype() == DType::bf16);
    double scale = std::sqrt(static_cast<double>(k.c / k.groups * k.kh * k.kw));
    CHECK_NOTHROW(testing::assert_close(got, want, {.rtol = 2e-2, .atol = 1e-2 * scale}));
  }
}

TEST_CASE("unfold / fold parity: forward and backward") {
  manual_seed(23);
  struct G {
    A2 k, d, p, s;
  };
  for (G g : {G{{2, 2}, {1, 1}, {0, 0}, {1, 1}}, G{{3, 3}, {1, 1}, {1, 1}, {2, 2}}, G{{2, 3}, {2, 1}, {1, 2}, {1, 2}},
              G{{3, 2}, {1, 2}, {2, 0}, {3, 1}}})
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(to_string(dt), " k=", g.k[0], "x", g.k[1]);
      Tensor x = cpu_randn({2, 3, 7, 6}, dt);
      parity([g](const std::vector<Tensor>& in) { return unfold(in[0], g.k, g.d, g.p, g.s); }, {x}, dt);
      parity([g](const std::vector<Tensor>& in) { return unfold(in[0].transpose(2, 3), g.k, g.d, g.p, g.s); }, {x}, dt);
      Tensor cols = unfold(x, g.k, g.d, g.p, g.s);
      Tensor y = cpu_randn(cols.shape(), dt);
      parity([g](const std::vector<Tensor>& in) { return fold(in[0], {7, 6}, g.k, g.d, g.p, g.s); }, {y}, dt);
      Tensor yt = cpu_randn({cols.size(0), cols.size(2), cols.size(1)}, dt);
      parity([g](const std::vector<Tensor>& in) { return fold(in[0].transpose(1, 2), {7, 6}, g.k, g.d, g.p, g.s); },
             {yt}, dt);
    }
}

TEST_CASE("pool parity: max_pool2d, avg_pool2d, adaptive_avg_pool2d forward and backward") {
  manual_seed(24);
  struct P {
    std::int64_t h, w;
    A2 k, s, p, d;
    bool ceil, include_pad;
  };
  for (P c : {P{6, 6, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true}, P{7, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
              P{6, 7, {1, 1}, {2, 2}, {0, 0}, {1, 1}, true, true}, P{5, 5, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true, true},
              P{5, 5, {4, 4}, {2, 2}, {1, 1}, {1, 1}, true, false}, P{32, 32, {1, 1}, {2, 2}, {0, 0}, {1, 1}, true, true},
              P{9, 10, {3, 3}, {2, 2}, {1, 1}, {2, 2}, false, true}, P{9, 10, {2, 3}, {2, 1}, {1, 1}, {3, 2}, true, true}})
    for (DType dt : {DType::f32, DType::f64}) {
      INFO(to_string(dt), " ", c.h, "x", c.w, " k=", c.k[0], "x", c.k[1], " ceil=", c.ceil);
      Pool2dOptions o{.kernel_size = c.k, .stride = c.s, .padding = c.p, .dilation = c.d, .ceil_mode = c.ceil,
                      .count_include_pad = c.include_pad};
      Tensor x = cpu_randn({2, 3, c.h, c.w}, dt);  // continuous values: no ties
      parity([o](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); }, {x}, dt);
      parity([o](const std::vector<Tensor>& in) { return max_pool2d(in[0].select(0, 1), o); }, {x}, dt);
      if (c.d == A2{1, 1}) {
        parity([o](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); }, {x}, dt);
        Pool2dOptions o2 = o;
        o2.count_include_pad = !o.count_include_pad;
        parity([o2](const std::vector<Tensor>& in) { return avg_pool2d(in[0].transpose(2, 3), o2); }, {x}, dt);
      }
    }
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = cpu_randn({2, 3, 8, 8}, dt), x2 = cpu_randn({2, 3, 7, 5}, dt);
    parity([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {4, 4}); }, {x}, dt);
    parity([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {3, 2}); }, {x2}, dt);
    parity([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {1, 1}); }, {x2}, dt);
  }
}

TEST_CASE("small CNN forward + backward under SyncPolicy::error matches the CPU") {
  manual_seed(25);
  const DType dt = DType::f32;
  Tensor x = cpu_randn({4, 3, 16, 16}, dt);
  Tensor w1 = cpu_randn({8, 3, 3, 3}, dt) * 0.3, b1 = cpu_randn({8}, dt) * 0.1;
  Tensor w2 = cpu_randn({16, 4, 3, 3}, dt) * 0.2, b2 = cpu_randn({16}, dt) * 0.1;
  auto step = [&](Device dev, bool guarded, std::uint64_t& syncs) {
    Tensor xx = leaf(x, dev), a = leaf(w1, dev), ab = leaf(b1, dev), c = leaf(w2, dev), cb = leaf(b2, dev);
    Tensor loss;
    {
      cuda::SyncPolicyGuard guard(guarded ? cuda::SyncPolicy::error : cuda::sync_policy());
      const std::uint64_t before = cuda::sync_count();
      Tensor h = relu(conv2d(xx, a, ab, {.padding = {1, 1}}));                              // [4, 8, 16, 16]
      h = max_pool2d(h, {.kernel_size = {2, 2}});                                           // [4, 8, 8, 8]
      h = relu(conv2d(h, c, cb, {.stride = {1, 1}, .padding = {1, 1}, .groups = 2}));       // [4, 16, 8, 8]
      h = avg_pool2d(h, {.kernel_size = {3, 3}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = true,
                         .count_include_pad = false});                                       // [4, 16, 4, 4]
      h = adaptive_avg_pool2d(h, {1, 1});
      loss = mean(mul(h, h));
      loss.backward();
      syncs = cuda::sync_count() - before;
    }
    return std::vector<Tensor>{loss, xx.grad(), a.grad(), ab.grad(), c.grad(), cb.grad()};
  };
  std::uint64_t syncs = 0, unused = 0;
  std::vector<Tensor> g;
  CHECK_NOTHROW(g = step(gpu(), true, syncs));
  CHECK(syncs == 0);
  auto c_ = step(Device::cpu(), false, unused);
  REQUIRE(g.size() == c_.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("result ", i);
    REQUIRE(g[i].defined());
    CHECK_NOTHROW(testing::assert_close(g[i], c_[i], {.rtol = 1e-4, .atol = 1e-5}));
  }
}
