// The math of the scans and of the sort order, written once for both backends (plain C++
// compiled by clang and by nvcc), as ops/elementwise_math.hpp is for elementwise ops.
// A = accumulate_t (backend/contract.hpp): float for f32/f16/bf16, double for f64, int64
// for integers and bool.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/contract.hpp"

namespace brrr::scan_math {

using backend::ScanOp;

template <auto OP> inline constexpr bool no_math_for = false;

template <class A> BRRR_HD bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

/// The running value after `x` joins `acc` (acc is the previous output of the line).
/// cummax/cummin: NaN wins once seen (and stays); otherwise x takes over on >= / <=.
template <ScanOp OP, class A> BRRR_HD A combine(A acc, A x) {
  if constexpr (OP == ScanOp::cumsum) return acc + x;
  else if constexpr (OP == ScanOp::cumprod) return acc * x;
  else if constexpr (OP == ScanOp::cummax) return (is_nan(acc) || (!is_nan(x) && acc > x)) ? acc : x;
  else if constexpr (OP == ScanOp::cummin) return (is_nan(acc) || (!is_nan(x) && acc < x)) ? acc : x;
  else if constexpr (OP == ScanOp::logcumsumexp) {
    if constexpr (std::is_floating_point_v<A>) {
      using std::exp, std::log1p;
      if (is_nan(acc) || is_nan(x)) return acc + x;
      const A hi = acc > x ? acc : x, lo = acc > x ? x : acc;
      if (lo == -std::numeric_limits<A>::infinity() || hi == lo) {
        if (hi == lo && hi != -std::numeric_limits<A>::infinity() && hi != std::numeric_limits<A>::infinity())
          return hi + log1p(exp(lo - hi));
        return hi;  // -inf joins, or both +-inf
      }
      return hi + log1p(exp(lo - hi));
    } else {
      return acc;  // floating only (the op layer converts integers)
    }
  } else static_assert(no_math_for<OP>, "an op of BRRR_SCAN_OPS has no math in ops/scan_sort_math.hpp");
}

/// The scans with an identity (combined first, it leaves every value as it is), which the
/// chunked CUDA scan starts from: -0.0 for cumsum (so a lone -0.0 stays -0.0), 1 for cumprod,
/// -inf for logcumsumexp. cummax/cummin have none in use (their NaN and index rules).
template <ScanOp OP> inline constexpr bool has_identity =
    OP == ScanOp::cumsum || OP == ScanOp::cumprod || OP == ScanOp::logcumsumexp;
template <ScanOp OP, class A> BRRR_HD A identity() {
  static_assert(has_identity<OP>, "this scan has no identity");
  if constexpr (OP == ScanOp::cumprod) return A(1);
  else if constexpr (!std::is_floating_point_v<A>) return A(0);
  else if constexpr (OP == ScanOp::cumsum) return A(-0.0);
  else return -std::numeric_limits<A>::infinity();
}

/// cummax/cummin: whether element x (of value x) is the running extreme `y` at its position
/// (so its index becomes the running index): equal, or both NaN.
template <class A> BRRR_HD bool is_running_extreme(A x, A y) { return x == y || (is_nan(x) && is_nan(y)); }

/// An unsigned key whose order is the sort order of T: integers by value, floats by value
/// with -0.0 equal to 0.0 and every NaN above +inf (PyTorch's sort order), bool as 0/1.
template <class T> struct SortKey {
  using type = std::conditional_t<sizeof(T) == 1, std::uint8_t,
               std::conditional_t<sizeof(T) == 2, std::uint16_t,
               std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;
};
template <class T> using sort_key_t = typename SortKey<T>::type;

/// The key of one element; `is_nan_v` / `is_zero` describe it (16-bit floats cannot be
/// compared here without their types, so the caller passes them).
template <class T> BRRR_HD sort_key_t<T> sort_key(T v, bool is_float, bool nan, bool zero) {
  using U = sort_key_t<T>;
  constexpr U sign = U(U(1) << (sizeof(U) * 8 - 1));
  U u;
  std::memcpy(&u, &v, sizeof(U));
  if (sizeof(T) == 1) return u;  // bool (uint8 0/1)
  if (!is_float) return U(u ^ sign);  // two's complement -> offset binary
  if (nan) return U(~U(0));
  if (zero) u = 0;  // -0.0 -> +0.0
  return (u & sign) ? U(~u) : U(u | sign);
}

/// sort_key of an element of any element type (the 16-bit floats compared through load()).
template <class T> BRRR_HD sort_key_t<T> sort_key_of(T v) {
  constexpr bool is_float = backend::is_floating<T>;
  const auto w = backend::load(v);
  bool nan = false, zero = false;
  if constexpr (is_float) {
    nan = w != w;
    zero = w == 0;
  }
  return sort_key<T>(v, is_float, nan, zero);
}

}  // namespace brrr::scan_math
