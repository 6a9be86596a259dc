// matmul on the CPU: values against a float64 reference computed here (NumPy semantics:
// 1-D promotion, broadcast batch dims), every dtype, transposed / padded / strided /
// batch-permuted / expanded operands (the no-copy stride mapping and the copying fallback),
// zero sizes, error messages, and gradients against central differences, create_graph
// included.
#include <doctest/doctest.h>

#include <algorithm>
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
#include "tests/ops/gradient_check.hpp"
#include "tests/ops/matmul_reference.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;



// --- the reference ----------------------------------------------------------------------


/// sum_q |a||b| per output element: the scale of a dot product's rounding error.
Ref ref_abs_matmul(V a, const Shape& as, V b, const Shape& bs) {
  for (auto& x : a) x = std::abs(x);
  for (auto& x : b) x = std::abs(x);
  return ref_matmul(a, as, b, bs);
}

// --- operands in different layouts ----------------------------------------------------

enum class Lay { contiguous, transposed, padded, strided, batch_permuted, batch_padded };

const char* lay_name(Lay l) {
  switch (l) {
    case Lay::contiguous: return "contiguous";
    case Lay::transposed: return "transposed";
    case Lay::padded: return "padded";
    case Lay::strided: return "strided";
    case Lay::batch_permuted: return "batch_permuted";
    case Lay::batch_padded: return "batch_padded";
  }
  return "?";
}

/// `x` (contiguous) copied into a tensor with layout `lay` (same shape and values); storage
/// outside the view is poisoned with NaN so a kernel that reads it shows.
Tensor relayout(const Tensor& x, Lay lay) {
  NoGradGuard no_grad;
  Shape s = x.shape();
  std::int64_t nd = x.dim();
  TensorOptions o{.dtype = x.dtype()};
  double nan = std::numeric_limits<double>::quiet_NaN();
  switch (lay) {
    case Lay::contiguous: return x.contiguous();
    case Lay::transposed: {
      if (nd < 2) return x.contiguous();
      Shape st = s;
      std::swap(st[nd - 1], st[nd - 2]);
      Tensor store = full(st, nan, o);
      Tensor v = store.transpose(-1, -2);
      v.copy_(x);
      return v;
    }
    case Lay::padded: {  // rows longer than the matrix: row stride > cols
      Shape st = s;
      st.back() += 3;
      Tensor v = full(st, nan, o).narrow(-1, 1, s.back());
      v.copy_(x);
      return v;
    }
    case Lay::strided: {  // no inner stride of 1: the fallback copy
      Shape st = s;
      st.back() *= 2;
      Tensor v = full(st, nan, o).slice(-1, 0, st.back(), 2);
      v.copy_(x);
      return v;
    }
    case Lay::batch_permuted: {  // batch dims that no single stride walks
      if (nd < 4) return x.contiguous();
      Shape st = s;
      std::swap(st[0], st[1]);
      Tensor v = full(st, nan, o).transpose(0, 1);
      v.copy_(x);
      return v;
    }
    case Lay::batch_padded: {  // batch stride larger than a matrix
      if (nd < 3) return x.contiguous();
      Shape st = s;
      st[nd - 2] += 2;
      Tensor v = full(st, nan, o).narrow(-2, 1, s[nd - 2]);
      v.copy_(x);
      return v;
    }
  }
  return x;
}

/// Whole numbers in [-3, 3]: exact in every dtype, and so are the small sums of products.
V small_ints(std::mt19937_64& rng, std::int64_t n) { return random_ints(rng, static_cast<std::size_t>(n), -3, 3); }

struct ShapeCase {
  Shape a, b;
};

const std::vector<ShapeCase> shape_cases = {
    {{3}, {3}},                     // dot -> []
    {{2, 3}, {3}},                  // matrix-vector -> [2]
    {{3}, {3, 4}},                  // vector-matrix -> [4]
    {{2, 3}, {3, 4}},               // plain
    {{1, 1}, {1, 1}},
    {{1, 5}, {5, 1}},
    {{4, 1}, {1, 3}},               // k = 1: outer product
    {{5, 2, 3}, {3, 4}},            // b without batch dims: folded into one GEMM
    {{2, 3}, {5, 3, 4}},            // a broadcast over b's batch
    {{4, 2, 3}, {4, 3, 1}},
    {{2, 1, 2, 3}, {3, 3, 4}},      // both broadcast: [2, 3, 2, 4]
    {{3, 2, 2, 3}, {3, 2, 3, 2}},   // 2 batch dims, same on both sides
    {{3}, {2, 3, 4}},               // vector times a batch -> [2, 4]
    {{2, 2, 3}, {3}},               // a batch times a vector -> [2, 2]
    {{1, 2, 3}, {4, 3, 2}},         // size-1 batch dim broadcast
};

/// Runs matmul on operands of the given layouts and checks it against the reference.
void check_case(DType dtype, const ShapeCase& c, Lay la, Lay lb, const V& av, const V& bv, test::Tol tol) {
  Tensor a = relayout(make(dtype, av, c.a), la);
  Tensor b = relayout(make(dtype, bv, c.b), lb);
  // The values the test reference sees: the operands' own (rounded to the dtype).
  V ar = values(a), br = values(b);
  Ref want = ref_matmul(ar, c.a, br, c.b);
  Ref scale = ref_abs_matmul(ar, c.a, br, c.b);
  Tensor out = matmul(a, b);
  INFO("dtype ", std::string(to_string(dtype)), " a ", to_string(c.a), " ", std::string(lay_name(la)), " b ",
       to_string(c.b), " ", std::string(lay_name(lb)));
  REQUIRE(out.shape() == want.shape);
  CHECK(out.dtype() == dtype);
  CHECK(out.device() == Device::cpu());
  V got = values(out);
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    double err = std::abs(got[i] - want.values[i]) - tol.rtol * scale.values[i] - tol.atol;
    if (!(err <= 0)) worst = std::max(worst, std::isnan(err) ? 1e300 : err);
  }
  CHECK(worst == 0);
}

const DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// Error allowed per unit of sum|a||b| (tests/tolerances.hpp).
test::Tol tolerance(DType d) { return test::tolerance(test::Computed::gemm, d); }

}  // namespace

TEST_CASE("matmul: every shape case, every float dtype, exact on whole numbers") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (DType dtype : float_dtypes)
    for (const ShapeCase& c : shape_cases) {
      V av = small_ints(rng, numel_of(c.a)), bv = small_ints(rng, numel_of(c.b));
      check_case(dtype, c, Lay::contiguous, Lay::contiguous, av, bv, {});
    }
}

TEST_CASE("matmul: hand-computed values") {
  // [[1, 2, 3], [4, 5, 6]] @ [[7, 8], [9, 10], [11, 12]] = [[58, 64], [139, 154]]
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{7, 8, 9, 10, 11, 12}, {3, 2});
  CHECK(matmul(a, b).to_host<float>() == std::vector<float>{58, 64, 139, 154});
  // The transposed view of b's transpose: same numbers, no copy needed.
  Tensor bt = Tensor::from_vector(std::vector<float>{7, 9, 11, 8, 10, 12}, {2, 3}).t();
  CHECK(matmul(a, bt).to_host<float>() == std::vector<float>{58, 64, 139, 154});
  // dot: 1*4 + 2*5 + 3*6 = 32, a 0-d tensor.
  Tensor d = matmul(Tensor::from_vector(std::vector<double>{1, 2, 3}), Tensor::from_vector(std::vector<double>{4, 5, 6}));
  CHECK(d.dim() == 0);
  CHECK(d.item<double>() == 32.0);
  // matrix-vector and vector-matrix
  Tensor v = Tensor::from_vector(std::vector<float>{1, 0, -1});
  CHECK(matmul(a, v).to_host<float>() == std::vector<float>{-2, -2});
  CHECK(matmul(Tensor::from_vector(std::vector<float>{1, -1}), a).to_host<float>() == std::vector<float>{-3, -3, -3});
}

TEST_CASE("matmul: random values against float64, every layout of both operands") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const Lay lays[] = {Lay::contiguous, Lay::transposed, Lay::padded, Lay::strided, Lay::batch_permuted,
                      Lay::batch_padded};
  for (DType dtype : float_dtypes)
    for (const ShapeCase& c : shape_cases)
      for (Lay la : lays)
        for (Lay lb : lays) {
          V av = normal_values(rng, numel_of(c.a)), bv = normal_values(rng, numel_of(c.b));
          check_case(dtype, c, la, lb, av, bv, tolerance(dtype));
        }
}

TEST_CASE("matmul: larger products, f32 and f64 within rounding of the float64 reference") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const ShapeCase big[] = {{{37, 129}, {129, 65}}, {{3, 33, 70}, {70, 17}}, {{4, 20, 31}, {4, 31, 9}}};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (const ShapeCase& c : big)
      for (Lay la : {Lay::contiguous, Lay::transposed})
        for (Lay lb : {Lay::contiguous, Lay::transposed}) {
          V av = normal_values(rng, numel_of(c.a)), bv = normal_values(rng, numel_of(c.b));
          check_case(dtype, c, la, lb, av, bv, tolerance(dtype));
        }
}

TEST_CASE("matmul: expanded operands (stride-0 batch and stride-0 inner dims)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  // b [3, 4] expanded to a batch of 5 (batch stride 0), a [5, 2, 3].
  Tensor b2 = make(DType::f32, small_ints(rng, 12), {3, 4});
  Tensor a = make(DType::f32, small_ints(rng, 30), {5, 2, 3});
  Tensor bx = b2.unsqueeze(0).expand({5, 3, 4});
  CHECK(bx.stride(0) == 0);
  Ref want = ref_matmul(values(a), a.shape(), values(bx), bx.shape());
  CHECK(values(matmul(a, bx)) == want.values);
  // An inner dim of stride 0 (a column broadcast along k): neither inner stride is 1.
  Tensor col = make(DType::f64, small_ints(rng, 4), {4, 1});
  Tensor ax = col.expand({4, 3});
  Tensor b = make(DType::f64, small_ints(rng, 6), {3, 2});
  want = ref_matmul(values(ax), ax.shape(), values(b), b.shape());
  CHECK(values(matmul(ax, b)) == want.values);
  // Both operands expanded over a batch that neither owns.
  Tensor a1 = make(DType::f64, small_ints(rng, 6), {1, 2, 3}).expand({4, 2, 3});
  Tensor b1 = make(DType::f64, small_ints(rng, 6), {3, 2});
  want = ref_matmul(values(a1), a1.shape(), values(b1), b1.shape());
  CHECK(values(matmul(a1, b1)) == want.values);
}

TEST_CASE("matmul: inputs are not modified and outputs are fresh") {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<double>{5, 6, 7, 8}, {2, 2});
  Tensor out = matmul(a, b.t());
  CHECK(values(a) == V{1, 2, 3, 4});
  CHECK(values(b) == V{5, 6, 7, 8});
  CHECK(!out.storage().is_same(a.storage()));
  CHECK(out.is_contiguous());
  CHECK(values(out) == V{17, 23, 39, 53});
}

TEST_CASE("matmul: zero sizes") {
  // k = 0: an empty sum, all zeros (the output is allocated uninitialised: it must be written).
  for (DType dtype : float_dtypes) {
    Tensor a = empty({3, 0}, {.dtype = dtype});
    Tensor b = empty({0, 4}, {.dtype = dtype});
    Tensor out = matmul(a, b);
    CHECK(out.shape() == Shape{3, 4});
    CHECK(values(out) == V(12, 0.0));
    Tensor dot = matmul(empty({0}, {.dtype = dtype}), empty({0}, {.dtype = dtype}));
    CHECK(dot.dim() == 0);
    CHECK(values(dot) == V{0.0});
    Tensor batched = matmul(empty({2, 3, 0}, {.dtype = dtype}), empty({0, 2}, {.dtype = dtype}));
    CHECK(batched.shape() == Shape{2, 3, 2});
    CHECK(values(batched) == V(12, 0.0));
  }
  // m = 0, n = 0 or batch = 0: empty results of the right shape.
  CHECK(matmul(empty({0, 3}), empty({3, 4})).shape() == Shape{0, 4});
  CHECK(matmul(empty({2, 3}), empty({3, 0})).shape() == Shape{2, 0});
  CHECK(matmul(empty({0, 2, 3}), empty({3, 4})).shape() == Shape{0, 2, 4});
  CHECK(matmul(empty({0, 2, 3}), empty({1, 3, 4})).shape() == Shape{0, 2, 4});
  CHECK(matmul(empty({0}), empty({0, 5})).shape() == Shape{5});
  CHECK(values(matmul(empty({0}), empty({0, 5}))) == V(5, 0.0));
}

TEST_CASE("matmul: errors name the op, the shapes and dtypes") {
  CHECK_BRRR_ERROR(matmul(empty({32, 784}), empty({128, 10})), ErrorKind::shape,
                   "matmul: shapes [32, 784] and [128, 10] cannot be multiplied (784 != 128)");
  // the exact message of DESIGN.md
  try {
    (void)matmul(empty({32, 784}), empty({128, 10}));
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "matmul: shapes [32, 784] and [128, 10] cannot be multiplied (784 != 128)");
  }
  CHECK_BRRR_ERROR(matmul(empty({3}), empty({4})), ErrorKind::shape, "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  CHECK_BRRR_ERROR(matmul(empty({2, 3}), empty({4})), ErrorKind::shape, "[2, 3] and [4]", "(3 != 4)");
  CHECK_BRRR_ERROR(matmul(empty({3}), empty({4, 2})), ErrorKind::shape, "[3] and [4, 2]", "(3 != 4)");
  CHECK_BRRR_ERROR(matmul(empty({2, 2, 3}), empty({3, 3, 4})), ErrorKind::shape, "matmul", "[2, 2, 3]", "[3, 3, 4]",
                   "batch", "[2] vs [3]");
  CHECK_BRRR_ERROR(matmul(empty({}), empty({3})), ErrorKind::shape, "matmul", "at least 1 dim", "[]");
  CHECK_BRRR_ERROR(matmul(empty({2, 2}, {.dtype = DType::i32}), empty({2, 2}, {.dtype = DType::i32})), ErrorKind::dtype,
                   "matmul", "i32");
  CHECK_BRRR_ERROR(matmul(empty({2, 2}, {.dtype = DType::boolean}), empty({2, 2})), ErrorKind::dtype, "matmul", "bool");
  CHECK_BRRR_ERROR(matmul(empty({2, 2}, {.dtype = DType::i64}), empty({2, 2}, {.dtype = DType::f32})), ErrorKind::dtype,
                   "i64");
  CHECK_BRRR_ERROR(matmul(empty({2, 2}), empty({2, 2}, {.dtype = DType::f64})), ErrorKind::dtype, "matmul",
                   "same dtype", "f32", "f64");
  CHECK_BRRR_ERROR(matmul(Tensor(), empty({2, 2})), ErrorKind::value, "matmul", "undefined");
  // mixed devices (Error(device)) are checked in the GPU suite
}

TEST_CASE("matmul: allow_tf32 is off by default and is a plain switch") {
  CHECK(allow_tf32() == false);
  set_allow_tf32(true);
  CHECK(allow_tf32() == true);
  // The CPU computes in f32 either way.
  Tensor a = Tensor::from_vector(std::vector<float>{1.0f + 1.0f / 1024, 1}, {1, 2});
  Tensor b = Tensor::from_vector(std::vector<float>{1.0f + 1.0f / 1024, 0}, {2, 1});
  CHECK(matmul(a, b).item<float>() == (1.0f + 1.0f / 1024) * (1.0f + 1.0f / 1024));
  set_allow_tf32(false);
  CHECK(allow_tf32() == false);
}

TEST_CASE("matmul: no graph without grad; a MatmulBackward node with it") {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  Tensor b = Tensor::from_vector(std::vector<double>{1, 0, 0, 1}, {2, 2});
  CHECK(matmul(a, b).grad_fn().get() == nullptr);
  a.requires_grad_();
  Tensor y = matmul(a, b);
  REQUIRE(y.grad_fn().get() != nullptr);
  CHECK(y.grad_fn()->name() == "MatmulBackward");
  CHECK(y.requires_grad());
  {
    NoGradGuard g;
    CHECK(matmul(a, b).grad_fn().get() == nullptr);
  }
}

TEST_CASE("matmul: gradients against central differences, every shape case") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (const ShapeCase& c : shape_cases) {
    INFO("a ", to_string(c.a), " b ", to_string(c.b));
    check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0], x[1])}; }, {c.a, c.b},
                    rng);
  }
}

TEST_CASE("matmul: gradients through transposed, sliced and expanded operands") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  // a stored as [k, m] and used transposed; b used through a strided slice.
  check_gradients(
      [](const std::vector<Tensor>& x) {
        return std::vector<Tensor>{matmul(x[0].t(), x[1].slice(1, 0, 8, 2))};
      },
      {{3, 2}, {3, 8}}, rng);
  // batched a, transposed batched b, b broadcast over a size-1 batch dim.
  check_gradients(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0], x[1].transpose(-1, -2))}; },
      {{2, 3, 2, 4}, {1, 5, 4}}, rng);
  // an operand expanded by the user (its gradient sums over the expanded dim).
  check_gradients(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0].expand({3, 2, 4}), x[1])}; },
      {{2, 4}, {3, 4, 2}}, rng);
  // the same tensor on both sides: x^T x
  check_gradients([](const std::vector<Tensor>& x) { return std::vector<Tensor>{matmul(x[0].t(), x[0])}; }, {{4, 3}},
                  rng);
  // a chain: (x w1) w2, two outputs
  check_gradients(
      [](const std::vector<Tensor>& x) {
        Tensor h = matmul(x[0], x[1]);
        return std::vector<Tensor>{matmul(h, x[2]), h};
      },
      {{5, 3}, {3, 4}, {4, 2}}, rng);
}

TEST_CASE("matmul: create_graph gives second derivatives") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  // y = a b; ga = dL/da = R b^T (recorded); d<S, ga>/db = S^T R.
  V av = normal_values(rng, 6), bv = normal_values(rng, 12), rv = normal_values(rng, 8), sv = normal_values(rng, 6);
  Tensor a = Tensor::from_vector(av, {2, 3});
  Tensor b = Tensor::from_vector(bv, {3, 4});
  a.requires_grad_();
  b.requires_grad_();
  Tensor r = Tensor::from_vector(rv, {2, 4});
  Tensor s = Tensor::from_vector(sv, {2, 3});
  Tensor y = matmul(a, b);
  std::vector<Tensor> g = autograd::grad({y}, {a}, {r}, false, true);
  REQUIRE(g[0].requires_grad());
  Ref ga = ref_matmul(rv, {2, 4}, values(b.t()), {4, 3});
  V got = values(g[0]);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(ga.values[i]).epsilon(1e-12));
  g[0].backward(s);
  REQUIRE(b.grad().defined());
  Ref want = ref_matmul(values(s.t()), {3, 2}, rv, {2, 4});
  V gb = values(b.grad());
  for (std::size_t i = 0; i < gb.size(); ++i) CHECK(gb[i] == doctest::Approx(want.values[i]).epsilon(1e-12));

  // 1-D . 1-D: y = <u, v>; dy/du = v; d<s, v>/dv = s.
  Tensor u = Tensor::from_vector(V{1, 2, 3});
  Tensor v = Tensor::from_vector(V{4, 5, 6});
  u.requires_grad_();
  v.requires_grad_();
  Tensor dot = matmul(u, v);
  std::vector<Tensor> gu = autograd::grad({dot}, {u}, {}, false, true);
  CHECK(values(gu[0]) == V{4, 5, 6});
  gu[0].backward(Tensor::from_vector(V{1, -1, 2}));
  CHECK(values(v.grad()) == V{1, -1, 2});
}

TEST_CASE("matmul: backward with bf16/f16/f32 gives gradients of the input dtype") {
  for (DType dtype : float_dtypes) {
    Tensor a = make(dtype, {1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor b = make(dtype, {1, 0, 0, 1, 1, 1}, {3, 2});
    a.requires_grad_();
    b.requires_grad_();
    Tensor y = matmul(a, b);
    y.backward(make(dtype, {1, 1, 1, 1}, {2, 2}));
    CHECK(a.grad().dtype() == dtype);
    CHECK(b.grad().dtype() == dtype);
    // ga = R b^T = rows of [1, 1, 2]; gb = a^T R = column sums [5, 7, 9] repeated.
    CHECK(values(a.grad()) == V{1, 1, 2, 1, 1, 2});
    CHECK(values(b.grad()) == V{5, 5, 7, 7, 9, 9});
  }
}

TEST_CASE("matmul: autograd::gradcheck, every shape case") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (const ShapeCase& c : shape_cases) {
    INFO("a ", to_string(c.a), " b ", to_string(c.b));
    std::vector<Tensor> inputs = {f64_tensor(normal_values(rng, numel_of(c.a)), c.a),
                                  f64_tensor(normal_values(rng, numel_of(c.b)), c.b)};
    CHECK(autograd::gradcheck([](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
                              inputs));
  }
}

TEST_CASE("the central-difference helper catches a wrong gradient") {
  std::mt19937_64 rng(7);
  double worst = check_gradients(
      [](const std::vector<Tensor>& x) {
        Tensor out = matmul(x[0].detach(), x[1].detach());
        if (autograd::any_requires_grad({x[0]})) {
          Tensor wrong = x[0].detach().clone();
          // A deliberately wrong backward rule: the gradient scaled by 1.01.
          autograd::record("WrongBackward", {x[0]}, {wrong},
                           [](const autograd::Backward& b) { return autograd::Grads{mul(b.grad(), 1.01)}; });
          out = matmul(wrong, x[1]);
        }
        return std::vector<Tensor>{out};
      },
      {{2, 3}, {3, 2}}, rng, 1e-6, 1e-7, false);
  CHECK(worst > 1e-3);
}
