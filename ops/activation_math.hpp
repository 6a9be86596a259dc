// The math of the activations of BRRR_ACTIVATION_OPS (backend/contract.hpp), for both
// backends (included by ops/elementwise_math.hpp). A is float (f32/f16/bf16) or double; p0
// and p1 are the op's parameters converted to A. Formulas are PyTorch's (ATen's
// Activation.cpp CPU kernels) with the papers they cite in ops/activation.cpp.
#pragma once
#include <cmath>

#include "backend/contract.hpp"

namespace brrr::elementwise {

template <backend::UnaryOp OP> inline constexpr bool is_activation = false;
#define BRRR_ACTIVATION_FLAG(op, ...) \
  template <> inline constexpr bool is_activation<backend::UnaryOp::op> = true;
BRRR_ACTIVATION_OPS(BRRR_ACTIVATION_FLAG)
#undef BRRR_ACTIVATION_FLAG

template <backend::UnaryOp OP> inline constexpr bool no_activation_math_for = false;

/// relu6(x + 3) / 6 without the multiply: 0 below -3, 1 above 3, NaN stays NaN.
template <class A> BRRR_HD A hard_unit(A x) {
  A t = x + A(3);
  t = t < A(0) ? A(0) : t;
  t = t > A(6) ? A(6) : t;
  return t / A(6);
}

template <backend::UnaryOp OP, class A> BRRR_HD A activation(A x, A p0, A p1) {
  using backend::UnaryOp;
  using std::exp, std::expm1, std::log1p, std::tanh, std::abs;
  if constexpr (OP == UnaryOp::leaky_relu) return x > A(0) ? x : x * p0;
  else if constexpr (OP == UnaryOp::elu) return x > A(0) ? p1 * x : p1 * p0 * expm1(x);  // p0 alpha, p1 scale
  else if constexpr (OP == UnaryOp::celu) return x > A(0) ? x : p0 * expm1(x / p0);
  else if constexpr (OP == UnaryOp::softplus)  // p0 beta, p1 threshold: linear above it
    return x * p0 > p1 ? x : log1p(exp(x * p0)) / p0;
  else if constexpr (OP == UnaryOp::hardtanh) {
    if (x != x) return x;
    A r = x < p0 ? p0 : x;
    return r > p1 ? p1 : r;
  } else if constexpr (OP == UnaryOp::hardswish) return x * hard_unit(x);
  else if constexpr (OP == UnaryOp::hardsigmoid) return hard_unit(x);
  else if constexpr (OP == UnaryOp::mish) return x * tanh(log1p(exp(x)));
  else if constexpr (OP == UnaryOp::logsigmoid) return (x < A(0) ? x : A(0)) - log1p(exp(-abs(x)));
  else if constexpr (OP == UnaryOp::softsign) return x / (A(1) + abs(x));
  else static_assert(no_activation_math_for<OP>, "an op of BRRR_ACTIVATION_OPS has no math here");
}

}  // namespace brrr::elementwise
