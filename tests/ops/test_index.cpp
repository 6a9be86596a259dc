// Indexing ops on the CPU: gather, scatter_add, index_select, embedding (padding_idx),
// one_hot. Values against references computed here from the inputs' host values
// (row-major coordinates, float64); several shapes and dims (negative too), non-contiguous
// inputs and indices, duplicates, i32 and i64 indices, 0-d and empty cases; errors (kind and
// the op/index/size in the message); gradients by gradcheck (central differences in f64) and
// the padding_idx example of PyTorch's documentation. Masks and dropout:
// test_masks_dropout.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/index_cases.hpp"

using namespace index_test;

using namespace brrr;
using namespace test;

// ---------------------------------------------------------------------------------------
// gather
// ---------------------------------------------------------------------------------------

TEST_CASE("gather: values against the row-major reference, several shapes, dims and dtypes") {
  std::mt19937_64 rng(11);
  manual_seed(11);
  for (const auto& c : gather_cases) {
    std::size_t d = wrap(c.dim, c.x.size());
    Idx idx = random_index(rng, numel_of(c.index), 0, c.x[d] - 1);
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
      CAPTURE(to_string(c.x));
      CAPTURE(c.dim);
      CAPTURE(dt);
      Tensor x = is_floating_point(dt) ? randn(c.x, {.dtype = dt}) : randint(-50, 50, c.x, {.dtype = dt});
      Tensor out = gather(x, c.dim, index_tensor(idx, c.index));
      CHECK(out.shape() == c.index);
      CHECK(out.dtype() == dt);
      check_values(values(out), ref_gather(values(x), c.x, c.dim, idx, c.index));
    }
  }
}

TEST_CASE("gather: bool and f16 move their bytes unchanged") {
  Tensor x = make(DType::boolean, {1, 0, 0, 1, 1, 0}, {2, 3});
  Tensor i = index_tensor({2, 2, 0, 1, 0, 0}, {2, 3});
  CHECK(values(gather(x, 1, i)) == V{0, 0, 1, 1, 1, 1});
  Tensor h = make(DType::f16, {0.5, -1.25, 3.0, 65504.0}, {4});
  CHECK(values(gather(h, 0, index_tensor({3, 0, 1, 2, 3}, {5}))) == V{65504.0, 0.5, -1.25, 3.0, 65504.0});
}

TEST_CASE("gather: non-contiguous input and index") {
  std::mt19937_64 rng(12);
  manual_seed(12);
  Tensor base = randn({5, 4});
  Tensor x = base.t();  // [4, 5], strides [1, 4]
  REQUIRE_FALSE(x.is_contiguous());
  Idx iv = random_index(rng, 15, 0, 3);
  Tensor index = index_tensor(iv, {5, 3}).t();  // [3, 5], non-contiguous
  REQUIRE_FALSE(index.is_contiguous());
  Idx idx = host_index(index);
  check_values(values(gather(x, 0, index)), ref_gather(values(x), {4, 5}, 0, idx, {3, 5}));
  // A sliced input with a step, index through an expanded (stride 0) view.
  Tensor xs = randn({6, 8}).slice(1, 1, 8, 2);  // [6, 4]
  Tensor ie = index_tensor({3, 0, 2}, {1, 3}).expand({6, 3});
  check_values(values(gather(xs, 1, ie)), ref_gather(values(xs), {6, 4}, 1, host_index(ie), {6, 3}));
}

TEST_CASE("gather: 0-d operands, empty index") {
  Tensor x = full({}, 2.5);
  Tensor out = gather(x, 0, full({}, 0.0, {.dtype = DType::i64}));
  CHECK(out.dim() == 0);
  CHECK(out.item<float>() == 2.5f);
  Tensor e = gather(randn({3, 4}), 1, zeros({3, 0}, {.dtype = DType::i64}));
  CHECK(e.shape() == Shape{3, 0});
}

TEST_CASE("gather: errors") {
  Tensor x = randn({4, 5});
  CHECK_BRRR_ERROR(gather(x, 0, zeros({2, 5})), ErrorKind::dtype, "gather", "i64", "f32");
  CHECK_BRRR_ERROR(gather(x, 0, zeros({2, 5}, {.dtype = DType::i32})), ErrorKind::dtype, "gather", "i32");
  CHECK_BRRR_ERROR(gather(x, 0, zeros({2}, {.dtype = DType::i64})), ErrorKind::shape, "gather", "[2]", "[4, 5]");
  CHECK_BRRR_ERROR(gather(x, 0, zeros({2, 6}, {.dtype = DType::i64})), ErrorKind::shape, "gather", "[2, 6]",
                   "dim 1");
  CHECK_BRRR_ERROR(gather(x, 2, zeros({2, 5}, {.dtype = DType::i64})), ErrorKind::index, "gather", "dim 2");
  CHECK_BRRR_ERROR(gather(x, 0, index_tensor({0, 1, 4, 2, 3}, {1, 5})), ErrorKind::index, "gather", "index 4",
                   "size 4");
  CHECK_BRRR_ERROR(gather(x, 1, index_tensor({-1}, {1, 1})), ErrorKind::index, "gather", "index -1", "size 5");
  CHECK_BRRR_ERROR(gather(zeros({3, 0}), 1, zeros({3, 1}, {.dtype = DType::i64})), ErrorKind::index, "gather",
                   "empty");
  CHECK_BRRR_ERROR(gather(Tensor(), 0, zeros({1}, {.dtype = DType::i64})), ErrorKind::value, "gather");
}

TEST_CASE("gather: gradcheck, and the gradient is a scatter-add of duplicates") {
  std::mt19937_64 rng(13);
  manual_seed(13);
  for (const auto& c : gather_cases) {
    std::size_t d = wrap(c.dim, c.x.size());
    Tensor index = index_tensor(random_index(rng, numel_of(c.index), 0, c.x[d] - 1), c.index);
    std::int64_t dim = c.dim;
    check_grad("gather " + to_string(c.x) + " dim " + std::to_string(dim),
               [index, dim](const std::vector<Tensor>& in) { return gather(in[0], dim, index); }, {randn(c.x)});
  }
  Tensor x = randn({3}, {.requires_grad = true});
  gather(x, 0, index_tensor({2, 2, 0, 2}, {4})).sum().backward();
  CHECK(values(x.grad()) == V{1, 0, 3});
}

// ---------------------------------------------------------------------------------------
// scatter_add
// ---------------------------------------------------------------------------------------

TEST_CASE("scatter_add: values with duplicates, several dims, out of place") {
  std::mt19937_64 rng(21);
  manual_seed(21);
  struct Case {
    Shape x, index, src;
    std::int64_t dim;
  };
  const Case cases[] = {
      {{4, 5}, {6, 5}, {6, 5}, 0},    {{4, 5}, {4, 9}, {4, 9}, 1},       {{4, 5}, {2, 3}, {3, 4}, -1},
      {{2, 3, 4}, {2, 7, 4}, {2, 7, 5}, 1}, {{2, 3, 4}, {1, 3, 8}, {2, 3, 8}, -1}, {{5}, {12}, {12}, 0},
      {{3, 2, 2, 2}, {6, 2, 1, 2}, {6, 2, 2, 2}, -4},
  };
  for (const auto& c : cases) {
    std::size_t d = wrap(c.dim, c.x.size());
    Idx idx = random_index(rng, numel_of(c.index), 0, c.x[d] - 1);  // many duplicates
    for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::bf16}) {
      CAPTURE(to_string(c.x));
      CAPTURE(c.dim);
      CAPTURE(dt);
      Tensor x = is_floating_point(dt) ? randn(c.x, {.dtype = dt}) : randint(-20, 20, c.x, {.dtype = dt});
      Tensor src = is_floating_point(dt) ? randn(c.src, {.dtype = dt}) : randint(-20, 20, c.src, {.dtype = dt});
      V before = values(x);
      Tensor out = scatter_add(x, c.dim, index_tensor(idx, c.index), src);
      CHECK(out.shape() == c.x);
      CHECK(out.dtype() == dt);
      V want = ref_scatter_add(before, c.x, c.dim, idx, c.index, values(src), c.src);
      // bf16 rounds after every addition; the others are exact or nearly so
      check_values(values(out), want, test::tolerance(test::Computed::rounded_per_add, dt).rtol);
      CHECK(values(x) == before);  // x untouched
    }
  }
}

TEST_CASE("scatter_add: non-contiguous input, index and src; f32 adds in row-major order exactly") {
  std::mt19937_64 rng(22);
  manual_seed(22);
  Tensor x = randn({5, 4}).t();     // [4, 5]
  Tensor src = randn({5, 3}).t();   // [3, 5]
  Tensor index = index_tensor(random_index(rng, 15, 0, 3), {5, 3}).t();
  Tensor out = scatter_add(x, 0, index, src);
  // Reference in f32 arithmetic, in the index's row-major order (the CPU kernel's order).
  std::vector<float> xv = x.contiguous().to_host<float>(), sv = src.contiguous().to_host<float>();
  Idx iv = host_index(index);
  for (std::int64_t p = 0; p < 15; ++p) {
    Shape c = coords(p, {3, 5});
    std::size_t s = static_cast<std::size_t>(flat_of(c, {3, 5}));
    c[0] = iv[static_cast<std::size_t>(p)];
    xv[static_cast<std::size_t>(flat_of(c, {4, 5}))] += sv[s];
  }
  CHECK(out.to_host<float>() == xv);
}

TEST_CASE("scatter_add: 0-d and empty index") {
  Tensor x = full({}, 1.5);
  Tensor out = scatter_add(x, 0, full({}, 0.0, {.dtype = DType::i64}), full({}, 2.0));
  CHECK(out.dim() == 0);
  CHECK(out.item<float>() == 3.5f);
  Tensor y = randn({3, 2});
  CHECK(values(scatter_add(y, 0, zeros({0, 2}, {.dtype = DType::i64}), zeros({0, 2}))) == values(y));
}

TEST_CASE("scatter_add: errors") {
  Tensor x = randn({4, 5});
  Tensor i = zeros({2, 5}, {.dtype = DType::i64});
  CHECK_BRRR_ERROR(scatter_add(x, 0, zeros({2, 5}), randn({2, 5})), ErrorKind::dtype, "scatter_add", "i64");
  CHECK_BRRR_ERROR(scatter_add(x, 0, i, randn({2, 5}, {.dtype = DType::f64})), ErrorKind::dtype, "scatter_add",
                   "f64", "f32");
  CHECK_BRRR_ERROR(scatter_add(zeros({3}, {.dtype = DType::boolean}), 0, zeros({1}, {.dtype = DType::i64}),
                               zeros({1}, {.dtype = DType::boolean})),
                   ErrorKind::dtype, "scatter_add", "bool");
  CHECK_BRRR_ERROR(scatter_add(x, 0, i, randn({2, 4})), ErrorKind::shape, "scatter_add", "src", "[2, 4]");
  CHECK_BRRR_ERROR(scatter_add(x, 0, i, randn({10})), ErrorKind::shape, "scatter_add", "[10]");
  CHECK_BRRR_ERROR(scatter_add(x, 0, zeros({2, 6}, {.dtype = DType::i64}), randn({2, 6})), ErrorKind::shape,
                   "scatter_add", "dim 1");
  CHECK_BRRR_ERROR(scatter_add(x, 1, index_tensor({0, 5}, {1, 2}), randn({1, 2})), ErrorKind::index, "scatter_add",
                   "index 5", "size 5");
  CHECK_BRRR_ERROR(scatter_add(x, -3, i, randn({2, 5})), ErrorKind::index, "scatter_add", "dim -3");
}

TEST_CASE("scatter_add: gradcheck for the input and src (also src larger than index)") {
  std::mt19937_64 rng(23);
  manual_seed(23);
  Tensor i1 = index_tensor(random_index(rng, 12, 0, 3), {6, 2});
  check_grad("scatter_add dim 0", [i1](const std::vector<Tensor>& in) { return scatter_add(in[0], 0, i1, in[1]); },
             {randn({4, 2}), randn({6, 2})});
  Tensor i2 = index_tensor(random_index(rng, 6, 0, 4), {2, 3});
  check_grad("scatter_add dim -1, src [3, 4] > index [2, 3]",
             [i2](const std::vector<Tensor>& in) { return scatter_add(in[0], -1, i2, in[1]); },
             {randn({2, 5}), randn({3, 4})});
  Tensor i3 = index_tensor(random_index(rng, 24, 0, 2), {2, 4, 3});
  check_grad("scatter_add 3-d dim 1",
             [i3](const std::vector<Tensor>& in) { return scatter_add(in[0], 1, i3, in[1]); },
             {randn({2, 3, 3}), randn({2, 4, 3})});
  // The src gradient outside the index's extent is exactly 0.
  Tensor x = randn({2, 5}, {.requires_grad = true});
  Tensor src = randn({3, 4}, {.requires_grad = true});
  scatter_add(x, 1, i2, src).sum().backward();
  CHECK(values(x.grad()) == V(10, 1.0));
  CHECK(values(src.grad()) == V{1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0});
}

TEST_CASE("gather/scatter_add: second derivatives through create_graph") {
  std::mt19937_64 rng(24);
  manual_seed(24);
  Tensor index = index_tensor(random_index(rng, 8, 0, 2), {4, 2});
  // d/dx sum(gather(x)^2) = scatter_add(2 gather(x)): its own gradient is checked.
  Fn f = [index](const std::vector<Tensor>& in) {
    GradModeGuard on(true);
    Tensor y = gather(in[0], 0, index);
    std::vector<Tensor> g = autograd::grad({mul(y, y).sum()}, {in[0]}, {}, false, true);
    return mul(g[0], in[0]).sum();
  };
  check_grad("gather second derivative", f, {randn({3, 2})});
}

// ---------------------------------------------------------------------------------------
// index_select
// ---------------------------------------------------------------------------------------

TEST_CASE("index_select: values for several dims, i32 and i64 indices with duplicates") {
  std::mt19937_64 rng(31);
  manual_seed(31);
  const Shape shape{3, 4, 5};
  Tensor x = randn(shape);
  V xv = values(x);
  for (std::int64_t dim : {0, 1, 2, -1, -3}) {
    for (DType it : {DType::i32, DType::i64}) {
      CAPTURE(dim);
      CAPTURE(it);
      std::size_t d = wrap(dim, 3);
      Idx idx = random_index(rng, 7, 0, shape[d] - 1);
      Tensor out = index_select(x, dim, index_tensor(idx, {7}, it));
      Shape os = shape;
      os[d] = 7;
      REQUIRE(out.shape() == os);
      // reference: out[..., k, ...] = x[..., idx[k], ...]
      Idx full_idx(static_cast<std::size_t>(numel_of(os)));
      for (std::int64_t p = 0; p < numel_of(os); ++p)
        full_idx[static_cast<std::size_t>(p)] = idx[static_cast<std::size_t>(coords(p, os)[d])];
      check_values(values(out), ref_gather(xv, shape, dim, full_idx, os));
    }
  }
}

TEST_CASE("index_select: non-contiguous input and index, 0-d index, empty index, 0-d input") {
  manual_seed(32);
  Tensor x = randn({4, 3}).t();  // [3, 4]
  Tensor idx = index_tensor({3, 0, 1, 1, 3, 2}, {6}).slice(0, 0, 6, 2);  // {3, 1, 3}, stride 2
  REQUIRE_FALSE(idx.is_contiguous());
  Tensor out = index_select(x, 1, idx);
  V xv = values(x);
  V want;
  for (int r = 0; r < 3; ++r)
    for (int k : {3, 1, 3}) want.push_back(xv[static_cast<std::size_t>(r * 4 + k)]);
  CHECK(values(out) == want);
  Tensor one = index_select(x, 0, full({}, 2.0, {.dtype = DType::i64}));
  CHECK(one.shape() == Shape{1, 4});
  CHECK(values(one) == V(xv.begin() + 8, xv.end()));
  CHECK(index_select(x, 0, zeros({0}, {.dtype = DType::i32})).shape() == Shape{0, 4});
  Tensor s = index_select(full({}, 4.0), 0, index_tensor({0}, {1}));
  CHECK(s.dim() == 0);
  CHECK(s.item<float>() == 4.0f);
}

TEST_CASE("index_select: errors") {
  Tensor x = randn({3, 4});
  CHECK_BRRR_ERROR(index_select(x, 0, zeros({2})), ErrorKind::dtype, "index_select", "f32");
  CHECK_BRRR_ERROR(index_select(x, 0, zeros({2, 2}, {.dtype = DType::i64})), ErrorKind::shape, "index_select",
                   "1-D", "[2, 2]");
  CHECK_BRRR_ERROR(index_select(x, 1, index_tensor({0, 4}, {2})), ErrorKind::index, "index_select", "index 4",
                   "size 4");
  CHECK_BRRR_ERROR(index_select(x, 0, index_tensor({-1}, {1}, DType::i32)), ErrorKind::index, "index_select",
                   "index -1", "size 3");
  CHECK_BRRR_ERROR(index_select(x, 2, index_tensor({0}, {1})), ErrorKind::index, "index_select", "dim 2");
}

TEST_CASE("index_select: gradcheck (duplicates accumulate)") {
  std::mt19937_64 rng(33);
  manual_seed(33);
  for (std::int64_t dim : {0, 1, -1}) {
    for (DType it : {DType::i32, DType::i64}) {
      Tensor idx = index_tensor(random_index(rng, 6, 0, 2), {6}, it);
      check_grad("index_select dim " + std::to_string(dim),
                 [idx, dim](const std::vector<Tensor>& in) { return index_select(in[0], dim, idx); },
                 {randn({3, 3, 3})});
    }
  }
}

// ---------------------------------------------------------------------------------------
// embedding
// ---------------------------------------------------------------------------------------

TEST_CASE("embedding: rows of the weight for any index shape, i32 and i64") {
  std::mt19937_64 rng(41);
  manual_seed(41);
  Tensor w = randn({7, 3});
  V wv = values(w);
  for (DType it : {DType::i32, DType::i64}) {
    for (Shape s : {Shape{5}, Shape{2, 3}, Shape{2, 2, 2}, Shape{}}) {
      CAPTURE(it);
      CAPTURE(to_string(s));
      Idx idx = random_index(rng, numel_of(s), 0, 6);
      Tensor out = embedding(w, index_tensor(idx, s, it));
      Shape os = s;
      os.push_back(3);
      REQUIRE(out.shape() == os);
      V want;
      for (auto k : idx)
        for (int j = 0; j < 3; ++j) want.push_back(wv[static_cast<std::size_t>(k * 3 + j)]);
      CHECK(values(out) == want);
    }
  }
  // non-contiguous indices and weight
  Tensor idx = index_tensor({1, 6, 0, 2, 2, 5}, {3, 2}).t();  // [2, 3]
  Tensor wt = randn({3, 7}).t();                              // [7, 3]
  Tensor out = embedding(wt, idx);
  V wtv = values(wt);
  V want;
  for (auto k : host_index(idx))
    for (int j = 0; j < 3; ++j) want.push_back(wtv[static_cast<std::size_t>(k * 3 + j)]);
  CHECK(values(out) == want);
  CHECK(embedding(w, zeros({0, 4}, {.dtype = DType::i64})).shape() == Shape{0, 4, 3});
}

TEST_CASE("embedding: padding_idx (PyTorch's example: Embedding(3, 2, padding_idx=0), input [0, 1, 0, 2])") {
  manual_seed(42);
  Tensor w = randn({3, 2}, {.requires_grad = true});
  Tensor out = embedding(w, index_tensor({0, 1, 0, 2}, {4}), 0);
  V wv = values(w);
  CHECK(values(out) == V{wv[0], wv[1], wv[2], wv[3], wv[0], wv[1], wv[4], wv[5]});  // forward reads row 0 as is
  out.sum().backward();
  CHECK(values(w.grad()) == V{0, 0, 1, 1, 1, 1});
  // negative padding_idx counts from the end; i32 indices
  Tensor w2 = randn({3, 2}, {.requires_grad = true});
  embedding(w2, index_tensor({2, 1, 2, 2}, {2, 2}, DType::i32), -1).sum().backward();
  CHECK(values(w2.grad()) == V{0, 0, 1, 1, 0, 0});
}

TEST_CASE("embedding: backward accumulates duplicate rows (upstream gradient not all ones)") {
  std::mt19937_64 rng(43);
  manual_seed(43);
  Tensor w = randn({5, 4}, {.requires_grad = true});
  Idx idx = random_index(rng, 30, 0, 4);
  Tensor out = embedding(w, index_tensor(idx, {6, 5}));
  Tensor g = randn({6, 5, 4});
  out.backward(g);
  V gv = values(g), want(20, 0.0);
  for (std::size_t p = 0; p < idx.size(); ++p)
    for (std::size_t j = 0; j < 4; ++j) want[static_cast<std::size_t>(idx[p]) * 4 + j] += gv[p * 4 + j];
  check_values(values(w.grad()), want, 1e-6);
}

TEST_CASE("embedding: errors") {
  Tensor w = randn({4, 3});
  CHECK_BRRR_ERROR(embedding(randn({4}), index_tensor({0}, {1})), ErrorKind::shape, "embedding", "2-D", "[4]");
  CHECK_BRRR_ERROR(embedding(w, zeros({2})), ErrorKind::dtype, "embedding", "i32 or i64", "f32");
  CHECK_BRRR_ERROR(embedding(w, index_tensor({1, 4, 0}, {3})), ErrorKind::index, "embedding", "index 4", "size 4");
  CHECK_BRRR_ERROR(embedding(w, index_tensor({-2}, {1}, DType::i32)), ErrorKind::index, "embedding", "index -2");
  CHECK_BRRR_ERROR(embedding(w, index_tensor({0}, {1}), 4), ErrorKind::index, "embedding", "padding_idx 4");
  CHECK_BRRR_ERROR(embedding(w, index_tensor({0}, {1}), -5), ErrorKind::index, "embedding", "padding_idx -5");
}

TEST_CASE("embedding: gradcheck of the weight, with and without padding_idx") {
  manual_seed(44);
  Tensor idx = index_tensor({1, 3, 0, 1, 2, 3, 3, 0}, {2, 4});  // duplicates, and the padding row 1
  check_grad("embedding", [idx](const std::vector<Tensor>& in) { return embedding(in[0], idx); }, {randn({4, 3})});
  // padding_idx deliberately departs from the true derivative for its row, so the check
  // masks the padding positions out of the output: the other rows must stay exact.
  Tensor pad_mask = eq(idx, 1).unsqueeze(-1);
  check_grad("embedding padding_idx 1 (padding positions masked out)",
             [idx, pad_mask](const std::vector<Tensor>& in) { return masked_fill(embedding(in[0], idx, 1), pad_mask, 0.0); },
             {randn({4, 3})});
}

// ---------------------------------------------------------------------------------------
// one_hot
// ---------------------------------------------------------------------------------------

TEST_CASE("one_hot: values, i32 and i64, any shape") {
  Tensor a = one_hot(index_tensor({0, 2, 1, 2}, {4}), 3);
  CHECK(a.dtype() == DType::i64);
  CHECK(a.shape() == Shape{4, 3});
  CHECK(values(a) == V{1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 1});
  Tensor b = one_hot(index_tensor({3, 0, 1, 3}, {2, 2}, DType::i32).t(), 4);
  CHECK(b.shape() == Shape{2, 2, 4});
  CHECK(values(b) == V{0, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1});
  Tensor c = one_hot(full({}, 1.0, {.dtype = DType::i64}), 2);
  CHECK(c.shape() == Shape{2});
  CHECK(values(c) == V{0, 1});
  CHECK(one_hot(zeros({0}, {.dtype = DType::i64}), 5).shape() == Shape{0, 5});
}

TEST_CASE("one_hot: errors") {
  Tensor i = index_tensor({0, 1}, {2});
  CHECK_BRRR_ERROR(one_hot(i, 0), ErrorKind::value, "one_hot", "num_classes", "0");
  CHECK_BRRR_ERROR(one_hot(i, -1), ErrorKind::value, "one_hot", "-1");
  CHECK_BRRR_ERROR(one_hot(zeros({2}), 3), ErrorKind::dtype, "one_hot", "f32");
  CHECK_BRRR_ERROR(one_hot(index_tensor({0, 3}, {2}), 3), ErrorKind::index, "one_hot", "index 3", "size 3");
  CHECK_BRRR_ERROR(one_hot(index_tensor({-1}, {1}, DType::i32), 3), ErrorKind::index, "one_hot", "index -1");
}
