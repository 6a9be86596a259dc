// CPU kernels of the elementwise ops: unary, binary (tensor-tensor and tensor-scalar) and
// where. The math is ops/elementwise_math.hpp, shared with the CUDA kernels, except f32 exp:
// exp_f32 (ops/cpu/loops.hpp) through the CPU capability's vector kernel (ops/cpu/isa), also
// for strided operands.
// Contiguous operands of one shape take a flat loop split over the intra-op pool.
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backend/contract.hpp"
#include "ops/cpu/isa/kernels.hpp"
#include "ops/cpu/loops.hpp"
#include "ops/elementwise_math.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;
namespace ew = elementwise;

namespace {

[[noreturn]] void no_kernel(const char* op, DType dtype) {
  throw Error(ErrorKind::dtype, std::string(op) + ": no CPU kernel for " + to_string(dtype) +
                                    " (the op layer converts first)");
}

// Large contiguous operands of one shape: f(i) over [0, n) split over the intra-op pool.
template <std::size_t N, class F> bool contiguous_parallel(const Operand* const (&ops)[N], F&& f) {
  const std::int64_t n = ops[0]->numel;
  if (n < 2 * elementwise_grain) return false;
  for (const Operand* o : ops)
    if (o->numel != n || !is_contiguous(*o)) return false;
  cpu::parallel_for(n, elementwise_grain, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) f(i);
  });
  return true;
}

template <UnaryOp OP> void unary_loop(const Operand& out, const Operand& in, double p0, double p1) {
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (!ew::has_unary_kernel<OP, T>) {
      no_kernel(name_of(OP), out.dtype);
    } else {
      using A = compute_t<T>;
      auto* o = static_cast<T*>(out.data);
      const auto* x = static_cast<const T*>(in.data);
      const A lo = ew::clamp_bound<A>(p0, false), hi = ew::clamp_bound<A>(p1, true);
      const Operand* ops[2] = {&out, &in};
      if constexpr (OP == UnaryOp::exp && std::is_same_v<T, float>) {  // vectorised (ops/cpu/isa)
        if (is_contiguous(out) && is_contiguous(in) && in.numel == out.numel) {
          const auto exp_array = isa().exp_f32;
          cpu::parallel_for(out.numel, elementwise_grain,
                            [&](std::int64_t i0, std::int64_t i1) { exp_array(x + i0, o + i0, i1 - i0); });
        } else {  // strided: gathered in blocks through the same vector kernel (exp_f32's bits)
          const auto exp_array = isa().exp_f32;
          constexpr int block = 256;
          float v[block];
          std::int64_t at[block];
          int k = 0;
          auto flush = [&] {
            exp_array(v, v, k);
            for (int j = 0; j < k; ++j) o[at[j]] = v[j];
            k = 0;
          };
          for_each(ops, [&](const std::int64_t* off) {
            v[k] = x[off[1]];
            at[k] = off[0];
            if (++k == block) flush();
          });
          flush();
        }
        return;
      }
      if (contiguous_parallel(ops, [&](std::int64_t i) { o[i] = narrow_to<T>(ew::unary<OP, A>(load<T>(x[i]), lo, hi)); }))
        return;
      for_each(ops, [&](const std::int64_t* off) {
        o[off[0]] = narrow_to<T>(ew::unary<OP, A>(load<T>(x[off[1]]), lo, hi));
      });
    }
  });
}

// Integer rounding divisions: a zero divisor is an error (PyTorch's CPU behaviour).
template <BinaryOp OP, class A> void check_divisor(A b, DType dtype) {
  if constexpr (is_rounding_division(OP) && std::is_integral_v<A>)
    if (b == 0)
      throw Error(ErrorKind::value, std::string(name_of(OP)) + ": integer division by zero (a " +
                                        to_string(dtype) + " divisor holds 0)");
}

template <BinaryOp OP> void binary_loop(const Operand& out, const Operand& a, const Operand& b) {
  dispatch(a.dtype, [&]<class T>(T*) {
    if constexpr (!ew::has_binary_kernel<OP, T>) {
      no_kernel(name_of(OP), a.dtype);
    } else {
      using A = compute_t<T>;
      const auto* pa = static_cast<const T*>(a.data);
      const auto* pb = static_cast<const T*>(b.data);
      const Operand* ops[3] = {&out, &a, &b};
      if constexpr (is_comparison(OP)) {
        auto* o = static_cast<std::uint8_t*>(out.data);
        for_each(ops, [&](const std::int64_t* off) {
          o[off[0]] = ew::binary<OP, A>(load<T>(pa[off[1]]), load<T>(pb[off[2]])) != A(0);
        });
      } else {
        auto* o = static_cast<T*>(out.data);
        if constexpr (!is_rounding_division(OP))  // those check divisors and throw: keep them serial
          if (contiguous_parallel(ops, [&](std::int64_t i) {
                o[i] = narrow_to<T>(ew::binary<OP, A>(load<T>(pa[i]), load<T>(pb[i])));
              }))
            return;
        for_each(ops, [&](const std::int64_t* off) {
          const A bv = load<T>(pb[off[2]]);
          check_divisor<OP>(bv, b.dtype);
          o[off[0]] = narrow_to<T>(ew::binary<OP, A>(load<T>(pa[off[1]]), bv));
        });
      }
    }
  });
}

template <BinaryOp OP> void binary_scalar_loop(const Operand& out, const Operand& a, double s, bool scalar_first) {
  dispatch(a.dtype, [&]<class T>(T*) {
    if constexpr (!ew::has_binary_kernel<OP, T>) {
      no_kernel(name_of(OP), a.dtype);
    } else {
      using A = compute_t<T>;
      const auto* pa = static_cast<const T*>(a.data);
      A sv = load<T>(narrow_to<T>(s));  // the scalar as the tensor's dtype holds it
      const Operand* ops[2] = {&out, &a};
      auto f = [&](A x) {
        check_divisor<OP>(scalar_first ? x : sv, a.dtype);
        return scalar_first ? ew::binary<OP, A>(sv, x) : ew::binary<OP, A>(x, sv);
      };
      if constexpr (is_comparison(OP)) {
        auto* o = static_cast<std::uint8_t*>(out.data);
        for_each(ops, [&](const std::int64_t* off) { o[off[0]] = f(load<T>(pa[off[1]])) != A(0); });
      } else {
        auto* o = static_cast<T*>(out.data);
        if constexpr (!is_rounding_division(OP))
          if (contiguous_parallel(ops, [&](std::int64_t i) { o[i] = narrow_to<T>(f(load<T>(pa[i]))); })) return;
        for_each(ops, [&](const std::int64_t* off) { o[off[0]] = narrow_to<T>(f(load<T>(pa[off[1]]))); });
      }
    }
  });
}

// add/sub/mul/div of f32 with bf16/f16 into f32 (mixed_float_binary): each operand widened
// as it is read.
template <BinaryOp OP, class IA, class IB> void mixed_loop(const Operand& out, const Operand& a, const Operand& b) {
  auto* o = static_cast<float*>(out.data);
  const auto* pa = static_cast<const IA*>(a.data);
  const auto* pb = static_cast<const IB*>(b.data);
  const auto f = [](IA x, IB y) { return ew::binary<OP, float>(static_cast<float>(load<IA>(x)), static_cast<float>(load<IB>(y))); };
  const Operand* ops[3] = {&out, &a, &b};
  if (contiguous_parallel(ops, [&](std::int64_t i) { o[i] = f(pa[i], pb[i]); })) return;
  for_each(ops, [&](const std::int64_t* off) { o[off[0]] = f(pa[off[1]], pb[off[2]]); });
}

template <BinaryOp OP> void mixed_binary(const Operand& out, const Operand& a, const Operand& b) {
  const DType h = a.dtype == DType::f32 ? b.dtype : a.dtype;
  const auto run = [&]<class H>(H*) {
    if (a.dtype == DType::f32) mixed_loop<OP, float, H>(out, a, b);
    else mixed_loop<OP, H, float>(out, a, b);
  };
  if (h == DType::bf16) run(static_cast<bfloat16*>(nullptr));
  else run(static_cast<half*>(nullptr));
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Operand& out, const Operand& in, double p0, double p1) {
  with_op(op, [&]<UnaryOp OP>() { unary_loop<OP>(out, in, p0, p1); });
}

void CpuBackend::binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b) {
  if (a.dtype != b.dtype) {
    if (!mixed_float_binary(op, a.dtype, b.dtype) || out.dtype != DType::f32)
      throw Error(ErrorKind::dtype, std::string(name_of(op)) + ": operands of dtypes " + to_string(a.dtype) + " and " +
                                        to_string(b.dtype) + " reached the kernel (the op layer converts them)");
    switch (op) {
      case BinaryOp::add: return mixed_binary<BinaryOp::add>(out, a, b);
      case BinaryOp::sub: return mixed_binary<BinaryOp::sub>(out, a, b);
      case BinaryOp::mul: return mixed_binary<BinaryOp::mul>(out, a, b);
      default: return mixed_binary<BinaryOp::div>(out, a, b);
    }
  }
  with_op(op, [&]<BinaryOp OP>() { binary_loop<OP>(out, a, b); });
}

void CpuBackend::binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first) {
  with_op(op, [&]<BinaryOp OP>() { binary_scalar_loop<OP>(out, a, s, scalar_first); });
}

void CpuBackend::where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b) {
  dispatch(out.dtype, [&]<class T>(T*) {
    auto* o = static_cast<T*>(out.data);
    const auto* c = static_cast<const std::uint8_t*>(cond.data);
    const auto* pa = static_cast<const T*>(a.data);
    const auto* pb = static_cast<const T*>(b.data);
    const Operand* ops[4] = {&out, &cond, &a, &b};
    for_each(ops, [&](const std::int64_t* off) { o[off[0]] = c[off[1]] ? pa[off[2]] : pb[off[3]]; });
  });
}

}  // namespace brrr::backend
