// Binary elementwise ops: add, sub, mul, div, pow, maximum, minimum, the rounding divisions
// (floor_divide, div with rounding_mode, remainder, fmod), comparisons, where.
// Forward: promote dtypes (PyTorch), broadcast (NumPy), one backend kernel over the
// broadcast views (stride 0, no copies). Backward: Tensor ops, reduced back to each input's
// shape (sum_to_size) and dtype.
module;
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;
using backend::BinaryOp;
using backend::name_of;
using backend::is_comparison;
using backend::is_rounding_division;

namespace {

// The gradient of a broadcast input: summed over the broadcast dims, in the input's dtype.
Tensor reduce_grad(const Tensor& g, const Shape& shape, DType dtype) {
  if (!g.defined()) return g;
  Tensor r = g.shape() == shape ? g : sum_to_size(g, shape);
  return r.dtype() == dtype ? r : r.to(dtype);
}

[[noreturn]] void bool_division(BinaryOp op) {
  throw Error(ErrorKind::dtype, std::string(name_of(op)) + ": not defined for bool tensors");
}

// Forward of tensor-tensor ops, never recorded.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = name_of(op);
  require_defined(name, a, "first operand");
  require_defined(name, b, "second operand");
  Device dev = common_device(name, {a, b});
  DType compute = promote_types(a.dtype(), b.dtype());
  if (op == BinaryOp::div && !is_floating_point(compute)) compute = DType::f32;  // true division
  if ((op == BinaryOp::sub) && compute == DType::boolean)
    throw Error(ErrorKind::dtype, "sub: subtracting bool tensors is not supported (use logical ops)");
  if (is_rounding_division(op) && compute == DType::boolean) bool_division(op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  NoGradGuard no_grad;
  Tensor ca = a.dtype() == compute ? a : a.to(compute);
  Tensor cb = b.dtype() == compute ? b : b.to(compute);
  Tensor out = empty(shape, {.dtype = is_comparison(op) ? DType::boolean : compute, .device = dev});
  if (out.numel() > 0)
    backend::backend_for(dev).binary(op, backend::operand(out, name), backend::operand(ca.expand(shape), name),
                                     backend::operand(cb.expand(shape), name));
  return out;
}

Tensor scalar_forward(BinaryOp op, const Tensor& a, const Scalar& s, bool scalar_first) {
  const char* name = name_of(op);
  require_defined(name, a);
  DType compute = result_type(a.dtype(), s);
  if (op == BinaryOp::div && !is_floating_point(compute)) compute = DType::f32;
  if (is_rounding_division(op)) {
    if (compute == DType::boolean) bool_division(op);
    // A known zero divisor needs no kernel to find it (tensor // 0 on integers).
    if (!scalar_first && !is_floating_point(compute) && s.value == 0)
      throw Error(ErrorKind::value, std::string(name) + ": integer division by zero (" + describe(a) + " by 0)");
  }
  NoGradGuard no_grad;
  Tensor ca = a.dtype() == compute ? a : a.to(compute);
  Tensor out = empty(a.shape(), {.dtype = is_comparison(op) ? DType::boolean : compute, .device = a.device()});
  if (out.numel() > 0)
    backend::backend_for(a.device()).binary_scalar(op, backend::operand(out, name), backend::operand(ca, name),
                                                    s.value, scalar_first);
  return out;
}

// --- backward nodes ------------------------------------------------------------------------

// Shapes and dtypes of both inputs: every binary node needs them.
struct Inputs {
  Shape a_shape, b_shape;
  DType a_dtype, b_dtype;
  Inputs(const Tensor& a, const Tensor& b)
      : a_shape(a.shape()), b_shape(b.shape()), a_dtype(a.dtype()), b_dtype(b.dtype()) {}
};

class AddBackward final : public autograd::Node, Inputs {
public:
  AddBackward(const Tensor& a, const Tensor& b, double alpha) : Inputs(a, b), alpha_(alpha) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor ga, gb;
    if (next_edges[0].defined()) ga = reduce_grad(g[0], a_shape, a_dtype);
    if (next_edges[1].defined())
      gb = reduce_grad(alpha_ == 1 ? g[0] : (alpha_ == -1 ? neg(g[0]) : mul(g[0], alpha_)), b_shape, b_dtype);
    return {ga, gb};
  }
  std::string name() const override { return alpha_ == 1 ? "AddBackward" : "SubBackward"; }

private:
  double alpha_;
};

class MulBackward final : public autograd::Node, Inputs {
public:
  MulBackward(const Tensor& a, const Tensor& b) : Inputs(a, b), a_(a), b_(b) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor a = a_.unpack(*this), b = b_.unpack(*this);
    return {next_edges[0].defined() ? reduce_grad(mul(g[0], b), a_shape, a_dtype) : Tensor(),
            next_edges[1].defined() ? reduce_grad(mul(g[0], a), b_shape, b_dtype) : Tensor()};
  }
  std::string name() const override { return "MulBackward"; }
  void release_saved() override { a_.reset(), b_.reset(); }

private:
  autograd::SavedTensor a_, b_;
};

class DivBackward final : public autograd::Node, Inputs {
public:
  DivBackward(const Tensor& a, const Tensor& b) : Inputs(a, b), a_(a), b_(b) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor a = a_.unpack(*this), b = b_.unpack(*this);
    Tensor ga, gb;
    if (next_edges[0].defined()) ga = reduce_grad(div(g[0], b), a_shape, a_dtype);
    if (next_edges[1].defined()) gb = reduce_grad(neg(div(mul(g[0], a), mul(b, b))), b_shape, b_dtype);
    return {ga, gb};
  }
  std::string name() const override { return "DivBackward"; }
  void release_saved() override { a_.reset(), b_.reset(); }

private:
  autograd::SavedTensor a_, b_;
};

class PowBackward final : public autograd::Node, Inputs {
public:
  PowBackward(const Tensor& a, const Tensor& b) : Inputs(a, b), a_(a), b_(b) {}
  /// Saved after connect(), once `out` has this node as grad_fn.
  void save_output(const Tensor& out) { out_ = autograd::SavedTensor(out, true); }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor a = a_.unpack(*this), b = b_.unpack(*this);
    Tensor ga, gb;
    // d/da a^b = b a^(b-1), taken as 0 where b == 0 (not 0 * 0^-1 = NaN at a == 0);
    // d/db a^b = a^b log(a), taken as 0 where a == 0 and b >= 0 (PyTorch's conventions, so
    // that 0^b stays differentiable in b).
    if (next_edges[0].defined()) {
      Tensor d = mul(b, pow(a, sub(b, 1.0)));
      d = where(eq(b, 0.0), zeros_like(d), d);
      ga = reduce_grad(mul(g[0], d), a_shape, a_dtype);
    }
    if (next_edges[1].defined()) {
      Tensor out = out_.unpack(*this);
      Tensor d = mul(out, log(a));
      d = where(eq(a, 0.0), where(ge(b, 0.0), zeros_like(d), d), d);
      gb = reduce_grad(mul(g[0], d), b_shape, b_dtype);
    }
    return {ga, gb};
  }
  std::string name() const override { return "PowBackward"; }
  void release_saved() override { a_.reset(), b_.reset(), out_.reset(); }

private:
  autograd::SavedTensor a_, b_, out_;
};

// maximum/minimum: the gradient goes to the larger (smaller) input; ties split it evenly.
class ExtremumBackward final : public autograd::Node, Inputs {
public:
  ExtremumBackward(const Tensor& a, const Tensor& b, bool is_max) : Inputs(a, b), a_(a), b_(b), is_max_(is_max) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    // PyTorch's rule (derivatives.yaml): each input gets g, or g / 2 on a tie, or 0 where it
    // strictly loses; at a NaN nobody strictly loses, so both get the whole gradient.
    Tensor a = a_.unpack(*this), b = b_.unpack(*this);
    Tensor tie = eq(a, b);
    Tensor split = where(tie, mul(g[0], 0.5), g[0]);
    Tensor zero = zeros_like(split), ga, gb;
    if (next_edges[0].defined()) ga = reduce_grad(where(is_max_ ? lt(a, b) : gt(a, b), zero, split), a_shape, a_dtype);
    if (next_edges[1].defined()) gb = reduce_grad(where(is_max_ ? gt(a, b) : lt(a, b), zero, split), b_shape, b_dtype);
    return {ga, gb};
  }
  std::string name() const override { return is_max_ ? "MaximumBackward" : "MinimumBackward"; }
  void release_saved() override { a_.reset(), b_.reset(); }

private:
  autograd::SavedTensor a_, b_;
  bool is_max_;
};

// floor_divide / trunc division: piecewise constant, gradient 0 (PyTorch). remainder and
// fmod: a - b * q with q = floor(a / b) or trunc(a / b), so d/da = 1, d/db = -q.
class RoundingDivisionBackward final : public autograd::Node, Inputs {
public:
  RoundingDivisionBackward(BinaryOp op, const Tensor& a, const Tensor& b) : Inputs(a, b), op_(op) {
    if (op == BinaryOp::remainder || op == BinaryOp::fmod) a_ = autograd::SavedTensor(a), b_ = autograd::SavedTensor(b);
  }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor ga, gb;
    if (op_ == BinaryOp::floor_divide || op_ == BinaryOp::trunc_divide) {
      if (next_edges[0].defined()) ga = reduce_grad(zeros_like(g[0]), a_shape, a_dtype);
      if (next_edges[1].defined()) gb = reduce_grad(zeros_like(g[0]), b_shape, b_dtype);
      return {ga, gb};
    }
    if (next_edges[0].defined()) ga = reduce_grad(g[0], a_shape, a_dtype);
    if (next_edges[1].defined()) {
      Tensor a = a_.unpack(*this), b = b_.unpack(*this);
      Tensor q = op_ == BinaryOp::remainder ? floor_divide(a, b) : div(a, b, "trunc");
      gb = reduce_grad(neg(mul(g[0], q)), b_shape, b_dtype);
    }
    return {ga, gb};
  }
  std::string name() const override { return std::string(name_of(op_)) + "Backward"; }
  void release_saved() override { a_.reset(), b_.reset(); }

private:
  BinaryOp op_;
  autograd::SavedTensor a_, b_;
};

// tensor (op) scalar: a single input.
class ScalarBackward final : public autograd::Node {
public:
  ScalarBackward(BinaryOp op, const Tensor& a, double s, bool scalar_first)
      : op_(op), s_(s), scalar_first_(scalar_first), shape_(a.shape()), dtype_(a.dtype()) {
    // Only s / a, a ^ s, 0 ^ a and s % a need the input itself.
    if ((op == BinaryOp::div && scalar_first) || (op == BinaryOp::pow && (!scalar_first || s == 0)) ||
        ((op == BinaryOp::remainder || op == BinaryOp::fmod) && scalar_first))
      a_ = autograd::SavedTensor(a);
  }
  void save_output(const Tensor& out) { out_ = autograd::SavedTensor(out, true); }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor gi;
    switch (op_) {
      case BinaryOp::add: gi = g[0]; break;
      case BinaryOp::sub: gi = scalar_first_ ? neg(g[0]) : g[0]; break;
      case BinaryOp::mul: gi = mul(g[0], s_); break;
      case BinaryOp::div:
        // a / s -> g / s;   s / a -> -g s / a^2
        if (!scalar_first_) gi = div(g[0], s_);
        else {
          Tensor a = a_.unpack(*this);
          gi = neg(div(mul(g[0], s_), mul(a, a)));
        }
        break;
      case BinaryOp::pow:
        if (!scalar_first_) {  // a^s -> s a^(s-1)
          Tensor a = a_.unpack(*this);
          gi = s_ == 0 ? zeros_like(g[0]) : mul(g[0], mul(pow(a, s_ - 1.0), s_));
        } else {  // s^a -> s^a log(s); 0^a -> 0 where a >= 0 (PyTorch), not 0 * log(0) = NaN
          gi = mul(g[0], mul(out_.unpack(*this), std::log(s_)));
          if (s_ == 0) gi = where(ge(a_.unpack(*this), 0.0), zeros_like(gi), gi);
        }
        break;
      case BinaryOp::floor_divide: case BinaryOp::trunc_divide: gi = zeros_like(g[0]); break;
      case BinaryOp::remainder: case BinaryOp::fmod:
        // a % s -> g;   s % a -> -g q with q the rounded quotient s / a
        if (!scalar_first_) gi = g[0];
        else {
          Tensor a = a_.unpack(*this);
          Tensor sa = full({}, s_, {.dtype = a.dtype(), .device = a.device()});
          gi = neg(mul(g[0], op_ == BinaryOp::remainder ? floor_divide(sa, a) : div(sa, a, "trunc")));
        }
        break;
      default:
        throw Error(ErrorKind::autograd, std::string(name_of(op_)) + " with a scalar has no backward rule");
    }
    return {reduce_grad(gi, shape_, dtype_)};
  }
  std::string name() const override { return std::string(name_of(op_)) + "ScalarBackward"; }
  void release_saved() override { a_.reset(), out_.reset(); }

private:
  BinaryOp op_;
  double s_;
  bool scalar_first_;
  Shape shape_;
  DType dtype_;
  autograd::SavedTensor a_, out_;
};

class WhereBackward final : public autograd::Node, Inputs {
public:
  WhereBackward(const Tensor& cond, const Tensor& a, const Tensor& b) : Inputs(a, b), cond_(cond) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    Tensor cond = cond_.unpack(*this);
    Tensor zero = zeros_like(g[0]);
    Tensor ga, gb;
    if (next_edges[1].defined()) ga = reduce_grad(where(cond, g[0], zero), a_shape, a_dtype);
    if (next_edges[2].defined()) gb = reduce_grad(where(cond, zero, g[0]), b_shape, b_dtype);
    return {Tensor(), ga, gb};
  }
  std::string name() const override { return "WhereBackward"; }
  void release_saved() override { cond_.reset(); }

private:
  autograd::SavedTensor cond_;
};

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  OpRange range(name_of(op));
  Tensor out = binary_forward(op, a, b);
  if (is_comparison(op) || !autograd::any_requires_grad({a, b}) || !is_floating_point(out.dtype())) return out;
  std::shared_ptr<autograd::Node> node;
  switch (op) {
    case BinaryOp::add: node = std::make_shared<AddBackward>(a, b, 1.0); break;
    case BinaryOp::sub: node = std::make_shared<AddBackward>(a, b, -1.0); break;
    case BinaryOp::mul: node = std::make_shared<MulBackward>(a, b); break;
    case BinaryOp::div: node = std::make_shared<DivBackward>(a, b); break;
    case BinaryOp::pow: node = std::make_shared<PowBackward>(a, b); break;
    case BinaryOp::maximum: node = std::make_shared<ExtremumBackward>(a, b, true); break;
    case BinaryOp::minimum: node = std::make_shared<ExtremumBackward>(a, b, false); break;
    case BinaryOp::floor_divide: case BinaryOp::trunc_divide: case BinaryOp::remainder: case BinaryOp::fmod:
      node = std::make_shared<RoundingDivisionBackward>(op, a, b);
      break;
    default: return out;  // comparisons; relu_backward is only used inside backward passes
  }
  autograd::connect(node, {a, b}, {out});
  if (op == BinaryOp::pow) static_cast<PowBackward&>(*node).save_output(out);
  return out;
}

Tensor scalar_op(BinaryOp op, const Tensor& a, const Scalar& s, bool scalar_first) {
  OpRange range(name_of(op));
  Tensor out = scalar_forward(op, a, s, scalar_first);
  if (is_comparison(op) || !autograd::any_requires_grad({a}) || !is_floating_point(out.dtype())) return out;
  auto node = std::make_shared<ScalarBackward>(op, a, s.value, scalar_first);
  autograd::connect(node, {a}, {out});
  if (op == BinaryOp::pow && scalar_first) node->save_output(out);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::add, a, b); }
Tensor add(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::add, a, b, false); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::sub, a, b); }
Tensor sub(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::sub, a, b, false); }
Tensor sub(Scalar a, const Tensor& b) { return scalar_op(BinaryOp::sub, b, a, true); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::mul, a, b); }
Tensor mul(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::mul, a, b, false); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::div, a, b); }
Tensor div(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::div, a, b, false); }
Tensor div(Scalar a, const Tensor& b) { return scalar_op(BinaryOp::div, b, a, true); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::pow, a, b); }
Tensor pow(const Tensor& a, Scalar exponent) { return scalar_op(BinaryOp::pow, a, exponent, false); }
Tensor pow(Scalar base, const Tensor& exponent) { return scalar_op(BinaryOp::pow, exponent, base, true); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::minimum, a, b); }

Tensor floor_divide(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::floor_divide, a, b); }
Tensor floor_divide(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::floor_divide, a, b, false); }
Tensor remainder(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::remainder, a, b); }
Tensor remainder(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::remainder, a, b, false); }
Tensor remainder(Scalar a, const Tensor& b) { return scalar_op(BinaryOp::remainder, b, a, true); }
Tensor fmod(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::fmod, a, b); }
Tensor fmod(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::fmod, a, b, false); }

namespace {
BinaryOp rounding_op(std::string_view mode) {
  if (mode == "floor") return BinaryOp::floor_divide;
  if (mode == "trunc") return BinaryOp::trunc_divide;
  throw Error(ErrorKind::value, "div: rounding_mode must be \"trunc\" or \"floor\", got \"" + std::string(mode) +
                                    "\" (use div(a, b) for true division)");
}
}  // namespace

Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode) {
  return binary_op(rounding_op(rounding_mode), a, b);
}
Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode) {
  return scalar_op(rounding_op(rounding_mode), a, b, false);
}

Tensor relu_backward(const Tensor& grad, const Tensor& x) { return binary_op(BinaryOp::relu_backward, grad, x); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::ge, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::eq, a, b, false); }
Tensor ne(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::ne, a, b, false); }
Tensor lt(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::lt, a, b, false); }
Tensor le(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::le, a, b, false); }
Tensor gt(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::gt, a, b, false); }
Tensor ge(const Tensor& a, Scalar b) { return scalar_op(BinaryOp::ge, a, b, false); }

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  OpRange range("where");
  require_defined("where", condition, "condition");
  require_defined("where", a, "first operand");
  require_defined("where", b, "second operand");
  Device dev = common_device("where", {condition, a, b});
  if (condition.dtype() != DType::boolean)
    throw Error(ErrorKind::dtype, "where: the condition must be bool, got " + describe(condition));
  DType dtype = promote_types(a.dtype(), b.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor ca = a.dtype() == dtype ? a : a.to(dtype);
    Tensor cb = b.dtype() == dtype ? b : b.to(dtype);
    out = empty(shape, {.dtype = dtype, .device = dev});
    if (out.numel() > 0)
      backend::backend_for(dev).where(backend::operand(out, "where"), backend::operand(condition.expand(shape), "where"),
                                      backend::operand(ca.expand(shape), "where"),
                                      backend::operand(cb.expand(shape), "where"));
  }
  if (autograd::any_requires_grad({a, b}) && is_floating_point(dtype))
    autograd::connect(std::make_shared<WhereBackward>(condition, a, b), {condition, a, b}, {out});
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, Scalar b) {
  require_defined("where", a, "first operand");
  return where(condition, a, full({}, b.value, {.dtype = result_type(a.dtype(), b), .device = a.device()}));
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace brrr
