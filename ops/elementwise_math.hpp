// The math of every elementwise op, written once for both backends: plain C++ compiled by
// clang (CPU kernels) and by nvcc (CUDA kernels). A = the arithmetic type (compute_t in
// backend/contract.hpp: float for f32/f16/bf16, double for f64, int32_t/int64_t for
// integers; bool math is done in int64). Each op of BRRR_UNARY_OPS / BRRR_BINARY_OPS has its
// branch here; an op without one fails to compile on both backends (the static_asserts).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/contract.hpp"
#include "ops/activation_math.hpp"

namespace brrr::elementwise {

using backend::BinaryOp;
using backend::UnaryOp;

template <auto OP> inline constexpr bool no_math_for = false;

/// Element types a unary op has a kernel for: floating ones, and integers (not bool) for
/// the ops that keep them (the op layer converts everything else first).
template <UnaryOp OP, class T> inline constexpr bool has_unary_kernel =
    backend::is_floating<T> || (backend::keeps_integers(OP) && !backend::is_bool_storage<T>);

/// clamp's bound `v` in the arithmetic type A: for integers rounded inward (a lower bound
/// up, an upper bound down) and saturated at A's range (a bound past the other end of the
/// range too: the cast would be undefined).
template <class A> BRRR_HD A clamp_bound(double v, bool upper) {
  if constexpr (std::is_floating_point_v<A>) {
    return static_cast<A>(v);
  } else {
    using std::ceil, std::floor;
    constexpr A min = std::numeric_limits<A>::lowest(), max = std::numeric_limits<A>::max();
    if (v <= static_cast<double>(min)) return min;
    if (v >= static_cast<double>(max)) return max;
    return static_cast<A>(upper ? floor(v) : ceil(v));
  }
}

template <class A> BRRR_HD A ipow(A base, A exp) {  // integer power by squaring (exp >= 0)
  // Unsigned arithmetic: overflow wraps (as PyTorch's integer pow does) instead of being UB.
  using U = std::make_unsigned_t<A>;
  U result = 1, b = static_cast<U>(base);
  while (exp > 0) {
    if (exp & 1) result *= b;
    exp >>= 1;
    if (exp > 0) b *= b;
  }
  return static_cast<A>(result);
}

/// f(x) of a unary op. Floating-only ops (Integers::promote) are instantiated for floating A
/// only; clamp's bounds are lo/hi.
template <UnaryOp OP, class A> BRRR_HD A unary(A x, A lo, A hi) {
  using std::abs, std::exp, std::log, std::log1p, std::sqrt, std::tanh, std::sin, std::cos, std::erf;
  if constexpr (OP == UnaryOp::neg) return -x;
  else if constexpr (OP == UnaryOp::abs) return x < A(0) ? -x : (x == A(0) ? A(0) : x);  // abs(-0.0) = +0.0
  else if constexpr (OP == UnaryOp::relu) return x <= A(0) ? A(0) : x;  // NaN stays NaN
  else if constexpr (is_activation<OP>) return activation<OP, A>(x, lo, hi);
  else if constexpr (OP == UnaryOp::sign) return A((A(0) < x) - (x < A(0)));
  else if constexpr (OP == UnaryOp::clamp) {
    if constexpr (std::is_floating_point_v<A>)
      if (x != x) return x;  // NaN propagates
    A r = x < lo ? lo : x;  // min(max(x, lo), hi): hi wins when lo > hi, as in PyTorch
    return r > hi ? hi : r;
  } else if constexpr (OP == UnaryOp::exp) return exp(x);
  else if constexpr (OP == UnaryOp::log) return log(x);
  else if constexpr (OP == UnaryOp::log1p) return log1p(x);
  else if constexpr (OP == UnaryOp::sqrt) return sqrt(x);
  else if constexpr (OP == UnaryOp::rsqrt) return A(1) / sqrt(x);
  else if constexpr (OP == UnaryOp::tanh) return tanh(x);
  else if constexpr (OP == UnaryOp::sigmoid) return A(1) / (A(1) + exp(-x));
  else if constexpr (OP == UnaryOp::gelu_tanh) {
    const A k = A(0.7978845608028654);  // sqrt(2 / pi)
    return A(0.5) * x * (A(1) + tanh(k * (x + A(0.044715) * x * x * x)));
  } else if constexpr (OP == UnaryOp::gelu_erf) return A(0.5) * x * (A(1) + erf(x * A(0.7071067811865476)));
  else if constexpr (OP == UnaryOp::silu) return x / (A(1) + exp(-x));
  else if constexpr (OP == UnaryOp::sin) return sin(x);
  else if constexpr (OP == UnaryOp::cos) return cos(x);
  else if constexpr (OP == UnaryOp::erf) return erf(x);
  else static_assert(no_math_for<OP>, "an op of BRRR_UNARY_OPS has no math in ops/elementwise_math.hpp");
}

/// floor_divide, trunc_divide, remainder, fmod: PyTorch's definitions (ATen's
/// div_floor_floating and remainder kernels). Floats: floor division computed from fmod, so
/// that a == b * q + r holds as closely as IEEE allows; a zero divisor gives inf/NaN.
/// Integers: C++ truncating division, adjusted toward -inf for floor and for the remainder's
/// sign (the divisor's); b == 0 returns 0 (the op layer or the kernel reports the error);
/// b == -1 avoids the overflow trap of INT_MIN / -1 (the quotient wraps, as PyTorch's).
template <BinaryOp OP, class A> BRRR_HD A rounding_division(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    using std::fmod, std::floor, std::trunc, std::copysign;
    if constexpr (OP == BinaryOp::fmod) return fmod(a, b);
    else if constexpr (OP == BinaryOp::trunc_divide) return trunc(a / b);
    else if constexpr (OP == BinaryOp::remainder) {
      A r = fmod(a, b);
      if (r != A(0) && ((b < A(0)) != (r < A(0)))) r += b;
      return r;
    } else {
      if (b == A(0)) return a / b;
      A r = fmod(a, b);
      A q = (a - r) / b;
      if (r != A(0) && ((b < A(0)) != (r < A(0)))) q -= A(1);
      if (q == A(0)) return copysign(A(0), a / b);
      A f = floor(q);
      if (q - f > A(0.5)) f += A(1);
      return f;
    }
  } else {
    if (b == 0) return A(0);
    using U = std::make_unsigned_t<A>;
    A q = b == -1 ? static_cast<A>(U(0) - static_cast<U>(a)) : a / b;  // wraps at the minimum
    A r = b == -1 ? A(0) : a % b;
    if constexpr (OP == BinaryOp::trunc_divide) return q;
    else if constexpr (OP == BinaryOp::fmod) return r;
    else if constexpr (OP == BinaryOp::remainder) return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    else return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
  }
}

/// Result of a binary op in A (comparisons return 0/1).
template <BinaryOp OP, class A> BRRR_HD A binary(A a, A b) {
  if constexpr (OP == BinaryOp::add) return a + b;
  else if constexpr (OP == BinaryOp::sub) return a - b;
  else if constexpr (OP == BinaryOp::mul) return a * b;
  else if constexpr (OP == BinaryOp::div) {
    if constexpr (std::is_floating_point_v<A>) return a / b;
    else return b == 0 ? A(0) : a / b;  // integer division is checked by the op layer
  } else if constexpr (OP == BinaryOp::pow) {
    if constexpr (std::is_floating_point_v<A>) {
      using std::pow;
      return pow(a, b);
    } else return b < 0 ? A(0) : ipow(a, b);
  } else if constexpr (backend::is_rounding_division(OP)) {
    return rounding_division<OP>(a, b);
  } else if constexpr (OP == BinaryOp::relu_backward) {
    return b <= A(0) ? A(0) : a;  // 0 at the kink; NaN passes the gradient (threshold_backward)
  } else if constexpr (OP == BinaryOp::maximum) {
    if constexpr (std::is_floating_point_v<A>)
      if (a != a || b != b) return a + b;  // NaN propagates
    return a > b ? a : b;
  } else if constexpr (OP == BinaryOp::minimum) {
    if constexpr (std::is_floating_point_v<A>)
      if (a != a || b != b) return a + b;
    return a < b ? a : b;
  } else if constexpr (OP == BinaryOp::eq) return A(a == b);
  else if constexpr (OP == BinaryOp::ne) return A(a != b);
  else if constexpr (OP == BinaryOp::lt) return A(a < b);
  else if constexpr (OP == BinaryOp::le) return A(a <= b);
  else if constexpr (OP == BinaryOp::gt) return A(a > b);
  else if constexpr (OP == BinaryOp::ge) return A(a >= b);
  else static_assert(no_math_for<OP>, "an op of BRRR_BINARY_OPS has no math in ops/elementwise_math.hpp");
}

}  // namespace brrr::elementwise
