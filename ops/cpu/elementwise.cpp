// CPU kernels of the elementwise ops: unary, binary (tensor-tensor and tensor-scalar) and
// where. The math is ops/elementwise_math.hpp, shared with the CUDA kernels.
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "ops/elementwise_math.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;
namespace ew = elementwise;

namespace {

template <ew::Unary OP> void unary_loop(const Operand& out, const Operand& in, double p0, double p1) {
  dispatch(out.dtype, [&]<class T>(T*) {
    using A = acc_t<T>;
    auto* o = static_cast<storage_t<T>*>(out.data);
    const auto* x = static_cast<const storage_t<T>*>(in.data);
    // clamp's bounds; for integers rounded inward and saturated at the type's range
    A lo, hi;
    if constexpr (std::is_floating_point_v<A>) {
      lo = static_cast<A>(p0);
      hi = static_cast<A>(p1);
    } else {
      constexpr A min = std::numeric_limits<A>::lowest(), max = std::numeric_limits<A>::max();
      // (a bound beyond the other end of the range saturates too: the cast would be undefined)
      lo = p0 <= static_cast<double>(min) ? min : p0 >= static_cast<double>(max) ? max : static_cast<A>(std::ceil(p0));
      hi = p1 >= static_cast<double>(max) ? max : p1 <= static_cast<double>(min) ? min : static_cast<A>(std::floor(p1));
    }
    const Operand* ops[2] = {&out, &in};
    for_each(ops, [&](const std::int64_t* off) {
      o[off[0]] = narrow_to<T>(ew::unary<OP, A>(load<T>(x[off[1]]), lo, hi));
    });
  });
}

const char* division_name(ew::Binary op) {
  switch (op) {
    case ew::Binary::floor_divide: return "floor_divide";
    case ew::Binary::trunc_divide: return "div (rounding_mode trunc)";
    case ew::Binary::remainder: return "remainder";
    default: return "fmod";
  }
}

// Integer rounding divisions: a zero divisor is an error (PyTorch's CPU behaviour).
template <ew::Binary OP, class A> void check_divisor(A b, DType dtype) {
  if constexpr (ew::is_integer_division(OP) && std::is_integral_v<A>)
    if (b == 0)
      throw Error(ErrorKind::value, std::string(division_name(OP)) + ": integer division by zero (a " +
                                        to_string(dtype) + " divisor holds 0)");
}

template <ew::Binary OP> void binary_loop(const Operand& out, const Operand& a, const Operand& b) {
  dispatch(a.dtype, [&]<class T>(T*) {
    using A = acc_t<T>;
    const auto* pa = static_cast<const storage_t<T>*>(a.data);
    const auto* pb = static_cast<const storage_t<T>*>(b.data);
    const Operand* ops[3] = {&out, &a, &b};
    if constexpr (ew::is_comparison(OP)) {
      auto* o = static_cast<std::uint8_t*>(out.data);
      for_each(ops, [&](const std::int64_t* off) {
        o[off[0]] = ew::binary<OP, A>(load<T>(pa[off[1]]), load<T>(pb[off[2]])) != A(0);
      });
    } else {
      auto* o = static_cast<storage_t<T>*>(out.data);
      for_each(ops, [&](const std::int64_t* off) {
        const A bv = load<T>(pb[off[2]]);
        check_divisor<OP>(bv, b.dtype);
        o[off[0]] = narrow_to<T>(ew::binary<OP, A>(load<T>(pa[off[1]]), bv));
      });
    }
  });
}

template <ew::Binary OP> void binary_scalar_loop(const Operand& out, const Operand& a, double s, bool scalar_first) {
  dispatch(a.dtype, [&]<class T>(T*) {
    using A = acc_t<T>;
    const auto* pa = static_cast<const storage_t<T>*>(a.data);
    A sv = load<T>(narrow_to<T>(s));  // the scalar as the tensor's dtype holds it
    const Operand* ops[2] = {&out, &a};
    auto f = [&](A x) {
      check_divisor<OP>(scalar_first ? x : sv, a.dtype);
      return scalar_first ? ew::binary<OP, A>(sv, x) : ew::binary<OP, A>(x, sv);
    };
    if constexpr (ew::is_comparison(OP)) {
      auto* o = static_cast<std::uint8_t*>(out.data);
      for_each(ops, [&](const std::int64_t* off) { o[off[0]] = f(load<T>(pa[off[1]])) != A(0); });
    } else {
      auto* o = static_cast<storage_t<T>*>(out.data);
      for_each(ops, [&](const std::int64_t* off) { o[off[0]] = narrow_to<T>(f(load<T>(pa[off[1]]))); });
    }
  });
}

// Turns a runtime op into a compile-time one: one loop instantiation per op.
template <class E, E... Ops, class F> void with_op(E op, F&& f) {
  ((op == Ops ? (f.template operator()<Ops>(), 0) : 0), ...);
}

#define BRRR_UNARY_OPS                                                                                          \
  ew::Unary::neg, ew::Unary::abs, ew::Unary::exp, ew::Unary::log, ew::Unary::log1p, ew::Unary::sqrt,              \
      ew::Unary::rsqrt, ew::Unary::tanh, ew::Unary::sigmoid, ew::Unary::relu, ew::Unary::gelu_tanh,               \
      ew::Unary::gelu_erf, ew::Unary::silu, ew::Unary::sin, ew::Unary::cos, ew::Unary::erf, ew::Unary::sign,      \
      ew::Unary::clamp
#define BRRR_BINARY_OPS                                                                                          \
  ew::Binary::add, ew::Binary::sub, ew::Binary::mul, ew::Binary::div, ew::Binary::pow, ew::Binary::maximum,       \
      ew::Binary::minimum, ew::Binary::eq, ew::Binary::ne, ew::Binary::lt, ew::Binary::le, ew::Binary::gt,        \
      ew::Binary::ge, ew::Binary::floor_divide, ew::Binary::trunc_divide, ew::Binary::remainder, ew::Binary::fmod, \
      ew::Binary::relu_backward

}  // namespace

static_assert(int(UnaryOp::clamp) == int(ew::Unary::clamp) && int(UnaryOp::neg) == int(ew::Unary::neg) &&
              int(UnaryOp::sign) == int(ew::Unary::sign) && int(UnaryOp::gelu_erf) == int(ew::Unary::gelu_erf));
static_assert(int(BinaryOp::ge) == int(ew::Binary::ge) && int(BinaryOp::add) == int(ew::Binary::add) &&
              int(BinaryOp::minimum) == int(ew::Binary::minimum));

void CpuBackend::unary(UnaryOp op, const Operand& out, const Operand& in, double p0, double p1) {
  with_op<ew::Unary, BRRR_UNARY_OPS>(static_cast<ew::Unary>(op),
                                     [&]<ew::Unary OP>() { unary_loop<OP>(out, in, p0, p1); });
}

void CpuBackend::binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b) {
  with_op<ew::Binary, BRRR_BINARY_OPS>(static_cast<ew::Binary>(op),
                                       [&]<ew::Binary OP>() { binary_loop<OP>(out, a, b); });
}

void CpuBackend::binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first) {
  with_op<ew::Binary, BRRR_BINARY_OPS>(static_cast<ew::Binary>(op), [&]<ew::Binary OP>() {
    binary_scalar_loop<OP>(out, a, s, scalar_first);
  });
}

void CpuBackend::where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b) {
  dispatch(out.dtype, [&]<class T>(T*) {
    auto* o = static_cast<storage_t<T>*>(out.data);
    const auto* c = static_cast<const std::uint8_t*>(cond.data);
    const auto* pa = static_cast<const storage_t<T>*>(a.data);
    const auto* pb = static_cast<const storage_t<T>*>(b.data);
    const Operand* ops[4] = {&out, &cond, &a, &b};
    for_each(ops, [&](const std::int64_t* off) { o[off[0]] = c[off[1]] ? pa[off[2]] : pb[off[3]]; });
  });
}

}  // namespace brrr::backend
