// Device helpers of the row kernels (ops/cuda/rows.cu, ops/cuda/cross_entropy.cu): the
// accumulation type, float/double math overloads, warp and block reductions.
#pragma once
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/cuda/common.cuh"

namespace brrr::kernels {
namespace {

// Accumulation type of the (floating) row kernels: double for f64, float for f32/bf16/f16.
template <class T> using racc_t = accumulate_t<T>;

template <class A, class T> __device__ __forceinline__ A to_acc(T v) { return static_cast<A>(load(v)); }

__device__ __forceinline__ float exp_(float x) { return expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
__device__ __forceinline__ float rsqrt_(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ double rsqrt_(double x) { return 1.0 / sqrt(x); }
__device__ __forceinline__ float max_(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_(double a, double b) { return fmax(a, b); }

template <class A> __device__ __forceinline__ A neg_inf() { return -std::numeric_limits<A>::infinity(); }

constexpr unsigned full_mask = 0xffffffffu;

template <class A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}
template <class A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max_(v, __shfl_xor_sync(full_mask, v, o));
  return v;
}

// All-reduce over the block (blockDim.x a multiple of 32, at most 1024). `shared` holds 33
// values; it may be reused by the next call right away (see the two __syncthreads).
template <class A, bool IsMax> __device__ __forceinline__ A block_reduce(A v, A* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = IsMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < nwarps ? shared[lane] : (IsMax ? neg_inf<A>() : A(0));
    w = IsMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) shared[32] = w;
  }
  __syncthreads();
  return shared[32];
}

// Calls f(std::integral_constant<int, N>) for N = n among 1, 2, 4, 8, 16, else 32: the
// elements per lane of the warp-per-row kernels (softmax, layer_norm's backward).
template <class F> void with_pow2_upto32(int n, F&& f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: f(std::integral_constant<int, 32>{}); break;
  }
}

// Calls f(std::integral_constant<int, G>) for G, the groups of 128 columns (4 a lane) of a row
// of `cols` columns, among 1, 2, 3, 4, 6, 8 (the fewest that cover the row; cols <= 1024):
// an exact 3 or 6 keeps the registers of widths 384 and 768 (GPT-2's) to what they use.
template <class F> void with_column_groups(std::int64_t cols, F&& f) {
  const std::int64_t need = (cols + 127) / 128;
  if (need <= 1) f(std::integral_constant<int, 1>{});
  else if (need == 2) f(std::integral_constant<int, 2>{});
  else if (need == 3) f(std::integral_constant<int, 3>{});
  else if (need == 4) f(std::integral_constant<int, 4>{});
  else if (need <= 6) f(std::integral_constant<int, 6>{});
  else if (need <= 8) f(std::integral_constant<int, 8>{});
}

}  // namespace
}  // namespace brrr::kernels
