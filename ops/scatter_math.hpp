// The combine step of scatter_reduce's kernel (BRRR_SCATTER_OPS), written once for both
// backends (plain C++ compiled by clang and by nvcc), as ops/elementwise_math.hpp is for the
// elementwise ops. A = compute_t (backend/contract.hpp): float for f32/f16/bf16, double for
// f64, the integer itself for integers, int64 for bool.
#pragma once
#include <type_traits>

#include "backend/contract.hpp"

namespace brrr::scatter_math {

using backend::ScatterOp;

template <auto OP> inline constexpr bool no_math_for = false;

/// The destination's new value after `src` meets its current value `dst`. prod on integers
/// wraps (unsigned multiply, as PyTorch's); amax/amin: NaN wins once seen.
template <ScatterOp OP, class A> BRRR_HD A combine(A dst, A src) {
  if constexpr (OP == ScatterOp::assign) return src;
  else if constexpr (OP == ScatterOp::prod) {
    if constexpr (std::is_floating_point_v<A>) return dst * src;
    else return static_cast<A>(static_cast<std::make_unsigned_t<A>>(dst) * static_cast<std::make_unsigned_t<A>>(src));
  } else if constexpr (OP == ScatterOp::amax || OP == ScatterOp::amin) {
    if constexpr (std::is_floating_point_v<A>) {
      if (dst != dst) return dst;
      if (src != src) return src;
    }
    if constexpr (OP == ScatterOp::amax) return src > dst ? src : dst;
    else return src < dst ? src : dst;
  } else static_assert(no_math_for<OP>, "an op of BRRR_SCATTER_OPS has no math in ops/scatter_math.hpp");
}

}  // namespace brrr::scatter_math
