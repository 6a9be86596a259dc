// Unary elementwise ops. Floating functions (exp, log, tanh, ...) promote integer inputs to
// f32 as PyTorch does; neg/abs/relu/sign/clamp keep integer dtypes. Backward rules are
// Tensor ops (second derivatives work); each cites its derivative.
module;
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/contract.hpp"
#include "ops/elementwise_math.hpp"
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;
using backend::UnaryOp;
using backend::name_of;
using backend::keeps_integers;

namespace {

constexpr double inv_sqrt2 = 0.70710678118654752440;
constexpr double inv_sqrt_2pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double two_over_sqrt_pi = 1.12837916709551257390;
constexpr double gelu_k = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double gelu_c = 0.044715;
constexpr double ln2 = 0.69314718055994530942;
constexpr double ln10 = 2.30258509299404568402;
constexpr double sqrt_pi_over_2 = 0.88622692545275801365;

Tensor unary_forward(UnaryOp op, const Tensor& x, double p0, double p1) {
  const char* name = name_of(op);
  require_defined(name, x);
  DType dtype = x.dtype();
  if (dtype == DType::boolean && keeps_integers(op))
    throw Error::dtype_not_supported(name, "not defined for bool tensors", x);
  if (is_floating_point(dtype) && !backend::takes_floats(op))
    throw Error::dtype_not_supported(name, "defined for integer and bool tensors only", x);
  if (!keeps_integers(op) && !is_floating_point(dtype)) dtype = DType::f32;
  NoGradGuard no_grad;
  Tensor cx = x.dtype() == dtype ? x : x.to(dtype);
  Tensor out = empty(x.shape(), {.dtype = dtype, .device = x.device()});
  if (out.numel() > 0)
    backend::backend_for(x.device()).unary(op, backend::output(out, name), backend::input(cx, name), p0, p1);
  return out;
}

// Wrapped numbers (the operands of backward rules; tensor/core.cppm): f(number) is a number.
Tensor number_op(UnaryOp op, const Tensor& x, double p0, double p1) {
  const double v = x.dtype() == DType::i64 ? static_cast<double>(x.item<std::int64_t>()) : x.to(DType::f64).item<double>();
  double r = 0;
  backend::with_op(op, [&]<UnaryOp OP>() {
    r = elementwise::unary<OP, double>(v, elementwise::clamp_bound<double>(p0, false), elementwise::clamp_bound<double>(p1, true));
  });
  return wrapped_number(r, keeps_integers(op) && x.dtype() == DType::i64 ? DType::i64 : DType::f64);
}

// The ops differentiated through their output (the input is then not kept alive).
bool saves_output(UnaryOp op) {
  return op == UnaryOp::exp || op == UnaryOp::sqrt || op == UnaryOp::rsqrt || op == UnaryOp::tanh ||
         op == UnaryOp::sigmoid || op == UnaryOp::tan || op == UnaryOp::expm1 || op == UnaryOp::exp2 ||
         op == UnaryOp::erfinv || op == UnaryOp::reciprocal;
}

// "expBackward", ...: the node names, from the op list.
const char* backward_name_of(UnaryOp op) {
  switch (op) {
#define BRRR_CASE(op, name, integers) \
  case UnaryOp::op: return name "Backward";
    BRRR_UNARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}

}  // namespace

Tensor ops_detail::unary_rule(UnaryOp op, const Tensor& g, const Tensor& v, double p0, double p1) {
  const Tensor& x = v;
  const Tensor& y = v;
  switch (op) {
    case UnaryOp::neg: return neg(g);
    case UnaryOp::abs: return mul(g, sign(x));  // d|x| = sign(x), 0 at 0
    case UnaryOp::exp: return mul(g, y);        // d e^x = e^x
    case UnaryOp::log: return div(g, x);        // d ln x = 1/x
    case UnaryOp::log1p: return div(g, add(x, 1.0));
    case UnaryOp::sqrt: return div(g, mul(y, 2.0));              // 1 / (2 sqrt x)
    case UnaryOp::rsqrt: return mul(g, mul(pow(y, 3.0), -0.5));  // -x^(-3/2) / 2
    case UnaryOp::tanh: return mul(g, sub(1.0, mul(y, y)));      // 1 - tanh^2
    case UnaryOp::sigmoid: return mul(g, mul(y, sub(1.0, y)));   // s (1 - s)
    case UnaryOp::relu:  // 0 at 0, g at NaN (PyTorch); one kernel, or recorded ops under create_graph
      return autograd::is_grad_enabled() ? where(le(x, 0.0), zeros_like(g), g) : relu_backward(g, x);
    case UnaryOp::gelu_erf: {
      // d/dx x Phi(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
      // phi(x) = exp(-x^2 / 2) / sqrt(2 pi); one kernel unless create_graph records it.
      if (!autograd::is_grad_enabled()) return gelu_backward(g, x, "none");
      Tensor cdf = mul(add(erf(mul(x, inv_sqrt2)), 1.0), 0.5);
      Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), inv_sqrt_2pi);
      return mul(g, add(cdf, mul(x, pdf)));
    }
    case UnaryOp::gelu_tanh: {
      // y = x/2 (1 + t), t = tanh(k (x + c x^3)): dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3 c x^2)
      if (!autograd::is_grad_enabled()) return gelu_backward(g, x, "tanh");
      Tensor x2 = mul(x, x);
      Tensor t = tanh(mul(add(x, mul(mul(x2, x), gelu_c)), gelu_k));
      Tensor left = mul(add(t, 1.0), 0.5);
      Tensor right = mul(mul(mul(x, 0.5), sub(1.0, mul(t, t))), mul(add(mul(x2, 3.0 * gelu_c), 1.0), gelu_k));
      return mul(g, add(left, right));
    }
    case UnaryOp::silu: {  // d x s(x) = s (1 + x (1 - s))
      Tensor s = sigmoid(x);
      return mul(g, mul(s, add(mul(x, sub(1.0, s)), 1.0)));
    }
    case UnaryOp::sin: return mul(g, cos(x));
    case UnaryOp::cos: return neg(mul(g, sin(x)));
    case UnaryOp::erf: return mul(g, mul(exp(neg(mul(x, x))), two_over_sqrt_pi));  // 2/sqrt(pi) e^(-x^2)
    case UnaryOp::sign: return zeros_like(g);
#define BRRR_CASE(op, ...) case UnaryOp::op:
    BRRR_ACTIVATION_OPS(BRRR_CASE)
#undef BRRR_CASE
      return activation_rule(op, g, x, p0, p1);  // ops/activation.cpp
    case UnaryOp::tan: return mul(g, add(mul(y, y), 1.0));             // 1 + tan^2
    case UnaryOp::asin: return mul(g, rsqrt(sub(1.0, mul(x, x))));     // 1 / sqrt(1 - x^2)
    case UnaryOp::acos: return neg(mul(g, rsqrt(sub(1.0, mul(x, x)))));
    case UnaryOp::atan: return div(g, add(mul(x, x), 1.0));            // 1 / (1 + x^2)
    case UnaryOp::sinh: return mul(g, cosh(x));
    case UnaryOp::cosh: return mul(g, sinh(x));
    case UnaryOp::expm1: return mul(g, add(y, 1.0));                   // e^x = y + 1
    case UnaryOp::log2: return div(g, mul(x, ln2));
    case UnaryOp::log10: return div(g, mul(x, ln10));
    case UnaryOp::exp2: return mul(g, mul(y, ln2));
    case UnaryOp::erfc: return mul(g, mul(exp(neg(mul(x, x))), -two_over_sqrt_pi));
    case UnaryOp::erfinv: return mul(g, mul(exp(mul(y, y)), sqrt_pi_over_2));  // sqrt(pi)/2 e^(y^2)
    case UnaryOp::lgamma: return mul(g, digamma(x));
    case UnaryOp::digamma: return mul(g, polygamma(1, x));
    case UnaryOp::trigamma:
      throw Error(ErrorKind::value, "polygamma: the derivative of polygamma(1, x) (order 2) is not implemented");
    case UnaryOp::floor: case UnaryOp::ceil: case UnaryOp::round: case UnaryOp::trunc:
      return zeros_like(g);  // piecewise constant (PyTorch: zeros)
    case UnaryOp::frac: return g;
    case UnaryOp::reciprocal: return neg(mul(g, mul(y, y)));  // -1/x^2
    case UnaryOp::square: return mul(g, mul(x, 2.0));
    case UnaryOp::nan_to_num: return where(isfinite(x), g, zeros_like(g));  // PyTorch: grad * isfinite(x)
    case UnaryOp::bitwise_not: return {};  // integers only: never recorded
    case UnaryOp::clamp: {
      // 1 where min <= x <= max (bounds included), else 0: so 0 at NaN, and everywhere when
      // min > max (PyTorch). A min of -inf (max of +inf, also an absent bound) holds for all
      // x but NaN: its comparison is skipped, unless both are, so that NaN still gets 0.
      Tensor zero = zeros_like(g);
      Tensor r = g;
      const double inf = std::numeric_limits<double>::infinity();
      const bool check_min = p0 != -inf, check_max = p1 != inf;
      if (check_min || !check_max) r = where(ge(x, p0), r, zero);
      if (check_max) r = where(le(x, p1), r, zero);
      return r;
    }
  }
  return {};
}

Tensor ops_detail::unary_op(UnaryOp op, const Tensor& x, double p0, double p1) {
  if (is_wrapped_number(x)) return number_op(op, x, p0, p1);
  NvtxRange range(name_of(op));
  Tensor out = unary_forward(op, x, p0, p1);
  if (autograd::any_requires_grad({x}) && is_floating_point(out.dtype()))
    autograd::record(backward_name_of(op), {x}, {out}, {saves_output(op) ? out : x},
                     [op, p0, p1](const autograd::Backward& b) {
                       return autograd::Grads{unary_rule(op, b.grad(), b.saved(0), p0, p1)};
                     });
  return out;
}

namespace {
// An op of autocast's fp32 list (exp, log and kin): under autocast a bf16/f16 input is widened.
Tensor fp32_unary_op(UnaryOp op, const Tensor& x) {
  if (!autocast::is_enabled()) return unary_op(op, x);
  AutocastGuard off(autocast::dtype(), false);
  return unary_op(op, autocast_arg(CastPolicy::fp32, x));
}
}  // namespace

Tensor neg(const Tensor& x) { return unary_op(UnaryOp::neg, x); }
Tensor abs(const Tensor& x) { return unary_op(UnaryOp::abs, x); }
Tensor exp(const Tensor& x) { return fp32_unary_op(UnaryOp::exp, x); }
Tensor log(const Tensor& x) { return fp32_unary_op(UnaryOp::log, x); }
Tensor log1p(const Tensor& x) { return fp32_unary_op(UnaryOp::log1p, x); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryOp::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return fp32_unary_op(UnaryOp::rsqrt, x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryOp::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::relu, x); }
Tensor silu(const Tensor& x) { return unary_op(UnaryOp::silu, x); }
Tensor sin(const Tensor& x) { return unary_op(UnaryOp::sin, x); }
Tensor cos(const Tensor& x) { return unary_op(UnaryOp::cos, x); }
Tensor erf(const Tensor& x) { return unary_op(UnaryOp::erf, x); }
Tensor sign(const Tensor& x) { return unary_op(UnaryOp::sign, x); }
Tensor tan(const Tensor& x) { return fp32_unary_op(UnaryOp::tan, x); }
Tensor asin(const Tensor& x) { return fp32_unary_op(UnaryOp::asin, x); }
Tensor acos(const Tensor& x) { return fp32_unary_op(UnaryOp::acos, x); }
Tensor atan(const Tensor& x) { return unary_op(UnaryOp::atan, x); }
Tensor sinh(const Tensor& x) { return fp32_unary_op(UnaryOp::sinh, x); }
Tensor cosh(const Tensor& x) { return fp32_unary_op(UnaryOp::cosh, x); }
Tensor expm1(const Tensor& x) { return fp32_unary_op(UnaryOp::expm1, x); }
Tensor log2(const Tensor& x) { return fp32_unary_op(UnaryOp::log2, x); }
Tensor log10(const Tensor& x) { return fp32_unary_op(UnaryOp::log10, x); }
Tensor exp2(const Tensor& x) { return unary_op(UnaryOp::exp2, x); }
Tensor erfc(const Tensor& x) { return unary_op(UnaryOp::erfc, x); }
Tensor erfinv(const Tensor& x) { return fp32_unary_op(UnaryOp::erfinv, x); }
Tensor lgamma(const Tensor& x) { return unary_op(UnaryOp::lgamma, x); }
Tensor digamma(const Tensor& x) { return unary_op(UnaryOp::digamma, x); }
Tensor polygamma(std::int64_t n, const Tensor& x) {
  if (n == 0) return digamma(x);
  if (n == 1) return unary_op(UnaryOp::trigamma, x);
  throw Error(ErrorKind::value, "polygamma: order n = " + std::to_string(n) + " is not supported (only 0 and 1)");
}
Tensor floor(const Tensor& x) { return unary_op(UnaryOp::floor, x); }
Tensor ceil(const Tensor& x) { return unary_op(UnaryOp::ceil, x); }
Tensor round(const Tensor& x, std::int64_t decimals) {
  if (decimals != 0 && x.defined() && !is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("round", "decimals != 0 needs a floating-point input", x);
  return unary_op(UnaryOp::round, x, static_cast<double>(decimals), 0);
}
Tensor trunc(const Tensor& x) { return unary_op(UnaryOp::trunc, x); }
Tensor frac(const Tensor& x) {
  if (x.defined() && !is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("frac", "expected a floating-point input (f32, f64, bf16, f16)", x);
  return unary_op(UnaryOp::frac, x);
}
Tensor reciprocal(const Tensor& x) { return fp32_unary_op(UnaryOp::reciprocal, x); }
Tensor square(const Tensor& x) {
  if (x.defined() && x.dtype() == DType::boolean) return x.to(DType::i64);  // PyTorch: bool squares to int64
  return unary_op(UnaryOp::square, x);
}

Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  require_defined("nan_to_num", x);
  if (!is_floating_point(x.dtype())) return x.clone();  // integers hold no NaN or inf
  double hi = std::numeric_limits<float>::max(), lo = 0;
  switch (x.dtype()) {
    case DType::f64: hi = std::numeric_limits<double>::max(); break;
    case DType::f16: hi = 65504.0; break;
    case DType::bf16: hi = 3.3895313892515355e38; break;  // (2 - 2^-7) 2^127
    case DType::f32: case DType::i32: case DType::i64: case DType::boolean: break;
  }
  lo = neginf ? *neginf : -hi;
  hi = posinf ? *posinf : hi;
  Tensor out = unary_op(UnaryOp::nan_to_num, x, lo, hi);
  if (nan && *nan != 0) out = where(isnan(x), full({}, *nan, {.dtype = x.dtype(), .device = x.device()}), out);
  return out;
}

Tensor isnan(const Tensor& x) {
  require_defined("isnan", x);
  if (!is_floating_point(x.dtype())) return zeros(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  return ne(x, x);
}
Tensor isinf(const Tensor& x) {
  require_defined("isinf", x);
  if (!is_floating_point(x.dtype())) return zeros(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  NoGradGuard no_grad;
  return eq(abs(x), std::numeric_limits<double>::infinity());
}
Tensor isfinite(const Tensor& x) {
  require_defined("isfinite", x);
  if (!is_floating_point(x.dtype())) return ones(x.shape(), {.dtype = DType::boolean, .device = x.device()});
  NoGradGuard no_grad;
  return lt(abs(x), std::numeric_limits<double>::infinity());  // false for NaN
}
Tensor logical_not(const Tensor& x) {
  require_defined("logical_not", x);
  return eq(x, 0);
}
Tensor bitwise_not(const Tensor& x) {
  require_defined("bitwise_not", x);
  if (x.dtype() == DType::boolean) return logical_not(x);
  return unary_op(UnaryOp::bitwise_not, x);
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  if (approximate == "none") return unary_op(UnaryOp::gelu_erf, x);
  if (approximate == "tanh") return unary_op(UnaryOp::gelu_tanh, x);
  throw Error(ErrorKind::value, "gelu: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
}

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  if (!min && !max) throw Error(ErrorKind::value, "clamp: at least one of min and max must be given");
  double lo = min ? *min : -std::numeric_limits<double>::infinity();
  double hi = max ? *max : std::numeric_limits<double>::infinity();
  if (std::isnan(lo) || std::isnan(hi)) throw Error(ErrorKind::value, "clamp: NaN bound");
  return unary_op(UnaryOp::clamp, x, lo, hi);
}
Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

}  // namespace brrr
