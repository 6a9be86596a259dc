// Indexing ops on cuda:0 against the CPU on the same random inputs: gather, scatter_add
// (atomic and deterministic), index_select, embedding (padding_idx, 1000 indices with many
// duplicates, deterministic on and off: two deterministic runs are bit-identical and equal
// the CPU's sequential sums), one_hot, masked_fill, tril/triu, dropout (the same seed gives
// the same mask on both devices); backward parity; the deferred device error of an
// out-of-range index (the op neither throws nor syncs; the next sync point throws
// Error(index) naming the op); a forward + backward of embedding + dropout under
// SyncPolicy::error. Outputs are poisoned first (a NaN-filled block freed just before the op
// is what the caching allocator hands out next). Without a CUDA device the suite exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;
using Idx = std::vector<std::int64_t>;

using test::gpu;

Idx random_index(std::mt19937_64& rng, std::int64_t n, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  Idx v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

Tensor index_tensor(const Idx& v, const Shape& shape, DType dtype = DType::i64) {
  V d(v.begin(), v.end());
  return make(dtype, d, shape);
}

/// Frees a NaN-filled (or all-ones for integers) block of `bytes` on the GPU, so the next
/// allocation of that size class gets poisoned memory.
void poison(std::size_t bytes) {
  std::int64_t n = static_cast<std::int64_t>(bytes / 4 + 1);
  Tensor p = full({n}, std::numeric_limits<double>::quiet_NaN(), {.dtype = DType::f32, .device = gpu()});
}

Tensor random_of(DType dt, const Shape& s) {
  if (dt == DType::boolean) return lt(rand(s), 0.5);
  if (!is_floating_point(dt)) return randint(-30, 30, s, {.dtype = dt});
  return randn(s, {.dtype = dt});
}

testing::CloseOptions sum_tolerance(DType dt) { return test::close_options(test::Computed::scatter, dt); }

/// Bitwise equality of two tensors' values (read back as their own dtype).
bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  switch (a.dtype()) {
    case DType::f32: return a.to_host<float>() == b.to_host<float>();
    case DType::f64: return a.to_host<double>() == b.to_host<double>();
    case DType::bf16: {
      auto x = a.to_host<bfloat16>(), y = b.to_host<bfloat16>();
      for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i].bits != y[i].bits) return false;
      return true;
    }
    case DType::f16: {
      auto x = a.to_host<half>(), y = b.to_host<half>();
      for (std::size_t i = 0; i < x.size(); ++i)
        if (x[i].bits != y[i].bits) return false;
      return true;
    }
    case DType::i32: return a.to_host<std::int32_t>() == b.to_host<std::int32_t>();
    case DType::i64: return a.to_host<std::int64_t>() == b.to_host<std::int64_t>();
    case DType::boolean: return a.to_host<bool>() == b.to_host<bool>();
  }
  return false;
}

/// Restores set_deterministic on scope exit.
struct DeterministicGuard {
  bool previous = deterministic();
  explicit DeterministicGuard(bool on) { set_deterministic(on); }
  ~DeterministicGuard() { set_deterministic(previous); }
};

struct GatherCase {
  Shape x, index;
  std::int64_t dim;
};

const GatherCase cases[] = {
    {{4, 5}, {3, 5}, 0},        {{4, 5}, {4, 7}, 1},        {{2, 3, 4}, {2, 5, 4}, 1},
    {{2, 3, 4}, {1, 2, 6}, -1}, {{300, 70}, {900, 70}, 0},  {{3, 1, 2, 2}, {2, 1, 2, 5}, -1},
    {{1000}, {4099}, 0},
};

std::size_t wrap(std::int64_t dim, std::size_t nd) {
  return static_cast<std::size_t>(dim < 0 ? dim + static_cast<std::int64_t>(nd) : dim);
}

}  // namespace

TEST_CASE("gpu index: gather parity, every dtype, contiguous and strided operands") {
  std::mt19937_64 rng(101);
  manual_seed(101);
  for (const auto& c : cases) {
    std::size_t d = wrap(c.dim, c.x.size());
    Tensor index = index_tensor(random_index(rng, numel_of(c.index), 0, c.x[d] - 1), c.index);
    for (DType dt : all_dtypes) {
      CAPTURE(to_string(c.x));
      CAPTURE(dt);
      Tensor x = random_of(dt, c.x);
      Tensor want = gather(x, c.dim, index);
      poison(want.nbytes());
      check_parity(gather(x.to(gpu()), c.dim, index.to(gpu())), want, "gather");
    }
  }
  // transposed input and index, expanded index
  Tensor x = randn({5, 4}).t();
  Tensor index = index_tensor(random_index(rng, 15, 0, 3), {5, 3}).t();
  check_parity(gather(x.to(gpu()), 0, index.to(gpu())), gather(x, 0, index), "gather strided");
  Tensor xs = randn({6, 8}).to(gpu()).slice(1, 1, 8, 2);
  Tensor ie = index_tensor({3, 0, 2}, {1, 3}).to(gpu()).expand({6, 3});
  check_parity(gather(xs, 1, ie), gather(xs.to(Device::cpu()), 1, ie.to(Device::cpu())), "gather stride 0");
}

TEST_CASE("gpu index: scatter_add parity, atomic and deterministic; deterministic f32 equals the CPU bit for bit") {
  std::mt19937_64 rng(102);
  manual_seed(102);
  for (const auto& c : cases) {
    std::size_t d = wrap(c.dim, c.x.size());
    Tensor index = index_tensor(random_index(rng, numel_of(c.index), 0, c.x[d] - 1), c.index);
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
      Tensor x = random_of(dt, c.x), src = random_of(dt, c.index);
      Tensor want = scatter_add(x, c.dim, index, src);
      Tensor xg = x.to(gpu()), ig = index.to(gpu()), sg = src.to(gpu());
      for (bool det : {false, true}) {
        CAPTURE(to_string(c.x));
        CAPTURE(dt);
        CAPTURE(det);
        DeterministicGuard guard(det);
        Tensor got = scatter_add(xg, c.dim, ig, sg);
        check_parity(got, want, "scatter_add", sum_tolerance(dt));
        // The sorted path adds in the CPU's order with the CPU's rounding.
        if (det) CHECK(bit_equal(got, want));
      }
    }
  }
}

TEST_CASE("gpu index: scatter_add with src larger than index, non-contiguous operands, backward") {
  std::mt19937_64 rng(103);
  manual_seed(103);
  // x [7, 5] and src [9, 10] transposed views; index [4, 8] (transposed) along dim 1, so src
  // is larger than the index in both dims.
  Tensor xc = randn({5, 7}).t();
  Tensor sc = randn({10, 9}).t();
  Tensor ic = index_tensor(random_index(rng, 32, 0, 4), {8, 4}).t();
  for (bool det : {false, true}) {
    DeterministicGuard guard(det);
    Tensor x = xc.clone(), s = sc.clone();
    x.requires_grad_(true);
    s.requires_grad_(true);
    Tensor xg = xc.t().to(gpu()).t(), sg = sc.t().to(gpu()).t();  // strided on the GPU too
    xg.requires_grad_(true);
    sg.requires_grad_(true);
    Tensor g = randn({7, 5});
    scatter_add(x, 1, ic, s).backward(g);
    Tensor yg = scatter_add(xg, 1, ic.to(gpu()), sg);
    check_parity(yg, scatter_add(xc, 1, ic, sc), "scatter_add forward", sum_tolerance(DType::f32));
    yg.backward(g.to(gpu()));
    check_parity(xg.grad(), x.grad(), "scatter_add d/dx");
    check_parity(sg.grad(), s.grad(), "scatter_add d/dsrc");
  }
}

TEST_CASE("gpu index: index_select and one_hot parity (i32 and i64), backward of index_select") {
  std::mt19937_64 rng(104);
  manual_seed(104);
  Tensor x = randn({6, 7, 5});
  for (std::int64_t dim : {0, 1, -1}) {
    for (DType it : {DType::i32, DType::i64}) {
      for (bool det : {false, true}) {
        CAPTURE(dim);
        CAPTURE(it);
        CAPTURE(det);
        DeterministicGuard guard(det);
        std::size_t d = wrap(dim, 3);
        Tensor idx = index_tensor(random_index(rng, 13, 0, x.size(static_cast<std::int64_t>(d)) - 1), {13}, it);
        Tensor xc = x.clone(), xg = x.to(gpu());
        xc.requires_grad_(true);
        xg.requires_grad_(true);
        Tensor yc = index_select(xc, dim, idx), yg = index_select(xg, dim, idx.to(gpu()));
        check_parity(yg, yc, "index_select");
        Tensor g = randn(yc.shape());
        yc.backward(g);
        yg.backward(g.to(gpu()));
        check_parity(xg.grad(), xc.grad(), "index_select backward", sum_tolerance(DType::f32));
        if (det) CHECK(bit_equal(xg.grad(), xc.grad()));
      }
    }
  }
  for (DType it : {DType::i32, DType::i64}) {
    Tensor idx = index_tensor(random_index(rng, 24, 0, 9), {4, 6}, it);
    check_parity(one_hot(idx.to(gpu()), 10), one_hot(idx, 10), "one_hot");
    check_parity(one_hot(idx.t().to(gpu()), 12), one_hot(idx.t(), 12), "one_hot strided");
  }
}

TEST_CASE("gpu index: whole-row gathers (index_select along dim 0, embedding) bit for bit, every dtype and width") {
  // The row path copies 16-byte words where every row start is aligned (widths 4, 384 in f32),
  // else words of the element size (widths 3, 33), with fewer lanes a row for narrow rows;
  // width 1 stays on the general kernel (the expanded index's size-1 dim keeps stride 1). A
  // sliced input has rows apart by more than their width, or a base off the 16-byte boundary.
  std::mt19937_64 rng(110);
  manual_seed(110);
  for (DType dt : all_dtypes) {
    for (std::int64_t width : {1, 3, 4, 33, 384}) {
      CAPTURE(dt);
      CAPTURE(width);
      Tensor x = random_of(dt, {37, width});
      Tensor idx = index_tensor(random_index(rng, 301, 0, 36), {301});
      Tensor want = index_select(x, 0, idx);
      poison(want.nbytes());
      Tensor got = index_select(x.to(gpu()), 0, idx.to(gpu()));
      CHECK(bit_equal(got, want));
      const auto sliced = [&](std::int64_t start, std::int64_t len) {
        Tensor xs = x.to(gpu()).narrow(1, start, len);
        Tensor want_s = index_select(xs.to(Device::cpu()), 0, idx);
        poison(want_s.nbytes());
        CHECK(bit_equal(index_select(xs, 0, idx.to(gpu())), want_s));
      };
      sliced(width > 1 ? 1 : 0, width > 1 ? width - 1 : 1);  // rows apart by more than their width
      if (width >= 8) {
        sliced(0, width - 4);  // aligned rows of width - 4, apart by width: 16-byte words for f32
        sliced(2, width - 4);  // the same rows from a base 2 elements in: not 16-byte aligned in f32
      }
      if (is_floating_point(dt)) {
        Tensor ids = index_tensor(random_index(rng, 60, 0, 36), {3, 20}, DType::i32);
        Tensor want_e = embedding(x, ids);
        poison(want_e.nbytes());
        CHECK(bit_equal(embedding(x.to(gpu()), ids.to(gpu())), want_e));
      }
    }
  }
}

TEST_CASE("gpu index: embedding padding_idx example on CUDA") {
  Tensor w = randn({3, 2}, {.device = gpu(), .requires_grad = true});
  Tensor out = embedding(w, index_tensor({0, 1, 0, 2}, {4}).to(gpu()), 0);
  out.sum().backward();
  CHECK(values(w.grad()) == V{0, 0, 1, 1, 1, 1});
}

TEST_CASE("gpu index: embedding with 1000 indices and many duplicates, deterministic off and on") {
  std::mt19937_64 rng(105);
  manual_seed(105);
  const std::int64_t vocab = 50, dimw = 33, n = 1000;
  Tensor wc = randn({vocab, dimw});
  for (DType it : {DType::i64, DType::i32}) {
    Tensor idx = index_tensor(random_index(rng, n, 0, vocab - 1), {20, n / 20}, it);
    Tensor g = randn({20, n / 20, dimw});
    for (std::optional<std::int64_t> pad : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{7}}) {
      Tensor w = wc.clone();
      w.requires_grad_(true);
      Tensor yc = embedding(w, idx, pad);
      yc.backward(g);
      Tensor want = w.grad();
      for (bool det : {false, true}) {
        CAPTURE(it);
        CAPTURE(det);
        CAPTURE(pad.has_value());
        DeterministicGuard guard(det);
        Tensor run[2];
        for (auto& r : run) {
          Tensor wg = wc.to(gpu());
          wg.requires_grad_(true);
          Tensor yg = embedding(wg, idx.to(gpu()), pad);
          check_parity(yg, yc, "embedding forward");
          yg.backward(g.to(gpu()));
          r = wg.grad();
        }
        check_parity(run[0], want, "embedding backward", sum_tolerance(DType::f32));
        if (det) {
          CHECK(bit_equal(run[0], run[1]));  // reproducible to the bit
          CHECK(bit_equal(run[0], want));    // and in the CPU's order
        }
        if (pad) CHECK(values(run[0].select(0, *pad)) == V(static_cast<std::size_t>(dimw), 0.0));
      }
    }
  }
}

TEST_CASE("gpu index: deterministic scatter of 2^20 sources into few rows matches the CPU") {
  std::mt19937_64 rng(106);
  manual_seed(106);
  const std::int64_t n = std::int64_t{1} << 20;
  Tensor idx = index_tensor(random_index(rng, n, 0, 9), {n});
  Tensor src = randn({n, 4});
  Tensor ie = idx.unsqueeze(1).expand({n, 4});
  Tensor want = scatter_add(zeros({10, 4}), 0, ie, src);
  DeterministicGuard guard(true);
  Tensor a = scatter_add(zeros({10, 4}, {.device = gpu()}), 0, ie.to(gpu()), src.to(gpu()));
  Tensor b = scatter_add(zeros({10, 4}, {.device = gpu()}), 0, ie.to(gpu()), src.to(gpu()));
  CHECK(bit_equal(a, b));
  CHECK(bit_equal(a, want));
}

TEST_CASE("gpu index: masked_fill and tril/triu parity, forward and backward") {
  manual_seed(107);
  Tensor x = randn({3, 5, 6});
  Tensor mask = lt(rand({5, 1}), 0.5);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::boolean}) {
    Tensor xd = random_of(dt, {3, 5, 6});
    check_parity(masked_fill(xd.to(gpu()), mask.to(gpu()), -3.0), masked_fill(xd, mask, -3.0), "masked_fill");
    for (std::int64_t k : {-2, 0, 3}) {
      check_parity(tril(xd.to(gpu()), k), tril(xd, k), "tril");
      check_parity(triu(xd.transpose(1, 2).to(gpu()), k), triu(xd.transpose(1, 2), k), "triu strided");
    }
  }
  Tensor xc = x.clone(), xg = x.to(gpu());
  xc.requires_grad_(true);
  xg.requires_grad_(true);
  Tensor g = randn({3, 5, 6});
  (masked_fill(xc, mask, 2.0) + tril(xc, 1) * 2.0 + triu(xc, -1) * 3.0).backward(g);
  (masked_fill(xg, mask.to(gpu()), 2.0) + tril(xg, 1) * 2.0 + triu(xg, -1) * 3.0).backward(g.to(gpu()));
  check_parity(xg.grad(), xc.grad(), "masked_fill/tril/triu backward");
}

TEST_CASE("gpu index: dropout mask identical on CPU and GPU for the same seed; backward parity") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (double p : {0.1, 0.5, 0.8}) {
      CAPTURE(dt);
      CAPTURE(p);
      manual_seed(900);
      Tensor x = add(rand({257, 31}, {.dtype = dt}), 0.5);
      Tensor xc = x.clone(), xg = x.to(gpu());
      xc.requires_grad_(true);
      xg.requires_grad_(true);
      manual_seed(31337);
      Tensor yc = dropout(xc, p);
      manual_seed(31337);
      Tensor yg = dropout(xg, p);
      CHECK(bit_equal(yg, yc));
      Tensor g = randn({257, 31}, {.dtype = dt});
      yc.backward(g);
      yg.backward(g.to(gpu()));
      CHECK(bit_equal(xg.grad(), xc.grad()));
    }
  }
  Tensor x = randn({4}, {.device = gpu()});
  CHECK(dropout(x, 0.0).is_same(x));
  CHECK(dropout(x, 0.5, false).is_same(x));
  CHECK(values(dropout(x, 1.0)) == V(4, 0.0));
}

TEST_CASE("gpu index: an out-of-range index is a deferred device error (no sync at the op)") {
  // Needs check_device_errors() after the host-blocking waits of cuda/runtime.cpp.
  Tensor w = randn({5, 3}, {.device = gpu()});
  Tensor bad = index_tensor({1, 10, 2}, {3}).to(gpu());
  cuda::synchronize();
  std::uint64_t syncs = cuda::sync_count();
  Tensor out;
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    CHECK_NOTHROW(out = embedding(w, bad));  // enqueued; no throw, no sync
  }
  CHECK(cuda::sync_count() == syncs);
  CHECK(out.shape() == Shape{3, 3});
  CHECK_BRRR_ERROR(out.to_host<float>(), ErrorKind::index, "embedding", "cuda:0", "out of range");
  // The flag was cleared: the next sync point is clean.
  CHECK_NOTHROW(cuda::synchronize());
  CHECK_NOTHROW((void)w.to_host<float>());

  // Other ops name themselves; cuda::synchronize is a sync point too; negative indices count.
  Tensor x = randn({4, 4}, {.device = gpu()});
  (void)gather(x, 1, index_tensor({0, -1, 2, 3}, {4, 1}).to(gpu()));
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "gather", "cuda:0");
  (void)index_select(x, 0, index_tensor({4}, {1}, DType::i32).to(gpu()));
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "index_select");
  (void)scatter_add(x, 0, index_tensor({9, 0, 0, 0}, {1, 4}).to(gpu()), randn({1, 4}, {.device = gpu()}));
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "scatter_add");
  {
    DeterministicGuard det(true);
    (void)scatter_add(x, 0, index_tensor({9, 0, 0, 0}, {1, 4}).to(gpu()), randn({1, 4}, {.device = gpu()}));
    CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "scatter_add");
  }
  (void)one_hot(index_tensor({0, 3}, {2}).to(gpu()), 3);
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "one_hot");
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("gpu index: embedding + dropout forward and backward under SyncPolicy::error") {
  std::mt19937_64 rng(108);
  manual_seed(108);
  Tensor wc = randn({40, 16});
  Tensor idx = index_tensor(random_index(rng, 800, 0, 39), {8, 100});
  Tensor w = wc.to(gpu()), ig = idx.to(gpu());
  w.requires_grad_(true);
  Tensor mask = lt(rand({100, 1}), 0.3).to(gpu());
  cuda::synchronize();
  std::uint64_t syncs = cuda::sync_count();
  for (bool det : {false, true}) {
    DeterministicGuard guard(det);
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    Tensor h = dropout(embedding(w, ig, 0), 0.25);
    Tensor y = tril(masked_fill(h, mask, 0.0), 0);
    (y * y).sum().backward();
  }
  CHECK(cuda::sync_count() == syncs);
  CHECK(w.grad().device() == gpu());
  CHECK(values(w.grad().select(0, 0)) == V(16, 0.0));
}
