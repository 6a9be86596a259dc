// The helpers of the edge-semantics cases (tests/ops/edge_semantics_cases.hpp): comparisons
// that treat NaN and infinities exactly, inputs rounded to the dtype, results to compare
// across devices.
#pragma once

#include "tests/tolerances.hpp"

namespace edge {

using namespace brrr;
using namespace test;
using V = std::vector<double>;

inline constexpr double inf = std::numeric_limits<double>::infinity();
inline constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
inline constexpr DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

using test::Tol;
inline constexpr Tol exact{};

/// Rounding of one result in `d` (the CPU computes in double and rounds once; CUDA computes
/// bf16/f16/f32 in f32): tests/tolerances.hpp.
inline Tol tol_of(DType d) { return test::tolerance(test::Computed::accumulated, d); }

/// NaN matches only NaN, an infinity only the same infinity, finite values within tolerance.
inline bool same_value(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  if (!std::isfinite(got)) return false;
  return std::abs(got - want) <= t.atol + t.rtol * std::abs(want);
}

inline void expect(const V& got, const V& want, Tol t, const std::string& what) {
  INFO(what);
  CHECK(got.size() == want.size());
  if (got.size() != want.size()) return;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (same_value(got[i], want[i], t)) continue;
    if (++bad <= 4) CHECK_MESSAGE(false, "element " << i << ": got " << got[i] << ", want " << want[i]);
  }
  CHECK_MESSAGE(bad == 0, bad << " of " << got.size() << " elements differ");
}

inline void expect(const Tensor& got, const V& want, Tol t, const std::string& what) {
  expect(values(got), want, t, what);
}

/// make() for any shape, 0-d included (make() reads an empty shape as 1-D).
inline Tensor make_as(DType dt, const V& v, const Shape& shape) {
  return shape.empty() ? make(dt, v).reshape({}) : make(dt, v, shape);
}

/// A fresh leaf requiring grad on `dev` holding `v` rounded to `dt`.
inline Tensor leaf(DType dt, const V& v, const Shape& shape, Device dev) {
  Tensor t = make_as(dt, v, shape).to(dev);
  t.requires_grad_();
  return t;
}

inline V normal(std::mt19937_64& rng, std::size_t n, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  V v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

using test::numel_of;

inline std::string name_of(DType d) { return to_string(d); }

/// Named tensors a random case produced (outputs and gradients), for the CPU/GPU comparison.
struct Result {
  std::string what;
  Tensor value;
};
using Results = std::vector<Result>;

}  // namespace edge
