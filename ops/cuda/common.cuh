// Shared device helpers: element types, conversions, strided indexing, launch geometry.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/cuda/kernels.hpp"

namespace brrr::kernels {

// Calls f(T{}) with the element type of `t` (bool tensors hold one byte 0/1: uint8_t is
// treated as bool by the conversions below).
template <class F> void dispatch(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::f32: return f(float{});
    case ScalarType::f64: return f(double{});
    case ScalarType::bf16: return f(__nv_bfloat16{});
    case ScalarType::f16: return f(__half{});
    case ScalarType::i32: return f(std::int32_t{});
    case ScalarType::i64: return f(std::int64_t{});
    case ScalarType::boolean: return f(std::uint8_t{});
  }
}

template <class T> inline constexpr bool is_half_like =
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// Widest value: double for floating types, int64 for integers, 0/1 for bool.
template <class T> __device__ __forceinline__ auto widen(T v) {
  if constexpr (is_half_like<T>) return static_cast<double>(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::int64_t>(v != 0);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<std::int64_t>(v);
}

// Same rules as the CPU backend: floats to ints truncate, NaN -> 0, saturate; anything to
// bool is (x != 0); to bf16/f16 via float with round-to-nearest-even.
template <class T, class W> __device__ __forceinline__ T narrow_to(W v) {
  if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::uint8_t>(v != 0);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else if constexpr (std::is_floating_point_v<W>) {
    if (v != v) return T(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else return static_cast<T>(v);
}

// The same conversions on the host (kernel arguments such as a fill or padding value):
// bf16/f16 via the round-to-nearest-even intrinsics, integers saturate, NaN -> 0.
template <class T> T host_cast(double v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<std::uint8_t>(v != 0);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else {
    if (v != v) return T(0);
    constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo) return std::numeric_limits<T>::min();
    if (v >= hi) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

// Element offset of row-major index i in a strided operand (64-bit throughout).
__device__ __forceinline__ std::int64_t offset_of(const Strided& s, std::int64_t i) {
  std::int64_t off = 0;
  for (int d = s.ndim - 1; d >= 0; --d) {
    std::int64_t size = s.sizes[d];
    off += (i % size) * s.strides[d];
    i /= size;
  }
  return off;
}

inline bool is_contiguous(const Strided& s) {
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
