// Edge-case semantics that match PyTorch 2.11 (issue 9; docs/semantics.md), on the CPU:
// softmax/log_softmax with infinities, empty means and all-ignored cross_entropy, var/std
// correction, gradients at kinks and ties, where() with NaN in the branch not taken, pool
// ceil_mode, embedding padding_idx and out-of-range indices, Adam/AdamW amsgrad. The cases
// live in tests/ops/edge_semantics_cases.hpp and run on CUDA too
// (tests/gpu/test_edge_semantics_parity.cpp); this file adds the CPU-only checks: central
// differences away from the kinks and the immediate index errors. Random inputs use a fresh
// seed per run, printed on failure.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/edge_semantics_cases.hpp"

using namespace brrr;
using namespace test;
using edge::V;

namespace {

const Device cpu = Device::cpu();

using In = std::vector<Tensor>;

}  // namespace

TEST_SUITE("edge semantics") {

// --- 1. softmax / log_softmax with infinities ----------------------------------------------

TEST_CASE("softmax/log_softmax infinities: the issue's values, every dtype, along dim 0 too, gradients") {
  edge::softmax_exact_values(cpu);
}

TEST_CASE("softmax/log_softmax: rows with -inf at random positions vs float64, widths 1 to 4100, every dtype") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  for (std::int64_t cols : {1, 2, 7, 32, 33, 100, 1000, 1024, 1025, 2048, 3000, 4100})
    for (DType dt : edge::float_dtypes) (void)edge::softmax_random_rows(cpu, dt, cols, seed + static_cast<std::uint64_t>(cols));
}

// --- 2. Empty means; cross_entropy with every target ignored ---------------------------------

TEST_CASE("mean of zero elements is NaN and sum is 0, every dtype and shape; mse_loss of nothing") {
  edge::empty_means_and_sums(cpu);
  CHECK_BRRR_ERROR(mean(zeros({0}, {.dtype = DType::i64})), ErrorKind::dtype, "mean", "i64");
}

TEST_CASE("cross_entropy with every target ignored: mean NaN with zero gradient, sum 0, none zeros") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::cross_entropy_ignored(cpu, seed);
}

// --- 3. var / std correction ----------------------------------------------------------------

TEST_CASE("var/std of one element: NaN with correction 1, 0 with correction 0, and PyTorch's gradients") {
  edge::var_std_single_element(cpu);
}

TEST_CASE("std of a constant slice: value 0 and gradient 0 (PyTorch's std_backward), not NaN") {
  for (DType dt : {DType::f64, DType::f32}) {
    INFO("dtype ", to_string(dt));
    Tensor x = Tensor::from_vector(std::vector<double>{2, 2, 2, 1, 2, 3}, {2, 3}).to(dt).requires_grad_();
    Tensor s = brrr::std(x, {1});
    sum(s).backward();
    V g = x.grad().to(DType::f64).to_host<double>();
    CHECK(g[0] == 0.0);
    CHECK(g[1] == 0.0);
    CHECK(g[2] == 0.0);
    CHECK(g[3] == doctest::Approx(-0.5));  // d std / dx = (x - mean) / ((N - 1) std) = -1 / 2
    CHECK(g[5] == doctest::Approx(0.5));
  }
}

TEST_CASE("var/std with N - correction <= 0 (inf or NaN), fractional and negative corrections") {
  edge::var_std_degrees_of_freedom(cpu);
}

TEST_CASE("var/std: random inputs, dims and corrections vs float64 values and gradients; gradcheck") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::var_std_random(cpu, seed);
  std::mt19937_64 rng(seed);
  Tensor x = Tensor::from_vector(edge::normal(rng, 24), {4, 6});
  for (double correction : {0.0, 1.0, 2.5, -1.0}) {
    INFO("correction ", correction);
    CHECK(autograd::gradcheck([=](const In& v) { return var(v[0], {}, correction); }, {x}));
    CHECK(autograd::gradcheck([=](const In& v) { return var(v[0], {1}, correction, true); }, {x}));
    CHECK(autograd::gradcheck([=](const In& v) { return brrr::std(v[0], {0}, correction); }, {x}));
  }
  // Second derivative through create_graph: d2/dx2 sum(x - mean)^2 / dof = (2 / dof) (I - 1/N).
  Tensor xs = Tensor::from_vector(V{1, 2, 4}, {3});
  xs.requires_grad_();
  Tensor g = autograd::grad({var(xs, {}, 0.5)}, {xs}, {}, false, true)[0];
  Tensor h = autograd::grad({g.select(0, 0)}, {xs})[0];
  edge::expect(h, {2.0 / 2.5 * (1 - 1.0 / 3), -2.0 / 2.5 / 3, -2.0 / 2.5 / 3}, {1e-12, 1e-12}, "var''");
}

// --- 5. Gradients at kinks and ties ------------------------------------------------------------

TEST_CASE("gradients at kinks: relu, abs, maximum(x, 0), clamp_min, clamp at its bounds; NaN inputs; ties") {
  edge::kinks_exact(cpu);
}

TEST_CASE("ties on random integer inputs: amax/amin/max()/min() split evenly, max/min(dim) to the index") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::ties_random(cpu, seed);
}

TEST_CASE("kinks on random inputs: exact values at the kinks, central differences away from them") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::kinks_random(cpu, seed);
  // Away from every kink (|x - kink| >= 0.05), the rules agree with finite differences.
  std::mt19937_64 rng(seed);
  V xv = edge::normal(rng, 30, 2.0), yv = edge::normal(rng, 30, 2.0);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    for (double k : {0.0, -0.5, 0.5, 6.0})
      if (std::abs(xv[i] - k) < 0.05) xv[i] = k + 0.1;
    if (std::abs(xv[i] - yv[i]) < 0.05) yv[i] = xv[i] + 0.1;
  }
  Tensor x = Tensor::from_vector(xv, {5, 6}), y = Tensor::from_vector(yv, {5, 6});
  CHECK(autograd::gradcheck([](const In& v) { return relu(v[0]); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return abs(v[0]); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return clamp(v[0], -0.5, 0.5); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return clamp_min(v[0], 0.0); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return clamp(v[0], 0.0, 6.0); }, {x}));
  CHECK(autograd::gradcheck([](const In& v) { return maximum(v[0], v[1]); }, {x, y}));
  CHECK(autograd::gradcheck([](const In& v) { return minimum(v[0], v[1]); }, {x, y}));
  // Distinct values 0.5 apart (a shuffled ramp): no ties, so max/amax and max(dim) are
  // differentiable there too.
  V ramp = iota(30);
  std::shuffle(ramp.begin(), ramp.end(), rng);
  for (auto& v : ramp) v = 0.5 * v - 7.0;
  Tensor z = Tensor::from_vector(ramp, {5, 6});
  CHECK(autograd::gradcheck([](const In& v) { return amax(v[0], {1}); }, {z}));
  CHECK(autograd::gradcheck([](const In& v) { return max(v[0], 0).values; }, {z}));
  CHECK(autograd::gradcheck([](const In& v) { return min(v[0], 1).values; }, {z}));
  CHECK(autograd::gradcheck([](const In& v) { return max(v[0]); }, {z}));
}

// --- 6. where() -------------------------------------------------------------------------------

TEST_CASE("where keeps NaN from the branch not taken in the gradient (PyTorch); masking the input avoids it") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::where_nan(cpu, seed);
}

// --- 7. Pools: padding and ceil_mode --------------------------------------------------------------

TEST_CASE("pool ceil_mode: 6x7 -> 3x4, 32x32 -> 16x16, 5x5 k2 s2 p1 -> 3x3 with values, every dtype") {
  edge::pool_ceil_exact(cpu);
}

TEST_CASE("pool output sizes follow PyTorch's formula for many sizes/kernels/strides/paddings; no -inf") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) (void)edge::pool_ceil_random(cpu, dt, seed);
}

TEST_CASE("max_pool2d: a dilated window that misses every real cell gives -inf, as PyTorch's kernel") {
  // H = W = 4, kernel 2, dilation 5, padding 1 (allowed: 2p <= kernel): one window, rows and
  // columns -1 and 4, all padding. brrr passes its gradient to no input cell.
  Tensor x = edge::leaf(DType::f32, iota(16), {1, 1, 4, 4}, cpu);
  Tensor y = max_pool2d(x, {.kernel_size = {2, 2},
                            .stride = std::array<std::int64_t, 2>{1, 1},
                            .padding = {1, 1},
                            .dilation = {5, 5}});
  CHECK(y.shape() == Shape{1, 1, 1, 1});
  edge::expect(y, {-edge::inf}, edge::exact, "a window of padding only");
  y.sum().backward();
  edge::expect(x.grad(), V(16, 0.0), edge::exact, "no input cell gets its gradient");
}

// --- 8. embedding: padding_idx, out-of-range indices -------------------------------------------

TEST_CASE("embedding padding_idx: Embedding(3, 2, padding_idx 0) on [0, 1, 0, 2] -> [[0, 0], [1, 1], [1, 1]]") {
  edge::embedding_padding_exact(cpu);
}

TEST_CASE("embedding padding_idx: random indices with duplicates (768, 769 and more) vs float64") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  for (std::int64_t n : {1, 768, 769, 3000})
    for (DType dt : {DType::f32, DType::f64}) (void)edge::embedding_padding_random(cpu, dt, n, seed + static_cast<std::uint64_t>(n));
}

TEST_CASE("embedding: an index outside [0, V) is Error(index) at the call on the CPU, forward and backward") {
  Tensor w = randn({4, 3}, {.requires_grad = true});
  for (DType it : {DType::i64, DType::i32}) {
    CHECK_BRRR_ERROR(embedding(w, make(it, {0, 4, 1}, {3})), ErrorKind::index, "embedding", "index 4", "size 4");
    CHECK_BRRR_ERROR(embedding(w, make(it, {-1}, {1})), ErrorKind::index, "embedding", "index -1");
    CHECK_BRRR_ERROR(embedding(w, make(it, {100, 0}, {1, 2}), 0), ErrorKind::index, "embedding", "index 100");
  }
  CHECK_BRRR_ERROR(embedding(w, make(DType::i64, {0}, {1}), 4), ErrorKind::index, "embedding", "padding_idx 4");
  CHECK_BRRR_ERROR(embedding(w, make(DType::i64, {0}, {1}), -5), ErrorKind::index, "embedding", "padding_idx -5");
  CHECK_BRRR_ERROR(embedding(w, make(DType::f32, {0}, {1})), ErrorKind::dtype, "embedding", "f32");
  // In range: fine, including the last row and a negative padding_idx.
  CHECK_NOTHROW((void)embedding(w, make(DType::i64, {3, 0}, {2}), -1));
}

// --- 9. Adam / AdamW amsgrad ----------------------------------------------------------------------

TEST_CASE("amsgrad: p = 0, lr = 1, eps = 0, gradients 1, 0, 0 -> -1, -1.669723, -2.187162 (Adam and AdamW)") {
  edge::amsgrad_exact(cpu);
}

TEST_CASE("Adam/AdamW with and without amsgrad: several settings vs PyTorch's algorithm in float64") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  (void)edge::amsgrad_random(cpu, seed);
}

}  // TEST_SUITE
