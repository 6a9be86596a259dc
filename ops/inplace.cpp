// In-place arithmetic (add_, sub_, mul_, div_, the compound assignments, index_put_'s write)
// with PyTorch's rules (modules/ops.cppm, "In-place arithmetic"): one function, update(),
// decides between an unrecorded write (one kernel when it can) and a recorded one in which
// x takes the op's history.
module;
#include <functional>
#include <string>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

// PyTorch's canCast: a result may be written into a tensor of the same kind or a lower one,
// never floating into integral or bool, nor integral into bool.
bool can_cast(DType from, DType to) {
  if (is_floating_point(from) && !is_floating_point(to)) return false;
  if (from != DType::boolean && to == DType::boolean) return false;
  return true;
}

void check_fits(const char* op, const Tensor& x, const Tensor& result) {
  if (result.shape() != x.shape())
    throw Error::shape_mismatch(op, x.shape(), result.shape(),
                                "do not match: the result of an in-place op must have the target's shape "
                                "(the operand broadcasts into it, not the target into the operand)");
  if (!can_cast(result.dtype(), x.dtype()))
    throw Error(ErrorKind::dtype, std::string(op) + ": result type " + to_string(result.dtype()) +
                                      " can't be cast to the desired output type " + to_string(x.dtype()) +
                                      " of the in-place target " + describe(x));
}

}  // namespace

namespace ops_detail {

const Tensor& update(const char* op, const Tensor& x, const Tensor& operand,
                     const std::function<Tensor(const Tensor&)>& compute, const std::function<bool()>& one_kernel) {
  require_defined(op, x);
  const bool operand_grad = operand.defined() && operand.requires_grad();
  const bool record = autograd::is_grad_enabled() && (x.requires_grad() || operand_grad);
  if (!record) {
    NoGradGuard no_grad;
    if (one_kernel && one_kernel()) {
      x.storage().bump_version();
      return x;
    }
    Tensor result = compute(x);
    check_fits(op, x, result);
    Tensor dst = x;
    dst.copy_(result);  // converts the dtype; bumps the version
    return x;
  }
  if (x.is_leaf() && x.requires_grad())
    throw Error(ErrorKind::autograd, std::string(op) + ": a leaf tensor that requires grad (" + describe(x) +
                                         ") is used in an in-place operation; update it under NoGradGuard (as "
                                         "optimizers do) or write y = x op ... out of place");
  if (x.storage().use_count() != 1)
    throw Error(ErrorKind::autograd, std::string(op) + ": in-place update of " + describe(x) +
                                         " would be recorded by autograd, but its storage is shared (it is a view, "
                                         "has views, or is saved for backward by the op that made it); write "
                                         "y = y op ... out of place instead");
  // x's old values reach the op's rule through a recorded copy, so writing x below does not
  // invalidate what the new node saved.
  Tensor result = compute(x.clone());
  check_fits(op, x, result);
  if (result.dtype() != x.dtype()) result = result.to(x.dtype());
  {
    NoGradGuard no_grad;
    Tensor dst = x;
    dst.copy_(result.detach());
  }
  x.set_grad_fn(result.grad_fn(), result.output_nr());
  return x;
}

}  // namespace ops_detail

namespace {

// One kernel x = x op y when the result is x's dtype and shape: y of x's dtype broadcasting
// into x, on x's device.
std::function<bool()> tensor_kernel(const char* op, backend::BinaryOp kind, const Tensor& x, const Tensor& y) {
  return [=]() {
    require_defined(op, y, "operand");
    if (y.dtype() != x.dtype() || y.device() != x.device() || is_wrapped_number(y)) return false;
    if (kind == backend::BinaryOp::div && !is_floating_point(x.dtype())) return false;
    if (broadcast_shapes(x.shape(), y.shape(), op) != x.shape()) return false;
    if (x.numel() > 0)
      backend::backend_for(x.device()).binary(kind, backend::output(x, op), backend::input(x, op),
                                              backend::input(y.expand(x.shape()), op));
    return true;
  };
}

std::function<bool()> scalar_kernel(const char* op, backend::BinaryOp kind, const Tensor& x, Scalar y) {
  return [=]() {
    if (result_type(x.dtype(), y) != x.dtype() || x.dtype() == DType::boolean) return false;
    if (kind == backend::BinaryOp::div && !is_floating_point(x.dtype())) return false;
    if (x.numel() > 0)
      backend::backend_for(x.device()).binary_scalar(kind, backend::output(x, op), backend::input(x, op), y.value,
                                                     false);
    return true;
  };
}

}  // namespace

const Tensor& add_(const Tensor& x, const Tensor& y, double alpha) {
  NvtxRange range("add_");
  require_defined("add_", y, "operand");
  if (alpha != 1.0)
    return update("add_", x, y, [&](const Tensor& v) { return add(v, mul(y, alpha)); }, {});
  return update("add_", x, y, [&](const Tensor& v) { return add(v, y); },
                tensor_kernel("add_", backend::BinaryOp::add, x, y));
}
const Tensor& add_(const Tensor& x, Scalar y) {
  NvtxRange range("add_");
  return update("add_", x, {}, [&](const Tensor& v) { return add(v, y); },
                scalar_kernel("add_", backend::BinaryOp::add, x, y));
}
const Tensor& sub_(const Tensor& x, const Tensor& y) {
  NvtxRange range("sub_");
  return update("sub_", x, y, [&](const Tensor& v) { return sub(v, y); },
                tensor_kernel("sub_", backend::BinaryOp::sub, x, y));
}
const Tensor& sub_(const Tensor& x, Scalar y) {
  NvtxRange range("sub_");
  return update("sub_", x, {}, [&](const Tensor& v) { return sub(v, y); },
                scalar_kernel("sub_", backend::BinaryOp::sub, x, y));
}
const Tensor& mul_(const Tensor& x, const Tensor& y) {
  NvtxRange range("mul_");
  return update("mul_", x, y, [&](const Tensor& v) { return mul(v, y); },
                tensor_kernel("mul_", backend::BinaryOp::mul, x, y));
}
const Tensor& mul_(const Tensor& x, Scalar y) {
  NvtxRange range("mul_");
  return update("mul_", x, {}, [&](const Tensor& v) { return mul(v, y); },
                scalar_kernel("mul_", backend::BinaryOp::mul, x, y));
}
const Tensor& div_(const Tensor& x, const Tensor& y) {
  NvtxRange range("div_");
  return update("div_", x, y, [&](const Tensor& v) { return div(v, y); },
                tensor_kernel("div_", backend::BinaryOp::div, x, y));
}
const Tensor& div_(const Tensor& x, Scalar y) {
  NvtxRange range("div_");
  return update("div_", x, {}, [&](const Tensor& v) { return div(v, y); },
                scalar_kernel("div_", backend::BinaryOp::div, x, y));
}

Tensor& operator+=(Tensor& a, const Tensor& b) { add_(a, b); return a; }
Tensor& operator+=(Tensor& a, Scalar b) { add_(a, b); return a; }
Tensor& operator-=(Tensor& a, const Tensor& b) { sub_(a, b); return a; }
Tensor& operator-=(Tensor& a, Scalar b) { sub_(a, b); return a; }
Tensor& operator*=(Tensor& a, const Tensor& b) { mul_(a, b); return a; }
Tensor& operator*=(Tensor& a, Scalar b) { mul_(a, b); return a; }
Tensor& operator/=(Tensor& a, const Tensor& b) { div_(a, b); return a; }
Tensor& operator/=(Tensor& a, Scalar b) { div_(a, b); return a; }

}  // namespace brrr
