// Edge-case semantics (issue 9; docs/semantics.md) on cuda:0: the cases of
// tests/ops/edge_semantics_cases.hpp run on the GPU, each checking PyTorch 2.11's values
// (hand-computed or float64 references), and the random ones are compared with the same
// cases run on the CPU (same seed, same inputs): softmax/log_softmax with infinities on
// every row-kernel path (warp, register block, generic; widths up to 50257), empty means,
// all-ignored cross_entropy, var/std correction, kinks and ties (max with indices), where()
// NaN gradients, pool ceil_mode, embedding padding_idx with 768, 769 and more indices
// (atomic and deterministic backward), amsgrad. Also CUDA-only: an out-of-range embedding
// index is reported as Error(index) at the next sync point (not at the op, which neither
// throws nor waits), and the edge cases run under SyncPolicy::error. The device's cache is
// poisoned with NaN before each case. Without a CUDA device the suite exits 77 (skipped).
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

using test::gpu;
const Device cpu = Device::cpu();

/// Frees NaN-filled blocks of several size classes, so the caching allocator hands out
/// poisoned memory to the ops that follow (an output a kernel forgets to write shows).
void poison_cache() {
  std::vector<Tensor> blocks;
  for (std::int64_t n : {std::int64_t{128}, std::int64_t{4096}, std::int64_t{1} << 16, std::int64_t{1} << 20,
                         std::int64_t{1} << 22})
    for (int i = 0; i < 4; ++i)
      blocks.push_back(full({n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = DType::f32, .device = gpu()}));
}

/// The GPU's results against the CPU's for the same case: same names, shapes and dtypes;
/// NaN and infinities at the same places; finite values within `tol(dtype)`.
void compare(const edge::Results& got, const edge::Results& want, const std::function<edge::Tol(DType)>& tol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("result ", i, ": ", want[i].what);
    CHECK(got[i].what == want[i].what);
    CHECK(got[i].value.device() == gpu());
    CHECK(got[i].value.shape() == want[i].value.shape());
    CHECK(got[i].value.dtype() == want[i].value.dtype());
    edge::expect(got[i].value, values(want[i].value), tol(want[i].value.dtype()), "GPU vs CPU");
  }
}

/// With the dtype's tolerance times 5 (the CPU computes in double, CUDA in f32 for
/// f32/bf16/f16, and sums in another order).
void compare(const edge::Results& got, const edge::Results& want) {
  compare(got, want, [](DType d) {
    edge::Tol t = edge::tol_of(d);
    return edge::Tol{5 * t.rtol, 5 * t.atol};
  });
}

/// Restores set_deterministic on scope exit.
struct DeterministicGuard {
  bool previous = deterministic();
  explicit DeterministicGuard(bool on) { set_deterministic(on); }
  ~DeterministicGuard() { set_deterministic(previous); }
};

}  // namespace

TEST_SUITE("gpu edge semantics") {

// --- 1. softmax / log_softmax with infinities ----------------------------------------------

TEST_CASE("gpu edge: softmax/log_softmax infinities, the issue's values, every dtype, gradients") {
  poison_cache();
  edge::softmax_exact_values(gpu());
}

TEST_CASE("gpu edge: softmax rows with -inf at random positions on every row-kernel path vs float64 and CPU") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  // Warp per row (<= 1024), register block with 16-byte vectors (multiples of 16 / itemsize up
  // to 32768, 8192 for f64), generic block kernel (odd widths, wider rows).
  for (std::int64_t cols : {1, 5, 32, 33, 100, 512, 1000, 1024, 1025, 1028, 1032, 2048, 3000, 4100, 8192, 9000, 32768,
                            50257}) {
    for (DType dt : edge::float_dtypes) {
      poison_cache();
      const std::uint64_t s = seed + static_cast<std::uint64_t>(cols);
      compare(edge::softmax_random_rows(gpu(), dt, cols, s), edge::softmax_random_rows(cpu, dt, cols, s));
    }
  }
}

// --- 2. Empty means; cross_entropy with every target ignored ---------------------------------

TEST_CASE("gpu edge: mean of zero elements is NaN, sum 0 (every dtype, shape and dims)") {
  poison_cache();
  edge::empty_means_and_sums(gpu());
}

TEST_CASE("gpu edge: cross_entropy all ignored (NaN mean with zero gradient, 0 sum, zeros none); partly ignored") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  compare(edge::cross_entropy_ignored(gpu(), seed), edge::cross_entropy_ignored(cpu, seed));
}

// --- 3. var / std correction ----------------------------------------------------------------

TEST_CASE("gpu edge: var/std of one element, N - correction <= 0, fractional corrections, random inputs") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  edge::var_std_single_element(gpu());
  edge::var_std_degrees_of_freedom(gpu());
  compare(edge::var_std_random(gpu(), seed), edge::var_std_random(cpu, seed));
}

// --- 5. Gradients at kinks and ties ------------------------------------------------------------

TEST_CASE("gpu edge: gradients at kinks, NaN inputs and clamp bounds; ties split, max with indices to the index") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  edge::kinks_exact(gpu());
  compare(edge::ties_random(gpu(), seed), edge::ties_random(cpu, seed));
  compare(edge::kinks_random(gpu(), seed), edge::kinks_random(cpu, seed));
}

TEST_CASE("gpu edge: max along a dim with ties picks the first index in every reduce kernel path") {
  // Rows long enough for the split (chunked) reductions: ties at random places, the first
  // maximum somewhere in the middle; the gradient goes to that index only.
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (auto [rows, cols] : {std::array<std::int64_t, 2>{3, 300000}, std::array<std::int64_t, 2>{50, 5000},
                            std::array<std::int64_t, 2>{1000, 33}}) {
    for (std::int64_t dim : {1, 0}) {
      INFO("shape [", rows, ", ", cols, "], dim ", dim);
      poison_cache();
      V xv = random_ints(rng, static_cast<std::size_t>(rows * cols), 0, 5);
      Tensor xc = make(DType::f32, xv, {rows, cols});
      Tensor xg = xc.to(gpu());
      xg.requires_grad_();
      ValuesIndices got = max(xg, dim);
      ValuesIndices want = max(xc, dim);
      CHECK(values(got.indices) == values(want.indices));
      edge::expect(got.values, values(want.values), edge::exact, "values");
      got.values.sum().backward();
      V grad = values(xg.grad());
      double total = 0;
      for (double g : grad) total += g;
      CHECK(total == static_cast<double>(dim == 1 ? rows : cols));  // one 1 per output, nothing split
      Tensor xcl = xc.clone();
      xcl.requires_grad_();
      max(xcl, dim).values.sum().backward();
      CHECK(grad == values(xcl.grad()));
    }
  }
}

// --- 6. where() -------------------------------------------------------------------------------

TEST_CASE("gpu edge: where() gradient is NaN where the untaken branch's derivative is; masking the input") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  compare(edge::where_nan(gpu(), seed), edge::where_nan(cpu, seed));
}

// --- 7. Pools: padding and ceil_mode --------------------------------------------------------------

TEST_CASE("gpu edge: pool ceil_mode sizes and values (the issue's three, then many configurations)") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  edge::pool_ceil_exact(gpu());
  for (DType dt : edge::float_dtypes) {
    poison_cache();
    compare(edge::pool_ceil_random(gpu(), dt, seed), edge::pool_ceil_random(cpu, dt, seed));
  }
}

// --- 8. embedding: padding_idx, out-of-range indices -------------------------------------------

TEST_CASE("gpu edge: embedding padding_idx, the issue's example on CUDA") {
  poison_cache();
  edge::embedding_padding_exact(gpu());
}

TEST_CASE("gpu edge: embedding padding_idx with 768, 769 and more indices, duplicates, atomic and deterministic") {
  // PyTorch's CUDA embedding backward changes algorithm above 768 indices; brrr's has one
  // atomic and one sorted (deterministic) path: both must give the float64 reference, and
  // the deterministic one the CPU's sums to the bit.
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  for (std::int64_t n : {768, 769, 1000, 5000}) {
    for (DType dt : {DType::f32, DType::f64}) {
      for (bool det : {false, true}) {
        INFO("n ", n, ", deterministic ", det);
        DeterministicGuard guard(det);
        poison_cache();
        const std::uint64_t s = seed + static_cast<std::uint64_t>(n);
        edge::Results got = edge::embedding_padding_random(gpu(), dt, n, s);
        edge::Results want = edge::embedding_padding_random(cpu, dt, n, s);
        // Atomic sums of up to ~0.15 n values of size 1 in another order: the absolute
        // error grows like sqrt(n) (cancelling sums make a relative bound useless).
        compare(got, want, [n](DType d) {
          return d == DType::f64 ? edge::Tol{1e-12, 1e-11} : edge::Tol{2e-5, 2e-5 * std::sqrt(static_cast<double>(n))};
        });
        if (det)
          for (std::size_t i = 0; i < got.size(); ++i) CHECK(values(got[i].value) == values(want[i].value));
      }
    }
  }
}

TEST_CASE("gpu edge: an out-of-range embedding index is Error(index) at the next sync point, not at the op") {
  Tensor w = randn({40, 8}, {.device = gpu(), .requires_grad = true});
  for (double bad : {40.0, -1.0, 1000.0}) {
    for (DType it : {DType::i64, DType::i32}) {
      INFO("bad index ", bad, ", ", edge::name_of(it));
      // 1000 indices (above PyTorch's 768 threshold), one of them bad, with padding_idx.
      V iv(1000);
      for (std::size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<double>(i % 40);
      iv[517] = bad;
      Tensor idx = make(it, iv, {1000}).to(gpu());
      cuda::synchronize();
      const std::uint64_t syncs = cuda::sync_count();
      Tensor out;
      {
        cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);  // the op must not wait for the device
        CHECK_NOTHROW(out = embedding(w, idx, 0));
      }
      CHECK(cuda::sync_count() == syncs);
      CHECK(out.shape() == Shape{1000, 8});
      // The next host-blocking call reports it, naming the op and the device.
      CHECK_BRRR_ERROR(out.to_host<float>(), ErrorKind::index, "embedding", "cuda:0", "out of range");
      // Reported once: the flag is cleared, the next sync point is clean.
      CHECK_NOTHROW(cuda::synchronize());
      // The backward of a bad lookup is reported the same way (at cuda::synchronize here).
      Tensor y = embedding(w, idx);
      CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "embedding");
      y.sum().backward();
      CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "embedding");
      CHECK_NOTHROW((void)w.grad().to_host<float>());
      w.set_grad(Tensor());
    }
  }
}

// --- 9. Adam / AdamW amsgrad ----------------------------------------------------------------------

TEST_CASE("gpu edge: amsgrad exact three steps and several settings vs PyTorch's algorithm and the CPU") {
  const std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  poison_cache();
  edge::amsgrad_exact(gpu());
  compare(edge::amsgrad_random(gpu(), seed), edge::amsgrad_random(cpu, seed));
}

// --- no host sync ---------------------------------------------------------------------------------

TEST_CASE("gpu edge: the edge cases compute and differentiate without a host sync (SyncPolicy::error)") {
  Tensor logits = randn({6, 5}, {.device = gpu(), .requires_grad = true});
  Tensor ignored = full({6}, -100.0, {.dtype = DType::i64, .device = gpu()});
  Tensor x = randn({4, 1, 3}, {.device = gpu(), .requires_grad = true});
  Tensor w = randn({10, 4}, {.device = gpu(), .requires_grad = true});
  Tensor idx = randint(0, 10, {900}, {.device = gpu()});
  Tensor rows = full({2, 3}, -std::numeric_limits<double>::infinity(), {.device = gpu()});
  cuda::synchronize();
  const std::uint64_t syncs = cuda::sync_count();
  Tensor ce, v, s, e, p;
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    ce = cross_entropy(logits, ignored);  // NaN, found on the device
    ce.backward();
    v = var(x, {1});  // one element per output: NaN
    v.sum().backward();
    s = softmax(rows, 1);
    e = embedding(w, idx, 3);
    e.sum().backward();
    p = max_pool2d(x.detach().view({1, 4, 1, 3}), {.kernel_size = {1, 1},
                                                   .stride = std::array<std::int64_t, 2>{2, 2},
                                                   .ceil_mode = true});
  }
  CHECK(cuda::sync_count() == syncs);
  CHECK(std::isnan(ce.item<float>()));
  edge::expect(logits.grad(), V(30, 0.0), edge::exact, "all-ignored gradient");
  edge::expect(v, V(12, edge::nan_v), edge::exact, "var of one element");
  edge::expect(x.grad(), V(12, edge::nan_v), edge::exact, "its gradient");
  edge::expect(s, V(6, edge::nan_v), edge::exact, "softmax of -inf rows");
  edge::expect(values(w.grad().select(0, 3)), V(4, 0.0), edge::exact, "padding row");
  CHECK(p.shape() == Shape{1, 4, 1, 2});
}

}  // TEST_SUITE
