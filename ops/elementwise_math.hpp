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
enum class Binary : std::uint8_t { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };

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
