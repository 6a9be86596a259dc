// scatter, scatter_reduce, index_add, index_copy, index_fill and index_put on the CPU:
// PyTorch's documented examples by hand, scatter_reduce against a float64 reference loop
// (every reduce, include_self on and off, duplicates, index larger than x along dim, several
// dtypes, a fresh seed), NaN and integer rules, the errors, and gradients against central
// differences (gradcheck), prod's zeros included.
#include <doctest/doctest.h>

#include <algorithm>
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

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

namespace {

using V = std::vector<double>;
using Idx = std::vector<std::int64_t>;
using In = std::vector<Tensor>;

Tensor idx(const Idx& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<std::int64_t>(v.size())};
  return Tensor::from_vector(v, shape);
}

// Row-major coordinates of flat position p in `shape`.
std::vector<std::int64_t> coords(std::int64_t p, const Shape& shape) {
  std::vector<std::int64_t> c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = p % shape[d];
    p /= shape[d];
  }
  return c;
}
std::int64_t flat(const std::vector<std::int64_t>& c, const Shape& shape) {
  std::int64_t p = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) p = p * shape[d] + c[d];
  return p;
}

// scatter_reduce by the definition, in double, sources in row-major order of index.
V reference(const V& x, const Shape& xs, const Idx& index, const Shape& is, const V& src, const Shape& ss,
            std::int64_t dim, const std::string& reduce, bool include_self, bool integral) {
  V out = x;
  std::vector<int> count(x.size(), 0);
  std::vector<bool> nan_seen(x.size(), false);
  for (std::int64_t p = 0; p < static_cast<std::int64_t>(index.size()); ++p) {
    auto c = coords(p, is);
    const double v = src[static_cast<std::size_t>(flat(c, ss))];
    c[static_cast<std::size_t>(dim)] = index[static_cast<std::size_t>(p)];
    const auto o = static_cast<std::size_t>(flat(c, xs));
    if (count[o]++ == 0 && !include_self) {
      out[o] = v;
      nan_seen[o] = std::isnan(v);
      continue;
    }
    if (count[o] == 1 && std::isnan(out[o])) nan_seen[o] = true;
    if (reduce == "sum" || reduce == "mean") out[o] += v;
    else if (reduce == "prod") out[o] *= v;
    else if (reduce == "amax") out[o] = std::max(out[o], v);
    else out[o] = std::min(out[o], v);
    if (std::isnan(v)) nan_seen[o] = true;
  }
  for (std::size_t o = 0; o < out.size(); ++o) {
    if ((reduce == "amax" || reduce == "amin") && nan_seen[o]) out[o] = NAN;
    if (reduce == "mean") {
      const int n = count[o] + (include_self ? 1 : 0);
      if (n > 0) out[o] = integral ? std::floor(out[o] / n) : out[o] / n;
    }
  }
  return out;
}

void check_values(const Tensor& got, const V& want, testing::CloseOptions o = {}) {
  o.equal_nan = true;
  Tensor w = Tensor::from_vector(want, got.shape()).to(got.dtype());
  std::string err;
  try {
    testing::assert_close(got, w, o);
  } catch (const Error& e) {
    err = e.what();
  }
  CHECK_MESSAGE(err.empty(), err);
}

}  // namespace

TEST_CASE("scatter: PyTorch's examples (src and value), index smaller than src, dim 0 and 1") {
  Tensor src = arange(1.0, 11.0, 1.0).reshape({2, 5});
  CHECK(test::values(scatter(zeros({3, 5}), 0, idx({0, 1, 2, 0}, {1, 4}), src)) ==
        V{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0});
  CHECK(test::values(zeros({3, 5}).scatter(1, idx({0, 1, 2, 0, 1, 4}, {2, 3}), src)) ==
        V{1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0});
  CHECK(test::values(scatter(zeros({2, 4}), 1, idx({2, 3}, {2, 1}), 1.25)) == V{0, 0, 1.25, 0, 0, 0, 0, 1.25});
  // The last source in row-major order wins on the CPU; x is not modified.
  Tensor x = zeros({3}, {.dtype = DType::f64});
  CHECK(test::values(scatter(x, 0, idx({1, 1, 1}), Tensor::from_vector(V{5, 6, 7}))) == V{0, 7, 0});
  CHECK(test::values(x) == V{0, 0, 0});
  // bool and integers; 0-d.
  CHECK(test::values(scatter(zeros({3}, {.dtype = DType::boolean}), 0, idx({2}), true)) == V{0, 0, 1});
  CHECK(test::values(scatter(test::make(DType::i32, {1, 2, 3}), 0, idx({0}), test::make(DType::i32, {9}))) == V{9, 2, 3});
  CHECK(scatter(full({}, 2.0), 0, idx({0}).reshape({}), full({}, 3.0)).item<float>() == 3.0f);
}

TEST_CASE("scatter_reduce: PyTorch's examples, NaN, integers, mean's floor") {
  Tensor src = Tensor::from_vector(V{1, 2, 3, 4, 5, 6});
  Tensor index = idx({0, 1, 0, 1, 2, 1});
  Tensor input = Tensor::from_vector(V{1, 2, 3, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "sum")) == V{5, 14, 8, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "sum", false)) == V{4, 12, 5, 4});
  CHECK(test::values(input.scatter_reduce(0, index, src, "amax")) == V{3, 6, 5, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "amax", false)) == V{3, 6, 5, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "amin")) == V{1, 2, 3, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "amin", false)) == V{1, 2, 5, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "prod")) == V{3, 96, 15, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "prod", false)) == V{3, 48, 5, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "mean")) == V{5.0 / 3, 3.5, 4, 4});
  CHECK(test::values(scatter_reduce(input, 0, index, src, "mean", false)) == V{2, 4, 5, 4});
  // Integers: mean rounds down; amax starts from the lowest value without self.
  Tensor isrc = test::make(DType::i64, {-1, -2, 7}), iin = test::make(DType::i64, {0, 0});
  CHECK(test::values(scatter_reduce(iin, 0, idx({0, 0, 1}), isrc, "mean")) == V{-1, 3});
  CHECK(test::values(scatter_reduce(iin, 0, idx({0, 0, 1}), isrc, "amax", false)) == V{-1, 7});
  // NaN wins in amax/amin, wherever it comes from.
  Tensor nsrc = Tensor::from_vector(V{1, NAN, 2});
  std::vector<double> m = test::values(scatter_reduce(Tensor::from_vector(V{0, NAN, 0}), 0, idx({0, 0, 2}), nsrc, "amax"));
  CHECK(std::isnan(m[0]));
  CHECK(std::isnan(m[1]));
  CHECK(m[2] == 2);
}

TEST_CASE("scatter_reduce against a float64 loop: every reduce, include_self, duplicates, dtypes") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  const Shape xs{4, 5, 3}, is{3, 9, 2}, ss{3, 10, 3};  // index longer than x along dim 1
  const std::int64_t dim = 1;
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::i64, DType::i32})
    for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
      for (bool include_self : {true, false}) {
        INFO(to_string(dt) << " " << reduce << " include_self " << include_self);
        const bool integral = !is_floating_point(dt);
        // Small integers (exact in every dtype, products too) for 16-bit and integer dtypes.
        auto draw = [&](std::int64_t n) {
          V v(static_cast<std::size_t>(n));
          std::uniform_int_distribution<int> small(-3, 3);
          std::normal_distribution<double> normal;
          for (double& e : v) e = (integral || dt == DType::bf16) ? small(rng) : normal(rng);
          return v;
        };
        V x = draw(test::numel_of(xs)), src = draw(test::numel_of(ss));
        std::uniform_int_distribution<std::int64_t> pick(0, xs[1] - 1);
        Idx index(static_cast<std::size_t>(test::numel_of(is)));
        for (auto& k : index) k = pick(rng);
        Tensor got = scatter_reduce(Tensor::from_vector(x, xs).to(dt), dim, idx(index, is),
                                    Tensor::from_vector(src, ss).to(dt), reduce, include_self);
        CHECK(got.dtype() == dt);
        CHECK(got.shape() == xs);
        const std::string r = reduce;
        // Reference inputs as the dtype holds them.
        V xr = test::values(Tensor::from_vector(x, xs).to(dt)), sr = test::values(Tensor::from_vector(src, ss).to(dt));
        V want = reference(xr, xs, index, is, sr, ss, dim, r, include_self, integral);
        testing::CloseOptions o = test::close_options(test::Computed::rounded_per_add, dt);
        if (dt == DType::f32) o = {.rtol = 1e-5, .atol = 1e-6};  // a few roundings per element
        if (dt == DType::f64) o = {.rtol = 1e-13, .atol = 1e-13};
        if (dt == DType::bf16 && r == "mean") o = test::close_options(test::Computed::rounded, dt);  // one rounding
        check_values(got, want, o);
      }
}

TEST_CASE("index_add, index_copy, index_fill, index_put: PyTorch's examples") {
  Tensor t = Tensor::from_vector(V{1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3}).to(DType::f32);
  Tensor index = idx({0, 4, 2});
  CHECK(test::values(index_add(ones({5, 3}), 0, index, t)) == V{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7});
  CHECK(test::values(ones({5, 3}).index_add(0, index, t, 2)) == V{3, 5, 7, 1, 1, 1, 15, 17, 19, 1, 1, 1, 9, 11, 13});
  CHECK(test::values(index_add(zeros({2}), 0, idx({1, 1, 1}), ones({3}))) == V{0, 3});  // repeats add up
  CHECK(test::values(index_add(zeros({3, 2}), 1, idx({1}, {1}).to(DType::i32), ones({3, 1}))) == V{0, 1, 0, 1, 0, 1});
  CHECK(test::values(index_copy(zeros({5, 3}), 0, index, t)) == V{1, 2, 3, 0, 0, 0, 7, 8, 9, 0, 0, 0, 4, 5, 6});
  CHECK(test::values(t.index_fill(1, idx({0, 2}), -1)) == V{-1, 2, -1, -1, 5, -1, -1, 8, -1});
  CHECK(test::values(index_fill(test::make(DType::i64, {1, 2, 3}), 0, idx({1}).reshape({}), 7)) == V{1, 7, 3});
  CHECK(test::values(index_fill(zeros({3}), 0, idx({-1}), 2.0)) == V{0, 0, 2});  // negative indices wrap, as PyTorch's
  Tensor z = zeros({5});
  CHECK(test::values(index_put(z, {idx({0, 0, 2})}, ones({3}), true)) == V{2, 0, 1, 0, 0});
  CHECK(test::values(z.index_put({idx({3})}, full({}, 4.0))) == V{0, 0, 0, 4, 0});
  CHECK(test::values(z) == V{0, 0, 0, 0, 0});  // out of place
}

TEST_CASE("scatter family: errors name the op, the shapes and the dtypes") {
  Tensor x = zeros({3, 4}), src = ones({3, 4});
  CHECK_BRRR_ERROR(scatter_reduce(x, 0, idx({0}, {1, 1}), src, "max"), ErrorKind::value, "scatter_reduce", "\"max\"");
  CHECK_BRRR_ERROR(scatter(x, 0, idx({0}, {1, 1}).to(DType::i32), src), ErrorKind::dtype, "scatter", "i64");
  CHECK_BRRR_ERROR(scatter(x, 0, idx({0}, {1, 1}), src.to(DType::f64)), ErrorKind::dtype, "scatter", "f64");
  CHECK_BRRR_ERROR(scatter(x, 0, idx({0, 0, 0, 0, 0}, {1, 5}), src), ErrorKind::shape, "scatter");
  CHECK_BRRR_ERROR(scatter_reduce(x, 0, idx({0}, {1}), src, "sum"), ErrorKind::shape, "scatter_reduce");
  CHECK_BRRR_ERROR(scatter(x, 2, idx({0}, {1, 1}), src), ErrorKind::index, "scatter");
  CHECK_BRRR_ERROR(scatter(x, 0, idx({3}, {1, 1}), src), ErrorKind::index, "scatter", "out of range");
  CHECK_BRRR_ERROR(scatter_reduce(x, 1, idx({-1}, {1, 1}), src, "amax"), ErrorKind::index, "scatter_reduce");
  CHECK_BRRR_ERROR(scatter_reduce(x.to(DType::boolean), 0, idx({0}, {1, 1}), src.to(DType::boolean), "sum"),
                   ErrorKind::dtype, "scatter_reduce", "bool");
  CHECK_BRRR_ERROR(index_add(x, 0, idx({0, 1}), ones({3, 4})), ErrorKind::shape, "index_add", "[3, 4]");
  CHECK_BRRR_ERROR(index_add(x, 0, idx({0, 1}), ones({2, 4}, {.dtype = DType::f64})), ErrorKind::dtype, "index_add");
  CHECK_BRRR_ERROR(index_add(x, 0, idx({0, 1}, {1, 2}), ones({2, 4})), ErrorKind::shape, "index_add", "1-D");
  CHECK_BRRR_ERROR(index_add(x, 0, idx({0, 5}), ones({2, 4})), ErrorKind::index, "index_add", "out of range");
  CHECK_BRRR_ERROR(index_copy(x, 1, idx({4}), ones({3, 1})), ErrorKind::index, "index_copy");
  CHECK_BRRR_ERROR(index_fill(x, 0, idx({0}).to(DType::f32), 1.0), ErrorKind::dtype, "index_fill");
  CHECK_BRRR_ERROR(index_fill(x, 1, idx({-5}), 1.0), ErrorKind::index, "index_fill");
  CHECK_BRRR_ERROR(index_fill(x, 3, idx({0}), 1.0), ErrorKind::index, "index_fill");
}

TEST_CASE("scatter family: gradients against central differences") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  auto normal = [&](Shape s) { return Tensor::from_vector(test::normal_values(rng, test::numel_of(s)), s); };
  auto check = [](const std::function<Tensor(const In&)>& f, In in) { CHECK(autograd::gradcheck(f, in)); };
  // Distinct destinations (a permutation per column) for scatter/index_copy: with repeats
  // PyTorch's src gradient (gather) is not the derivative of an overwritten element.
  Tensor perm = argsort(rand({4, 3}), 0).narrow(0, 0, 3);  // [3, 3], distinct rows per column
  check([perm](const In& v) { return scatter(v[0], 0, perm, v[1]); }, {normal({4, 3}), normal({3, 3})});
  check([perm](const In& v) { return scatter(v[0], 0, perm, 2.5); }, {normal({4, 3})});
  Tensor dup = randint(0, 4, {6, 3});
  for (const char* r : {"sum", "mean", "prod", "amax", "amin"})
    for (bool self : {true, false}) {
      INFO(r << " include_self " << self);
      check([dup, r, self](const In& v) { return scatter_reduce(v[0], 0, dup, v[1], r, self); },
            {normal({4, 3}), normal({7, 3})});  // src larger than index: its last row gets 0
    }
  Tensor rows = Tensor::from_vector(Idx{3, 0, 3});
  check([rows](const In& v) { return index_add(v[0], 0, rows, v[1], 0.5); }, {normal({4, 2}), normal({3, 2})});
  check([](const In& v) { return index_copy(v[0], 1, Tensor::from_vector(Idx{2, 0}), v[1]); }, {normal({2, 3}), normal({2, 2})});
  check([](const In& v) { return index_fill(v[0], 1, Tensor::from_vector(Idx{1}), -2.0); }, {normal({2, 3})});
  check([](const In& v) { return index_put(v[0], {Tensor::from_vector(Idx{1, 1})}, v[1], true); }, {normal({3}), normal({2})});
}

TEST_CASE("scatter_reduce prod: the gradient with zeros, by hand") {
  // x = [2], src = [0, 3] into one slot: result 0; d/dx = 0 * 3, d/dsrc = [2 * 3, 2 * 0].
  Tensor x = Tensor::from_vector(V{2}).requires_grad_(), s = Tensor::from_vector(V{0, 3}).requires_grad_();
  Tensor y = scatter_reduce(x, 0, idx({0, 0}), s, "prod");
  y.backward(ones({1}, {.dtype = DType::f64}));
  CHECK(test::values(x.grad()) == V{0});
  CHECK(test::values(s.grad()) == V{6, 0});
  // Two zeros: every gradient is 0; a zero in x: the others' product.
  Tensor x2 = Tensor::from_vector(V{0}).requires_grad_(), s2 = Tensor::from_vector(V{0, 5}).requires_grad_();
  scatter_reduce(x2, 0, idx({0, 0}), s2, "prod").backward(ones({1}, {.dtype = DType::f64}));
  CHECK(test::values(x2.grad()) == V{0});
  CHECK(test::values(s2.grad()) == V{0, 0});
  Tensor x3 = Tensor::from_vector(V{0}).requires_grad_(), s3 = Tensor::from_vector(V{4, 5}).requires_grad_();
  scatter_reduce(x3, 0, idx({0, 0}), s3, "prod").backward(ones({1}, {.dtype = DType::f64}));
  CHECK(test::values(x3.grad()) == V{20});
  CHECK(test::values(s3.grad()) == V{0, 0});
  // amax ties share the gradient evenly.
  Tensor x4 = Tensor::from_vector(V{1}).requires_grad_(), s4 = Tensor::from_vector(V{1, 0}).requires_grad_();
  scatter_reduce(x4, 0, idx({0, 0}), s4, "amax").backward(ones({1}, {.dtype = DType::f64}));
  CHECK(test::values(x4.grad()) == V{0.5});
  CHECK(test::values(s4.grad()) == V{0.5, 0});
}
