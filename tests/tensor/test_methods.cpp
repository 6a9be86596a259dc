// LibTorch's spelling on the CPU: Tensor's op methods (BRRR_TENSOR_METHODS) against the free
// functions and float64 references computed here; comparison operators; compound assignment
// with PyTorch's in-place rules (values, version counter, leaf refusal, recorded history on
// non-leaves and its gradient, dtype/shape/storage errors); x[i], x.index({...}) with slices,
// None, Ellipsis, index tensors (adjacent and separated, NumPy's result layout) and masks
// against references computed element by element; index_put_ (views, tensors, accumulate,
// masks) and its gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace brrr::indexing;
using namespace test;

namespace {

using V = std::vector<double>;

Tensor f64(const V& v, Shape s) { return Tensor::from_vector(v, std::move(s)); }

void check_values(const Tensor& t, const V& expected, double tol = 1e-12) {
  V got = values(t);
  REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(expected[i]).epsilon(tol));
}

Shape coords(std::int64_t flat, const Shape& s) {
  Shape c(s.size());
  for (std::size_t d = s.size(); d-- > 0;) {
    c[d] = flat % s[d];
    flat /= s[d];
  }
  return c;
}

std::int64_t flat_of(const Shape& c, const Shape& s) {
  std::int64_t f = 0;
  for (std::size_t d = 0; d < s.size(); ++d) f = f * s[d] + c[d];
  return f;
}

}  // namespace

TEST_CASE("methods forward to the free functions with the tensor first") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  V a = normal_values(rng, 12), b = normal_values(rng, 12);
  Tensor x = f64(a, {3, 4}), y = f64(b, {3, 4});

  // Elementwise, against float64 references.
  V pow2, sum_xy, clamped, relu;
  for (std::size_t i = 0; i < a.size(); ++i) {
    pow2.push_back(a[i] * a[i]);
    sum_xy.push_back(a[i] + b[i]);
    clamped.push_back(std::min(std::max(a[i], -0.5), 0.5));
    relu.push_back(a[i] > 0 ? a[i] : 0);
  }
  check_values(x.pow(2), pow2);
  check_values(x.add(y), sum_xy);
  check_values(x.clamp(-0.5, 0.5), clamped);
  check_values(x.relu(), relu);
  check_values(x.exp(), values(exp(x)));
  check_values(x.mul(3), values(mul(x, 3)));

  // Reductions with an int where a dim list is taken, a braced list, keepdim.
  V row_sums(3, 0), col_max(4, -1e300), total{0};
  std::vector<double> row_argmax(3, 0);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      double v = a[r * 4 + c];
      row_sums[r] += v;
      total[0] += v;
      col_max[c] = std::max(col_max[c], v);
      if (v > a[r * 4 + static_cast<int>(row_argmax[r])]) row_argmax[r] = c;
    }
  check_values(x.sum(1), row_sums);
  CHECK(x.sum(1).shape() == Shape{3});
  check_values(x.sum({0, 1}, true), total);
  CHECK(x.sum({0, 1}, true).shape() == Shape{1, 1});
  check_values(x.sum(), total);
  check_values(x.mean(), {total[0] / 12});
  check_values(x.amax(0), col_max);
  check_values(x.max(0).values, col_max);
  check_values(x.argmax(1), row_argmax);
  CHECK(x.argmax(1).dtype() == DType::i64);

  // Softmax along -1 against exp / row sum.
  Tensor sm = x.softmax(-1);
  for (int r = 0; r < 3; ++r) {
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(a[r * 4 + c]);
    for (int c = 0; c < 4; ++c) CHECK(values(sm)[r * 4 + c] == doctest::Approx(std::exp(a[r * 4 + c]) / z));
  }

  // mm / matmul against a triple loop.
  Tensor w = f64(normal_values(rng, 8), {4, 2});
  V wv = values(w), prod(6, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k) prod[i * 2 + j] += a[i * 4 + k] * wv[k * 2 + j];
  check_values(x.mm(w), prod);
  check_values(x.matmul(w), prod);
  CHECK_BRRR_ERROR(x.mm(w.flatten()), ErrorKind::shape, "mm", "2-D");

  // Masking and selecting.
  Tensor mask = x.gt(0.0);
  V filled;
  for (double v : a) filled.push_back(v > 0 ? -1.0 : v);
  check_values(x.masked_fill(mask, -1.0), filled);
  Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{2, 0});
  check_values(x.index_select(0, idx), values(index_select(x, 0, idx)));
  CHECK(x.chunk(2, 1).size() == 2);
}

TEST_CASE("comparison operators give bool tensors") {
  Tensor x = f64({1, 2, 3, 4}, {4}), y = f64({4, 2, 1, 4}, {4});
  CHECK((x < y).dtype() == DType::boolean);
  CHECK(values(x < y) == V{1, 0, 0, 0});
  CHECK(values(x <= y) == V{1, 1, 0, 1});
  CHECK(values(x == y) == V{0, 1, 0, 1});
  CHECK(values(x != y) == V{1, 0, 1, 0});
  CHECK(values(x > y) == V{0, 0, 1, 0});
  CHECK(values(x >= y) == V{0, 1, 1, 1});
  CHECK(values(x > 2) == V{0, 0, 1, 1});
  CHECK(values(2 > x) == V{1, 0, 0, 0});
  CHECK(values(2 <= x) == V{0, 1, 1, 1});
  CHECK(values(3 == x) == V{0, 0, 1, 0});
}

TEST_CASE("compound assignment: in place, version-counted, PyTorch's dtype and shape rules") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  V a = normal_values(rng, 6), b = normal_values(rng, 3);
  Tensor x = f64(a, {2, 3});
  Tensor alias = x;  // another handle: sees the update
  void* data = x.data_ptr();
  std::uint64_t v0 = x.storage().version();
  x += f64(b, {3});  // broadcasts into x
  CHECK(x.data_ptr() == data);
  CHECK(x.storage().version() > v0);
  V expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a[i] + b[i % 3]);
  check_values(alias, expected);
  x *= 2;
  for (double& e : expected) e *= 2;
  check_values(x, expected);
  x -= 1.5;
  for (double& e : expected) e -= 1.5;
  check_values(x, expected);
  x /= f64({2}, {1});
  for (double& e : expected) e /= 2;
  check_values(x, expected);
  x.add_(x);  // aliasing operand, same positions
  for (double& e : expected) e *= 2;
  check_values(x, expected);

  // A view updates its base.
  Tensor base = f64({1, 2, 3, 4}, {2, 2});
  Tensor row = base[1];
  row += 10;
  CHECK(values(base) == V{1, 2, 13, 14});

  // f32 target keeps its dtype with an f64 operand (can cast down within floats).
  Tensor h = Tensor::from_vector(std::vector<float>{1, 2});
  h += f64({0.5, 0.25}, {2});
  CHECK(h.dtype() == DType::f32);
  CHECK(values(h) == V{1.5, 2.25});

  // Integers: + int stays exact; float results cannot be written into them.
  Tensor n = Tensor::from_vector(std::vector<std::int64_t>{7, -3});
  n += 2;
  CHECK(values(n) == V{9, -1});
  CHECK_BRRR_ERROR(n += 0.5, ErrorKind::dtype, "add_", "f32", "i64");
  CHECK_BRRR_ERROR(n /= 2, ErrorKind::dtype, "div_", "can't be cast");
  CHECK(values(n) == V{9, -1});  // untouched by the refused updates

  // The result must keep the target's shape.
  Tensor small = f64({1, 2, 3}, {3});
  CHECK_BRRR_ERROR(small += f64(a, {2, 3}), ErrorKind::shape, "add_", "[3]", "[2, 3]");
}

TEST_CASE("compound assignment under autograd: leaves refused, non-leaves recorded") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  V a = normal_values(rng, 4);
  Tensor x = f64(a, {4}).requires_grad_();
  CHECK_BRRR_ERROR(x += 1, ErrorKind::autograd, "add_", "leaf", "requires grad");
  CHECK_BRRR_ERROR(x *= x, ErrorKind::autograd, "mul_", "leaf");
  {
    NoGradGuard g;
    x -= 0.0;  // allowed under NoGradGuard (optimizers)
  }

  // y = 2x; y += x^2; y *= x  ->  y = 2x^2 + x^3, dy/dx = 4x + 3x^2.
  Tensor y = x * 2;
  y += x * x;
  y *= x;
  CHECK(!y.is_leaf());
  y.sum().backward();
  V expected, grad;
  for (double v : a) {
    expected.push_back(2 * v * v + v * v * v);
    grad.push_back(4 * v + 3 * v * v);
  }
  check_values(y.detach(), expected);
  check_values(x.grad(), grad);

  // An accumulator that does not require grad takes the operand's history.
  Tensor w = f64(a, {4}).requires_grad_();
  Tensor total = zeros({}, {.dtype = DType::f64});
  for (int i = 0; i < 3; ++i) total += (w * static_cast<double>(i + 1)).sum();
  CHECK(total.requires_grad());
  total.backward();
  check_values(w.grad(), V(4, 6.0));

  // A recorded in-place update of a view (or of a tensor with views) is refused, never
  // silently wrong.
  Tensor z = x * 1.0;
  Tensor view = z.slice(0, 0, 2);
  CHECK_BRRR_ERROR(view += 1, ErrorKind::autograd, "add_", "shared");
  CHECK_BRRR_ERROR(z += 1, ErrorKind::autograd, "add_", "shared");

  // A saved tensor modified in place makes backward throw (the version counter).
  Tensor s = x * 3.0;
  Tensor used = s * s;  // saves s
  s += 1;
  CHECK_BRRR_ERROR(used.sum().backward(), ErrorKind::autograd);
}

TEST_CASE("x[i] and x.index with integers, slices, None and Ellipsis are views") {
  Tensor x = arange(24).view({2, 3, 4});
  CHECK(values(x[1]) == values(x.select(0, 1)));
  CHECK(x[1].storage().is_same(x.storage()));
  CHECK(values(x[-1][2]) == V{20, 21, 22, 23});
  std::size_t unsigned_index = 1;
  CHECK(values(x.index({unsigned_index, 0})) == V{12, 13, 14, 15});

  Tensor a = x.index({Slice(), 1});
  CHECK(a.shape() == Shape{2, 4});
  CHECK(values(a) == V{4, 5, 6, 7, 16, 17, 18, 19});
  Tensor b = x.index({Slice(None, None, 2), Slice(1, None), Slice(-3, -1)});
  CHECK(b.shape() == Shape{1, 2, 2});
  CHECK(values(b) == V{5, 6, 9, 10});
  Tensor c = x.index({Ellipsis, 0});
  CHECK(c.shape() == Shape{2, 3});
  CHECK(values(c) == V{0, 4, 8, 12, 16, 20});
  Tensor d = x.index({0, None, Ellipsis, None});
  CHECK(d.shape() == Shape{1, 3, 4, 1});
  Tensor e = x.index({1, Ellipsis, 2});
  CHECK(values(e) == V{14, 18, 22});
  CHECK(e.storage().is_same(x.storage()));
  Tensor f = x.index({Slice(0, 8)});  // clamps like Python
  CHECK(f.shape() == Shape{2, 3, 4});

  CHECK_BRRR_ERROR(x.index({0, 0, 0, 0}), ErrorKind::index, "index", "too many indices", "[2, 3, 4]");
  CHECK_BRRR_ERROR(x.index({Ellipsis, Ellipsis}), ErrorKind::index, "Ellipsis");
  CHECK_BRRR_ERROR(x.index({5}), ErrorKind::index, "index 5", "size 2");
}

TEST_CASE("advanced indexing: index tensors and masks follow NumPy's rules") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  const Shape s{3, 4, 5};
  Tensor x = f64(normal_values(rng, 60), s);
  V xv = values(x);
  auto at = [&](std::int64_t i, std::int64_t j, std::int64_t k) { return xv[static_cast<std::size_t>(flat_of({i, j, k}, s))]; };

  // One index tensor (with a negative index) on dim 1, 2-D: [3, 2, 2, 5].
  std::vector<std::int64_t> iv{0, -1, 2, 1};
  Tensor idx = Tensor::from_vector(iv, {2, 2});
  Tensor r = x.index({Slice(), idx});
  REQUIRE(r.shape() == Shape{3, 2, 2, 5});
  V rv = values(r);
  for (std::int64_t f = 0; f < r.numel(); ++f) {
    Shape c = coords(f, r.shape());
    std::int64_t j = iv[static_cast<std::size_t>(c[1] * 2 + c[2])];
    if (j < 0) j += 4;
    CHECK(rv[static_cast<std::size_t>(f)] == at(c[0], j, c[3]));
  }
  CHECK(values(x[Tensor::from_vector(std::vector<std::int64_t>{2, 0})]) == values(index_select(x, 0, Tensor::from_vector(std::vector<std::int64_t>{2, 0}))));

  // Two adjacent index tensors broadcast together and keep their place: [3, 2].
  Tensor i1 = Tensor::from_vector(std::vector<std::int64_t>{1, 3});
  Tensor i2 = Tensor::from_vector(std::vector<std::int32_t>{4, 0});
  Tensor adj = x.index({Slice(), i1, i2});
  REQUIRE(adj.shape() == Shape{3, 2});
  for (int a = 0; a < 3; ++a) {
    CHECK(values(adj)[a * 2 + 0] == at(a, 1, 4));
    CHECK(values(adj)[a * 2 + 1] == at(a, 3, 0));
  }
  // Separated by a slice: the broadcast dims go first: [2, 4].
  Tensor i0 = Tensor::from_vector(std::vector<std::int64_t>{2, 0});
  Tensor sep = x.index({i0, Slice(), Tensor::from_vector(std::vector<std::int64_t>{1})});
  REQUIRE(sep.shape() == Shape{2, 4});
  for (int p = 0; p < 2; ++p)
    for (int j = 0; j < 4; ++j) CHECK(values(sep)[p * 4 + j] == at(p == 0 ? 2 : 0, j, 1));

  // A bool mask over the first two dims: its true positions, row-major.
  Tensor mask = x.index({Slice(), Slice(), 0}).gt(0.0);  // [3, 4]
  Tensor m = x.index({mask});
  V mv = values(m), maskv = values(mask);
  std::int64_t count = 0;
  for (double bit : maskv) count += bit != 0;
  REQUIRE(m.shape() == Shape{count, 5});
  std::int64_t row = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) {
      if (maskv[i * 4 + j] == 0) continue;
      for (int k = 0; k < 5; ++k) CHECK(mv[row * 5 + k] == at(i, j, k));
      ++row;
    }
  // A full-shape mask gives the 1-D selection, like x[x > 0].
  Tensor pos = x.index({x > 0});
  V expected;
  for (double v : xv)
    if (v > 0) expected.push_back(v);
  CHECK(values(pos) == expected);

  CHECK_BRRR_ERROR(x.index({Slice(), Tensor::from_vector(std::vector<std::int64_t>{4})}), ErrorKind::index);
  CHECK_BRRR_ERROR(x.index({Tensor::from_vector(std::vector<float>{0})}), ErrorKind::dtype, "index", "i64");
  CHECK_BRRR_ERROR(x.index({ones({2, 4}, {.dtype = DType::boolean})}), ErrorKind::shape, "mask");
}

TEST_CASE("index gradients: each selected element passes its gradient (repeats add up)") {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{2, 2, 0});
  Tensor y = x.index({Slice(), idx});  // [2, 3]
  (y * f64({1, 2, 3, 4, 5, 6}, {2, 3})).sum().backward();
  CHECK(values(x.grad()) == V{3, 0, 3, 6, 0, 9});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) {
          return in[0].index({Tensor::from_vector(std::vector<std::int64_t>{1, 0}), Slice(1, None)});
        },
        {f64({1, 2, 3, 4, 5, 6}, {2, 3})}));
}

TEST_CASE("index_put_: views, index tensors, accumulate, masks, gradients") {
  Tensor x = zeros({3, 4}, {.dtype = DType::f64});
  x.index_put_({1}, f64({1, 2, 3, 4}, {4}));
  x.index_put_({Slice(), 0}, 9.0);
  CHECK(values(x) == V{9, 0, 0, 0, 9, 2, 3, 4, 9, 0, 0, 0});

  Tensor rows = Tensor::from_vector(std::vector<std::int64_t>{0, 2}), cols = Tensor::from_vector(std::vector<std::int64_t>{3, 1});
  x.index_put_({rows, cols}, f64({-1, -2}, {2}));
  CHECK(values(x) == V{9, 0, 0, -1, 9, 2, 3, 4, 9, -2, 0, 0});

  Tensor acc = zeros({4}, {.dtype = DType::f64});
  acc.index_put_({Tensor::from_vector(std::vector<std::int64_t>{1, 1, 3, 1})}, f64({1, 2, 3, 4}, {4}), true);
  CHECK(values(acc) == V{0, 7, 0, 3});

  Tensor y = f64({-1, 2, -3, 4}, {4});
  std::uint64_t v0 = y.storage().version();
  y.index_put_({y < 0}, 0.0);  // x[x < 0] = 0
  CHECK(values(y) == V{0, 2, 0, 4});
  CHECK(y.storage().version() > v0);
  Tensor z = f64({5, 6, 7, 8, 9, 10}, {2, 3});
  z.index_put_({f64({1, 0}, {2}) > 0}, f64({0, 1, 2}, {3}));  // a row mask
  CHECK(values(z) == V{0, 1, 2, 8, 9, 10});
  CHECK_BRRR_ERROR(z.index_put_({0}, f64({1, 2}, {2})), ErrorKind::shape, "copy_");

  // Gradients: the overwritten positions get none from x, the values get theirs.
  Tensor w = f64({1, 2, 3, 4}, {4}).requires_grad_();
  Tensor v = f64({10, 20}, {2}).requires_grad_();
  Tensor h = w * 1.0;
  h.index_put_({Tensor::from_vector(std::vector<std::int64_t>{3, 0})}, v);
  CHECK(values(h.detach()) == V{20, 2, 3, 10});
  (h * f64({1, 2, 3, 4}, {4})).sum().backward();
  CHECK(values(w.grad()) == V{0, 2, 3, 0});
  CHECK(values(v.grad()) == V{4, 1});
}
