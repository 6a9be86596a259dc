// Fused attention on CUDA: FlashAttention-2's forward and backward (Dao 2023, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", algorithms 1 and 2; Dao et
// al. 2022, "FlashAttention"). No L x S matrix is ever in memory: tiles of keys/values (or of
// queries/output gradients) go through shared memory, the softmax is computed online, and
// backward recomputes the probabilities from the log-sum-exp the forward saved.
//
// A straightforward SIMT version (no tensor cores yet): arithmetic in f32 (f64 for f64), every
// element type converted once when its tile is loaded. A row (one query in the forward and the
// dQ kernel, one key in the dK/dV kernel) belongs to TPR = DMAX / 16 adjacent threads, each
// holding 16 of its dims, interleaved (thread p owns dims p, p + TPR, ...) so that the threads
// of a row read consecutive shared-memory words; a dot product is 16 FMAs and log2(TPR) warp
// shuffles. 128 threads per block: 128 / TPR rows per block.
//
// Kernels:
//   forward   grid (B*H) x query tiles; per key tile: scores, online max/sum, O += P V.
//   delta     delta_i = dO_i . O_i (one warp per row).
//   dq        grid (B*H) x query tiles; per key tile: P = exp(S - lse), dS = P (dO V^T - delta),
//             dQ += dS K.
//   dkdv      grid (B*H) x key tiles; per query tile: dV += P^T dO, dK += dS^T Q.
// Deterministic (no atomics): dQ and dK/dV recompute S in separate kernels.
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

constexpr int kThreads = 128;  // threads per block
constexpr int kDpt = 16;       // dims per thread
// Keys (forward, dq) or queries (dkdv) per shared-memory tile: two tiles of kTile x 128 stay
// within the 48 KiB of static shared memory (32 KiB in f32, 32 KiB in f64 with 16 rows).
template <class A> constexpr int kTileOf = sizeof(A) == 8 ? 16 : 32;

// One [B, H, T, D] operand: base pointer, strides in elements (the dim's stride is 1).
template <class T> struct Bhtd {
  T* data;
  std::int64_t sb, sh, st;
  __device__ __forceinline__ T* row(int b, int h, std::int64_t t) const { return data + b * sb + h * sh + t * st; }
};

template <class T> Bhtd<T> bhtd(const Operand& o) {
  return {static_cast<T*>(o.data), o.strides[0], o.strides[1], o.strides[2]};
}

struct Geometry {
  int heads, q_len, k_len, dim;
  int tiles;  // row tiles per (batch, head): blockIdx.x = bh * tiles + tile
};

// Sum over the TPR threads of a row (adjacent lanes; every lane of the warp takes part).
template <int TPR, class A> __device__ __forceinline__ A row_sum(A v) {
#pragma unroll
  for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

// Loads rows [t0, t0 + kTileOf<A>) of x (zeros past t_len or dim) into tile[kTileOf<A>][DMAX] as A.
template <int DMAX, class T, class A>
__device__ __forceinline__ void load_tile(A (*tile)[DMAX], const Bhtd<const T>& x, int b, int h, int t0, int t_len,
                                          int dim) {
  for (int e = threadIdx.x; e < kTileOf<A> * DMAX; e += kThreads) {
    const int r = e / DMAX, d = e % DMAX;
    const int t = t0 + r;
    tile[r][d] = t < t_len && d < dim ? to_acc<A>(x.row(b, h, t)[d]) : A(0);
  }
}

// Loads this thread's dims of row t of x (zeros when out of range), times `mul`.
template <int TPR, class T, class A>
__device__ __forceinline__ void load_row(A (&r)[kDpt], const Bhtd<const T>& x, int b, int h, int t, bool active,
                                         int dim, int part, A mul) {
#pragma unroll
  for (int e = 0; e < kDpt; ++e) {
    const int d = part + TPR * e;
    r[e] = active && d < dim ? to_acc<A>(x.row(b, h, t)[d]) * mul : A(0);
  }
}

template <int TPR, class T, class A>
__device__ __forceinline__ void store_row(const Bhtd<T>& x, int b, int h, int t, int dim, int part,
                                          const A (&r)[kDpt], A mul) {
#pragma unroll
  for (int e = 0; e < kDpt; ++e) {
    const int d = part + TPR * e;
    if (d < dim) x.row(b, h, t)[d] = narrow_to<T>(r[e] * mul);
  }
}

template <int TPR, int DMAX, class A> __device__ __forceinline__ A dot_tile(const A (&r)[kDpt], const A* tile_row, int part) {
  A s = 0;
#pragma unroll
  for (int e = 0; e < kDpt; ++e) s += r[e] * tile_row[part + TPR * e];
  return row_sum<TPR>(s);
}

// ---- forward ---------------------------------------------------------------------------

template <class T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Bhtd<T> out, accumulate_t<T>* __restrict__ lse, Bhtd<const T> q, Bhtd<const T> k,
                             Bhtd<const T> v, Geometry g, accumulate_t<T> scale, bool causal) {
  using A = accumulate_t<T>;
  constexpr int TPR = DMAX / kDpt, ROWS = kThreads / TPR, kTile = kTileOf<A>;
  __shared__ A ks[kTile][DMAX];
  __shared__ A vs[kTile][DMAX];
  const int bh = blockIdx.x / g.tiles, tile = blockIdx.x % g.tiles;
  const int b = bh / g.heads, h = bh % g.heads;
  const int part = threadIdx.x % TPR, i = tile * ROWS + threadIdx.x / TPR;
  const bool active = i < g.q_len;

  A qr[kDpt], o[kDpt];
  load_row<TPR>(qr, q, b, h, i, active, g.dim, part, scale);  // scores come out scaled
#pragma unroll
  for (int e = 0; e < kDpt; ++e) o[e] = 0;
  A m = neg_inf<A>(), l = 0;

  // Causal: no row of this block attends past its last row.
  const int last = causal ? min(g.k_len, (tile + 1) * ROWS) : g.k_len;
  for (int j0 = 0; j0 < last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<DMAX, T>(ks, k, b, h, j0, g.k_len, g.dim);
    load_tile<DMAX, T>(vs, v, b, h, j0, g.k_len, g.dim);
    __syncthreads();
    A s[kTile];
    A tile_max = neg_inf<A>();
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      const int j = j0 + jj;
      const A dot = dot_tile<TPR, DMAX>(qr, ks[jj], part);
      s[jj] = j < g.k_len && (!causal || j <= i) ? dot : neg_inf<A>();
      tile_max = max_(tile_max, s[jj]);
    }
    const A m_new = max_(m, tile_max);
    if (m_new == neg_inf<A>()) continue;  // every key of this tile masked for this row
    const A alpha = exp_(m - m_new);      // 0 while m is -inf
    l *= alpha;
#pragma unroll
    for (int e = 0; e < kDpt; ++e) o[e] *= alpha;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      const A p = exp_(s[jj] - m_new);  // 0 for masked keys
      l += p;
#pragma unroll
      for (int e = 0; e < kDpt; ++e) o[e] += p * vs[jj][part + TPR * e];
    }
    m = m_new;
  }
  if (active) {
    store_row<TPR>(out, b, h, i, g.dim, part, o, A(1) / l);
    if (part == 0) lse[static_cast<std::int64_t>(bh) * g.q_len + i] = m + log_(l);
  }
}

// ---- backward --------------------------------------------------------------------------

// delta[bh * L + i] = dO_i . O_i, one warp per row.
template <class T>
__global__ void attention_delta_kernel(accumulate_t<T>* __restrict__ delta, Bhtd<const T> dout, Bhtd<const T> out,
                                       Geometry g, std::int64_t rows) {
  using A = accumulate_t<T>;
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / 32;
  // Grid-stride over rows; a row is one warp's, so whole warps take the same branches.
  for (std::int64_t r = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const int i = static_cast<int>(r % g.q_len);
    const int bh = static_cast<int>(r / g.q_len), b = bh / g.heads, h = bh % g.heads;
    const T* gr = dout.row(b, h, i);
    const T* orow = out.row(b, h, i);
    A s = 0;
    for (int d = lane; d < g.dim; d += 32) s += to_acc<A>(gr[d]) * to_acc<A>(orow[d]);
    s = warp_sum(s);
    if (lane == 0) delta[r] = s;
  }
}

template <class T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(Bhtd<T> dq, Bhtd<const T> dout, Bhtd<const T> q, Bhtd<const T> k, Bhtd<const T> v,
                        const accumulate_t<T>* __restrict__ lse, const accumulate_t<T>* __restrict__ delta, Geometry g,
                        accumulate_t<T> scale, bool causal) {
  using A = accumulate_t<T>;
  constexpr int TPR = DMAX / kDpt, ROWS = kThreads / TPR, kTile = kTileOf<A>;
  __shared__ A ks[kTile][DMAX];
  __shared__ A vs[kTile][DMAX];
  const int bh = blockIdx.x / g.tiles, tile = blockIdx.x % g.tiles;
  const int b = bh / g.heads, h = bh % g.heads;
  const int part = threadIdx.x % TPR, i = tile * ROWS + threadIdx.x / TPR;
  const bool active = i < g.q_len;
  const std::int64_t row = static_cast<std::int64_t>(bh) * g.q_len + i;
  const A lse_i = active ? lse[row] : A(0), delta_i = active ? delta[row] : A(0);

  A qr[kDpt], gr[kDpt], acc[kDpt];
  load_row<TPR>(qr, q, b, h, i, active, g.dim, part, scale);
  load_row<TPR>(gr, dout, b, h, i, active, g.dim, part, A(1));
#pragma unroll
  for (int e = 0; e < kDpt; ++e) acc[e] = 0;

  const int last = causal ? min(g.k_len, (tile + 1) * ROWS) : g.k_len;
  for (int j0 = 0; j0 < last; j0 += kTile) {
    __syncthreads();
    load_tile<DMAX, T>(ks, k, b, h, j0, g.k_len, g.dim);
    load_tile<DMAX, T>(vs, v, b, h, j0, g.k_len, g.dim);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kTile; ++jj) {
      const int j = j0 + jj;
      const A s = dot_tile<TPR, DMAX>(qr, ks[jj], part);
      const A dp = dot_tile<TPR, DMAX>(gr, vs[jj], part);
      const bool kept = active && j < g.k_len && (!causal || j <= i);
      const A p = kept ? exp_(s - lse_i) : A(0);
      const A ds = p * (dp - delta_i);
#pragma unroll
      for (int e = 0; e < kDpt; ++e) acc[e] += ds * ks[jj][part + TPR * e];
    }
  }
  if (active) store_row<TPR>(dq, b, h, i, g.dim, part, acc, scale);
}

template <class T, int DMAX>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(Bhtd<T> dk, Bhtd<T> dv, Bhtd<const T> dout, Bhtd<const T> q, Bhtd<const T> k,
                          Bhtd<const T> v, const accumulate_t<T>* __restrict__ lse,
                          const accumulate_t<T>* __restrict__ delta, Geometry g, accumulate_t<T> scale, bool causal) {
  using A = accumulate_t<T>;
  constexpr int TPR = DMAX / kDpt, ROWS = kThreads / TPR, kTile = kTileOf<A>;
  __shared__ A qs[kTile][DMAX];
  __shared__ A gs[kTile][DMAX];
  __shared__ A lse_s[kTile], delta_s[kTile];
  const int bh = blockIdx.x / g.tiles, tile = blockIdx.x % g.tiles;  // tiles of keys here
  const int b = bh / g.heads, h = bh % g.heads;
  const int part = threadIdx.x % TPR, j = tile * ROWS + threadIdx.x / TPR;
  const bool active = j < g.k_len;

  A kr[kDpt], vr[kDpt], dkr[kDpt], dvr[kDpt];
  load_row<TPR>(kr, k, b, h, j, active, g.dim, part, scale);  // scores come out scaled
  load_row<TPR>(vr, v, b, h, j, active, g.dim, part, A(1));
#pragma unroll
  for (int e = 0; e < kDpt; ++e) dkr[e] = dvr[e] = 0;

  // Causal: queries before this block's first key attend none of its keys.
  const int first = causal ? (tile * ROWS / kTile) * kTile : 0;
  const std::int64_t rows0 = static_cast<std::int64_t>(bh) * g.q_len;
  for (int i0 = first; i0 < g.q_len; i0 += kTile) {
    __syncthreads();
    load_tile<DMAX, T>(qs, q, b, h, i0, g.q_len, g.dim);
    load_tile<DMAX, T>(gs, dout, b, h, i0, g.q_len, g.dim);
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_s[threadIdx.x] = i < g.q_len ? lse[rows0 + i] : A(0);
      delta_s[threadIdx.x] = i < g.q_len ? delta[rows0 + i] : A(0);
    }
    __syncthreads();
#pragma unroll 4
    for (int ii = 0; ii < kTile; ++ii) {
      const int i = i0 + ii;
      const A s = dot_tile<TPR, DMAX>(kr, qs[ii], part);
      const A dp = dot_tile<TPR, DMAX>(vr, gs[ii], part);
      const bool kept = active && i < g.q_len && (!causal || j <= i);
      const A p = kept ? exp_(s - lse_s[ii]) : A(0);
      const A ds = p * (dp - delta_s[ii]);
#pragma unroll
      for (int e = 0; e < kDpt; ++e) {
        dvr[e] += p * gs[ii][part + TPR * e];
        dkr[e] += ds * qs[ii][part + TPR * e];
      }
    }
  }
  if (active) {
    store_row<TPR>(dk, b, h, j, g.dim, part, dkr, scale);
    store_row<TPR>(dv, b, h, j, g.dim, part, dvr, A(1));
  }
}

// Calls f.template operator()<T, DMAX>() for the operands' dtype and the smallest of 32, 64,
// 128 that holds dim.
template <class F> int with_attention_types(DType dtype, int dim, F&& f) {
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      if (dim <= 32) status = f.template operator()<T, 32>();
      else if (dim <= 64) status = f.template operator()<T, 64>();
      else if (dim <= 128) status = f.template operator()<T, 128>();
    }
  });
  return status;
}

Geometry geometry(const Operand& q, const Operand& k, int rows_per_tile, std::int64_t tile_len) {
  Geometry g;
  g.heads = static_cast<int>(q.sizes[1]);
  g.q_len = static_cast<int>(q.sizes[2]);
  g.k_len = static_cast<int>(k.sizes[2]);
  g.dim = static_cast<int>(q.sizes[3]);
  g.tiles = static_cast<int>((tile_len + rows_per_tile - 1) / rows_per_tile);
  return g;
}

// Grid of (B*H) * tiles blocks; cudaErrorInvalidConfiguration when it does not fit (2^31 - 1)
// or a length exceeds int.
bool fits(const Operand& q, const Operand& k, const Geometry& g) {
  const std::int64_t bh = q.sizes[0] * q.sizes[1];
  return q.sizes[2] <= INT32_MAX && k.sizes[2] <= INT32_MAX && bh <= INT32_MAX &&
         bh * g.tiles <= static_cast<std::int64_t>(INT32_MAX);
}

}  // namespace

int attention_forward(const Operand& out, const Operand& lse, const Operand& q, const Operand& k, const Operand& v,
                      double scale, bool causal, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_attention_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    using A = accumulate_t<T>;
    constexpr int rows = kThreads / (DMAX / kDpt);
    const Geometry g = geometry(q, k, rows, q.sizes[2]);
    if (!fits(q, k, g)) return static_cast<int>(cudaErrorInvalidConfiguration);
    const unsigned blocks = static_cast<unsigned>(q.sizes[0] * q.sizes[1] * g.tiles);
    attention_forward_kernel<T, DMAX><<<blocks, kThreads, 0, s>>>(bhtd<T>(out), static_cast<A*>(lse.data),
                                                                  bhtd<const T>(q), bhtd<const T>(k), bhtd<const T>(v),
                                                                  g, static_cast<A>(scale), causal);
    return static_cast<int>(cudaGetLastError());
  });
}

std::size_t attention_backward_workspace_bytes(const Operand& q) {
  const std::size_t acc = q.dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<std::size_t>(q.sizes[0] * q.sizes[1] * q.sizes[2]) * acc;
}

int attention_backward(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout, const Operand& q,
                       const Operand& k, const Operand& v, const Operand& out, const Operand& lse, double scale,
                       bool causal, void* workspace, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return with_attention_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    using A = accumulate_t<T>;
    constexpr int rows = kThreads / (DMAX / kDpt);
    auto* delta = static_cast<A*>(workspace);
    const auto* lse_p = static_cast<const A*>(lse.data);
    const Geometry gq = geometry(q, k, rows, q.sizes[2]);
    const Geometry gk = geometry(q, k, rows, k.sizes[2]);
    if (!fits(q, k, gq) || !fits(q, k, gk)) return static_cast<int>(cudaErrorInvalidConfiguration);
    const std::int64_t nrows = q.sizes[0] * q.sizes[1] * q.sizes[2];
    attention_delta_kernel<T><<<blocks_for(nrows * 32, 256), 256, 0, s>>>(delta, bhtd<const T>(dout),
                                                                          bhtd<const T>(out), gq, nrows);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
    const auto bh = q.sizes[0] * q.sizes[1];
    attention_dq_kernel<T, DMAX><<<static_cast<unsigned>(bh * gq.tiles), kThreads, 0, s>>>(
        bhtd<T>(dq), bhtd<const T>(dout), bhtd<const T>(q), bhtd<const T>(k), bhtd<const T>(v), lse_p, delta, gq,
        static_cast<A>(scale), causal);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
    attention_dkdv_kernel<T, DMAX><<<static_cast<unsigned>(bh * gk.tiles), kThreads, 0, s>>>(
        bhtd<T>(dk), bhtd<T>(dv), bhtd<const T>(dout), bhtd<const T>(q), bhtd<const T>(k), bhtd<const T>(v), lse_p,
        delta, gk, static_cast<A>(scale), causal);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace brrr::kernels
