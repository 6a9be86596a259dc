// assert_close / allclose: elementwise comparison in f64 on the host.
module;
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
module brrr.testing;
import brrr.tensor;

namespace brrr::testing {

namespace {

struct Tolerance {
  double rtol, atol;
};

Tolerance default_tolerance(DType d) {
  switch (d) {
    case DType::f64: return {1e-7, 1e-7};
    case DType::f32: return {1.3e-6, 1e-5};
    case DType::f16: return {1e-3, 1e-5};
    case DType::bf16: return {1.6e-2, 1e-5};
    case DType::i32: case DType::i64: case DType::boolean: return {0, 0};
  }
  return {0, 0};
}

struct Report {
  std::int64_t failures = 0;
  std::int64_t worst = -1;
  double worst_excess = -1;  // |diff| - tol at the worst element
  double actual = 0, expected = 0, tol = 0;
};

std::string index_text(std::int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return to_string(idx);
}

Report compare(const Tensor& actual, const Tensor& expected, const CloseOptions& o) {
  Tolerance ta = default_tolerance(actual.dtype()), te = default_tolerance(expected.dtype());
  double rtol = o.rtol.value_or(std::max(ta.rtol, te.rtol));
  double atol = o.atol.value_or(std::max(ta.atol, te.atol));
  std::vector<double> a = actual.to(DType::f64).to(Device::cpu()).to_host<double>();
  std::vector<double> e = expected.to(DType::f64).to(Device::cpu()).to_host<double>();
  Report r;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double x = a[i], y = e[i];
    bool ok;
    double excess;
    if (std::isnan(x) || std::isnan(y)) {
      ok = o.equal_nan && std::isnan(x) && std::isnan(y);
      excess = ok ? 0 : INFINITY;
    } else if (std::isinf(x) || std::isinf(y)) {
      ok = x == y;
      excess = ok ? 0 : INFINITY;
    } else {
      double tol = atol + rtol * std::fabs(y);
      excess = std::fabs(x - y) - tol;
      ok = excess <= 0;
    }
    if (!ok) {
      ++r.failures;
      if (excess > r.worst_excess) {
        r.worst_excess = excess;
        r.worst = static_cast<std::int64_t>(i);
        r.actual = x;
        r.expected = y;
        r.tol = atol + rtol * std::fabs(y);
      }
    }
  }
  return r;
}

}  // namespace

void assert_close(const Tensor& actual, const Tensor& expected, CloseOptions options) {
  if (!actual.defined() || !expected.defined())
    throw Error(ErrorKind::value, "assert_close: undefined tensor");
  if (actual.shape() != expected.shape())
    throw Error(ErrorKind::shape, "assert_close: shapes differ: actual " + to_string(actual.shape()) + " vs expected " +
                                      to_string(expected.shape()));
  Report r = compare(actual, expected, options);
  if (r.failures == 0) return;
  std::ostringstream msg;
  msg.precision(9);
  msg << "assert_close: " << r.failures << " of " << actual.numel() << " elements differ (actual "
      << to_string(actual.dtype()) << " on " << actual.device().str() << ", expected " << to_string(expected.dtype())
      << " on " << expected.device().str() << "); worst at index " << index_text(r.worst, actual.shape())
      << ": actual " << r.actual << ", expected " << r.expected << ", |diff| " << std::fabs(r.actual - r.expected)
      << " > tolerance " << r.tol;
  throw Error(ErrorKind::value, msg.str());
}

bool allclose(const Tensor& actual, const Tensor& expected, CloseOptions options) {
  if (!actual.defined() || !expected.defined() || actual.shape() != expected.shape()) return false;
  return compare(actual, expected, options).failures == 0;
}

}  // namespace brrr::testing
