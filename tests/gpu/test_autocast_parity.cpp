// Autocast on CUDA against autocast on the CPU: the lower-precision ops (matmul, linear, bmm,
// conv2d, the fused attention) and the fp32 ops (softmax, layer_norm, cross_entropy) give the
// same dtypes on both devices and values within the bf16/f16 rounding of the output (the
// GEMMs accumulate in f32 on both: cuBLAS COMPUTE_32F, the CPU's widened GEMM); the gradients
// of f32 leaves through a mixed-precision block are f32 and agree within the low dtype's
// rounding at the gradient's scale. Without a CUDA device the
// suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

// The output's dtype decides: two units in the last place of bf16/f16 at the output's scale,
// f32 results (after an f32 op on bf16 products) a little looser than f32's own.
testing::CloseOptions tol(DType d) {
  switch (d) {
    case DType::bf16: return {.rtol = 1.6e-2, .atol = 1e-2};
    case DType::f16: return {.rtol = 2e-3, .atol = 1e-3};
    default: return {.rtol = 1e-2, .atol = 1e-3};
  }
}

// f under autocast, on the CPU leaves and on their GPU copies, for both dtypes: the outputs
// within tol(), then the f32 gradients of sum(out * r). A gradient element is a sum of
// products rounded to bf16/f16 at points that differ between the backends (the CPU's chunked
// weight-gradient GEMMs, the fused attention's P and dS tiles), so its error scales with the
// gradient's magnitude rather than the element's: atol is two units of the low dtype's
// rounding at the largest reference gradient.
// `scaled`: the output's and the gradients' atol is also the attention row's (tests/tolerances.hpp)
// times the largest |expected|, for the fused attention, whose P and dS tiles are rounded to the
// low dtype before their products (as PyTorch's flash kernel does) while the CPU composite keeps
// them in f32.
template <class F>
void autocast_parity(const std::string& what, F&& f, const std::vector<Tensor>& in, bool scaled = false) {
  for (DType low : {DType::bf16, DType::f16}) {
    const std::string name = what + " under autocast " + to_string(low);
    std::vector<Tensor> c, g;
    for (const Tensor& t : in) {
      c.push_back(t.detach().requires_grad_());
      g.push_back(t.detach().to(gpu()).requires_grad_());
    }
    Tensor oc, og;
    {
      AutocastGuard guard(low);
      oc = f(c);
      og = f(g);
    }
    testing::CloseOptions out_tol = tol(oc.dtype());
    if (scaled) {
      double scale = 0;
      for (float v : oc.to(DType::f32).to_host<float>()) scale = std::max(scale, std::abs(double(v)));
      out_tol.atol = std::max(*out_tol.atol, tolerance(Computed::attention, low).atol * scale);
    }
    check_parity(og, oc, name, out_tol);
    Tensor r = randn(oc.shape(), {.dtype = oc.dtype()});
    autograd::backward({oc}, {r});
    autograd::backward({og}, {r.to(gpu())});
    const double unit = low == DType::bf16 ? 0x1p-8 : 0x1p-11;
    for (std::size_t i = 0; i < c.size(); ++i) {
      REQUIRE(c[i].grad().defined());
      double scale = 0;
      for (float v : c[i].grad().to(DType::f32).to_host<float>()) scale = std::max(scale, std::abs(double(v)));
      testing::CloseOptions o = tol(low);
      o.atol = std::max(*o.atol, 2 * unit * scale);
      if (scaled) o.atol = std::max(*o.atol, tolerance(Computed::attention, low).atol * scale);  // dS rounded too
      check_parity(g[i].grad(), c[i].grad(), name + " grad " + std::to_string(i), o);
    }
  }
}

}  // namespace

TEST_CASE("autocast on CUDA equals autocast on the CPU: lower-precision ops") {
  manual_seed(2024);
  autocast_parity("matmul", [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                  {randn({33, 70}), randn({70, 17})});
  autocast_parity("linear", [](const std::vector<Tensor>& x) { return linear(x[0], x[1], x[2]); },
                  {randn({8, 5, 64}), randn({96, 64}), randn({96})});
  autocast_parity("bmm", [](const std::vector<Tensor>& x) { return bmm(x[0], x[1]); },
                  {randn({3, 9, 40}), randn({3, 40, 11})});
  autocast_parity("conv2d",
                  [](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}}); },
                  {randn({2, 3, 9, 9}), randn({6, 3, 3, 3}), randn({6})});
  autocast_parity("scaled_dot_product_attention (fused on CUDA)",
                  [](const std::vector<Tensor>& x) {
                    return scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true});
                  },
                  {randn({2, 3, 40, 32}), randn({2, 3, 40, 32}), randn({2, 3, 40, 32})}, true);
}

TEST_CASE("autocast on CUDA equals autocast on the CPU: fp32 ops and a mixed block") {
  manual_seed(2025);
  Tensor target = randint(0, 12, {10});
  autocast_parity("softmax of a bf16 input", [](const std::vector<Tensor>& x) { return softmax(x[0].to(DType::bf16), 1); },
                  {randn({10, 12})});
  autocast_parity(
      "linear -> layer_norm -> cross_entropy",
      [&](const std::vector<Tensor>& x) {
        Tensor h = linear(x[0], x[1], x[2]);
        Tensor n = layer_norm(h, {12}, x[3], x[4]);
        return cross_entropy(n, target.to(x[0].device()));
      },
      {randn({10, 20}), randn({12, 20}), randn({12}), randn({12}), randn({12})});
  // The dtypes are the CPU's on CUDA too.
  AutocastGuard guard;
  Tensor a = randn({4, 4}, {.device = gpu()});
  CHECK(matmul(a, a).dtype() == DType::bf16);
  CHECK(softmax(matmul(a, a), 1).dtype() == DType::f32);
  CHECK(layer_norm(matmul(a, a), {4}).dtype() == DType::f32);
}

TEST_CASE("f32 with bf16/f16 on CUDA: one kernel per op, the CPU's bits, every layout path") {
  manual_seed(2026);
  for (DType low : {DType::bf16, DType::f16}) {
    Tensor f = randn({9, 136});
    // vector path (contiguous), row path (a broadcast row; a broadcast column), strided (a
    // transposed view), and rows that start unaligned (a slice one element in)
    const Tensor others[] = {randn({9, 136}, {.dtype = low}), randn({1, 136}, {.dtype = low}),
                             randn({9, 1}, {.dtype = low}), randn({136, 9}, {.dtype = low}).t(),
                             randn({9, 137}, {.dtype = low}).narrow(1, 1, 136)};
    for (const Tensor& h : others) {
      for (int op = 0; op < 4; ++op) {
        const auto run = [op](const Tensor& a, const Tensor& b) {
          switch (op) {
            case 0: return add(a, b);
            case 1: return sub(a, b);
            case 2: return mul(a, b);
            default: return div(a, b);
          }
        };
        const std::string name = "op " + std::to_string(op) + " f32 with " + to_string(low);
        Tensor fg = f.to(gpu()), hg = h.to(gpu());
        check_parity(run(fg, hg), run(f, h), name, {.rtol = 0, .atol = 0});
        check_parity(run(hg, fg), run(h, f), name + " (low first)", {.rtol = 0, .atol = 0});
      }
    }
  }
}
