// Autocast (AutocastGuard, PyTorch's op lists) on the CPU: the lower-precision ops return the
// autocast dtype and equal the same op on explicitly cast inputs bit for bit; the fp32 ops
// widen bf16/f16 inputs to f32 (not when a dtype is asked for); f64, integer and unlisted ops
// are left alone; gradients reach f32 parameters in f32 and equal the explicit-cast
// reference, whether backward runs inside the guard or not; the guard nests, is per thread
// and refuses f32; binary_cross_entropy is refused as in PyTorch; a small mixed-precision
// training loop learns.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <thread>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  std::vector<double> x = values(a), y = values(b);
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : values(t)) m = std::max(m, std::abs(v));
  return m;
}

}  // namespace

TEST_CASE("autocast: the state, nesting, threads and the dtype check") {
  CHECK_FALSE(autocast::is_enabled());
  {
    AutocastGuard on;
    CHECK(autocast::is_enabled());
    CHECK(autocast::dtype() == DType::bf16);
    {
      AutocastGuard off(DType::f16, false);
      CHECK_FALSE(autocast::is_enabled());
      CHECK(autocast::dtype() == DType::f16);
    }
    CHECK(autocast::is_enabled());
    CHECK(autocast::dtype() == DType::bf16);
    bool other_thread = true;
    std::thread t([&] { other_thread = autocast::is_enabled(); });
    t.join();
    CHECK_FALSE(other_thread);
  }
  CHECK_FALSE(autocast::is_enabled());
  CHECK_BRRR_ERROR(AutocastGuard(DType::f32), ErrorKind::dtype, "AutocastGuard", "bf16 or f16");
  CHECK_BRRR_ERROR(AutocastGuard(DType::i64), ErrorKind::dtype, "AutocastGuard");
  CHECK_FALSE(autocast::is_enabled());
}

TEST_CASE("autocast: lower-precision ops compute in the autocast dtype, as on cast inputs") {
  manual_seed(fresh_seed());
  Tensor a = randn({4, 8}), b = randn({8, 3}), bias = randn({3});
  Tensor w = randn({3, 8});
  Tensor ba = randn({2, 4, 8}), bb = randn({2, 8, 5}), bin = randn({2, 4, 5}), in = randn({4, 3});
  Tensor img = randn({2, 3, 6, 6}), kern = randn({4, 3, 3, 3}), kb = randn({4});
  Tensor q = randn({2, 2, 5, 4}), k = randn({2, 2, 5, 4}), v = randn({2, 2, 5, 4});
  Tensor mask = randn({5, 5});  // a float (additive) mask: cast with q, k, v
  for (DType low : {DType::bf16, DType::f16}) {
    INFO("autocast dtype ", to_string(low));
    auto c = [&](const Tensor& t) { return t.to(low); };
    // References first, outside the guard.
    Tensor r_mm = matmul(c(a), c(b)), r_lin = linear(c(a), c(w), c(bias)), r_bmm = bmm(c(ba), c(bb));
    Tensor r_addmm = addmm(c(in), c(a), c(b), 0.5, 2.0), r_baddbmm = baddbmm(c(bin), c(ba), c(bb));
    Tensor r_conv = conv2d(c(img), c(kern), c(kb), {.padding = {1, 1}});
    Tensor r_sdpa = scaled_dot_product_attention(c(q), c(k), c(v), {.is_causal = true});
    AutocastGuard guard(low);
    CHECK(same_values(matmul(a, b), r_mm));
    CHECK(same_values(mm(a, b), r_mm));
    CHECK(same_values(a.matmul(b), r_mm));
    CHECK(same_values(linear(a, w, bias), r_lin));
    CHECK(same_values(bmm(ba, bb), r_bmm));
    CHECK(same_values(addmm(in, a, b, 0.5, 2.0), r_addmm));
    CHECK(same_values(baddbmm(bin, ba, bb), r_baddbmm));
    CHECK(same_values(conv2d(img, kern, kb, {.padding = {1, 1}}), r_conv));
    CHECK(same_values(scaled_dot_product_attention(q, k, v, {.is_causal = true}), r_sdpa));
    {
      AutocastGuard off(low, false);
      r_sdpa = scaled_dot_product_attention(c(q), c(k), c(v), {.attn_mask = c(mask)});
    }
    CHECK(same_values(scaled_dot_product_attention(q, k, v, {.attn_mask = mask}), r_sdpa));
    // Inputs already in the autocast dtype pass as they are; f64 is not eligible.
    CHECK(same_values(matmul(c(a), c(b)), r_mm));
    CHECK(matmul(a.to(DType::f64), b.to(DType::f64)).dtype() == DType::f64);
    // Integer tensors are not eligible: matmul sees them as they are (and refuses them).
    Tensor ia = randint(-3, 4, {3, 3}), ib = randint(-3, 4, {3, 3});
    CHECK_BRRR_ERROR(matmul(ia, ib), ErrorKind::dtype, "matmul", "i64");
  }
}

TEST_CASE("autocast: fp32 ops widen bf16/f16 inputs, unless a dtype is asked for") {
  manual_seed(fresh_seed());
  Tensor x = randn({6, 10}).to(DType::bf16);
  Tensor xf = x.to(DType::f32);
  Tensor target = randint(0, 10, {6});
  Tensor weight = rand({10}), lw = randn({10}), lb = randn({10});
  Tensor r_soft = softmax(xf, 1), r_lsoft = log_softmax(xf, -1), r_sum = sum(xf), r_exp = exp(xf);
  Tensor r_pow = pow(xf, 2.0), r_ln = layer_norm(xf, {10}, lw, lb), r_ce = cross_entropy(xf, target);
  Tensor r_cew = cross_entropy(xf, target, {.weight = weight});
  Tensor r_cumsum = cumsum(xf, 1), r_lse = logsumexp(xf, {1}), r_mse = mse_loss(xf, flip(xf, {0}));
  AutocastGuard guard;
  CHECK(same_values(softmax(x, 1), r_soft));
  CHECK(same_values(log_softmax(x, -1), r_lsoft));
  CHECK(same_values(sum(x), r_sum));
  CHECK(same_values(x.sum(), r_sum));
  CHECK(same_values(exp(x), r_exp));
  CHECK(same_values(pow(x, 2.0), r_pow));
  CHECK(same_values(layer_norm(x, {10}, lw, lb), r_ln));
  CHECK(same_values(cross_entropy(x, target), r_ce));
  CHECK(same_values(cross_entropy(x, target, {.weight = weight.to(DType::bf16)}),
                    cross_entropy(xf, target, {.weight = weight.to(DType::bf16).to(DType::f32)})));
  CHECK(cross_entropy(x, target, {.weight = weight}).dtype() == DType::f32);
  (void)r_cew;
  CHECK(same_values(cumsum(x, 1), r_cumsum));
  CHECK(same_values(logsumexp(x, {1}), r_lse));
  CHECK(same_values(mse_loss(x, flip(x, {0})), r_mse));
  // An explicit dtype wins (PyTorch's fp32_set_opt_dtype policy).
  CHECK(sum(x, {}, false, DType::bf16).dtype() == DType::bf16);
  CHECK(softmax(x, 1, DType::f64).dtype() == DType::f64);
  // Ops on neither list run in their inputs' dtype; mixed dtypes promote as usual.
  CHECK(relu(x).dtype() == DType::bf16);
  CHECK(add(x, xf).dtype() == DType::f32);
  CHECK(mul(x, 2.0).dtype() == DType::bf16);
}

TEST_CASE("autocast: gradients reach f32 parameters in f32, equal to the explicit-cast reference") {
  manual_seed(fresh_seed());
  Tensor x = randn({5, 8});
  Tensor w0 = randn({4, 8}), b0 = randn({4}), lw0 = randn({4}), lb0 = randn({4});
  Tensor target = randint(0, 4, {5});
  auto leaves = [&] {
    std::vector<Tensor> p = {w0.clone(), b0.clone(), lw0.clone(), lb0.clone()};
    for (Tensor& t : p) t.requires_grad_(true);
    return p;
  };
  // Reference: the casts written out.
  std::vector<Tensor> ref = leaves();
  {
    const DType low = DType::bf16;
    Tensor h = linear(x.to(low), ref[0].to(low), ref[1].to(low));
    Tensor n = layer_norm(h.to(DType::f32), {4}, ref[2], ref[3]);
    Tensor loss = cross_entropy(n, target);
    loss.backward();
  }
  for (bool backward_inside : {false, true}) {
    INFO("backward inside the guard: ", backward_inside);
    std::vector<Tensor> p = leaves();
    Tensor loss;
    {
      AutocastGuard guard;
      Tensor h = linear(x, p[0], p[1]);
      CHECK(h.dtype() == DType::bf16);
      Tensor n = layer_norm(h, {4}, p[2], p[3]);
      CHECK(n.dtype() == DType::f32);
      loss = cross_entropy(n, target);
      CHECK(loss.dtype() == DType::f32);
      if (backward_inside) loss.backward();
    }
    if (!backward_inside) loss.backward();
    for (std::size_t i = 0; i < p.size(); ++i) {
      INFO("parameter ", i);
      REQUIRE(p[i].grad().defined());
      CHECK(p[i].grad().dtype() == DType::f32);
      if (i >= 2) {
        CHECK(same_values(p[i].grad(), ref[i].grad()));  // layer_norm's: the same f32 computation
      } else {
        // linear's come from f32 GEMMs of the bf16 operands, the reference's from bf16 GEMMs and
        // casts: within one bf16 rounding (2^-8 relative) at the gradient's scale.
        const double scale = max_abs(ref[i].grad());
        testing::assert_close(p[i].grad(), ref[i].grad(), {.rtol = 0x1p-8, .atol = 0x1p-8 * scale});
      }
    }
  }
}

TEST_CASE("autocast: linear gives f32 inputs' gradients straight from f32 GEMMs of the casts") {
  manual_seed(fresh_seed());
  const auto f32 = [](const Tensor& t) { return t.to(DType::f32); };
  for (DType low : {DType::bf16, DType::f16}) {
    for (bool with_bias : {true, false}) {
      for (bool low_input : {false, true}) {
        INFO(to_string(low), " bias ", with_bias, " input already ", to_string(low), " ", low_input);
        Tensor x = randn({3, 5, 8}, {.dtype = low_input ? low : DType::f32}).requires_grad_();
        Tensor w = randn({6, 8}).requires_grad_(), b = with_bias ? randn({6}).requires_grad_() : Tensor();
        Tensor r = randn({3, 5, 6}, {.dtype = low});
        Tensor h;
        {
          AutocastGuard guard(low);
          h = linear(x, w, b);
        }
        CHECK(h.dtype() == low);
        autograd::backward({h}, {r});
        // The expected values: the same products of the cast operands, summed in f32.
        Tensor xl = f32(x.detach().to(low)).reshape({15, 8}), wl = f32(w.detach().to(low)), rf = f32(r).reshape({15, 6});
        REQUIRE(x.grad().dtype() == x.dtype());
        REQUIRE(w.grad().dtype() == DType::f32);
        const testing::CloseOptions o{.rtol = 1e-5, .atol = 1e-5};
        if (low_input) {  // a bf16/f16 input's gradient is rounded to its dtype, as the unfused op's
          testing::assert_close(f32(x.grad()), f32(matmul(rf, wl).to(low)).reshape({3, 5, 8}),
                                {.rtol = low == DType::bf16 ? 0x1p-7 : 0x1p-10, .atol = 1e-3});
        } else {
          testing::assert_close(x.grad(), matmul(rf, wl).reshape({3, 5, 8}), o);
        }
        testing::assert_close(w.grad(), matmul(rf.t(), xl), o);
        if (with_bias) {
          REQUIRE(b.grad().dtype() == DType::f32);
          testing::assert_close(b.grad(), sum(rf, {0}), o);
        }
      }
    }
  }
}

TEST_CASE("autocast: linear's second derivatives flow through its casts (create_graph)") {
  manual_seed(fresh_seed());
  Tensor x0 = randn({4, 8}), w0 = randn({5, 8}), b0 = randn({5}), s = randn({4, 8});
  const DType low = DType::bf16;
  // d/dw of sum(dx * s) with dx = d sum(h r)/dx = r w_low: the fused node against explicit casts.
  Tensor r = randn({4, 5}, {.dtype = low});
  std::vector<Tensor> got, want;
  for (bool fused : {true, false}) {
    Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    Tensor h;
    if (fused) {
      AutocastGuard guard(low);
      h = linear(x, w, b);
    } else {
      h = linear(x.to(low), w.to(low), b.to(low));
    }
    Tensor dx = autograd::grad({h}, {x}, {r}, true, true)[0];
    CHECK(dx.dtype() == DType::f32);
    sum(mul(dx, s)).backward();
    REQUIRE(w.grad().defined());
    (fused ? got : want).push_back(w.grad());
  }
  const double scale = max_abs(want[0]);
  testing::assert_close(got[0], want[0], {.rtol = 0x1p-7, .atol = 0x1p-7 * scale});
}

TEST_CASE("autocast: binary_cross_entropy is refused, the logits form is not") {
  Tensor p = rand({4}), t = rand({4});
  AutocastGuard guard;
  CHECK_BRRR_ERROR(binary_cross_entropy(p, t), ErrorKind::dtype, "binary_cross_entropy", "autocast");
  CHECK(binary_cross_entropy_with_logits(p.to(DType::bf16), t).dtype() == DType::f32);
  AutocastGuard off(DType::bf16, false);
  CHECK(binary_cross_entropy(p, t).dtype() == DType::f32);
}

TEST_CASE("autocast: a small mixed-precision training loop learns, master weights stay f32") {
  manual_seed(fresh_seed());
  nn::Module model = nn::Sequential{nn::Linear(16, 32), nn::LayerNorm(Shape{32}), nn::GELU(),
                                    nn::Linear(32, 4)};
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  Tensor x = randn({64, 16});
  Tensor y = argmax(matmul(x, randn({16, 4})), 1);  // a learnable labelling
  std::vector<double> losses;
  for (int step = 0; step < 60; ++step) {
    Tensor loss;
    {
      AutocastGuard guard;
      loss = cross_entropy(model(x), y);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : model.parameters()) CHECK(p.dtype() == DType::f32);
  for (double l : losses) CHECK(std::isfinite(l));
  CHECK(losses.back() < 0.5 * losses.front());
}
