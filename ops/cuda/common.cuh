// Shared device helpers: element types, strided indexing, launch geometry. The conversion
// rules (load, widen, narrow_to, compute_t, accumulate_t) are the contract's
// (backend/contract.hpp), the same the CPU backend applies.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/contract.hpp"
#include "ops/cuda/kernels.hpp"

namespace brrr::kernels {

using namespace ::brrr::backend;  // the contract's types and conversion rules

/// Calls f(static_cast<T*>(nullptr)) with the element type of `dtype`: CUDA's __half and
/// __nv_bfloat16 for the 16-bit floats, std::uint8_t for bool (0/1).
template <class F> void dispatch(DType dtype, F&& f) { with_element_type<__half, __nv_bfloat16>(dtype, f); }

// Element offset of row-major index i in a strided operand (64-bit throughout).
__device__ __forceinline__ std::int64_t offset_of(const Operand& s, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    std::int64_t size = s.sizes[d];
    off += (i % size) * s.strides[d];
    i /= size;
  }
  return off;
}

inline bool is_contiguous(const Operand& s) {
  std::int64_t expect = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    if (s.sizes[d] != 1 && s.strides[d] != expect) return false;
    expect *= s.sizes[d];
  }
  return true;
}

// Grid for a grid-stride loop over n elements.
inline unsigned blocks_for(std::int64_t n, int threads = 256) {
  std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

}  // namespace brrr::kernels
