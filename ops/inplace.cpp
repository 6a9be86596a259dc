// In-place arithmetic for optimizers and gradient clipping: not recorded by autograd, so it
// refuses tensors that require grad while grad mode is on.
module;
#include <string>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {
void check_target(const char* op, const Tensor& x) {
  require_defined(op, x);
  if (autograd::is_grad_enabled() && x.requires_grad())
    throw Error(ErrorKind::autograd, std::string(op) + ": in-place update of a tensor that requires grad (" +
                                         describe(x) + "); do it under NoGradGuard");
}

void inplace_binary(const char* op, backend::BinaryOp kind, const Tensor& x, const Tensor& y) {
  NvtxRange range(op);
  check_target(op, x);
  require_defined(op, y, "operand");
  common_device(op, {x, y});
  NoGradGuard no_grad;
  Tensor cy = y.dtype() == x.dtype() ? y : y.to(x.dtype());
  Tensor by;
  try {
    by = cy.expand(x.shape());
  } catch (const Error&) {
    throw Error(ErrorKind::shape, std::string(op) + ": operand " + describe(y) + " cannot broadcast to " + describe(x));
  }
  if (x.numel() > 0)
    backend::backend_for(x.device()).binary(kind, backend::output(x, op), backend::input(x, op),
                                            backend::input(by, op));
  x.storage().bump_version();
}
}  // namespace

void add_(const Tensor& x, const Tensor& y, double alpha) {
  if (alpha == 1.0) return inplace_binary("add_", backend::BinaryOp::add, x, y);
  NoGradGuard no_grad;
  inplace_binary("add_", backend::BinaryOp::add, x, mul(y, alpha));
}

void mul_(const Tensor& x, const Tensor& y) { inplace_binary("mul_", backend::BinaryOp::mul, x, y); }

void mul_(const Tensor& x, Scalar y) {
  NvtxRange range("mul_");
  check_target("mul_", x);
  if (x.numel() > 0)
    backend::backend_for(x.device()).binary_scalar(backend::BinaryOp::mul, backend::output(x, "mul_"),
                                                   backend::input(x, "mul_"), y.value, false);
  x.storage().bump_version();
}

}  // namespace brrr
