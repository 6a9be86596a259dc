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
    (backend::is_floating<T> && backend::takes_floats(OP)) ||
    (!backend::is_floating<T> && backend::keeps_integers(OP) && !backend::is_bool_storage<T>);

/// Element types a binary op has a kernel for: floating ones only for the floating kind
/// (the op layer converts integers first), integers and bool only for the bitwise kind.
template <BinaryOp OP, class T> inline constexpr bool has_binary_kernel =
    backend::is_floating_only(OP) ? backend::is_floating<T>
                                  : (backend::is_bitwise(OP) ? !backend::is_floating<T> : true);

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


inline constexpr double pi = 3.14159265358979323846;

/// erfinv: Giles' single-precision approximation ("Approximating the erfinv function", GPU
/// Computing Gems Jade, 2011) refined by three Halley steps, which make it accurate to the
/// last bits of A. erfinv(+-1) = +-inf, |x| > 1 or NaN gives NaN.
template <class A> BRRR_HD A erfinv(A x) {
  using std::log, std::sqrt, std::erf, std::exp, std::abs;
  if (x != x || x < A(-1) || x > A(1)) return std::numeric_limits<A>::quiet_NaN();
  if (x == A(1) || x == A(-1)) return x * std::numeric_limits<A>::infinity();
  A w = -log((A(1) - x) * (A(1) + x)), p;
  if (w < A(5)) {
    w -= A(2.5);
    p = A(2.81022636e-08);
    p = A(3.43273939e-07) + p * w;
    p = A(-3.5233877e-06) + p * w;
    p = A(-4.39150654e-06) + p * w;
    p = A(0.00021858087) + p * w;
    p = A(-0.00125372503) + p * w;
    p = A(-0.00417768164) + p * w;
    p = A(0.246640727) + p * w;
    p = A(1.50140941) + p * w;
  } else {
    w = sqrt(w) - A(3);
    p = A(-0.000200214257);
    p = A(0.000100950558) + p * w;
    p = A(0.00134934322) + p * w;
    p = A(-0.00367342844) + p * w;
    p = A(0.00573950773) + p * w;
    p = A(-0.0076224613) + p * w;
    p = A(0.00943887047) + p * w;
    p = A(1.00167406) + p * w;
    p = A(2.83297682) + p * w;
  }
  // Halley on |x| (erfinv is odd): on erf(y) - |x| near 0, on erfc(y) - (1 - |x|) near 1,
  // where 1 - |x| is exact and erfc keeps the relative precision that erf loses.
  const A a = x < A(0) ? -x : x, r = A(1) - a;
  A y = p * a;
  const A k = A(1.1283791670955126);  // 2 / sqrt(pi): d erf(y) / dy = k exp(-y^2)
  for (int i = 0; i < 3; ++i) {  // Halley steps: f'' = -2 y f' for both
    const A d = k * exp(-y * y);
    if (d == A(0)) break;
    const A step = a > A(0.5) ? (r - std::erfc(y)) / d : (erf(y) - a) / d;  // f / f'
    y -= step / (A(1) + y * step);
  }
  y = x < A(0) ? -y : y;
  return y;
}

/// digamma (psi = d/dx ln Gamma): psi(0) = -inf for +0 (+inf for -0) and NaN at the negative
/// integers, as PyTorch; reflection psi(x) = psi(1 - x) - pi / tan(pi x) for x < 0; the
/// recurrence psi(x) = psi(x + 1) - 1/x up to x >= 20; then the asymptotic series
/// ln x - 1/(2x) - sum B_2k / (2k x^2k) (Abramowitz & Stegun 6.3.5, 6.3.7, 6.3.18).
template <class A> BRRR_HD A digamma(A x) {
  using std::log, std::tan, std::floor;
  if (x == A(0)) return (std::signbit(x) ? A(1) : A(-1)) * std::numeric_limits<A>::infinity();
  A result = A(0);
  if (x < A(0)) {
    if (x == floor(x)) return std::numeric_limits<A>::quiet_NaN();
    result = -A(pi) / tan(A(pi) * x);
    x = A(1) - x;
  }
  while (x < A(20)) {
    result -= A(1) / x;
    x += A(1);
  }
  const A z = A(1) / (x * x);
  const A series = z * (A(1.0 / 12) - z * (A(1.0 / 120) - z * (A(1.0 / 252) - z * (A(1.0 / 240) - z * A(1.0 / 132)))));
  return result + log(x) - A(0.5) / x - series;
}

/// trigamma (psi'): reflection psi'(1 - x) + psi'(x) = pi^2 / sin^2(pi x) for x < 1/2; the
/// recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to x >= 20; then the asymptotic series
/// 1/x + 1/(2x^2) + sum B_2k / x^(2k+1) (Abramowitz & Stegun 6.4.6, 6.4.7, 6.4.12).
template <class A> BRRR_HD A trigamma(A x) {
  using std::sin;
  A sign = A(1), result = A(0);
  if (x < A(0.5)) {
    const A s = sin(A(pi) * x);
    result = -A(pi * pi) / (s * s);
    sign = A(-1);
    x = A(1) - x;
  }
  while (x < A(20)) {
    result += A(1) / (x * x);
    x += A(1);
  }
  const A z = A(1) / (x * x);
  const A series = A(1) / x + A(0.5) * z + z / x * (A(1.0 / 6) - z * (A(1.0 / 30) - z * (A(1.0 / 42) - z * A(1.0 / 30))));
  return sign * (result + series);
}

/// round half to even, with PyTorch's `decimals` (a 10^decimals scale; negative decimals
/// round to tens, hundreds, ...).
template <class A> BRRR_HD A round_decimals(A x, A decimals) {
  using std::nearbyint, std::pow;
  if (decimals == A(0)) return nearbyint(x);
  if (decimals > A(0)) {
    const A scale = pow(A(10), decimals);
    return nearbyint(x * scale) / scale;
  }
  const A scale = pow(A(10), -decimals);
  return nearbyint(x / scale) * scale;
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
  else if constexpr (OP == UnaryOp::tan) return std::tan(x);
  else if constexpr (OP == UnaryOp::asin) return std::asin(x);
  else if constexpr (OP == UnaryOp::acos) return std::acos(x);
  else if constexpr (OP == UnaryOp::atan) return std::atan(x);
  else if constexpr (OP == UnaryOp::sinh) return std::sinh(x);
  else if constexpr (OP == UnaryOp::cosh) return std::cosh(x);
  else if constexpr (OP == UnaryOp::expm1) return std::expm1(x);
  else if constexpr (OP == UnaryOp::log2) return std::log2(x);
  else if constexpr (OP == UnaryOp::log10) return std::log10(x);
  else if constexpr (OP == UnaryOp::exp2) return std::exp2(x);
  else if constexpr (OP == UnaryOp::erfc) return std::erfc(x);
  else if constexpr (OP == UnaryOp::erfinv) return erfinv(x);
  else if constexpr (OP == UnaryOp::lgamma) return std::lgamma(x);
  else if constexpr (OP == UnaryOp::digamma) return digamma(x);
  else if constexpr (OP == UnaryOp::trigamma) return trigamma(x);
  else if constexpr (OP == UnaryOp::reciprocal) return A(1) / x;
  else if constexpr (OP == UnaryOp::square) return x * x;
  else if constexpr (OP == UnaryOp::frac) return x - std::trunc(x);
  else if constexpr (!std::is_floating_point_v<A>) {  // the rounding ops and nan_to_num keep integers as they are
    if constexpr (OP == UnaryOp::bitwise_not) return static_cast<A>(~x);
    else if constexpr (OP == UnaryOp::floor || OP == UnaryOp::ceil || OP == UnaryOp::round ||
                       OP == UnaryOp::trunc || OP == UnaryOp::nan_to_num)
      return x;
    else static_assert(no_math_for<OP>, "an op of BRRR_UNARY_OPS has no math in ops/elementwise_math.hpp");
  } else if constexpr (OP == UnaryOp::floor) return std::floor(x);
  else if constexpr (OP == UnaryOp::ceil) return std::ceil(x);
  else if constexpr (OP == UnaryOp::round) return round_decimals(x, lo);  // lo: decimals
  else if constexpr (OP == UnaryOp::trunc) return std::trunc(x);
  else if constexpr (OP == UnaryOp::nan_to_num) {  // lo/hi: what -inf/+inf become
    if (x != x) return A(0);
    if (x == std::numeric_limits<A>::infinity()) return hi;
    if (x == -std::numeric_limits<A>::infinity()) return lo;
    return x;
  } else if constexpr (OP == UnaryOp::bitwise_not) return x;  // floats are refused by the op layer
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

/// The bitwise ops on integers (bool computes as int64 0/1). Shifts as PyTorch's: by a
/// negative count or by the width or more, a left shift gives 0 and a right shift the sign
/// fill. Floats never reach them (the op layer refuses them); their branch is for number_op.
template <BinaryOp OP, class A> BRRR_HD A bitwise(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    return static_cast<A>(bitwise<OP, std::int64_t>(static_cast<std::int64_t>(a), static_cast<std::int64_t>(b)));
  } else {
    using U = std::make_unsigned_t<A>;
    constexpr A width = static_cast<A>(sizeof(A) * 8);
    if constexpr (OP == BinaryOp::bitwise_and) return a & b;
    else if constexpr (OP == BinaryOp::bitwise_or) return a | b;
    else if constexpr (OP == BinaryOp::bitwise_xor) return a ^ b;
    else if constexpr (OP == BinaryOp::bitwise_left_shift)
      return (b < 0 || b >= width) ? A(0) : static_cast<A>(static_cast<U>(a) << b);
    else return (b < 0 || b >= width) ? (a < 0 ? A(-1) : A(0)) : static_cast<A>(a >> b);
  }
}

/// The floating binary functions (integers are converted to f32 by the op layer first).
/// logaddexp: m + log1p(exp(-|a - b|)), m = max(a, b), and a itself when a == b = +-inf.
/// xlogy: 0 where x == 0 unless y is NaN (scipy's and PyTorch's).
template <BinaryOp OP, class A> BRRR_HD A floating_binary(A a, A b) {
  if constexpr (OP == BinaryOp::atan2) return std::atan2(a, b);
  else if constexpr (OP == BinaryOp::hypot) return std::hypot(a, b);
  else if constexpr (OP == BinaryOp::copysign) return std::copysign(a, b);
  else if constexpr (OP == BinaryOp::xlogy) {
    if (b != b) return b;
    if (a == A(0)) return A(0);
    return a * std::log(b);
  } else if constexpr (OP == BinaryOp::logaddexp) {
    if (a != a || b != b) return a + b;
    if (a == b && (a == std::numeric_limits<A>::infinity() || a == -std::numeric_limits<A>::infinity())) return a;
    const A m = a > b ? a : b, d = a > b ? a - b : b - a;
    return m + std::log1p(std::exp(-d));
  } else if constexpr (OP == BinaryOp::gelu_erf_backward) {
    // a = grad, b = x: d/dx x Phi(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
    // phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
    const A cdf = A(0.5) * (A(1) + std::erf(b * A(0.70710678118654752440)));
    const A pdf = std::exp(A(-0.5) * b * b) * A(0.39894228040143267794);
    return a * (cdf + b * pdf);
  } else if constexpr (OP == BinaryOp::gelu_tanh_backward) {
    // y = x/2 (1 + t), t = tanh(k (x + c x^3)), k = sqrt(2 / pi), c = 0.044715:
    // dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2).
    constexpr A k = A(0.79788456080286535588), c = A(0.044715);
    const A x2 = b * b;
    const A t = std::tanh(k * (b + c * x2 * b));
    return a * (A(0.5) * (A(1) + t) + A(0.5) * b * (A(1) - t * t) * k * (A(1) + A(3) * c * x2));
  } else static_assert(no_math_for<OP>, "an op of BRRR_BINARY_OPS has no math in ops/elementwise_math.hpp");
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
  } else if constexpr (OP == BinaryOp::logical_and) return A(a != A(0) && b != A(0));
  else if constexpr (OP == BinaryOp::logical_or) return A(a != A(0) || b != A(0));
  else if constexpr (OP == BinaryOp::logical_xor) return A((a != A(0)) != (b != A(0)));
  else if constexpr (backend::is_bitwise(OP)) {
    return bitwise<OP>(a, b);
  } else if constexpr (backend::is_floating_only(OP) && OP != BinaryOp::div) {
    if constexpr (std::is_floating_point_v<A>) return floating_binary<OP>(a, b);
    else return static_cast<A>(floating_binary<OP>(static_cast<double>(a), static_cast<double>(b)));
  } else if constexpr (OP == BinaryOp::eq) return A(a == b);
  else if constexpr (OP == BinaryOp::ne) return A(a != b);
  else if constexpr (OP == BinaryOp::lt) return A(a < b);
  else if constexpr (OP == BinaryOp::le) return A(a <= b);
  else if constexpr (OP == BinaryOp::gt) return A(a > b);
  else if constexpr (OP == BinaryOp::ge) return A(a >= b);
  else static_assert(no_math_for<OP>, "an op of BRRR_BINARY_OPS has no math in ops/elementwise_math.hpp");
}

}  // namespace brrr::elementwise
