// The activations of torch.nn.functional: leaky_relu, elu, selu, celu, softplus, hardtanh,
// relu6, hardswish, hardsigmoid, mish, logsigmoid, softsign (each one elementwise kernel,
// BRRR_ACTIVATION_OPS; math in ops/activation_math.hpp) and glu (a composition). Their
// gradients, below, are Tensor ops following ATen's *_backward formulas, so second
// derivatives work; ops/unary.cpp records them.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/contract.hpp"
module brrr.ops;
import brrr.tensor;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;
using backend::UnaryOp;

namespace {

// SELU's constants (Klambauer et al. 2017), as in PyTorch.
constexpr double selu_alpha = 1.6732632423543772848170429916717;
constexpr double selu_scale = 1.0507009873554804934193349852946;

}  // namespace

Tensor ops_detail::activation_rule(UnaryOp op, const Tensor& g, const Tensor& x, double p0, double p1) {
  switch (op) {
    case UnaryOp::leaky_relu: return where(gt(x, 0.0), g, mul(g, p0));  // 1 or slope (slope at 0)
    case UnaryOp::elu:  // scale, or scale alpha e^x for x <= 0 (NaN takes the positive branch)
      return where(le(x, 0.0), mul(g, mul(exp(x), p0 * p1)), mul(g, p1));
    case UnaryOp::celu: return where(le(x, 0.0), mul(g, exp(div(x, p0))), g);  // e^(x / alpha)
    case UnaryOp::softplus:  // sigmoid(beta x), 1 above the threshold
      return where(gt(mul(x, p0), p1), g, mul(g, sigmoid(mul(x, p0))));
    case UnaryOp::hardtanh: {  // 1 strictly inside (min, max); NaN passes
      Tensor zero = zeros_like(g);
      return where(le(x, p0), zero, where(ge(x, p1), zero, g));
    }
    case UnaryOp::hardswish:  // 0 up to -3, x/3 + 1/2 strictly inside (-3, 3), 1 from 3 on
      return where(le(x, -3.0), zeros_like(g), where(lt(x, 3.0), mul(g, add(div(x, 3.0), 0.5)), g));
    case UnaryOp::hardsigmoid: {  // 1/6 strictly inside (-3, 3)
      Tensor zero = zeros_like(g);
      return where(gt(x, -3.0), where(lt(x, 3.0), div(g, 6.0), zero), zero);
    }
    case UnaryOp::mish: {  // t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
      Tensor t = tanh(softplus(x));
      return mul(g, add(t, mul(mul(x, sigmoid(x)), sub(1.0, mul(t, t)))));
    }
    case UnaryOp::logsigmoid: return mul(g, sigmoid(neg(x)));  // 1 - sigmoid(x)
    case UnaryOp::softsign: {                                  // 1 / (1 + |x|)^2
      Tensor d = add(abs(x), 1.0);
      return div(g, mul(d, d));
    }
    default: break;
  }
  throw Error(ErrorKind::value, std::string("activation_rule: ") + backend::name_of(op) + " is not an activation");
}

Tensor leaky_relu(const Tensor& x, double negative_slope) { return unary_op(UnaryOp::leaky_relu, x, negative_slope); }
Tensor elu(const Tensor& x, double alpha) { return unary_op(UnaryOp::elu, x, alpha, 1.0); }
Tensor selu(const Tensor& x) { return unary_op(UnaryOp::elu, x, selu_alpha, selu_scale); }
Tensor celu(const Tensor& x, double alpha) {
  if (alpha == 0.0) throw Error::bad_value("celu", "alpha", alpha, "non-zero");
  return unary_op(UnaryOp::celu, x, alpha);
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  BRRR_AUTOCAST(fp32, softplus, x, beta, threshold);
  if (beta == 0.0) throw Error::bad_value("softplus", "beta", beta, "non-zero");
  return unary_op(UnaryOp::softplus, x, beta, threshold);
}
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  if (!(min_val <= max_val))
    throw Error(ErrorKind::value, "hardtanh: min_val (" + number_text(min_val) + ") must not be greater than max_val (" +
                                      number_text(max_val) + ")");
  return unary_op(UnaryOp::hardtanh, x, min_val, max_val);
}
Tensor relu6(const Tensor& x) { return hardtanh(x, 0.0, 6.0); }
Tensor hardswish(const Tensor& x) { return unary_op(UnaryOp::hardswish, x); }
Tensor hardsigmoid(const Tensor& x) { return unary_op(UnaryOp::hardsigmoid, x); }
Tensor mish(const Tensor& x) { return unary_op(UnaryOp::mish, x); }
Tensor logsigmoid(const Tensor& x) { return unary_op(UnaryOp::logsigmoid, x); }
Tensor softsign(const Tensor& x) { return unary_op(UnaryOp::softsign, x); }

Tensor glu(const Tensor& x, std::int64_t dim) {
  NvtxRange range("glu");
  require_defined("glu", x);
  if (x.dim() == 0) throw Error(ErrorKind::shape, "glu: does not support 0-d tensors, got " + describe(x));
  const std::int64_t d = wrap_dim("glu", dim, x.dim(), x.shape());
  if (x.size(d) % 2 != 0)
    throw Error(ErrorKind::shape, "glu: halving dimension " + std::to_string(dim) + " must be even, got " + describe(x));
  const std::int64_t half = x.size(d) / 2;
  return mul(x.narrow(d, 0, half), sigmoid(x.narrow(d, half, half)));
}

}  // namespace brrr
