// The math of every elementwise op, written once for both backends: plain C++ compiled by
// clang (CPU kernels) and by nvcc (CUDA kernels). A = the arithmetic type (float for
// f32/f16/bf16, double for f64, int32_t/int64_t for integers; bool math is done in int64).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/random_transform.hpp"  // BRRR_HD

namespace brrr::elementwise {

enum class Unary : std::uint8_t {
  neg, abs, exp, log, log1p, sqrt, rsqrt, tanh, sigmoid, relu, gelu_tanh, gelu_erf, silu, sin, cos, erf, sign, clamp
};
enum class Binary : std::uint8_t {
  add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge,
  floor_divide, trunc_divide, remainder, fmod,  // rounding divisions (integers stay integers)
  relu_backward                                  // (grad, x) -> x <= 0 ? 0 : grad
};

/// The rounding divisions: on integers a zero divisor is an error the kernels report.
BRRR_HD constexpr bool is_integer_division(Binary op) {
  return op == Binary::floor_divide || op == Binary::trunc_divide || op == Binary::remainder || op == Binary::fmod;
}

/// True for comparisons: they write bool.
BRRR_HD constexpr bool is_comparison(Binary op) {
  return op == Binary::eq || op == Binary::ne || op == Binary::lt || op == Binary::le || op == Binary::gt ||
         op == Binary::ge;
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

template <Unary OP, class A> BRRR_HD A unary(A x, A lo, A hi) {
  using std::abs, std::exp, std::log, std::log1p, std::sqrt, std::tanh, std::sin, std::cos, std::erf;
  if constexpr (OP == Unary::neg) return -x;
  else if constexpr (OP == Unary::abs) return x < A(0) ? -x : (x == A(0) ? A(0) : x);  // abs(-0.0) = +0.0
  else if constexpr (OP == Unary::relu) return x <= A(0) ? A(0) : x;  // NaN stays NaN
  else if constexpr (OP == Unary::sign) return A((A(0) < x) - (x < A(0)));
  else if constexpr (OP == Unary::clamp) {
    if constexpr (std::is_floating_point_v<A>)
      if (x != x) return x;  // NaN propagates
    A r = x < lo ? lo : x;  // min(max(x, lo), hi): hi wins when lo > hi, as in PyTorch
    return r > hi ? hi : r;
  } else if constexpr (std::is_floating_point_v<A>) {
    if constexpr (OP == Unary::exp) return exp(x);
    else if constexpr (OP == Unary::log) return log(x);
    else if constexpr (OP == Unary::log1p) return log1p(x);
    else if constexpr (OP == Unary::sqrt) return sqrt(x);
    else if constexpr (OP == Unary::rsqrt) return A(1) / sqrt(x);
    else if constexpr (OP == Unary::tanh) return tanh(x);
    else if constexpr (OP == Unary::sigmoid) return A(1) / (A(1) + exp(-x));
    else if constexpr (OP == Unary::gelu_tanh) {
      const A k = A(0.7978845608028654);  // sqrt(2 / pi)
      return A(0.5) * x * (A(1) + tanh(k * (x + A(0.044715) * x * x * x)));
    } else if constexpr (OP == Unary::gelu_erf) return A(0.5) * x * (A(1) + erf(x * A(0.7071067811865476)));
    else if constexpr (OP == Unary::silu) return x / (A(1) + exp(-x));
    else if constexpr (OP == Unary::sin) return sin(x);
    else if constexpr (OP == Unary::cos) return cos(x);
    else if constexpr (OP == Unary::erf) return erf(x);
  }
  return x;  // unreachable: the op layer promotes integers for floating functions
}

/// floor_divide, trunc_divide, remainder, fmod: PyTorch's definitions (ATen's
/// div_floor_floating and remainder kernels). Floats: floor division computed from fmod, so
/// that a == b * q + r holds as closely as IEEE allows; a zero divisor gives inf/NaN.
/// Integers: C++ truncating division, adjusted toward -inf for floor and for the remainder's
/// sign (the divisor's); b == 0 returns 0 (the op layer or the kernel reports the error);
/// b == -1 avoids the overflow trap of INT_MIN / -1 (the quotient wraps, as PyTorch's).
template <Binary OP, class A> BRRR_HD A rounding_division(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    using std::fmod, std::floor, std::trunc, std::copysign;
    if constexpr (OP == Binary::fmod) return fmod(a, b);
    else if constexpr (OP == Binary::trunc_divide) return trunc(a / b);
    else if constexpr (OP == Binary::remainder) {
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
    if constexpr (OP == Binary::trunc_divide) return q;
    else if constexpr (OP == Binary::fmod) return r;
    else if constexpr (OP == Binary::remainder) return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    else return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
  }
}

/// Result of a binary op in A (comparisons return 0/1).
template <Binary OP, class A> BRRR_HD A binary(A a, A b) {
  if constexpr (OP == Binary::add) return a + b;
  else if constexpr (OP == Binary::sub) return a - b;
  else if constexpr (OP == Binary::mul) return a * b;
  else if constexpr (OP == Binary::div) {
    if constexpr (std::is_floating_point_v<A>) return a / b;
    else return b == 0 ? A(0) : a / b;  // integer division is checked by the op layer
  } else if constexpr (OP == Binary::pow) {
    if constexpr (std::is_floating_point_v<A>) {
      using std::pow;
      return pow(a, b);
    } else return b < 0 ? A(0) : ipow(a, b);
  } else if constexpr (is_integer_division(OP)) {
    return rounding_division<OP>(a, b);
  } else if constexpr (OP == Binary::relu_backward) {
    return b <= A(0) ? A(0) : a;  // 0 at the kink; NaN passes the gradient (threshold_backward)
  } else if constexpr (OP == Binary::maximum) {
    if constexpr (std::is_floating_point_v<A>)
      if (a != a || b != b) return a + b;  // NaN propagates
    return a > b ? a : b;
  } else if constexpr (OP == Binary::minimum) {
    if constexpr (std::is_floating_point_v<A>)
      if (a != a || b != b) return a + b;
    return a < b ? a : b;
  } else if constexpr (OP == Binary::eq) return A(a == b);
  else if constexpr (OP == Binary::ne) return A(a != b);
  else if constexpr (OP == Binary::lt) return A(a < b);
  else if constexpr (OP == Binary::le) return A(a <= b);
  else if constexpr (OP == Binary::gt) return A(a > b);
  else return A(a >= b);
}

}  // namespace brrr::elementwise
