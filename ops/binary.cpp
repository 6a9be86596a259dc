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

#include "backend/contract.hpp"
#include "ops/elementwise_math.hpp"
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;
using backend::BinaryOp;
using backend::name_of;
using backend::is_comparison;
using backend::is_rounding_division;
using backend::is_floating_only;
using backend::is_bitwise;

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

// The bitwise ops take integers and bool (shifts: integers) only, as PyTorch.
void check_operand_kinds(BinaryOp op, DType compute, const Tensor& a, const Tensor& b) {
  if (!is_bitwise(op)) return;
  const bool shift = op == BinaryOp::bitwise_left_shift || op == BinaryOp::bitwise_right_shift;
  if (is_floating_point(compute) || (shift && compute == DType::boolean)) {
    const std::string what = shift ? "defined for integer tensors only" : "defined for integer and bool tensors only";
    const bool a_ok = !is_floating_point(a.dtype()) && !(shift && a.dtype() == DType::boolean);
    throw Error::dtype_not_supported(name_of(op), what, b.defined() && a_ok ? b : a);
  }
}

// Forward of tensor-tensor ops, never recorded.
Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = name_of(op);
  require_defined(name, a, "first operand");
  require_defined(name, b, "second operand");
  Device dev = common_device(name, {a, b});
  DType compute = promote_types(a.dtype(), b.dtype());
  check_operand_kinds(op, compute, a, b);
  if (is_floating_only(op) && !is_floating_point(compute)) compute = DType::f32;  // true division, atan2, ...
  if ((op == BinaryOp::sub) && compute == DType::boolean)
    throw Error(ErrorKind::dtype, "sub: subtracting bool tensors is not supported (use logical ops)");
  if (is_rounding_division(op) && compute == DType::boolean) bool_division(op);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  NoGradGuard no_grad;
  // f32 with bf16/f16 (autocast's residual adds): the kernel widens as it reads.
  const bool mixed = backend::mixed_float_binary(op, a.dtype(), b.dtype());
  Tensor ca = mixed || a.dtype() == compute ? a : a.to(compute);
  Tensor cb = mixed || b.dtype() == compute ? b : b.to(compute);
  Tensor out = empty(shape, {.dtype = is_comparison(op) ? DType::boolean : compute, .device = dev});
  if (out.numel() > 0)
    backend::backend_for(dev).binary(op, backend::output(out, name), backend::input(ca.expand(shape), name),
                                     backend::input(cb.expand(shape), name));
  return out;
}

Tensor scalar_forward(BinaryOp op, const Tensor& a, const Scalar& s, bool scalar_first) {
  const char* name = name_of(op);
  require_defined(name, a);
  DType compute = result_type(a.dtype(), s);
  check_operand_kinds(op, compute, a, Tensor());
  if (is_floating_only(op) && !is_floating_point(compute)) compute = DType::f32;
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
    backend::backend_for(a.device()).binary_scalar(op, backend::output(out, name), backend::input(ca, name),
                                                    s.value, scalar_first);
  return out;
}

// --- wrapped numbers (the number operand of a backward rule; tensor/core.cppm) ------------

// The value of a wrapped number.
Scalar number_of(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f64: return Scalar(t.item<double>());
    case DType::i64: return Scalar(t.item<std::int64_t>());
    case DType::boolean: return Scalar(static_cast<std::int64_t>(t.item<bool>()));
    case DType::f32: case DType::bf16: case DType::f16: case DType::i32: break;
  }
  throw Error(ErrorKind::dtype, "wrapped number of unexpected dtype " + describe(t));
}

// op on numbers only, on the host in double (or int64 for integral operands of ops that keep
// integers), with the kernels' own math: a number again.
Tensor number_op(BinaryOp op, const Scalar& a, const Scalar& b) {
  const bool integral = a.is_integral && b.is_integral && !is_floating_only(op);
  double r = 0;
  backend::with_op(op, [&]<BinaryOp OP>() {
    if (integral)
      r = static_cast<double>(elementwise::binary<OP, std::int64_t>(static_cast<std::int64_t>(a.value),
                                                                   static_cast<std::int64_t>(b.value)));
    else r = elementwise::binary<OP, double>(a.value, b.value);
  });
  return wrapped_number(r, is_comparison(op) ? DType::boolean : integral ? DType::i64 : DType::f64);
}

// --- backward rules ----------------------------------------------------------------------
// One rule per op, written for two tensors. The (tensor, number) overloads use the same
// rule with the number as a wrapped number (which the ops read as a scalar, so a rule costs
// the same launches as a hand-written scalar version) and an input without an edge.

using autograd::Backward;
using autograd::Grads;

// How a rule gets an operand back when it runs: saved tensor `i`, or the number of a
// (tensor, number) overload as a wrapped number (numbers get no edge and are not saved).
struct Arg {
  bool is_number = false;
  Scalar number{0};
  Tensor value(const Backward& c, std::size_t i) const {
    return is_number ? wrapped_number(number.value, number.is_integral ? DType::i64 : DType::f64) : c.saved(i);
  }
};

// Shapes and dtypes of both inputs: every gradient is reduced back to its input's.
struct Inputs {
  Shape a_shape, b_shape;
  DType a_dtype = DType::f32, b_dtype = DType::f32;
  Inputs(const Tensor& a, const Tensor& b) {
    if (a.defined()) a_shape = a.shape(), a_dtype = a.dtype();
    if (b.defined()) b_shape = b.shape(), b_dtype = b.dtype();
  }
  Tensor grad_a(const Tensor& g) const { return reduce_grad(g, a_shape, a_dtype); }
  Tensor grad_b(const Tensor& g) const { return reduce_grad(g, b_shape, b_dtype); }
};

// d(a + alpha b) = (g, alpha g)
Grads add_rule(const Backward& c, const Inputs& in, double alpha) {
  const Tensor& g = c.grad();
  return {c.needs(0) ? in.grad_a(g) : Tensor(),
          c.needs(1) ? in.grad_b(alpha == 1 ? g : alpha == -1 ? neg(g) : mul(g, alpha)) : Tensor()};
}

// d(a b) = (g b, g a)
Grads mul_rule(const Backward& c, const Inputs& in, const Tensor& a, const Tensor& b) {
  const Tensor& g = c.grad();
  return {c.needs(0) ? in.grad_a(mul(g, b)) : Tensor(), c.needs(1) ? in.grad_b(mul(g, a)) : Tensor()};
}

// d(a / b) = (g / b, -g a / b^2)
Grads div_rule(const Backward& c, const Inputs& in, const Tensor& a, const Tensor& b) {
  const Tensor& g = c.grad();
  return {c.needs(0) ? in.grad_a(div(g, b)) : Tensor(),
          c.needs(1) ? in.grad_b(neg(div(mul(g, a), mul(b, b)))) : Tensor()};
}

// d/da a^b = b a^(b-1), taken as 0 where b == 0 (not 0 * 0^-1 = NaN at a == 0);
// d/db a^b = a^b log(a), taken as 0 where a == 0 and b >= 0 (PyTorch's conventions, so that
// 0^b stays differentiable in b).
Grads pow_rule(const Backward& c, const Inputs& in, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Tensor& g = c.grad();
  Tensor ga, gb;
  if (c.needs(0)) {
    Tensor d = mul(b, pow(a, sub(b, 1.0)));
    ga = in.grad_a(mul(g, where(eq(b, 0.0), zeros_like(d), d)));
  }
  if (c.needs(1)) {
    Tensor d = mul(out, log(a));
    gb = in.grad_b(mul(g, where(eq(a, 0.0), where(ge(b, 0.0), zeros_like(d), d), d)));
  }
  return {ga, gb};
}

// maximum/minimum, PyTorch's rule (derivatives.yaml): each input gets g, or g / 2 on a tie,
// or 0 where it strictly loses; at a NaN nobody strictly loses, so both get the whole gradient.
Grads extremum_rule(const Backward& c, const Inputs& in, const Tensor& a, const Tensor& b, bool is_max) {
  const Tensor split = where(eq(a, b), mul(c.grad(), 0.5), c.grad());
  const Tensor zero = zeros_like(split);
  return {c.needs(0) ? in.grad_a(where(is_max ? lt(a, b) : gt(a, b), zero, split)) : Tensor(),
          c.needs(1) ? in.grad_b(where(is_max ? gt(a, b) : lt(a, b), zero, split)) : Tensor()};
}

// floor_divide / trunc division: piecewise constant, gradient 0 (PyTorch). remainder and
// fmod: a - b * q with q = floor(a / b) or trunc(a / b), so d/da = 1, d/db = -q.
Grads rounding_rule(const Backward& c, const Inputs& in, BinaryOp op, const Tensor& a, const Tensor& b) {
  const Tensor& g = c.grad();
  if (op == BinaryOp::floor_divide || op == BinaryOp::trunc_divide)
    return {c.needs(0) ? in.grad_a(zeros_like(g)) : Tensor(), c.needs(1) ? in.grad_b(zeros_like(g)) : Tensor()};
  Tensor gb;
  if (c.needs(1)) gb = in.grad_b(neg(mul(g, op == BinaryOp::remainder ? floor_divide(a, b) : div(a, b, "trunc"))));
  return {c.needs(0) ? in.grad_a(g) : Tensor(), gb};
}

// The floating binary functions (derivatives.yaml's formulas):
//   atan2(a, b): (g b, -g a) / (a^2 + b^2)
//   hypot(a, b) = r: (g a / r, g b / r)
//   logaddexp(a, b): (g / (1 + e^(b - a)), g / (1 + e^(a - b)))
//   xlogy(a, b): (xlogy(g, b), 0 where a == 0 and b <= 0; g a / b)
//   copysign(a, b) = r: (g r / a, 0 where a == 0; 0)
Grads floating_rule(const Backward& c, const Inputs& in, BinaryOp op, const Tensor& a, const Tensor& b,
                    const Tensor& out) {
  const Tensor& g = c.grad();
  Tensor ga, gb;
  switch (op) {
    case BinaryOp::atan2: {
      Tensor d = add(mul(a, a), mul(b, b));
      if (c.needs(0)) ga = div(mul(g, b), d);
      if (c.needs(1)) gb = neg(div(mul(g, a), d));
      break;
    }
    case BinaryOp::hypot:
      if (c.needs(0)) ga = div(mul(g, a), out);
      if (c.needs(1)) gb = div(mul(g, b), out);
      break;
    case BinaryOp::logaddexp:
      if (c.needs(0)) ga = div(g, add(exp(sub(b, a)), 1.0));
      if (c.needs(1)) gb = div(g, add(exp(sub(a, b)), 1.0));
      break;
    case BinaryOp::xlogy:
      if (c.needs(0)) {
        Tensor d = xlogy(g, b);
        ga = where(logical_and(eq(a, 0.0), le(b, 0.0)), zeros_like(d), d);
      }
      if (c.needs(1)) gb = div(mul(g, a), b);
      break;
    case BinaryOp::copysign:
      if (c.needs(0)) {
        Tensor d = mul(g, div(out, a));
        ga = where(eq(a, 0.0), zeros_like(d), d);
      }
      if (c.needs(1)) gb = zeros_like(g);
      break;
    default: break;
  }
  return {ga.defined() ? in.grad_a(ga) : ga, gb.defined() ? in.grad_b(gb) : gb};
}

const char* rounding_backward_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::floor_divide: return "floor_divideBackward";
    case BinaryOp::trunc_divide: return "trunc_divideBackward";
    case BinaryOp::remainder: return "remainderBackward";
    default: return "fmodBackward";
  }
}

// Records op's rule on `out`. a, b: the tensor operands (undefined for a number, described
// by x or y).
void record_binary(BinaryOp op, const Tensor& a, const Tensor& b, Arg x, Arg y, const Tensor& out) {
  Inputs in(a, b);  // moved into the rule (not const: a const capture would be copied on every move)
  switch (op) {
    case BinaryOp::add:
    case BinaryOp::sub: {
      const double alpha = op == BinaryOp::add ? 1.0 : -1.0;
      autograd::record(op == BinaryOp::add ? "AddBackward" : "SubBackward", {a, b}, {out},
                       [in = std::move(in), alpha](const Backward& c) { return add_rule(c, in, alpha); });
      return;
    }
    case BinaryOp::mul:
      autograd::record("MulBackward", {a, b}, {out}, {a, b}, [in = std::move(in), x, y](const Backward& c) {
        return mul_rule(c, in, x.value(c, 0), y.value(c, 1));
      });
      return;
    case BinaryOp::div:
      autograd::record("DivBackward", {a, b}, {out}, {a, b}, [in = std::move(in), x, y](const Backward& c) {
        return div_rule(c, in, x.value(c, 0), y.value(c, 1));
      });
      return;
    case BinaryOp::pow:
      // The output is read only for the exponent's gradient.
      autograd::record("PowBackward", {a, b}, {out}, {a, b, y.is_number ? Tensor() : out}, [in = std::move(in), x, y](const Backward& c) {
        return pow_rule(c, in, x.value(c, 0), y.value(c, 1), c.saved(2));
      });
      return;
    case BinaryOp::maximum:
    case BinaryOp::minimum: {
      const bool is_max = op == BinaryOp::maximum;
      autograd::record(is_max ? "MaximumBackward" : "MinimumBackward", {a, b}, {out}, {a, b},
                       [in = std::move(in), x, y, is_max](const Backward& c) {
                         return extremum_rule(c, in, x.value(c, 0), y.value(c, 1), is_max);
                       });
      return;
    }
    case BinaryOp::floor_divide:
    case BinaryOp::trunc_divide:
    case BinaryOp::remainder:
    case BinaryOp::fmod:
      if (op == BinaryOp::floor_divide || op == BinaryOp::trunc_divide)  // reads no operand
        autograd::record(rounding_backward_name(op), {a, b}, {out},
                         [in = std::move(in), op](const Backward& c) { return rounding_rule(c, in, op, Tensor(), Tensor()); });
      else
        autograd::record(rounding_backward_name(op), {a, b}, {out}, {a, b}, [in = std::move(in), op, x, y](const Backward& c) {
          return rounding_rule(c, in, op, x.value(c, 0), y.value(c, 1));
        });
      return;
    case BinaryOp::atan2:
    case BinaryOp::hypot:
    case BinaryOp::logaddexp:
    case BinaryOp::xlogy:
    case BinaryOp::copysign: {
      static constexpr const char* names[] = {"Atan2Backward", "HypotBackward", "LogaddexpBackward", "XlogyBackward",
                                              "CopysignBackward"};
      const char* node = names[static_cast<int>(op) - static_cast<int>(BinaryOp::atan2)];
      autograd::record(node, {a, b}, {out}, {a, b, out}, [in = std::move(in), op, x, y](const Backward& c) {
        return floating_rule(c, in, op, x.value(c, 0), y.value(c, 1), c.saved(2));
      });
      return;
    }
    case BinaryOp::eq: case BinaryOp::ne: case BinaryOp::lt: case BinaryOp::le: case BinaryOp::gt: case BinaryOp::ge:
    case BinaryOp::logical_and: case BinaryOp::logical_or: case BinaryOp::logical_xor:
    case BinaryOp::bitwise_and: case BinaryOp::bitwise_or: case BinaryOp::bitwise_xor:
    case BinaryOp::bitwise_left_shift: case BinaryOp::bitwise_right_shift:
    case BinaryOp::relu_backward: case BinaryOp::gelu_erf_backward: case BinaryOp::gelu_tanh_backward:
      return;  // comparisons are not differentiable; the *_backward ops run inside backward passes
  }
}

Tensor scalar_op(BinaryOp op, const Tensor& a, const Scalar& s, bool scalar_first);

Tensor binary_op(BinaryOp op, const Tensor& a, const Tensor& b) {
  // A wrapped number is a scalar operand (tensor/core.cppm).
  if (is_wrapped_number(b)) return scalar_op(op, a, number_of(b), false);
  if (is_wrapped_number(a)) return scalar_op(op, b, number_of(a), true);
  NvtxRange range(name_of(op));
  Tensor out = binary_forward(op, a, b);
  if (!is_comparison(op) && autograd::any_requires_grad({a, b}) && is_floating_point(out.dtype()))
    record_binary(op, a, b, Arg{}, Arg{}, out);
  return out;
}

Tensor scalar_op(BinaryOp op, const Tensor& a, const Scalar& s, bool scalar_first) {
  if (is_wrapped_number(a)) {
    const Scalar x = number_of(a);
    return scalar_first ? number_op(op, s, x) : number_op(op, x, s);
  }
  NvtxRange range(name_of(op));
  Tensor out = scalar_forward(op, a, s, scalar_first);
  if (!is_comparison(op) && autograd::any_requires_grad({a}) && is_floating_point(out.dtype()))
    record_binary(op, scalar_first ? Tensor() : a, scalar_first ? a : Tensor(), Arg{scalar_first, s},
                  Arg{!scalar_first, s}, out);
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
Tensor pow(const Tensor& a, const Tensor& b) {
  BRRR_AUTOCAST(fp32, pow, a, b);
  return binary_op(BinaryOp::pow, a, b);
}
Tensor pow(const Tensor& a, Scalar exponent) {
  BRRR_AUTOCAST(fp32, pow, a, exponent);
  return scalar_op(BinaryOp::pow, a, exponent, false);
}
Tensor pow(Scalar base, const Tensor& exponent) {
  BRRR_AUTOCAST(fp32, pow, base, exponent);
  return scalar_op(BinaryOp::pow, exponent, base, true);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryOp::minimum, a, b); }

Tensor atan2(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::atan2, input, other); }
Tensor hypot(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::hypot, input, other); }
Tensor logaddexp(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::logaddexp, input, other); }
Tensor xlogy(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::xlogy, input, other); }
Tensor xlogy(const Tensor& input, Scalar other) { return scalar_op(BinaryOp::xlogy, input, other, false); }
Tensor xlogy(Scalar input, const Tensor& other) { return scalar_op(BinaryOp::xlogy, other, input, true); }
Tensor copysign(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::copysign, input, other); }
Tensor copysign(const Tensor& input, Scalar other) { return scalar_op(BinaryOp::copysign, input, other, false); }

Tensor logical_and(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::logical_and, input, other); }
Tensor logical_or(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::logical_or, input, other); }
Tensor logical_xor(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::logical_xor, input, other); }

Tensor bitwise_and(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::bitwise_and, input, other); }
Tensor bitwise_and(const Tensor& input, Scalar other) { return scalar_op(BinaryOp::bitwise_and, input, other, false); }
Tensor bitwise_or(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::bitwise_or, input, other); }
Tensor bitwise_or(const Tensor& input, Scalar other) { return scalar_op(BinaryOp::bitwise_or, input, other, false); }
Tensor bitwise_xor(const Tensor& input, const Tensor& other) { return binary_op(BinaryOp::bitwise_xor, input, other); }
Tensor bitwise_xor(const Tensor& input, Scalar other) { return scalar_op(BinaryOp::bitwise_xor, input, other, false); }
Tensor bitwise_left_shift(const Tensor& input, const Tensor& other) {
  return binary_op(BinaryOp::bitwise_left_shift, input, other);
}
Tensor bitwise_left_shift(const Tensor& input, Scalar other) {
  return scalar_op(BinaryOp::bitwise_left_shift, input, other, false);
}
Tensor bitwise_right_shift(const Tensor& input, const Tensor& other) {
  return binary_op(BinaryOp::bitwise_right_shift, input, other);
}
Tensor bitwise_right_shift(const Tensor& input, Scalar other) {
  return scalar_op(BinaryOp::bitwise_right_shift, input, other, false);
}

// lerp: input + weight (end - input), a composition (its gradient comes from the ops').
Tensor lerp(const Tensor& input, const Tensor& end, const Tensor& weight) {
  NvtxRange range("lerp");
  require_defined("lerp", input);
  require_defined("lerp", end, "end");
  require_defined("lerp", weight, "weight");
  for (const Tensor* t : {&input, &end, &weight}) require_floating("lerp", *t, t == &input ? "input" : t == &end ? "end" : "weight");
  return add(input, mul(weight, sub(end, input)));
}
Tensor lerp(const Tensor& input, const Tensor& end, Scalar weight) {
  NvtxRange range("lerp");
  require_defined("lerp", input);
  require_defined("lerp", end, "end");
  require_floating("lerp", input);
  require_floating("lerp", end, "end");
  return add(input, mul(sub(end, input), weight));
}

// clamp with tensor bounds: minimum(maximum(x, min), max) forward (NaN in x or a bound
// propagates, as PyTorch). One bound: exactly maximum/minimum (ties split the gradient, both
// get it at a NaN). Both bounds: the gradient goes to whichever of x, min, max the result is
// (half each on a tie between x and a bound; x at a NaN x; max wherever min > max), as
// PyTorch 2.x computes it.
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max) {
  NvtxRange range("clamp");
  require_defined("clamp", x);
  if (!min.defined() && !max.defined()) throw Error(ErrorKind::value, "clamp: at least one of min and max must be given");
  if (!max.defined()) return maximum(x, min);
  if (!min.defined()) return minimum(x, max);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = minimum(maximum(x, min), max);
  }
  if (!autograd::any_requires_grad({x, min, max}) || !is_floating_point(out.dtype())) return out;
  Inputs x_in(x, min), max_in(max, max);
  autograd::record("ClampBackward", {x, min, max}, {out}, {x, min, max},
                   [x_in = std::move(x_in), max_in = std::move(max_in)](const Backward& c) {
                     const Tensor &g = c.grad(), &x = c.saved(0), &lo = c.saved(1), &hi = c.saved(2);
                     const Tensor zero = zeros_like(g), half = mul(g, 0.5);
                     const Tensor crossed = gt(lo, hi);
                     Grads r(3);
                     if (c.needs(0)) {
                       Tensor gx = where(logical_or(eq(x, lo), eq(x, hi)), half, g);
                       gx = where(logical_or(logical_or(lt(x, lo), gt(x, hi)), crossed), zero, gx);
                       r[0] = x_in.grad_a(gx);
                     }
                     if (c.needs(1))
                       r[1] = x_in.grad_b(where(crossed, zero, where(lt(x, lo), g, where(eq(x, lo), half, zero))));
                     if (c.needs(2))
                       r[2] = max_in.grad_a(where(logical_or(crossed, gt(x, hi)), g, where(eq(x, hi), half, zero)));
                     return r;
                   });
  return out;
}
Tensor clamp_min(const Tensor& x, const Tensor& min) { return clamp(x, min, Tensor()); }
Tensor clamp_max(const Tensor& x, const Tensor& max) { return clamp(x, Tensor(), max); }

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
Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate) {
  if (approximate == "none") return binary_op(BinaryOp::gelu_erf_backward, grad, x);
  if (approximate == "tanh") return binary_op(BinaryOp::gelu_tanh_backward, grad, x);
  throw Error(ErrorKind::value,
              "gelu_backward: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
}

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
  NvtxRange range("where");
  require_defined("where", condition, "condition");
  require_defined("where", a, "first operand");
  require_defined("where", b, "second operand");
  if (condition.dtype() != DType::boolean)
    throw Error::dtype_not_supported("where", "the condition must be bool", condition);
  DType dtype = promote_types(a.dtype(), b.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  if (is_wrapped_number(condition)) {  // a known condition picks a side (inside backward rules)
    const Tensor& side = condition.item<bool>() ? a : b;
    return (side.dtype() == dtype ? side : side.to(dtype)).expand(shape);
  }
  Device dev = common_device("where", {condition, a, b});
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor ca = a.dtype() == dtype ? a : a.to(dtype);
    Tensor cb = b.dtype() == dtype ? b : b.to(dtype);
    out = empty(shape, {.dtype = dtype, .device = dev});
    if (out.numel() > 0)
      backend::backend_for(dev).where(backend::output(out, "where"), backend::input(condition.expand(shape), "where"),
                                      backend::input(ca.expand(shape), "where"),
                                      backend::input(cb.expand(shape), "where"));
  }
  if (autograd::any_requires_grad({a, b}) && is_floating_point(dtype)) {
    // Gradients flow to a where the condition holds and to b elsewhere.
    autograd::record("WhereBackward", {condition, a, b}, {out}, {condition},
                     [in = Inputs(a, b)](const Backward& c) {
                       const Tensor cond = c.saved(0), zero = zeros_like(c.grad());
                       return Grads{Tensor(), c.needs(1) ? in.grad_a(where(cond, c.grad(), zero)) : Tensor(),
                                    c.needs(2) ? in.grad_b(where(cond, zero, c.grad())) : Tensor()};
                     });
  }
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
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator==(Scalar a, const Tensor& b) { return eq(b, a); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator!=(Scalar a, const Tensor& b) { return ne(b, a); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<(Scalar a, const Tensor& b) { return gt(b, a); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator<=(Scalar a, const Tensor& b) { return ge(b, a); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>(Scalar a, const Tensor& b) { return lt(b, a); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
Tensor operator>=(Scalar a, const Tensor& b) { return le(b, a); }

}  // namespace brrr
