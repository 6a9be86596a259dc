// CUDA kernels of the row ops: softmax / log_softmax and layer_norm over the last dim of a
// contiguous [rows, cols] tensor. Arithmetic in f32 (f64 for f64 tensors). Three shapes of
// kernel, picked on the host from cols, dtype and alignment:
//   - warp per row (cols <= 1024): each lane keeps its cols/32 elements in registers;
//     reductions are warp shuffles only (no shared memory, no __syncthreads).
//   - block per row, row in registers (cols % (16 / sizeof(T)) == 0, 16-byte aligned
//     pointers, cols up to 32768 f32/bf16/f16 or 8192 f64): 16-byte vector loads and
//     stores, VPT vectors per thread, one read and one write of the row.
//   - block per row, generic (anything else, e.g. a 50257-wide vocabulary): strided scalar
//     loads; softmax keeps an online (max, sum) pair (Milakov & Gimelshein 2018, "Online
//     normalizer calculation for softmax") so the row is read twice; layer_norm reads it
//     three times (sum, squared deviations, write) for an exact two-pass variance.
// Semantics (PyTorch's): softmax of a row of all -inf is NaN (exp(-inf - -inf)); a +inf
// makes the row NaN; NaN propagates to the whole row. layer_norm's variance is biased and
// rstd = 1 / sqrt(var + eps).
#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/pack.cuh"
#include "ops/cuda/philox_state.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/random_transform.hpp"

namespace brrr::kernels {

namespace {

// Online softmax normaliser (m, s): s is the sum of exp(x - m) over the elements seen.
// NaN and +inf poison the row (m = s = NaN: every output NaN, as PyTorch), -inf elements
// add nothing, and a state that saw only -inf stays (-inf, 0), so a lane with no finite
// element cannot turn a finite row into NaN; a row of all -inf ends as (-inf, 0), whose
// outputs exp(-inf - -inf) are NaN. One exp per merge.
template <class A> __device__ __forceinline__ void online_merge(A& m, A& s, A m2, A s2) {
  if (m != m || m2 != m2) {
    m = s = std::numeric_limits<A>::quiet_NaN();
  } else if (m2 <= m) {
    if (m2 != neg_inf<A>()) s += s2 * exp_(m2 - m);
  } else {
    s = (m == neg_inf<A>() ? A(0) : s * exp_(m - m2)) + s2;
    m = m2;
  }
}
template <class A> __device__ __forceinline__ void online_update(A& m, A& s, A x) {
  if (x != x || x == -neg_inf<A>()) m = s = std::numeric_limits<A>::quiet_NaN();
  else online_merge(m, s, x, A(1));
}

template <class A> __device__ __forceinline__ void warp_online(A& m, A& s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    A m2 = __shfl_xor_sync(full_mask, m, o), s2 = __shfl_xor_sync(full_mask, s, o);
    online_merge(m, s, m2, s2);
  }
}

// 16 bytes of T: W elements.
template <class T> constexpr int vec_width = 16 / static_cast<int>(sizeof(T));

template <class T, class A> __device__ __forceinline__ void load_vec(const T* p, A* dst) {
  uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < vec_width<T>; ++k) dst[k] = to_acc<A>(e[k]);
}

template <class T, class A> __device__ __forceinline__ void store_vec(T* p, const A* src) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int k = 0; k < vec_width<T>; ++k) e[k] = narrow_to<T>(src[k]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// ---------------------------------------------------------------------------------------
// softmax / log_softmax
// ---------------------------------------------------------------------------------------

// One warp per row, N elements per lane (cols <= 32 N); element i*32 + lane is coalesced.
template <class T, int N>
__global__ void __launch_bounds__(128) softmax_warp(T* __restrict__ out, const T* __restrict__ in, std::int64_t rows,
                                                    int cols, bool log) {
  pdl_begin();
  using A = racc_t<T>;
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = blockDim.x >> 5;
  for (std::int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += gridDim.x * warps) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A v[N];
    A m = neg_inf<A>();
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int c = i * 32 + lane;
      v[i] = c < cols ? to_acc<A>(x[c]) : neg_inf<A>();
      m = max_(m, v[i]);
    }
    m = warp_max(m);
    A s = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i * 32 + lane < cols) {
        A e = exp_(v[i] - m);
        s += e;
        if (!log) v[i] = e;
      }
    }
    s = warp_sum(s);
    if (log) {
      A ls = log_(s);
#pragma unroll
      for (int i = 0; i < N; ++i) {
        int c = i * 32 + lane;
        if (c < cols) y[c] = narrow_to<T>(v[i] - m - ls);
      }
    } else {
      A inv = A(1) / s;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        int c = i * 32 + lane;
        if (c < cols) y[c] = narrow_to<T>(v[i] * inv);
      }
    }
  }
}

// One block per row, the row in registers: VPT 16-byte vectors per thread. Vector j of the
// row is read by thread j % blockDim.x (coalesced). cols % vec_width<T> == 0, pointers
// 16-byte aligned, cols <= VPT * vec_width * blockDim.x.
template <class T, int VPT>
__global__ void __launch_bounds__(1024) softmax_block_vec(T* __restrict__ out, const T* __restrict__ in,
                                                          std::int64_t rows, std::int64_t cols, bool log) {
  pdl_begin();
  using A = racc_t<T>;
  constexpr int W = vec_width<T>;
  __shared__ A red[33];
  const std::int64_t nvec = cols / W;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A v[VPT][W];
    A m = neg_inf<A>();
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
        load_vec<T>(x + j * W, v[i]);
#pragma unroll
        for (int k = 0; k < W; ++k) m = max_(m, v[i][k]);
      }
    }
    m = block_reduce<A, true>(m, red);
    A s = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
          A e = exp_(v[i][k] - m);
          s += e;
          if (!log) v[i][k] = e;
        }
      }
    }
    s = block_reduce<A, false>(s, red);
    const A ls = log ? log_(s) : A(0), inv = A(1) / s;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
        A r[W];
#pragma unroll
        for (int k = 0; k < W; ++k) r[k] = log ? v[i][k] - m - ls : v[i][k] * inv;
        store_vec<T>(y + j * W, r);
      }
    }
  }
}

// One block per row, any cols and alignment: online (max, sum) pass, then the write pass.
template <class T>
__global__ void __launch_bounds__(1024) softmax_block_generic(T* __restrict__ out, const T* __restrict__ in,
                                                              std::int64_t rows, std::int64_t cols, bool log) {
  pdl_begin();
  using A = racc_t<T>;
  __shared__ A red_m[32], red_s[32];
  __shared__ A row_m, row_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A m = neg_inf<A>(), s = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) online_update(m, s, to_acc<A>(x[c]));
    warp_online(m, s);
    if (lane == 0) {
      red_m[warp] = m;
      red_s[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
      A wm = lane < nwarps ? red_m[lane] : neg_inf<A>();
      A ws = lane < nwarps ? red_s[lane] : A(0);
      warp_online(wm, ws);
      if (lane == 0) {
        row_m = wm;
        row_s = ws;
      }
    }
    __syncthreads();
    m = row_m;
    s = row_s;
    const A ls = log ? log_(s) : A(0), inv = A(1) / s;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      A v = to_acc<A>(x[c]);
      y[c] = narrow_to<T>(log ? v - m - ls : exp_(v - m) * inv);
    }
    // The next row's lane-0 writes to red_m/red_s and row_m/row_s must wait for every
    // thread to have read this row's values.
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------------------
// layer_norm
// ---------------------------------------------------------------------------------------

template <class T, class A> __device__ __forceinline__ A affine(A xhat, const T* w, const T* b, std::int64_t c) {
  A r = xhat;
  if (w) r *= to_acc<A>(w[c]);
  if (b) r += to_acc<A>(b[c]);
  return r;
}

template <class T, int N>
__global__ void __launch_bounds__(128) layer_norm_warp(T* __restrict__ out, racc_t<T>* __restrict__ mean_out,
                                                       racc_t<T>* __restrict__ rstd_out, const T* __restrict__ in,
                                                       const T* __restrict__ w, const T* __restrict__ b,
                                                       std::int64_t rows, int cols, racc_t<T> eps) {
  pdl_begin();
  using A = racc_t<T>;
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = blockDim.x >> 5;
  for (std::int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += gridDim.x * warps) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A v[N];
    A s = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int c = i * 32 + lane;
      v[i] = c < cols ? to_acc<A>(x[c]) : A(0);
      s += v[i];
    }
    const A mean = warp_sum(s) / cols;
    A sq = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i * 32 + lane < cols) {
        A d = v[i] - mean;
        sq += d * d;
      }
    }
    const A rstd = rsqrt_(warp_sum(sq) / cols + eps);
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
      int c = i * 32 + lane;
      if (c < cols) y[c] = narrow_to<T>(affine<T, A>((v[i] - mean) * rstd, w, b, c));
    }
  }
}

template <class T, int VPT>
__global__ void __launch_bounds__(1024) layer_norm_block_vec(T* __restrict__ out, racc_t<T>* __restrict__ mean_out,
                                                             racc_t<T>* __restrict__ rstd_out, const T* __restrict__ in,
                                                             const T* __restrict__ w, const T* __restrict__ b,
                                                             std::int64_t rows, std::int64_t cols, racc_t<T> eps) {
  pdl_begin();
  using A = racc_t<T>;
  constexpr int W = vec_width<T>;
  __shared__ A red[33];
  const std::int64_t nvec = cols / W;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A v[VPT][W];
    A s = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
        load_vec<T>(x + j * W, v[i]);
#pragma unroll
        for (int k = 0; k < W; ++k) s += v[i][k];
      }
    }
    const A mean = block_reduce<A, false>(s, red) / static_cast<A>(cols);
    A sq = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
#pragma unroll
        for (int k = 0; k < W; ++k) {
          A d = v[i][k] - mean;
          sq += d * d;
        }
      }
    }
    const A rstd = rsqrt_(block_reduce<A, false>(sq, red) / static_cast<A>(cols) + eps);
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      std::int64_t j = static_cast<std::int64_t>(i) * blockDim.x + threadIdx.x;
      if (j < nvec) {
        A wv[W], bv[W], r[W];
        if (w) load_vec<T>(w + j * W, wv);
        if (b) load_vec<T>(b + j * W, bv);
#pragma unroll
        for (int k = 0; k < W; ++k) {
          A t = (v[i][k] - mean) * rstd;
          if (w) t *= wv[k];
          if (b) t += bv[k];
          r[k] = t;
        }
        store_vec<T>(y + j * W, r);
      }
    }
  }
}

template <class T>
__global__ void __launch_bounds__(1024) layer_norm_block_generic(T* __restrict__ out, racc_t<T>* __restrict__ mean_out,
                                                                 racc_t<T>* __restrict__ rstd_out,
                                                                 const T* __restrict__ in, const T* __restrict__ w,
                                                                 const T* __restrict__ b, std::int64_t rows,
                                                                 std::int64_t cols, racc_t<T> eps) {
  pdl_begin();
  using A = racc_t<T>;
  __shared__ A red[33];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x = in + row * cols;
    T* y = out + row * cols;
    A s = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += to_acc<A>(x[c]);
    const A mean = block_reduce<A, false>(s, red) / static_cast<A>(cols);
    A sq = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      A d = to_acc<A>(x[c]) - mean;
      sq += d * d;
    }
    const A rstd = rsqrt_(block_reduce<A, false>(sq, red) / static_cast<A>(cols) + eps);
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      y[c] = narrow_to<T>(affine<T, A>((to_acc<A>(x[c]) - mean) * rstd, w, b, c));
    // block_reduce's own barriers order the reuse of `red` by the next row.
  }
}

// ---------------------------------------------------------------------------------------
// Host side: choosing a kernel
// ---------------------------------------------------------------------------------------

constexpr unsigned max_grid = 1u << 20;  // blocks; kernels loop over the remaining rows
constexpr int warp_kernel_max_cols = 1024;
constexpr int warp_kernel_threads = 128;  // 4 rows per block
constexpr int generic_threads = 512;

unsigned grid_for(std::int64_t blocks) {
  return static_cast<unsigned>(blocks < static_cast<std::int64_t>(max_grid) ? blocks : max_grid);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Elements per lane of the warp kernel: the smallest power of two with 32 N >= cols.
int warp_elems(std::int64_t cols) {
  int n = 1;
  while (n * 32 < cols) n *= 2;
  return n;
}

// The register block kernel keeps at most 32 f32 (16 f64) values per thread, so that it
// fits the 64 registers a 1024-thread block allows without spilling.
template <class T> constexpr int max_vpt =
    (sizeof(racc_t<T>) == 8 ? 8 : 32) / vec_width<T> < 8 ? (sizeof(racc_t<T>) == 8 ? 8 : 32) / vec_width<T> : 8;

// The register block kernel's shape: VPT (1, 2, 4 or 8 vectors per thread, up to
// max_vpt<T>) and threads (a multiple of 32, at most 1024); vpt 0 when the row does not
// fit in registers. Prefers <= 256 threads per row (several rows in flight per SM).
struct BlockShape {
  int vpt = 0;
  int threads = 0;
};
template <class T> BlockShape block_shape(std::int64_t cols) {
  const std::int64_t nvec = cols / vec_width<T>;
  BlockShape r;
  for (int vpt = 1; vpt <= max_vpt<T>; vpt *= 2) {
    std::int64_t threads = (nvec + vpt - 1) / vpt;
    if (threads <= 256 || (vpt == max_vpt<T> && threads <= 1024)) {
      r.vpt = vpt;
      r.threads = static_cast<int>((threads + 31) / 32 * 32);
      return r;
    }
  }
  return r;
}

// Calls f(std::integral_constant<int, VPT>) for the runtime vpt, instantiating only the
// VPTs that block_shape<T> can choose.
template <class T, class F> void with_vpt(int vpt, F&& f) {
  switch (vpt) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: if constexpr (max_vpt<T> >= 2) f(std::integral_constant<int, 2>{}); break;
    case 4: if constexpr (max_vpt<T> >= 4) f(std::integral_constant<int, 4>{}); break;
    case 8: if constexpr (max_vpt<T> >= 8) f(std::integral_constant<int, 8>{}); break;
    default: break;
  }
}

// ---------------------------------------------------------------------------------------
// dropout_add_layer_norm: one warp per row, each lane owning groups of 4 adjacent columns
// (g * 32 + lane), so that a group's dropout words are one Philox block and its loads one
// vector (VEC: every pointer aligned to 4 elements).
// ---------------------------------------------------------------------------------------

// kept[r] for elements e0 .. e0 + 3 (e0 a multiple of 4): `dropout`'s rule, one word per element
// (two for f64) from the stream at `offset`.
template <class T> __device__ __forceinline__ void dropout_keep4(std::uint64_t seed, std::uint64_t offset,
                                                                 std::int64_t e0, double p, float p32, bool (&kept)[4]) {
  namespace rt = ::brrr::random_transform;
  constexpr int per = std::is_same_v<T, double> ? 2 : 1;
  std::uint32_t c[per][4];
  const std::uint64_t w0 = offset + per * static_cast<std::uint64_t>(e0);
#pragma unroll
  for (int k = 0; k < per; ++k) {
    if (w0 % 4 == 0) {
      rt::philox_block(seed, w0 / 4 + k, c[k]);
    } else {
#pragma unroll
      for (int r = 0; r < 4; ++r) c[k][r] = rt::philox_word(seed, w0 + 4 * k + r);
    }
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if constexpr (per == 2) kept[r] = rt::uniform53(c[r / 2][2 * (r % 2)], c[r / 2][2 * (r % 2) + 1]) >= p;
    else kept[r] = rt::uniform_bits(c[0][r], 24) >= p32;
  }
}

template <class T0, class TS, int G, bool VEC>
__global__ void __launch_bounds__(128)
    dropout_add_layer_norm_warp(T0* __restrict__ out, TS* __restrict__ sum, bool* __restrict__ mask,
                                racc_t<TS>* __restrict__ mean_out, racc_t<TS>* __restrict__ rstd_out,
                                const T0* __restrict__ x0, const TS* __restrict__ res, const TS* __restrict__ w,
                                const TS* __restrict__ b, std::int64_t rows, int cols, racc_t<TS> eps,
                                AttentionDropout d, T0 keep) {
  pdl_begin();
  using A = racc_t<TS>;
  const bool drop = d.p > 0;
  std::uint64_t seed = 0, offset = 0;
  if (drop) philox_state(d, seed, offset);
  const float p32 = static_cast<float>(d.p);
  const T0 zero = narrow_to<T0>(0.0);
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = blockDim.x >> 5;
  for (std::int64_t row = blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += gridDim.x * warps) {
    A v[G][4];
    A s = 0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c0 = (g * 32 + lane) * 4;
#pragma unroll
      for (int r = 0; r < 4; ++r) v[g][r] = A(0);
      if (c0 >= cols) continue;
      const std::int64_t e0 = row * cols + c0;
      T0 t[4];
      load4<T0, VEC>(x0 + e0, t);
      if (drop) {
        bool kept[4];
        dropout_keep4<T0>(seed, offset, e0, d.p, p32, kept);
        *reinterpret_cast<uchar4*>(mask + e0) = make_uchar4(kept[0], kept[1], kept[2], kept[3]);
#pragma unroll
        for (int r = 0; r < 4; ++r) t[r] = narrow_to<T0>(load(t[r]) * load(kept[r] ? keep : zero));
      }
      TS sv[4];
      if (res) {
        TS rv[4];
        load4<TS, VEC>(res + e0, rv);
#pragma unroll
        for (int r = 0; r < 4; ++r) sv[r] = narrow_to<TS>(static_cast<A>(load(rv[r])) + static_cast<A>(load(t[r])));
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) sv[r] = narrow_to<TS>(load(t[r]));
      }
      store4<TS, VEC>(sum + e0, sv);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        v[g][r] = to_acc<A>(sv[r]);
        s += v[g][r];
      }
    }
    const A mean = warp_sum(s) / cols;
    A sq = 0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if ((g * 32 + lane) * 4 >= cols) continue;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const A dv = v[g][r] - mean;
        sq += dv * dv;
      }
    }
    const A rstd = rsqrt_(warp_sum(sq) / cols + eps);
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c0 = (g * 32 + lane) * 4;
      if (c0 >= cols) continue;
      T0 o[4];
#pragma unroll
      for (int r = 0; r < 4; ++r)  // layer_norm's output in the sum's dtype, then x0's
        o[r] = narrow_to<T0>(load(narrow_to<TS>(affine<TS, A>((v[g][r] - mean) * rstd, w, b, c0 + r))));
      store4<T0, VEC>(out + row * cols + c0, o);
    }
  }
}

template <class T>
int softmax_typed(T* out, const T* in, std::int64_t rows, std::int64_t cols, bool log, cudaStream_t st) {
  if (cols <= warp_kernel_max_cols) {
    const int rows_per_block = warp_kernel_threads / 32;
    const unsigned grid = grid_for((rows + rows_per_block - 1) / rows_per_block);
    const int c = static_cast<int>(cols);
    with_pow2_upto32(warp_elems(cols), [&](auto n) {
      launch_pdl(softmax_warp<T, decltype(n)::value>, grid, warp_kernel_threads, 0, st, out, in, rows, c, log);
    });
    return static_cast<int>(cudaGetLastError());
  }
  const unsigned grid = grid_for(rows);
  const BlockShape shape = block_shape<T>(cols);
  if (cols % vec_width<T> == 0 && aligned16(out) && aligned16(in) && shape.vpt > 0) {
    with_vpt<T>(shape.vpt, [&](auto vpt) {
      launch_pdl(softmax_block_vec<T, decltype(vpt)::value>, grid, shape.threads, 0, st, out, in, rows, cols, log);
    });
    return static_cast<int>(cudaGetLastError());
  }
  launch_pdl(softmax_block_generic<T>, grid, generic_threads, 0, st, out, in, rows, cols, log);
  return static_cast<int>(cudaGetLastError());
}

template <class T>
int layer_norm_typed(T* out, racc_t<T>* mean, racc_t<T>* rstd, const T* in, const T* w, const T* b, std::int64_t rows,
                     std::int64_t cols, double eps_d, cudaStream_t st) {
  using A = racc_t<T>;
  const A eps = static_cast<A>(eps_d);
  if (cols <= warp_kernel_max_cols) {
    const int rows_per_block = warp_kernel_threads / 32;
    const unsigned grid = grid_for((rows + rows_per_block - 1) / rows_per_block);
    const int c = static_cast<int>(cols);
    with_pow2_upto32(warp_elems(cols), [&](auto n) {
      launch_pdl(layer_norm_warp<T, decltype(n)::value>, grid, warp_kernel_threads, 0, st, out, mean, rstd, in, w, b,
                 rows, c, eps);
    });
    return static_cast<int>(cudaGetLastError());
  }
  const unsigned grid = grid_for(rows);
  const BlockShape shape = block_shape<T>(cols);
  const bool aligned = aligned16(out) && aligned16(in) && (!w || aligned16(w)) && (!b || aligned16(b));
  if (cols % vec_width<T> == 0 && aligned && shape.vpt > 0) {
    with_vpt<T>(shape.vpt, [&](auto vpt) {
      launch_pdl(layer_norm_block_vec<T, decltype(vpt)::value>, grid, shape.threads, 0, st, out, mean, rstd, in, w, b,
                 rows, cols, eps);
    });
    return static_cast<int>(cudaGetLastError());
  }
  launch_pdl(layer_norm_block_generic<T>, grid, generic_threads, 0, st, out, mean, rstd, in, w, b, rows, cols, eps);
  return static_cast<int>(cudaGetLastError());
}

template <class T0, class TS>
int dropout_add_layer_norm_typed(T0* out, TS* sum, bool* mask, racc_t<TS>* mean, racc_t<TS>* rstd, const T0* x0,
                                 const TS* res, const TS* w, const TS* b, std::int64_t rows, std::int64_t cols,
                                 double eps, const AttentionDropout& d, cudaStream_t st) {
  if (cols % 4 != 0 || cols > (sizeof(racc_t<TS>) == 8 ? 512 : 1024)) return static_cast<int>(cudaErrorInvalidValue);
  const int rows_per_block = warp_kernel_threads / 32;
  const unsigned grid = grid_for((rows + rows_per_block - 1) / rows_per_block);
  const auto a = [](const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; };
  const bool vec = a(x0, 4 * sizeof(T0)) && a(out, 4 * sizeof(T0)) && a(sum, 4 * sizeof(TS)) &&
                   (!res || a(res, 4 * sizeof(TS)));
  if (d.p > 0 && !a(mask, 4)) return static_cast<int>(cudaErrorInvalidValue);
  const T0 keep = narrow_to<T0>(d.p > 0 ? 1.0 / (1.0 - d.p) : 1.0);
  const int c = static_cast<int>(cols);
  const auto eps_a = static_cast<racc_t<TS>>(eps);
  // Groups of 128 columns (4 a lane) per row (the kernel skips groups past cols).
  bool launched = false;
  with_column_groups(cols, [&](auto n) {
    constexpr int G = decltype(n)::value;
    {
      launched = true;
      if (vec)
        launch_pdl(dropout_add_layer_norm_warp<T0, TS, G, true>, grid, warp_kernel_threads, 0, st, out, sum, mask, mean,
                   rstd, x0, res, w, b, rows, c, eps_a, d, keep);
      else
        launch_pdl(dropout_add_layer_norm_warp<T0, TS, G, false>, grid, warp_kernel_threads, 0, st, out, sum, mask,
                   mean, rstd, x0, res, w, b, rows, c, eps_a, d, keep);
    }
  });
  if (!launched) return static_cast<int>(cudaErrorInvalidValue);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int softmax_rows(void* out, const void* in, DType dtype, std::int64_t rows, std::int64_t cols, bool log,
                 void* stream) {
  if (rows <= 0 || cols <= 0) return static_cast<int>(cudaSuccess);
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::f32: return softmax_typed(static_cast<float*>(out), static_cast<const float*>(in), rows, cols, log, st);
    case DType::f64: return softmax_typed(static_cast<double*>(out), static_cast<const double*>(in), rows, cols, log, st);
    case DType::bf16:
      return softmax_typed(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(in), rows, cols, log, st);
    case DType::f16: return softmax_typed(static_cast<__half*>(out), static_cast<const __half*>(in), rows, cols, log, st);
    case DType::i32: case DType::i64: case DType::boolean: break;
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int layer_norm_rows(void* out, void* mean, void* rstd, const void* in, const void* weight, const void* bias,
                    DType dtype, std::int64_t rows, std::int64_t cols, double eps, void* stream) {
  if (rows <= 0 || cols <= 0) return static_cast<int>(cudaSuccess);
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case DType::f32:
      return layer_norm_typed(static_cast<float*>(out), static_cast<float*>(mean), static_cast<float*>(rstd),
                              static_cast<const float*>(in), static_cast<const float*>(weight),
                              static_cast<const float*>(bias), rows, cols, eps, st);
    case DType::f64:
      return layer_norm_typed(static_cast<double*>(out), static_cast<double*>(mean), static_cast<double*>(rstd),
                              static_cast<const double*>(in), static_cast<const double*>(weight),
                              static_cast<const double*>(bias), rows, cols, eps, st);
    case DType::bf16:
      return layer_norm_typed(static_cast<__nv_bfloat16*>(out), static_cast<float*>(mean), static_cast<float*>(rstd),
                              static_cast<const __nv_bfloat16*>(in), static_cast<const __nv_bfloat16*>(weight),
                              static_cast<const __nv_bfloat16*>(bias), rows, cols, eps, st);
    case DType::f16:
      return layer_norm_typed(static_cast<__half*>(out), static_cast<float*>(mean), static_cast<float*>(rstd),
                              static_cast<const __half*>(in), static_cast<const __half*>(weight),
                              static_cast<const __half*>(bias), rows, cols, eps, st);
    case DType::i32: case DType::i64: case DType::boolean: break;
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int dropout_add_layer_norm(const Operand& out, const Operand& sum, const Operand* mask, const Operand& mean,
                           const Operand& rstd, const Operand& x0, const Operand* residual, const Operand* weight,
                           const Operand* bias, double eps, const AttentionDropout& d, void* stream) {
  const std::int64_t cols = x0.ndim == 0 ? 1 : x0.sizes[x0.ndim - 1];
  if (cols <= 0 || x0.numel == 0) return static_cast<int>(cudaSuccess);
  const std::int64_t rows = x0.numel / cols;
  auto st = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(x0.dtype, [&]<class T0>(T0*) {
    if constexpr (is_floating<T0>) {
      auto run = [&]<class TS>(TS*) {
        using A = racc_t<TS>;
        status = dropout_add_layer_norm_typed<T0, TS>(
            static_cast<T0*>(out.data), static_cast<TS*>(sum.data), mask ? static_cast<bool*>(mask->data) : nullptr,
            static_cast<A*>(mean.data), static_cast<A*>(rstd.data), static_cast<const T0*>(x0.data),
            residual ? static_cast<const TS*>(residual->data) : nullptr,
            weight ? static_cast<const TS*>(weight->data) : nullptr, bias ? static_cast<const TS*>(bias->data) : nullptr,
            rows, cols, eps, d, st);
      };
      if (sum.dtype == x0.dtype) run(static_cast<T0*>(nullptr));
      else if constexpr (sizeof(T0) == 2) {
        if (sum.dtype == DType::f32) run(static_cast<float*>(nullptr));
      }
    }
  });
  return status;
}

}  // namespace brrr::kernels
