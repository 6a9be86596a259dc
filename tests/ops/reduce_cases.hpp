// Helpers of the CPU reduction suites (tests/ops/test_reduce.cpp, test_reduce_stats.cpp):
// the float64 reference reduction and value checks. Include after `import brrr;`,
// tests/tensor/helpers.hpp and tests/tolerances.hpp.
#pragma once

namespace reduce_test {

using namespace brrr;
using namespace test;

using V = std::vector<double>;
using Dims = std::vector<std::int64_t>;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

inline Tensor f64_tensor(const V& v, const Shape& shape) {
  if (shape.empty()) return full({}, v.at(0), {.dtype = DType::f64});
  return Tensor::from_vector(v, shape);
}

// --- the float64 reference -------------------------------------------------------------

enum class RefOp { sum, max, min };

struct Ref {
  V values;
  std::vector<std::int64_t> indices;  // max/min with one reduced dim: index along it
  Shape shape;                        // after keepdim
  std::vector<std::int64_t> counts;   // elements reduced into each output
};

inline std::uint32_t ref_mask(const Dims& dims, std::size_t nd) {
  if (dims.empty()) return nd == 0 ? 0u : static_cast<std::uint32_t>((1ull << nd) - 1);
  std::uint32_t m = 0;
  for (auto d : dims) m |= 1u << static_cast<std::size_t>(d < 0 ? d + static_cast<std::int64_t>(nd) : d);
  return m;
}

inline Ref reference(RefOp op, const V& x, const Shape& shape, const Dims& dims, bool keepdim) {
  std::size_t nd = shape.size();
  std::uint32_t mask = ref_mask(dims, nd);
  Shape kshape;
  for (std::size_t d = 0; d < nd; ++d) kshape.push_back(mask & (1u << d) ? 1 : shape[d]);
  std::int64_t n_out = numel_of(kshape);
  Ref r;
  r.values.assign(static_cast<std::size_t>(n_out), op == RefOp::sum ? 0.0 : nan_v);
  r.indices.assign(static_cast<std::size_t>(n_out), -1);
  r.counts.assign(static_cast<std::size_t>(n_out), 0);
  std::vector<std::int64_t> idx(nd, 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    std::int64_t o = 0, along = 0;
    for (std::size_t d = 0; d < nd; ++d) {
      if (mask & (1u << d)) along = idx[d];
      o = o * kshape[d] + ((mask & (1u << d)) ? 0 : idx[d]);
    }
    auto k = static_cast<std::size_t>(o);
    double v = x[i];
    double& a = r.values[k];
    std::int64_t& ai = r.indices[k];
    if (op == RefOp::sum) {
      a += v;
    } else if (ai < 0 || (!std::isnan(a) && (std::isnan(v) || (op == RefOp::max ? v > a : v < a)))) {
      a = v;
      ai = along;
    }
    ++r.counts[k];
    for (std::size_t d = nd; d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  for (std::size_t d = 0; d < nd; ++d)
    if (!(mask & (1u << d)) || keepdim) r.shape.push_back(kshape[d]);
  return r;
}

inline void check_close(const V& got, const V& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CAPTURE(got[i]);
    CAPTURE(want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

// Layouts of one logical [A, B, C] input: contiguous, transposed (permuted storage),
// sliced with a step, and expanded from a size-1 dim.
struct Variant {
  const char* name;
  Tensor t;
};

inline std::vector<Variant> layouts(const Tensor& base) {
  // base: [A, B, C] contiguous. Each variant holds the same values in another layout.
  std::vector<Variant> v;
  v.push_back({"contiguous", base});
  v.push_back({"transposed", base.permute({2, 0, 1}).contiguous().permute({1, 2, 0})});
  {
    Shape big = base.shape();
    big[2] *= 2;
    Tensor wide = zeros(big, {.dtype = base.dtype()});
    // every second column holds base
    Tensor view = wide.slice(2, 0, big[2], 2);
    view.copy_(base);
    v.push_back({"sliced", view});
  }
  return v;
}

// --- gradients against central differences -------------------------------------------------

using Fn = std::function<Tensor(const Tensor&)>;

// Checks d/dx <R, f(x)> from backward() against central differences in f64, at `x0`.
inline void check_gradient(const Fn& f, const V& x0, const Shape& shape, std::mt19937_64& rng, double eps = 1e-6,
                    double tol = 1e-6) {
  Tensor x = f64_tensor(x0, shape);
  x.requires_grad_();
  Tensor out = f(x);
  REQUIRE(out.requires_grad());
  V rv = normal_values(rng, out.numel());
  Tensor r = f64_tensor(rv, out.shape());
  out.backward(r);
  REQUIRE(x.grad().defined());
  V analytic = values(x.grad());
  REQUIRE(x.grad().shape() == shape);
  auto loss = [&](const V& xv) {
    NoGradGuard no_grad;
    V o = values(f(f64_tensor(xv, shape)));
    double l = 0;
    for (std::size_t i = 0; i < o.size(); ++i) l += o[i] * rv[i];
    return l;
  };
  for (std::size_t i = 0; i < x0.size(); ++i) {
    V p = x0, m = x0;
    p[i] += eps;
    m[i] -= eps;
    double numeric = (loss(p) - loss(m)) / (2 * eps);
    CAPTURE(i);
    CAPTURE(numeric);
    CAPTURE(analytic[i]);
    CHECK(std::abs(numeric - analytic[i]) <= tol * (1 + std::abs(numeric)));
  }
}

}  // namespace reduce_test
