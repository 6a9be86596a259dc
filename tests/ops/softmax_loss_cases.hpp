// Helpers of the CPU softmax, loss and layer_norm suites (tests/ops/test_softmax.cpp,
// test_losses.cpp, test_layer_norm.cpp): float64 references and tolerances. Include after
// `import brrr;`, tests/tensor/helpers.hpp and tests/tolerances.hpp.
#pragma once

namespace softmax_loss_test {

using namespace brrr;
using namespace test;

using V = std::vector<double>;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

// NaN matches NaN, infinities must be equal; otherwise |got - want| <= atol + rtol |want|.
inline void check_close(const V& got, const V& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", want ", want[i]);
    if (std::isnan(want[i])) {
      CHECK(std::isnan(got[i]));
    } else if (std::isinf(want[i])) {
      CHECK(got[i] == want[i]);
    } else {
      CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
    }
  }
}

using test::Tol;
inline Tol tol_for(DType d) { return test::tolerance(test::Computed::reduction, d); }  // tests/tolerances.hpp

// softmax / log_softmax of row-major `x` of `shape` along `dim`, in double.
inline V ref_softmax(const V& x, const Shape& shape, std::int64_t dim, bool log) {
  const std::int64_t nd = static_cast<std::int64_t>(shape.size());
  if (nd == 0) return {log ? 0.0 : 1.0};
  if (dim < 0) dim += nd;
  std::int64_t outer = 1, inner = 1;
  for (std::int64_t d = 0; d < dim; ++d) outer *= shape[d];
  for (std::int64_t d = dim + 1; d < nd; ++d) inner *= shape[d];
  const std::int64_t len = shape[dim];
  V y(x.size());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t k) { return static_cast<std::size_t>((o * len + k) * inner + i); };
      double m = -inf;
      for (std::int64_t k = 0; k < len; ++k) m = std::max(m, x[at(k)]);
      double s = 0;
      for (std::int64_t k = 0; k < len; ++k) s += std::exp(x[at(k)] - m);
      for (std::int64_t k = 0; k < len; ++k) y[at(k)] = log ? x[at(k)] - m - std::log(s) : std::exp(x[at(k)] - m) / s;
    }
  return y;
}

// Per-sample cross entropy of logits [N, C] (row-major) with label smoothing e; ignored
// samples give 0 and are flagged in `counted`.
struct CeRef {
  V per_sample;
  std::int64_t counted = 0;
};
inline CeRef ref_cross_entropy(const V& logits, std::int64_t n, std::int64_t c, const std::vector<std::int64_t>& target,
                        std::int64_t ignore, double e) {
  CeRef r;
  V lp = ref_softmax(logits, {n, c}, 1, true);
  for (std::int64_t i = 0; i < n; ++i) {
    if (target[static_cast<std::size_t>(i)] == ignore) {
      r.per_sample.push_back(0.0);
      continue;
    }
    ++r.counted;
    double nll = -lp[static_cast<std::size_t>(i * c + target[static_cast<std::size_t>(i)])];
    double smooth = 0;
    for (std::int64_t k = 0; k < c; ++k) smooth -= lp[static_cast<std::size_t>(i * c + k)];
    smooth /= static_cast<double>(c);
    r.per_sample.push_back((1 - e) * nll + e * smooth);
  }
  return r;
}

inline double sum_of(const V& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

inline Tensor i64_tensor(const std::vector<std::int64_t>& v, Shape shape = {}) { return Tensor::from_vector(v, std::move(shape)); }

inline std::vector<std::int64_t> random_targets(std::mt19937_64& rng, std::int64_t n, std::int64_t c) {
  std::uniform_int_distribution<std::int64_t> dist(0, c - 1);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = dist(rng);
  return t;
}

}  // namespace softmax_loss_test
