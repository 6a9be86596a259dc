// Fused attention on CUDA: FlashAttention-2's forward and backward (Dao 2023, "FlashAttention-2:
// Faster Attention with Better Parallelism and Work Partitioning", algorithms 1 and 2; Dao et
// al. 2022, "FlashAttention"). No L x S matrix is ever in memory: tiles of keys/values (or of
// queries/output gradients) go through shared memory, the softmax is computed online, and
// backward recomputes the probabilities from the log-sum-exp the forward saved.
//
// bf16/f16, and f32 when TF32 is allowed, take the tensor-core kernels of
// ops/cuda/attention_mma.cu (same contract, same dropout words, lse interchangeable); the SIMT
// kernels here serve f32 otherwise and f64.
//
// A straightforward SIMT version (no tensor cores): arithmetic in f32 (f64 for f64), every
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
//
// Dropout (AttentionDropout, backend/contract.hpp; kernels instantiated with DROP only when
// p > 0): the keep bit of element (b, h, i, j) comes from the Philox word(s) that rand() would
// draw for element ((b H + h) L + i) S + j of a [B, H, L, S] tensor, so the mask is that of the
// composite's dropout(rand(...) >= p) and is recomputed, never stored. With Z = keep / (1 - p):
// forward O = (P o Z) V / l with l and the log-sum-exp those of P; backward dV = (P o Z)^T dO,
// dP = (dO V^T) o Z, dS = P o (dP - delta), and delta_i = dO_i . O_i still holds. The lanes of
// a row (forward, dq) share the Philox blocks of their key tile; the dk/dv kernel builds a
// query tile's bits in shared memory, G lanes per query row.
#include <cmath>
#include <cstdint>
#include <limits>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/philox_state.cuh"
#include "ops/cuda/row_reduce.cuh"
#include "ops/random_transform.hpp"

namespace brrr::kernels {

namespace {

namespace rt = ::brrr::random_transform;

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

// A launch's dropout: the generator state (from device memory under a graph capture), the
// threshold (f32 uniforms compare with p as f32, as ge(rand, p) does) and 1 / (1 - p).
struct DropoutArgs {
  const std::uint64_t* seed_offset;
  std::uint64_t seed, offset;
  float p32;
  double p64, scale;
};

DropoutArgs dropout_args(const AttentionDropout& d) {
  return {d.seed_offset, d.seed, d.offset, static_cast<float>(d.p), d.p, d.p < 1 ? 1.0 / (1.0 - d.p) : 0.0};
}

// Bit e (e < n <= 64) set iff element `first + e` of the [B, H, L, S] probabilities is kept.
// Computed by G adjacent lanes together (`lane` is this thread's index among them; every lane
// of the warp must call it) and returned to each of them. f32 uniforms: one word per element,
// each lane computing every G-th Philox block of the range; f64: two words per element.
template <class A, int G>
__device__ __forceinline__ std::uint64_t keep_bits(const DropoutArgs& d, std::uint64_t seed, std::uint64_t offset,
                                                   std::uint64_t first, int n, int lane) {
  std::uint64_t bits = 0;
  if constexpr (sizeof(A) == 8) {
    for (int e = lane; e < n; e += G) {
      const std::uint64_t w = offset + 2 * (first + e);
      if (rt::uniform53(rt::philox_word(seed, w), rt::philox_word(seed, w + 1)) >= d.p64) bits |= 1ull << e;
    }
  } else {
    const std::uint64_t w0 = offset + first, b0 = w0 / 4, b1 = (w0 + n - 1) / 4;
    for (std::uint64_t b = b0 + lane; b <= b1; b += G) {
      std::uint32_t c[4];
      rt::philox_block(seed, b, c);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const auto e = static_cast<std::int64_t>(4 * b + r - w0);  // may wrap below 0
        if (e >= 0 && e < n && rt::uniform_bits(c[r], 24) >= d.p32) bits |= 1ull << e;
      }
    }
  }
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) bits |= __shfl_xor_sync(full_mask, bits, o);
  return bits;
}

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

template <class T, int DMAX, bool DROP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Bhtd<T> out, accumulate_t<T>* __restrict__ lse, Bhtd<const T> q, Bhtd<const T> k,
                             Bhtd<const T> v, Geometry g, accumulate_t<T> scale, bool causal, DropoutArgs drop) {
  pdl_begin();
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
  std::uint64_t seed = 0, offset = 0;
  if constexpr (DROP) philox_state(drop, seed, offset);
  const std::uint64_t first = (static_cast<std::uint64_t>(bh) * g.q_len + i) * g.k_len;  // element (b, h, i, 0)
  const A zscale = static_cast<A>(drop.scale);

  // Causal: no row of this block attends past its last row.
  const int last = causal ? min(g.k_len, (tile + 1) * ROWS) : g.k_len;
  for (int j0 = 0; j0 < last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<DMAX, T>(ks, k, b, h, j0, g.k_len, g.dim);
    load_tile<DMAX, T>(vs, v, b, h, j0, g.k_len, g.dim);
    __syncthreads();
    std::uint64_t keep = 0;  // before any lane leaves the iteration: its shuffles need them all
    if constexpr (DROP) keep = keep_bits<A, TPR>(drop, seed, offset, first + j0, min(kTile, g.k_len - j0), part);
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
      A pz = p;
      if constexpr (DROP) pz = (keep >> jj) & 1 ? p * zscale : A(0);
#pragma unroll
      for (int e = 0; e < kDpt; ++e) o[e] += pz * vs[jj][part + TPR * e];
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
  pdl_begin();
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

template <class T, int DMAX, bool DROP>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(Bhtd<T> dq, Bhtd<const T> dout, Bhtd<const T> q, Bhtd<const T> k, Bhtd<const T> v,
                        const accumulate_t<T>* __restrict__ lse, const accumulate_t<T>* __restrict__ delta, Geometry g,
                        accumulate_t<T> scale, bool causal, DropoutArgs drop) {
  pdl_begin();
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
  std::uint64_t seed = 0, offset = 0;
  if constexpr (DROP) philox_state(drop, seed, offset);
  const std::uint64_t first = static_cast<std::uint64_t>(row) * g.k_len;  // element (b, h, i, 0)
  const A zscale = static_cast<A>(drop.scale);

  const int last = causal ? min(g.k_len, (tile + 1) * ROWS) : g.k_len;
  for (int j0 = 0; j0 < last; j0 += kTile) {
    std::uint64_t keep = 0;
    if constexpr (DROP) keep = keep_bits<A, TPR>(drop, seed, offset, first + j0, min(kTile, g.k_len - j0), part);
    __syncthreads();
    load_tile<DMAX, T>(ks, k, b, h, j0, g.k_len, g.dim);
    load_tile<DMAX, T>(vs, v, b, h, j0, g.k_len, g.dim);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kTile; ++jj) {
      const int j = j0 + jj;
      const A s = dot_tile<TPR, DMAX>(qr, ks[jj], part);
      A dp = dot_tile<TPR, DMAX>(gr, vs[jj], part);
      if constexpr (DROP) dp = (keep >> jj) & 1 ? dp * zscale : A(0);
      const bool kept = active && j < g.k_len && (!causal || j <= i);
      const A p = kept ? exp_(s - lse_i) : A(0);
      const A ds = p * (dp - delta_i);
#pragma unroll
      for (int e = 0; e < kDpt; ++e) acc[e] += ds * ks[jj][part + TPR * e];
    }
  }
  if (active) store_row<TPR>(dq, b, h, i, g.dim, part, acc, scale);
}

template <class T, int DMAX, bool DROP>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(Bhtd<T> dk, Bhtd<T> dv, Bhtd<const T> dout, Bhtd<const T> q, Bhtd<const T> k,
                          Bhtd<const T> v, const accumulate_t<T>* __restrict__ lse,
                          const accumulate_t<T>* __restrict__ delta, Geometry g, accumulate_t<T> scale, bool causal,
                          DropoutArgs drop) {
  pdl_begin();
  using A = accumulate_t<T>;
  constexpr int TPR = DMAX / kDpt, ROWS = kThreads / TPR, kTile = kTileOf<A>;
  constexpr int G = kThreads / kTile;  // lanes per query row when building the keep bits
  static_assert(ROWS <= 64 && G * kTile == kThreads && G <= 32);
  __shared__ A qs[kTile][DMAX];
  __shared__ A gs[kTile][DMAX];
  __shared__ A lse_s[kTile], delta_s[kTile];
  __shared__ std::uint64_t keep_s[DROP ? kTile : 1];  // bit r of [ii]: key tile * ROWS + r kept for query i0 + ii
  const int bh = blockIdx.x / g.tiles, tile = blockIdx.x % g.tiles;  // tiles of keys here
  const int b = bh / g.heads, h = bh % g.heads;
  const int part = threadIdx.x % TPR, j = tile * ROWS + threadIdx.x / TPR;
  const bool active = j < g.k_len;

  A kr[kDpt], vr[kDpt], dkr[kDpt], dvr[kDpt];
  load_row<TPR>(kr, k, b, h, j, active, g.dim, part, scale);  // scores come out scaled
  load_row<TPR>(vr, v, b, h, j, active, g.dim, part, A(1));
#pragma unroll
  for (int e = 0; e < kDpt; ++e) dkr[e] = dvr[e] = 0;
  std::uint64_t seed = 0, offset = 0;
  if constexpr (DROP) philox_state(drop, seed, offset);
  const A zscale = static_cast<A>(drop.scale);
  const int key0 = tile * ROWS, r = threadIdx.x / TPR;  // this thread's key is key0 + r

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
    if constexpr (DROP) {
      // Rows past L read words of no element: their probabilities are 0 anyway.
      const int ii = threadIdx.x / G;
      const std::uint64_t bits =
          keep_bits<A, G>(drop, seed, offset, static_cast<std::uint64_t>(rows0 + i0 + ii) * g.k_len + key0,
                          min(ROWS, g.k_len - key0), threadIdx.x % G);
      if (threadIdx.x % G == 0) keep_s[ii] = bits;
    }
    __syncthreads();
#pragma unroll 4
    for (int ii = 0; ii < kTile; ++ii) {
      const int i = i0 + ii;
      const A s = dot_tile<TPR, DMAX>(kr, qs[ii], part);
      A dp = dot_tile<TPR, DMAX>(vr, gs[ii], part);
      const bool kept = active && i < g.q_len && (!causal || j <= i);
      const A p = kept ? exp_(s - lse_s[ii]) : A(0);
      A pz = p;
      if constexpr (DROP) {
        const bool keep = (keep_s[ii] >> r) & 1;
        pz = keep ? p * zscale : A(0);
        dp = keep ? dp * zscale : A(0);
      }
      const A ds = p * (dp - delta_s[ii]);
#pragma unroll
      for (int e = 0; e < kDpt; ++e) {
        dvr[e] += pz * gs[ii][part + TPR * e];
        dkr[e] += ds * qs[ii][part + TPR * e];
      }
    }
  }
  if (active) {
    store_row<TPR>(dk, b, h, j, g.dim, part, dkr, scale);
    store_row<TPR>(dv, b, h, j, g.dim, part, dvr, A(1));
  }
}

// Calls f.template operator()<T, DMAX>() for the operands' dtype (f32, f64: bf16/f16 take
// attention_mma.cu) and the smallest of 32, 64, 128 that holds dim.
template <class F> int with_attention_types(DType dtype, int dim, F&& f) {
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(dtype, [&]<class T>(T*) {
    if constexpr (std::is_floating_point_v<T>) {
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

// The tensor-core kernels take bf16/f16, and f32 as TF32 when allowed.
bool on_tensor_cores(DType dt, bool allow_tf32) {
  return dt == DType::bf16 || dt == DType::f16 || (dt == DType::f32 && allow_tf32);
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
                      double scale, bool causal, const AttentionDropout& dropout, bool allow_tf32, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (on_tensor_cores(q.dtype, allow_tf32))  // ops/cuda/attention_mma.cu
    return attention_forward_mma(out, lse, q, k, v, scale, causal, dropout, s);
  return with_attention_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    using A = accumulate_t<T>;
    constexpr int rows = kThreads / (DMAX / kDpt);
    const Geometry g = geometry(q, k, rows, q.sizes[2]);
    if (!fits(q, k, g)) return static_cast<int>(cudaErrorInvalidConfiguration);
    const unsigned blocks = static_cast<unsigned>(q.sizes[0] * q.sizes[1] * g.tiles);
    auto* kernel = dropout.p > 0 ? attention_forward_kernel<T, DMAX, true> : attention_forward_kernel<T, DMAX, false>;
    launch_pdl(kernel, blocks, kThreads, 0, s, bhtd<T>(out), static_cast<A*>(lse.data), bhtd<const T>(q),
               bhtd<const T>(k), bhtd<const T>(v), g, static_cast<A>(scale), causal, dropout_args(dropout));
    return static_cast<int>(cudaGetLastError());
  });
}

std::size_t attention_backward_workspace_bytes(const Operand& q) {
  const std::size_t acc = q.dtype == DType::f64 ? sizeof(double) : sizeof(float);
  return static_cast<std::size_t>(q.sizes[0] * q.sizes[1] * q.sizes[2]) * acc;
}

int attention_backward(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout, const Operand& q,
                       const Operand& k, const Operand& v, const Operand& out, const Operand& lse, double scale,
                       bool causal, const AttentionDropout& dropout, bool allow_tf32, bool deterministic,
                       void* workspace, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (on_tensor_cores(q.dtype, allow_tf32))
    return attention_backward_mma(dq, dk, dv, dout, q, k, v, out, lse, scale, causal, dropout, deterministic,
                                  workspace, s);
  return with_attention_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    using A = accumulate_t<T>;
    constexpr int rows = kThreads / (DMAX / kDpt);
    auto* delta = static_cast<A*>(workspace);
    const auto* lse_p = static_cast<const A*>(lse.data);
    const Geometry gq = geometry(q, k, rows, q.sizes[2]);
    const Geometry gk = geometry(q, k, rows, k.sizes[2]);
    if (!fits(q, k, gq) || !fits(q, k, gk)) return static_cast<int>(cudaErrorInvalidConfiguration);
    const std::int64_t nrows = q.sizes[0] * q.sizes[1] * q.sizes[2];
    launch_pdl(attention_delta_kernel<T>, blocks_for(nrows * 32, 256), 256, 0, s, delta, bhtd<const T>(dout),
               bhtd<const T>(out), gq, nrows);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
    const auto bh = q.sizes[0] * q.sizes[1];
    const bool drop = dropout.p > 0;
    const DropoutArgs args = dropout_args(dropout);
    auto* dq_kernel = drop ? attention_dq_kernel<T, DMAX, true> : attention_dq_kernel<T, DMAX, false>;
    launch_pdl(dq_kernel, static_cast<unsigned>(bh * gq.tiles), kThreads, 0, s, bhtd<T>(dq), bhtd<const T>(dout),
               bhtd<const T>(q), bhtd<const T>(k), bhtd<const T>(v), lse_p, delta, gq, static_cast<A>(scale), causal,
               args);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
    auto* dkdv_kernel = drop ? attention_dkdv_kernel<T, DMAX, true> : attention_dkdv_kernel<T, DMAX, false>;
    launch_pdl(dkdv_kernel, static_cast<unsigned>(bh * gk.tiles), kThreads, 0, s, bhtd<T>(dk), bhtd<T>(dv),
               bhtd<const T>(dout), bhtd<const T>(q), bhtd<const T>(k), bhtd<const T>(v), lse_p, delta, gk,
               static_cast<A>(scale), causal, args);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace brrr::kernels
