// Fused attention for bf16/f16, and f32 as TF32, on tensor cores (sm_80+): FlashAttention-2's
// forward and backward (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism
// and Work Partitioning", algorithms 1 and 2) written with mma.sync (f32 accumulators),
// ldmatrix and cp.async. Same contract and semantics as the SIMT kernels of
// ops/cuda/attention.cu (which keep f32/f64): lse is the natural log-sum-exp of the scaled
// scores, the dropout mask is the same Philox words'. The backward is deterministic (dq, then
// dk/dv) but for f32 with 32 < D <= 64 without set_deterministic, which is fused (below).
//
// Tiling. 4 warps (128 threads) per CTA; the CTA owns 64 rows (16 per warp): queries in the
// forward and dQ kernels, keys in the dK/dV kernel, and loops over tiles of the other side:
// 64 keys (forward, dq) and 64 queries (dK/dV), or for D > 64, whose D-wide accumulators take
// the registers, 32 keys and 16 queries (f32: 32 keys and 32 queries, 16 for D > 64, so that
// 3 CTAs share an SM). Head dims are padded with zeros to
// DMAX = 32, 64 or 128 (any D <= 128; the loads zero-fill). Shared memory holds each tile as
// [rows][DMAX + 8] 16-bit elements: the 16 bytes of padding put the 8 rows an ldmatrix phase
// reads in 8 different 4-bank groups (no conflicts). Tiles are loaded with 16-byte cp.async
// when every operand allows it (D % 8 == 0, strides % 8 == 0, 16-byte aligned base; `vec`),
// else element by element; the tile of the next loop step is loaded while this one is used
// (two buffers).
//   forward  grid (B*H) x query tiles (the longest causal rows first). Per key tile:
//            S = Q K^T (Q's fragments stay in registers), online softmax on the accumulators,
//            O += P V. Shared: Q, 2 x K, 2 x V.
//   dq       grid (B*H) x query tiles. Prologue: delta_i = dO_i . O_i (f32, from O as stored,
//            before f32 tiles are rounded to TF32), written to the workspace for dk/dv. Per key
//            tile: S = Q K^T, P = exp(S - lse), dP = dO V^T, dS = P o (dP o Z - delta),
//            dQ += dS K. Shared: Q, dO, 2 x K, 2 x V.
//   dkdv     grid (B*H) x key tiles (most query tiles first), launched after dq. Per query tile:
//            S^T = K Q^T, dP^T = V dO^T (K, V fragments in registers for D <= 64 without dropout),
//            dV += (P o Z)^T dO, dK += dS^T Q. Shared: K, V, 2 x Q, 2 x dO, 2 x lse, 2 x delta.
//   fused    (f32 as TF32, 32 < D <= 64, not deterministic; FlashAttention-2's algorithm 2)
//            delta: delta_i, and dq zeroed; then dkdv, which after dV and dK of each query tile
//            stages dS in that tile's dO buffer and adds dS K (times scale) into dq with atomics
//            (float2 on sm_90). Saves the dq kernel's recomputation of S and dP (5 products a
//            tile pair instead of 7): 0.400 -> 0.361 ms for the GPT's forward + backward (H100).
// Results go through the warp's own rows of a shared tile (Q, or K and V) to 16-byte stores.
// Without the fused dq each output element is written by one thread, summed in a fixed order.
// Shared memory (bytes, D = 32 / 64 / 128): forward 25600 / 46080 / 52224, dq 30720 / 55296 /
// 69632, dkdv 31744 / 56320 / 52480; f32 (pitch DMAX + 4 floats) forward 27648 / 52224 /
// 101376, dq 36864 / 69632 / 135168, dkdv 37376 / 70144 / 101632. Registers and spills:
// `-Xptxas -v` (none spills).
//
// f32 (only when set_allow_tf32 is on) runs the same kernels with mma.sync.m16n8k8.tf32: every
// operand rounded to TF32 (cvt.rna), tiles once in shared memory as they land (round_tile), P
// and dS as they become A fragments; a k-step of 8 columns (32 bytes, as 16 bf16), tiles with
// a pitch of DMAX + 4 floats (twice the shared memory), no fragments kept in registers across
// tiles (twice the registers) but Q's in the forward for D <= 64. The two spots that differ:
// the A fragment from an accumulator (acc_to_a) and the B fragment of X stored [k][n]
// (mma_ab), read one element at a time since ldmatrix.trans has no 32-bit form.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"; lane = 4 g + t, g = groupID,
// t = threadID_in_group):
//   A (16x16 row-major, 4 regs of 16-bit pairs): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..),
//     a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..).
//   B (16x8, k x n, 2 regs): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g).
//   C (16x8 f32): c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1).
// ldmatrix.x4 takes row addresses from lanes 8m..8m+7 for matrix m and gives lane l register
// m = (row l/4, cols 2(l%4), +1); with .trans = (rows 2(l%4), +1 of col l/4). So:
//   A from a row-major tile: lane l addresses row (l & 15), col 8 (l >> 4)  -> a[0..3].
//   B = X^T for X stored [n][k] (K in S = Q K^T, Q in S^T = K Q^T, V in dO V^T):
//     row 8 (l >> 4) + (l & 7), col 8 ((l >> 3) & 1) -> b0, b1 of n-tile 0, b0, b1 of n-tile 1.
//   B = X for X stored [k][n] (V in P V, K in dS K, dO/Q in dV/dK): .trans, row (l & 15),
//     col 8 (l >> 4) -> b0, b1 of n-tile 0, then of n-tile 1.
// An accumulator tile 16 x 16 (n-tiles 2kk, 2kk+1) is exactly one A operand of k-step kk:
// a = (pack c[0],c[1] of 2kk; c[2],c[3] of 2kk; c[0],c[1] of 2kk+1; c[2],c[3] of 2kk+1), so
// P (and dS) go from the softmax to the next mma in registers.
//
// Softmax in base 2: scores are scaled by scale * log2(e) and exponentiated with ex2; the
// forward's running max is in those units, lse = (m + log2 l) ln 2 is stored in natural units,
// the backward multiplies it by log2(e) again. Row sums are per-thread partials (a row is
// spread over the 4 lanes of a quad) reduced once at the end.
//
// Dropout (AttentionDropout, backend/contract.hpp): element (b, h, i, j) is kept iff word
// w = offset + ((b H + h) L + i) S + j of the Philox stream gives uniform_bits(w, 24) >= float(p),
// i.e. (w >> 8) >= ceil(float(p) 2^24) (both sides are exact: the same test as the SIMT kernel).
// A Philox block gives words 4c .. 4c+3, so a run of n consecutive words of a row needs n/4 or
// n/4 + 1 blocks. Forward and dq (rows = queries, 16 x NK per warp and key tile): lane l
// computes the keep mask of row l/2, keys (l % 2) NK/2 .. + NK/2 - 1 (for NK = 64: 8 or 9
// blocks, the ideal being 8); the lane owning (g, 2t..) of n-tile nt reads it from lane
// 2g + (8 nt >= NK/2) (and 2(g+8) + ...) by shuffles. dK/dV (rows = keys: a query's 16 keys of
// the warp are 16 consecutive words): for 64 query columns lane l computes the 16-bit masks of
// columns 2l and 2l+1 (4 or 5 blocks each), for 16 columns lane l the 8 keys 8 (l % 2) .. of
// column l/2; the owner of column 8 nt + 2t + e reads them by shuffles. Only the forward draws
// the words: it stores the bits it computes (AttentionDropout::keep_bits, a row-major bit
// matrix of 3 MiB for the GPT's [64, 6, 256, 256]), and dq and dK/dV read them instead of
// drawing them again (each backward kernel spent about as long on Philox as the forward),
// each lane loading its runs for the next tile a loop step ahead.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/philox_state.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/random_transform.hpp"

namespace brrr::kernels {

namespace {

namespace rt = ::brrr::random_transform;
using namespace ::brrr::kernels::mma;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlock = 16 * kWarps;  // the CTA's own rows: queries (forward, dq) or keys (dk/dv)
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float neg_inf_f() { return -std::numeric_limits<float>::infinity(); }

// Elements of T in 16 bytes (one cp.async chunk, one ldmatrix row) and in one mma k-step
// (32 bytes: 16 for bf16/f16, m16n8k16; 8 for f32, m16n8k8 on TF32).
template <class T> constexpr int kVec = static_cast<int>(16 / sizeof(T));
template <class T> constexpr int kStep = 2 * kVec<T>;
template <class T> constexpr bool kTf32 = std::is_same_v<T, float>;

// Row pitch of a shared-memory tile, in elements: DMAX + 16 bytes.
template <class T, int DMAX> constexpr int kPitch = DMAX + kVec<T>;

// Keys per loop step of the forward and dq kernels: 32 for the 128 variant (its D-wide
// accumulators need the registers) and for f32 (whose tiles take twice the shared memory: 32
// keys let 3 CTAs share an SM), else 64. Queries per step of the dK/dV kernel (two D-wide
// accumulators): 16 for the 128 variant, 32 for f32, else 64.
template <class T, int DMAX> constexpr int kKeys = DMAX > 64 || sizeof(T) == 4 ? 32 : 64;
template <class T, int DMAX> constexpr int kQueriesDkdv = DMAX > 64 ? 16 : sizeof(T) == 4 ? 32 : 64;
// K and V fragments in registers (dK/dV without dropout) and Q, dO fragments (dq) for 16-bit
// types and DMAX <= 64; the 128 variant and f32 (whose fragments take twice the registers)
// read them from shared memory at each use. The forward keeps Q's in registers but for f32
// with DMAX = 64 or 128.
template <class T, int DMAX> constexpr bool kRegs = DMAX <= 64 && !kTf32<T>;
template <class T, int DMAX> constexpr bool kRegsForward = DMAX < 64 || !kTf32<T>;
// __launch_bounds__'s resident CTAs per SM for the forward (0: not given). The f32 (TF32)
// DMAX = 64 forward at 4 (128 registers, 8 bytes spilled with dropout, Q read from shared
// memory; it held Q in 159 registers at 3 CTAs): 93.3 -> 90.1 us a layer in the GPT's TF32
// step (H100, Nsight Compute). Keeping Q in registers at 4 CTAs spills 92 bytes (bench_ops
// forward 0.121 ms against 0.100).
template <class T, int DMAX> constexpr int kMinBlocksForward = kTf32<T> && DMAX == 64 ? 4 : 0;
// __launch_bounds__'s resident CTAs per SM for the dq kernel: ptxas left alone puts the 128
// variant with dropout at 168 registers and spills; asking for 2 CTAs (255) it does not. 0 is
// "not given" (1 is not: it moves the 64 variant from 150 to 226 registers).
template <int DMAX> constexpr int kMinBlocksDq = DMAX > 64 ? 2 : 0;

// One [B, H, T, D] operand (last stride 1): base and strides in elements.
template <class T> struct Heads {
  T* data;
  std::int64_t sb, sh, st;
  __device__ __forceinline__ T* head(int b, int h) const { return data + b * sb + h * sh; }
};

template <class T> Heads<T> heads(const Operand& o) {
  return {static_cast<T*>(o.data), o.strides[0], o.strides[1], o.strides[2]};
}

struct Dims {
  int bh, heads, q_len, k_len, dim;
};

struct Dropout {
  const std::uint64_t* seed_offset;  // device {seed, offset} under a graph capture, else null
  std::uint64_t seed, offset;
  std::uint32_t threshold;  // keep iff (word >> 8) >= threshold
  float scale;              // 1 / (1 - p)
  std::uint32_t* bits;      // the stored mask: written by the forward (if not null), read by the backward
  int words;                // its words per row
};

Dropout dropout_of(const AttentionDropout& d) {
  // uniform_bits(w, 24) = (w >> 8) 2^-24 exactly, and float(p) 2^24 is exact in double: the
  // float comparison u >= float(p) is (w >> 8) >= ceil(float(p) 2^24).
  const double p32 = static_cast<double>(static_cast<float>(d.p));
  const double t = std::ceil(p32 * 16777216.0);
  return {d.seed_offset, d.seed, d.offset, static_cast<std::uint32_t>(t < 16777216.0 ? (t > 0 ? t : 0) : 16777216.0),
          static_cast<float>(d.p < 1 ? 1.0 / (1.0 - d.p) : 0.0), d.keep_bits, 0};
}

// Bit e (e < N, N = 8, 16 or 32) set iff word w0 + e of the stream is kept: N / 4 or N / 4 + 1
// Philox blocks, as w0's alignment needs.
template <int N>
__device__ __forceinline__ std::uint32_t keep_run(std::uint64_t seed, std::uint64_t w0, std::uint32_t threshold) {
  constexpr int kBlocks = N / 4 + 1;
  const int shift = static_cast<int>(w0 % 4);
  const std::uint64_t b0 = w0 / 4;
  std::uint64_t acc = 0;
#pragma unroll
  for (int c = 0; c < kBlocks; ++c) {
    if (c < kBlocks - 1 || shift != 0) {
      std::uint32_t w[4];
      rt::philox_block(seed, b0 + c, w);
#pragma unroll
      for (int r = 0; r < 4; ++r) acc |= static_cast<std::uint64_t>((w[r] >> 8) >= threshold) << (4 * c + r);
    }
  }
  const std::uint32_t bits = static_cast<std::uint32_t>(acc >> shift);
  return N == 32 ? bits : bits & ((1u << N) - 1);
}

// Bits [j, j + N) of row `row` of the stored mask (N = 8, 16 or 32; j a multiple of N, so they
// sit in one word).
template <int N>
__device__ __forceinline__ std::uint32_t stored_run(const Dropout& drop, std::uint64_t row, int j) {
  const std::uint32_t w = drop.bits[row * static_cast<std::uint64_t>(drop.words) + j / 32];
  return N == 32 ? w : (w >> (j % 32)) & ((1u << N) - 1);
}

// Spreads the 16 rows x NK keys of a warp's mask to the accumulator layout: lane l holds bits
// `mine` of row l / 2, keys (l % 2) NK / 2 .. + NK / 2 - 1; bit 4 nt + c of the result belongs
// to s[nt][c]. Every lane of the warp takes part (shuffles).
template <int NK> __device__ __forceinline__ std::uint32_t spread_rows(std::uint32_t mine, int lane) {
  constexpr int kHalf = NK / 2;
  const int g = lane / 4, t = lane % 4;
  const std::uint32_t lo0 = __shfl_sync(kFull, mine, 2 * g), hi0 = __shfl_sync(kFull, mine, 2 * g + 1);
  const std::uint32_t lo1 = __shfl_sync(kFull, mine, 2 * g + 16), hi1 = __shfl_sync(kFull, mine, 2 * g + 17);
  std::uint32_t keep = 0;
#pragma unroll
  for (int nt = 0; nt < NK / 8; ++nt) {
    const bool lo = 8 * nt < kHalf;
    const int sh = 8 * nt + 2 * t - (lo ? 0 : kHalf);
    const std::uint32_t r0 = (lo ? lo0 : hi0) >> sh, r1 = (lo ? lo1 : hi1) >> sh;
    keep |= ((r0 & 1) | (r0 & 2) | (r1 & 1) << 2 | (r1 & 2) << 2) << (4 * nt);
  }
  return keep;
}

// This lane's run of the stored mask for spread_rows<NK> (row first_row + l / 2, keys j0 +
// (l % 2) NK / 2 ..; 0 past rows_left or k_len). The dq kernel loads the next key tile's run a
// loop step ahead, so that the load's latency hides behind a tile's products.
template <int NK>
__device__ __forceinline__ std::uint32_t stored_rows_run(const Dropout& drop, std::uint64_t first_row, int rows_left,
                                                         int k_len, int j0, int lane) {
  constexpr int kHalf = NK / 2;
  const int r = lane / 2, j = j0 + kHalf * (lane % 2);
  return r < rows_left && j < k_len ? stored_run<kHalf>(drop, first_row + r, j) : 0u;
}

// Keep bits of a warp's 16 rows (queries first_row + r) x NK keys [j0, j0 + NK), drawn by the
// forward, which writes them to the stored mask when there is one (spread_rows' layout).
// rows_left: the warp's rows before L.
template <int NK>
__device__ __forceinline__ std::uint32_t keep_rows(const Dropout& drop, std::uint64_t seed, std::uint64_t offset,
                                                   std::uint64_t first_row /* (b H + h) L + first query */,
                                                   int rows_left, int k_len, int j0, int lane) {
  constexpr int kHalf = NK / 2;
  const int r = lane / 2, j = j0 + kHalf * (lane % 2);
  const bool in = r < rows_left && j < k_len;  // (the bits of the others are never used)
  const std::uint32_t mine =
      keep_run<kHalf>(seed, offset + (first_row + r) * static_cast<std::uint64_t>(k_len) + j, drop.threshold);
  if (drop.bits != nullptr) {
    if constexpr (kHalf == 32) {
      if (in) drop.bits[(first_row + r) * static_cast<std::uint64_t>(drop.words) + j / 32] = mine;
    } else {  // lanes 2r and 2r + 1 hold the two halves of one word (j0 a multiple of 32)
      const std::uint32_t high = __shfl_xor_sync(kFull, mine, 1);
      if (in && lane % 2 == 0) drop.bits[(first_row + r) * static_cast<std::uint64_t>(drop.words) + j / 32] = mine | high << 16;
    }
  }
  return spread_rows<NK>(mine, lane);
}

// This lane's runs of the stored mask for a warp's 16 keys [jw, jw + 16) x BQ queries (rows
// first_row + c): BQ = 64, keys jw .. + 15 of columns 2l (low half) and 2l + 1 (high half); BQ
// = 32, of column l; BQ = 16, keys jw + 8 (l % 2) .. + 7 of column l / 2. Bits of queries past
// queries_left (the tile's before L) and keys past S are 0. The dK/dV kernel loads the next
// query tile's runs a loop step ahead, so that the loads' latency hides behind a tile's products.
template <int BQ>
__device__ __forceinline__ std::uint32_t stored_cols_run(const Dropout& drop, std::uint64_t first_row, int queries_left,
                                                         int k_len, int jw, int lane) {
  const auto run16 = [&](int c) { return c < queries_left && jw < k_len ? stored_run<16>(drop, first_row + c, jw) : 0u; };
  if constexpr (BQ == 64) {
    return run16(2 * lane) | run16(2 * lane + 1) << 16;
  } else if constexpr (BQ == 32) {
    return run16(lane);
  } else {
    static_assert(BQ == 16);
    const int c = lane / 2, j = jw + 8 * (lane % 2);
    return c < queries_left && j < k_len ? stored_run<8>(drop, first_row + c, j) : 0u;
  }
}

// Keep bits of the transposed scores from stored_cols_run's runs: bit 4 nt + c belongs to
// s[nt][c] (rows keys g, g + 8; columns queries). Every lane of the warp takes part (shuffles).
template <int BQ> __device__ __forceinline__ std::uint32_t spread_cols(std::uint32_t mine, int lane) {
  const int g = lane / 4, t = lane % 4;
  std::uint32_t keep = 0;
  if constexpr (BQ == 64) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const std::uint32_t x = __shfl_sync(kFull, mine, 4 * nt + t);  // columns 8 nt + 2t, + 1
      keep |= ((x >> g & 1) | (x >> (16 + g) & 1) << 1 | (x >> (8 + g) & 1) << 2 | (x >> (24 + g) & 1) << 3)
              << (4 * nt);
    }
  } else if constexpr (BQ == 32) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const std::uint32_t x0 = __shfl_sync(kFull, mine, 8 * nt + 2 * t), x1 = __shfl_sync(kFull, mine, 8 * nt + 2 * t + 1);
      keep |= ((x0 >> g & 1) | (x1 >> g & 1) << 1 | (x0 >> (8 + g) & 1) << 2 | (x1 >> (8 + g) & 1) << 3) << (4 * nt);
    }
  } else {
    static_assert(BQ == 16);  // lane l: column l / 2, keys 8 (l % 2) .. + 7
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int c = 8 * nt + 2 * t;  // columns c, c + 1
      const std::uint32_t lo0 = __shfl_sync(kFull, mine, 2 * c), hi0 = __shfl_sync(kFull, mine, 2 * c + 1);
      const std::uint32_t lo1 = __shfl_sync(kFull, mine, 2 * c + 2), hi1 = __shfl_sync(kFull, mine, 2 * c + 3);
      keep |= ((lo0 >> g & 1) | (lo1 >> g & 1) << 1 | (hi0 >> g & 1) << 2 | (hi1 >> g & 1) << 3) << (4 * nt);
    }
  }
  return keep;
}

// ---- shared-memory tiles ---------------------------------------------------------------

// Rows [t0, t0 + ROWS) of one head (row stride st) into tile[ROWS][kPitch<T, DMAX>], zeros past
// t_len and dim. vec: 16-byte cp.async (the caller commits and waits); else plain loads, in a
// loop kept rolled so that its address arithmetic is not hoisted into registers for the whole
// kernel.
template <int ROWS, int DMAX, class T>
__device__ __forceinline__ void load_tile(T* tile, const T* head, std::int64_t st, int t0, int t_len, int dim,
                                          bool vec) {
  constexpr int V = kVec<T>, P = kPitch<T, DMAX>, kChunks = DMAX / V, kN = ROWS * kChunks;
  static_assert(kN % kThreads == 0);
  if (vec) {
#pragma unroll
    for (int c0 = 0; c0 < kN; c0 += kThreads) {
      const int c = c0 + static_cast<int>(threadIdx.x), r = c / kChunks, d = (c % kChunks) * V, t = t0 + r;
      const bool ok = t < t_len && d < dim;
      cp_async_16(tile + r * P + d, ok ? head + static_cast<std::int64_t>(t) * st + d : head, ok);
    }
  } else {
    using Bits = std::conditional_t<sizeof(T) == 2, std::uint16_t, std::uint32_t>;
#pragma unroll 1
    for (int c = static_cast<int>(threadIdx.x); c < kN; c += kThreads) {
      const int r = c / kChunks, d = (c % kChunks) * V, t = t0 + r;
      const int n = t < t_len ? min(dim - d, V) : 0;  // elements of this chunk in range
      const auto* src = reinterpret_cast<const Bits*>(head) + static_cast<std::int64_t>(t) * st + d;
      Bits w[V];
#pragma unroll
      for (int e = 0; e < V; ++e) w[e] = e < n ? src[e] : Bits{0};
      uint4 chunk;
      std::memcpy(&chunk, w, 16);
      *reinterpret_cast<uint4*>(tile + r * P + d) = chunk;
    }
  }
}

// f32 tiles: this thread's chunks of load_tile<ROWS, DMAX> (the same chunks, so its own loads
// are the ones it waited for) rounded to TF32 in place, once per tile: the fragments then go
// to the mma as loaded. (Rounding each fragment as it was loaded cost 3 instructions an
// element at every use: up to 8 per mma in dK/dV, which made the f32 kernels issue-bound.)
// Callers wait for their copies first and sync the CTA after. 16-bit tiles: nothing.
template <int ROWS, int DMAX, class T> __device__ __forceinline__ void round_tile(T* tile) {
  if constexpr (kTf32<T>) {
    constexpr int V = kVec<T>, P = kPitch<T, DMAX>, kChunks = DMAX / V, kN = ROWS * kChunks;
#pragma unroll
    for (int c0 = 0; c0 < kN; c0 += kThreads) {
      const int c = c0 + static_cast<int>(threadIdx.x), r = c / kChunks, d = (c % kChunks) * V;
      auto* chunk = reinterpret_cast<uint4*>(tile + r * P + d);
      uint4 x = *chunk;
      x = make_uint4(to_tf32(x.x), to_tf32(x.y), to_tf32(x.z), to_tf32(x.w));
      *chunk = x;
    }
  }
}

// n floats src[t0 .. t0 + n) (zeros past t_len) into dst, by threads 0 .. n - 1 of `first`.
__device__ __forceinline__ void load_floats(float* dst, const float* src, int t0, int t_len, int n, int first) {
  const int e = static_cast<int>(threadIdx.x) - first;
  if (e >= 0 && e < n) {
    const bool ok = t0 + e < t_len;
    cp_async_4(dst + e, ok ? src + t0 + e : src, ok);
  }
}

// An accumulator (16 rows x 8 NT of a warp, times mul[row half]) into the warp's 16 rows of a
// tile, as T.
template <class T, int NT, int P>
__device__ __forceinline__ void stage(T* rows, const float (&acc)[NT][4], float mul0, float mul1, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if constexpr (kTf32<T>) {
      *reinterpret_cast<float2*>(rows + g * P + 8 * nt + 2 * t) = make_float2(acc[nt][0] * mul0, acc[nt][1] * mul0);
      *reinterpret_cast<float2*>(rows + (g + 8) * P + 8 * nt + 2 * t) = make_float2(acc[nt][2] * mul1, acc[nt][3] * mul1);
    } else {
      *reinterpret_cast<std::uint32_t*>(rows + g * P + 8 * nt + 2 * t) = pack2<T>(acc[nt][0] * mul0, acc[nt][1] * mul0);
      *reinterpret_cast<std::uint32_t*>(rows + (g + 8) * P + 8 * nt + 2 * t) =
          pack2<T>(acc[nt][2] * mul1, acc[nt][3] * mul1);
    }
  }
}

// The warp's 16 staged rows (rows t0 ..) to global rows < t_len, dims < dim.
template <int DMAX, class T>
__device__ __forceinline__ void store_rows(T* head, std::int64_t st, const T* rows, int t0, int t_len, int dim,
                                           bool vec, int lane) {
  constexpr int V = kVec<T>, kChunks = DMAX / V;
#pragma unroll
  for (int c0 = 0; c0 < 16 * kChunks; c0 += 32) {
    const int c = c0 + lane, r = c / kChunks, d = (c % kChunks) * V, t = t0 + r;
    if (t >= t_len || d >= dim) continue;
    const T* src = rows + r * kPitch<T, DMAX> + d;
    T* dst = head + static_cast<std::int64_t>(t) * st + d;
    if (vec) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (d + e < dim) dst[e] = src[e];
    }
  }
}

// acc + the dot product of two 16-byte chunks of T (kVec<T> elements each), in f32: delta =
// rowsum(dO o O) of the backward.
template <class T> __device__ __forceinline__ float dot16(uint4 x, uint4 y, float acc) {
  const std::uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if constexpr (kTf32<T>) {
      acc = fmaf(__uint_as_float(xs[e]), __uint_as_float(ys[e]), acc);
    } else {
      const float2 a = unpack2<T>(xs[e]), b = unpack2<T>(ys[e]);
      acc = fmaf(a.x, b.x, acc);
      acc = fmaf(a.y, b.y, acc);
    }
  }
  return acc;
}

// ---- warp-level matrix products ----------------------------------------------------------

// One k-step's product on tensor cores: bf16/f16 m16n8k16, f32 m16n8k8 on TF32 (operands
// already rounded: tiles by round_tile, accumulators by acc_to_a).
template <class T>
__device__ __forceinline__ void mma_step(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (kTf32<T>) mma_1688_tf32(d, a, b0, b1);
  else mma_16816<T>(d, a, b0, b1);
}

// A fragments of k-step kk of the warp's 16 rows of a tile. For f32 the ldmatrix of the same
// bytes gives exactly m16n8k8's A: matrix m of 8 rows x 4 f32 puts (row l / 4, col l % 4) in
// lane l, so rows 0-7 / 8-15 at cols 0 / 4 are a[0..3].
template <int P, class T> __device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const T* rows, int kk, int lane) {
  ldmatrix_x4(a, rows + (lane & 15) * P + kStep<T> * kk + kVec<T> * (lane >> 4));
}

// Whether 16-column block kk of a tile holds a column of [lo, hi) (warp-uniform): blocks
// without one are all masked for this warp, and their products are skipped.
__device__ __forceinline__ bool live(int kk, int lo, int hi) { return 16 * kk + 16 > lo && 16 * kk < hi; }
// The same for k-step kk of a product over the tile's columns (kStep<T> of them).
template <class T> __device__ __forceinline__ bool live_step(int kk, int lo, int hi) {
  return kStep<T> * kk + kStep<T> > lo && kStep<T> * kk < hi;
}

// acc (16 x 8 NT) += A (16 x kStep KS) X^T, X = rows [0, 8 NT) x dims [0, kStep KS) of tile x; the
// 16-row blocks of x outside [lo, hi) are skipped (their acc columns stay as they are).
// A from registers (REGS) or from the warp's 16 rows of a tile.
template <bool REGS, int KS, int NT, int P, class T>
__device__ __forceinline__ void mma_abt(float (&acc)[NT][4], const std::uint32_t (&areg)[REGS ? KS : 1][4],
                                        const T* arows, const T* x, int lane, int lo, int hi) {
  const T* base = x + ((lane & 7) + 8 * (lane >> 4)) * P + kVec<T> * ((lane >> 3) & 1);
#pragma unroll
  for (int kk = 0; kk < KS; ++kk) {
    std::uint32_t a[4];
    if constexpr (REGS) {
#pragma unroll
      for (int e = 0; e < 4; ++e) a[e] = areg[kk][e];
    } else {
      load_a<P>(a, arows, kk, lane);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      if (!live(np, lo, hi)) continue;
      std::uint32_t f[4];
      ldmatrix_x4(f, base + 16 * np * P + kStep<T> * kk);
      mma_step<T>(acc[2 * np], a, f[0], f[1]);
      mma_step<T>(acc[2 * np + 1], a, f[2], f[3]);
    }
  }
}

// acc (16 x 8 NT) += a (16 x kStep) X, X = rows [0, kStep) x [0, 8 NT) of x. 16-bit: ldmatrix.trans.
// f32 (no 32-bit .trans): acc_to_a's k order, where k-slot t of the A fragment is column 2t and
// slot t + 4 column 2t + 1, so b0 = X[2t][n g] and b1 = X[2t + 1][n g], read one by one (with
// the pitch DMAX + 4, the 32 lanes hit 32 banks).
template <int NT, int P, class T>
__device__ __forceinline__ void mma_ab(float (&acc)[NT][4], const std::uint32_t (&a)[4], const T* x, int lane) {
  if constexpr (kTf32<T>) {
    const T* base = x + 2 * (lane % 4) * P + lane / 4;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      mma_step<T>(acc[nt], a, __float_as_uint(base[8 * nt]), __float_as_uint(base[P + 8 * nt]));
  } else {
    const T* base = x + (lane & 15) * P + 8 * (lane >> 4);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      std::uint32_t f[4];
      ldmatrix_x4_trans(f, base + 16 * np);
      mma_step<T>(acc[2 * np], a, f[0], f[1]);
      mma_step<T>(acc[2 * np + 1], a, f[2], f[3]);
    }
  }
}

// Columns [kStep kk, kStep (kk + 1)) of an accumulator as the A operand of the next product.
// 16-bit: the C fragments of n-tiles 2kk, 2kk + 1 are A's layout. f32: n-tile kk's (g, 2t),
// (g+8, 2t), (g, 2t+1), (g+8, 2t+1) become A's k-slots t and t + 4 (mma_ab reads X in that order).
template <class T, int NT>
__device__ __forceinline__ void acc_to_a(std::uint32_t (&a)[4], const float (&acc)[NT][4], int kk) {
  if constexpr (kTf32<T>) {
    a[0] = to_tf32(acc[kk][0]);
    a[1] = to_tf32(acc[kk][2]);
    a[2] = to_tf32(acc[kk][1]);
    a[3] = to_tf32(acc[kk][3]);
  } else {
    a[0] = pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
    a[1] = pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
    a[2] = pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    a[3] = pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

template <int NT> __device__ __forceinline__ void zero(float (&acc)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[n][c] = 0.0f;
}

// ---- forward -----------------------------------------------------------------------------

template <class T, int DMAX, bool DROP>
__global__ void __launch_bounds__(kThreads, kMinBlocksForward<T, DMAX>)
    mma_forward_kernel(Heads<T> out, float* __restrict__ lse, Heads<const T> q, Heads<const T> k, Heads<const T> v,
                       Dims g, float scale2, bool causal, Dropout drop, bool vec) {
  pdl_begin();
  constexpr int NK = kKeys<T, DMAX>, P = kPitch<T, DMAX>, kTile = kBlock * P, kKT = NK * P;
  constexpr int KS = DMAX / kStep<T>, NT = NK / 8, OT = DMAX / 8;
  constexpr bool REGS = kRegsForward<T, DMAX>;
  extern __shared__ uint4 smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* kv = sq + kTile;  // buffer i: K at kv + 2 i kKT, V at kv + (2 i + 1) kKT

  const int tiles = (g.q_len + kBlock - 1) / kBlock;
  const int bh = static_cast<int>(blockIdx.x % static_cast<unsigned>(g.bh));
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x / static_cast<unsigned>(g.bh));  // longest rows first
  const int b = bh / g.heads, h = bh % g.heads;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int grp = lane / 4, tig = lane % 4;
  const int i0 = qt * kBlock, iw = i0 + 16 * warp;  // first query of the block, of the warp
  const T* qh = q.head(b, h);
  const T* kh = k.head(b, h);
  const T* vh = v.head(b, h);
  const int n_end = causal ? min(g.k_len, i0 + kBlock) : g.k_len;  // no key past the block's last row
  const int n_tiles = (n_end + NK - 1) / NK;

  load_tile<kBlock, DMAX>(sq, qh, q.st, i0, g.q_len, g.dim, vec);
  load_tile<NK, DMAX>(kv, kh, k.st, 0, g.k_len, g.dim, vec);
  load_tile<NK, DMAX>(kv + kKT, vh, v.st, 0, g.k_len, g.dim, vec);
  cp_async_commit();

  std::uint64_t seed = 0, offset = 0;
  if constexpr (DROP) philox_state(drop, seed, offset);
  const std::uint64_t row0 = static_cast<std::uint64_t>(bh) * g.q_len + iw;  // row of query iw in [B H L]

  std::uint32_t qf[REGS ? KS : 1][4];
  float o[OT][4];
  zero(o);
  float m[2] = {neg_inf_f(), neg_inf_f()}, l[2] = {0.0f, 0.0f};  // rows grp, grp + 8 of the warp

  for (int n = 0; n < n_tiles; ++n) {
    const int j0 = n * NK;
    cp_async_wait<0>();
    if (n == 0) round_tile<kBlock, DMAX>(sq);
    round_tile<NK, DMAX>(kv + 2 * (n & 1) * kKT);
    round_tile<NK, DMAX>(kv + (2 * (n & 1) + 1) * kKT);
    __syncthreads();  // tile n is in; every warp is done with tile n - 1, whose buffers refill now
    if (n + 1 < n_tiles) {
      T* next = kv + 2 * ((n + 1) & 1) * kKT;
      load_tile<NK, DMAX>(next, kh, k.st, j0 + NK, g.k_len, g.dim, vec);
      load_tile<NK, DMAX>(next + kKT, vh, v.st, j0 + NK, g.k_len, g.dim, vec);
    }
    cp_async_commit();
    if constexpr (REGS) {
      if (n == 0) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) load_a<P>(qf[kk], sq + 16 * warp * P, kk, lane);
      }
    }
    const T* ck = kv + 2 * (n & 1) * kKT;
    const T* cv = ck + kKT;
    // Keys this warp can see: causal, none past its last row; none past S.
    const int hi = min(causal ? iw + 16 - j0 : NK, g.k_len - j0);
    std::uint32_t keep = 0;  // (before the scores exist: fewer live registers; none when all are masked)
    if constexpr (DROP)
      if (hi > 0) keep = keep_rows<NK>(drop, seed, offset, row0, g.q_len - iw, g.k_len, j0, lane);
    float s[NT][4];
    zero(s);
    mma_abt<REGS, KS, NT, P>(s, qf, sq + 16 * warp * P, ck, lane, 0, hi);

    // Scale to base-2 units, then mask keys past S and (causal) after the row.
    const bool mask = j0 + NK > g.k_len || (causal && j0 + NK - 1 > iw);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        s[nt][c] *= scale2;
        if (mask) {
          const int j = j0 + 8 * nt + 2 * tig + (c & 1), i = iw + grp + 8 * (c >> 1);
          if (j >= g.k_len || (causal && j > i)) s[nt][c] = neg_inf_f();
        }
      }

#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx = m[half];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
      const float mu = mx == neg_inf_f() ? 0.0f : mx;  // a row with every key masked so far: p = 0
      const float alpha = exp2_approx(m[half] - mu);   // 0 while m is -inf
      m[half] = mx;
      l[half] *= alpha;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
        o[ot][2 * half] *= alpha;
        o[ot][2 * half + 1] *= alpha;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2_approx(s[nt][2 * half + e] - mu);
          l[half] += p;
          s[nt][2 * half + e] = DROP && !((keep >> (4 * nt + 2 * half + e)) & 1) ? 0.0f : p;
        }
    }

#pragma unroll
    for (int kk = 0; kk < NK / kStep<T>; ++kk) {
      if (!live_step<T>(kk, 0, hi)) continue;  // P = 0 there
      std::uint32_t a[4];
      acc_to_a<T>(a, s, kk);
      mma_ab<OT, P>(o, a, cv + kStep<T> * kk * P, lane);
    }
  }

  // O / l (times 1 / (1 - p) with dropout), the log-sum-exp, through the warp's rows of sq.
  float mul[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float sum = l[half];
    sum += __shfl_xor_sync(kFull, sum, 1);
    sum += __shfl_xor_sync(kFull, sum, 2);
    mul[half] = sum > 0 ? (DROP ? drop.scale : 1.0f) / sum : 0.0f;
    const int i = iw + grp + 8 * half;
    if (tig == 0 && i < g.q_len)
      lse[static_cast<std::int64_t>(bh) * g.q_len + i] = (m[half] + log2f(sum)) * kLn2;  // -inf for an empty row
  }
  T* rows = sq + 16 * warp * P;  // this warp's own rows: no other warp reads them
  stage<T, OT, P>(rows, o, mul[0], mul[1], lane);
  __syncwarp();
  store_rows<DMAX>(out.head(b, h), out.st, rows, iw, g.q_len, g.dim, vec, lane);
}

// ---- backward: dq (and delta) -----------------------------------------------------------

template <class T, int DMAX, bool DROP>
__global__ void __launch_bounds__(kThreads, kMinBlocksDq<DMAX>)
    mma_dq_kernel(Heads<T> dq, float* __restrict__ delta, Heads<const T> dout, Heads<const T> q, Heads<const T> k,
                  Heads<const T> v, Heads<const T> out, const float* __restrict__ lse, Dims g, float scale,
                  float scale2, bool causal, Dropout drop, bool vec) {
  pdl_begin();
  constexpr int NK = kKeys<T, DMAX>, P = kPitch<T, DMAX>, kTile = kBlock * P, kKT = NK * P;
  constexpr int KS = DMAX / kStep<T>, NT = NK / 8, OT = DMAX / 8;
  constexpr bool REGS = kRegs<T, DMAX>;
  static_assert(2 * NK >= kBlock);
  extern __shared__ uint4 smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sdo = sq + kTile;
  T* kv = sdo + kTile;     // buffer i: K at kv + 2 i kKT, V at kv + (2 i + 1) kKT
  T* so = kv + 2 * kKT;    // O, for delta, in the second buffer before the first prefetch

  const int tiles = (g.q_len + kBlock - 1) / kBlock;
  const int bh = static_cast<int>(blockIdx.x % static_cast<unsigned>(g.bh));
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x / static_cast<unsigned>(g.bh));
  const int b = bh / g.heads, h = bh % g.heads;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int grp = lane / 4, tig = lane % 4;
  const int i0 = qt * kBlock, iw = i0 + 16 * warp;
  const T* kh = k.head(b, h);
  const T* vh = v.head(b, h);
  const int n_end = causal ? min(g.k_len, i0 + kBlock) : g.k_len;
  const int n_tiles = (n_end + NK - 1) / NK;

  load_tile<kBlock, DMAX>(sq, q.head(b, h), q.st, i0, g.q_len, g.dim, vec);
  load_tile<kBlock, DMAX>(sdo, dout.head(b, h), dout.st, i0, g.q_len, g.dim, vec);
  load_tile<kBlock, DMAX>(so, out.head(b, h), out.st, i0, g.q_len, g.dim, vec);
  load_tile<NK, DMAX>(kv, kh, k.st, 0, g.k_len, g.dim, vec);
  load_tile<NK, DMAX>(kv + kKT, vh, v.st, 0, g.k_len, g.dim, vec);
  cp_async_commit();

  const std::uint64_t row0 = static_cast<std::uint64_t>(bh) * g.q_len + iw;
  const T* my_q = sq + 16 * warp * P;
  const T* my_do = sdo + 16 * warp * P;

  // lse of rows grp, grp + 8 (base 2; 0 for rows past L, whose results are not stored).
  float lse2[2], dl[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = iw + grp + 8 * half;
    lse2[half] = i < g.q_len ? lse[static_cast<std::int64_t>(bh) * g.q_len + i] * kLog2e : 0.0f;
  }

  cp_async_wait<0>();
  __syncthreads();
  {
    // delta of the warp's row lane / 2, dims of half lane % 2, in f32 from the rounded dO and O.
    constexpr int V = kVec<T>, kChunks = DMAX / V;
    const int r = lane / 2;
    float d = 0;
#pragma unroll
    for (int cc = 0; cc < kChunks / 2; ++cc) {
      const int c = (lane % 2) * (kChunks / 2) + cc;
      d = dot16<T>(*reinterpret_cast<const uint4*>(my_do + r * P + V * c),
                   *reinterpret_cast<const uint4*>(so + (16 * warp + r) * P + V * c), d);
    }
    d += __shfl_xor_sync(kFull, d, 1);
    if (lane % 2 == 0 && iw + r < g.q_len) delta[static_cast<std::int64_t>(bh) * g.q_len + iw + r] = d;
    dl[0] = __shfl_sync(kFull, d, 2 * grp);
    dl[1] = __shfl_sync(kFull, d, 2 * grp + 16);
  }
  if constexpr (kTf32<T>) {  // (after every warp's delta, which takes dO unrounded)
    __syncthreads();
    round_tile<kBlock, DMAX>(sq);
    round_tile<kBlock, DMAX>(sdo);
    __syncthreads();
  }
  std::uint32_t qf[REGS ? KS : 1][4], dof[REGS ? KS : 1][4];
  if constexpr (REGS) {
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
      load_a<P>(qf[kk], my_q, kk, lane);
      load_a<P>(dof[kk], my_do, kk, lane);
    }
  }
  float acc[OT][4];
  zero(acc);
  std::uint32_t run_next = 0;  // the stored mask's run of the next key tile (dropout)
  if constexpr (DROP) run_next = stored_rows_run<NK>(drop, row0, g.q_len - iw, g.k_len, 0, lane);

  for (int n = 0; n < n_tiles; ++n) {
    const int j0 = n * NK;
    cp_async_wait<0>();
    round_tile<NK, DMAX>(kv + 2 * (n & 1) * kKT);
    round_tile<NK, DMAX>(kv + (2 * (n & 1) + 1) * kKT);
    __syncthreads();  // (n = 0: every warp is done with O, in the buffer that refills now)
    if (n + 1 < n_tiles) {
      T* next = kv + 2 * ((n + 1) & 1) * kKT;
      load_tile<NK, DMAX>(next, kh, k.st, j0 + NK, g.k_len, g.dim, vec);
      load_tile<NK, DMAX>(next + kKT, vh, v.st, j0 + NK, g.k_len, g.dim, vec);
    }
    cp_async_commit();
    const T* ck = kv + 2 * (n & 1) * kKT;
    const T* cv = ck + kKT;
    const int hi = min(causal ? iw + 16 - j0 : NK, g.k_len - j0);  // as in the forward
    std::uint32_t keep = 0;
    if constexpr (DROP) {
      const std::uint32_t run = run_next;
      if (n + 1 < n_tiles) run_next = stored_rows_run<NK>(drop, row0, g.q_len - iw, g.k_len, j0 + NK, lane);
      if (hi > 0) keep = spread_rows<NK>(run, lane);
    }
    float s[NT][4], dp[NT][4];
    zero(s);
    zero(dp);
    mma_abt<REGS, KS, NT, P>(s, qf, my_q, ck, lane, 0, hi);
    mma_abt<REGS, KS, NT, P>(dp, dof, my_do, cv, lane, 0, hi);
    const bool mask = j0 + NK > g.k_len || (causal && j0 + NK - 1 > iw);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int half = c >> 1;
        float p = exp2_approx(fmaf(s[nt][c], scale2, -lse2[half]));
        if (mask) {
          const int j = j0 + 8 * nt + 2 * tig + (c & 1), i = iw + grp + 8 * half;
          if (j >= g.k_len || (causal && j > i)) p = 0.0f;
        }
        float d = dp[nt][c];
        if constexpr (DROP) d = (keep >> (4 * nt + c)) & 1 ? d * drop.scale : 0.0f;
        s[nt][c] = p * (d - dl[half]);  // dS
      }

#pragma unroll
    for (int kk = 0; kk < NK / kStep<T>; ++kk) {
      if (!live_step<T>(kk, 0, hi)) continue;  // dS = 0 there
      std::uint32_t a[4];
      acc_to_a<T>(a, s, kk);
      mma_ab<OT, P>(acc, a, ck + kStep<T> * kk * P, lane);
    }
  }

  T* rows = sq + 16 * warp * P;
  stage<T, OT, P>(rows, acc, scale, scale, lane);
  __syncwarp();
  store_rows<DMAX>(dq.head(b, h), dq.st, rows, iw, g.q_len, g.dim, vec, lane);
}

// ---- backward: dk, dv ------------------------------------------------------------------

// The fused backward's dQ += dS K for one query tile of the f32 (TF32) dK/dV kernel (DMAX = 64):
// dS^T (this warp's 16 keys x BQ queries, dp) goes to sds as [query][key], rounded, the keys of
// each 8 in acc_to_a's k order (key 2u at column u and 2u + 1 at column u + 4, the order in which
// mma_ab reads B), then warp w multiplies queries 16 (w % (BQ / 16)) .. + 15 of dS by its share of K's
// dims (sk: [key][dim], rounded) and adds the products, times scale, into dq's f32 sums (rows
// i0 + .., dims < D) with atomics. Entered by every thread of the CTA (two barriers).
template <class T, int BQ>
__device__ __forceinline__ void fused_dq(float* acc, std::int64_t st, T* sds, const T* sk, const float (&dp)[BQ / 8][4],
                                         int i0, const Dims& g, float scale, bool pairs, int warp, int lane) {
  static_assert(kTf32<T>);
  constexpr int P = kPitch<T, 64>, NT = BQ / 8, QB = BQ / 16, DW = 64 / (kWarps / QB), DT = DW / 8;
  const int grp = lane / 4, tig = lane % 4;
  __syncthreads();  // every warp is done with this tile's dO (dV's product): dS takes its buffer
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int qi = 8 * nt + 2 * tig + (c & 1), kj = 16 * warp + grp + 8 * (c >> 1);
      const int r = kj & 7;
      sds[qi * P + ((kj & ~7) | (r & 1 ? 4 + (r >> 1) : r >> 1))] = __uint_as_float(to_tf32(dp[nt][c]));
    }
  __syncthreads();
  const int qb = warp % QB, d0 = (warp / QB) * DW;
  float o[DT][4];
  zero(o);
#pragma unroll
  for (int kk = 0; kk < kBlock / kStep<T>; ++kk) {
    std::uint32_t a[4];
    load_a<P>(a, sds + 16 * qb * P, kk, lane);
    mma_ab<DT, P>(o, a, sk + kStep<T> * kk * P + d0, lane);
  }
#pragma unroll
  for (int dt = 0; dt < DT; ++dt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int i = i0 + 16 * qb + grp + 8 * half, d = d0 + 8 * dt + 2 * tig;
      if (i >= g.q_len || d >= g.dim) continue;
      float* p = acc + static_cast<std::int64_t>(i) * st + d;
      const float x = o[dt][2 * half] * scale, y = o[dt][2 * half + 1] * scale;
#if __CUDA_ARCH__ >= 900
      if (pairs && d + 1 < g.dim) {
        atomicAdd(reinterpret_cast<float2*>(p), make_float2(x, y));
        continue;
      }
#endif
      atomicAdd(p, x);
      if (d + 1 < g.dim) atomicAdd(p + 1, y);
    }
}

// The fused backward's first launch (f32 only, as the fused backward): delta = rowsum(dO o O)
// of every query row into delta[(b H + h) L + i], and the row's dq sums (acc: dq) zeroed. A
// group of DMAX / 4 lanes takes a row, 4 elements each (16-byte loads where vec).
template <int DMAX>
__global__ void __launch_bounds__(256)
    mma_delta_kernel(float* __restrict__ delta, Heads<float> acc, Heads<const float> dout, Heads<const float> out,
                     Dims g, bool vec) {
  pdl_begin();
  constexpr int V = kVec<float>, kLanes = DMAX / V;
  static_assert(32 % kLanes == 0);
  const std::int64_t row = (static_cast<std::int64_t>(blockIdx.x) * 256 + threadIdx.x) / kLanes;
  const int d = static_cast<int>(threadIdx.x % kLanes) * V;
  const bool in = row < static_cast<std::int64_t>(g.bh) * g.q_len;
  float s = 0.0f;
  if (in) {
    const int bh = static_cast<int>(row / g.q_len), i = static_cast<int>(row % g.q_len);
    const int b = bh / g.heads, h = bh % g.heads;
    const float* x = dout.head(b, h) + static_cast<std::int64_t>(i) * dout.st + d;
    const float* y = out.head(b, h) + static_cast<std::int64_t>(i) * out.st + d;
    float* a = acc.head(b, h) + static_cast<std::int64_t>(i) * acc.st + d;
    if (vec && d + V <= g.dim) {
      s = dot16<float>(*reinterpret_cast<const uint4*>(x), *reinterpret_cast<const uint4*>(y), s);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (d + e < g.dim) s = fmaf(x[e], y[e], s);
    }
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (d + e < g.dim) a[e] = 0.0f;
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) s += __shfl_xor_sync(kFull, s, off);
  if (in && d == 0) delta[row] = s;
}

// FUSED (f32, DMAX = 64; the fused backward): after dV and dK, each query tile's dQ += dS K too,
// dS staged through the tile's dO buffer (free once dV's product is done; [BQ][P] holds BQ x 64
// keys at DMAX = 64) and added into dqa (dq, zeroed by mma_delta_kernel) with atomics; `pairs`:
// dqa's rows and base allow 8-byte float2 atomics (sm_90).
template <class T, int DMAX, bool DROP, bool FUSED>
__global__ void __launch_bounds__(kThreads)
    mma_dkdv_kernel(Heads<T> dk, Heads<T> dv, Heads<const T> dout, Heads<const T> q, Heads<const T> k,
                    Heads<const T> v, const float* __restrict__ lse, const float* __restrict__ delta, Dims g,
                    float scale, float scale2, bool causal, Dropout drop, bool vec, Heads<float> dqa, bool pairs) {
  pdl_begin();
  static_assert(!FUSED || (DMAX == 64 && kBlock == 64 && kTf32<T>));
  constexpr int BQ = kQueriesDkdv<T, DMAX>;
  constexpr int P = kPitch<T, DMAX>, kKTile = kBlock * P, kQTile = BQ * P, KS = DMAX / kStep<T>, NT = BQ / 8;
  constexpr int OT = DMAX / 8;
  constexpr bool REGS = kRegs<T, DMAX> && !DROP;  // (with dropout, registers for K, V spill)
  extern __shared__ uint4 smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + kKTile;
  T* sq = sv + kKTile;      // two buffers
  T* sdo = sq + 2 * kQTile;  // two buffers
  float* slse = reinterpret_cast<float*>(sdo + 2 * kQTile);  // two buffers of BQ
  float* sdelta = slse + 2 * BQ;                             // two buffers of BQ

  const int bh = static_cast<int>(blockIdx.x % static_cast<unsigned>(g.bh));
  const int kt = static_cast<int>(blockIdx.x / static_cast<unsigned>(g.bh));  // causal: most query tiles first
  const int b = bh / g.heads, h = bh % g.heads;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int grp = lane / 4, tig = lane % 4;
  const int j0 = kt * kBlock, jw = j0 + 16 * warp;  // first key of the block, of the warp
  const T* qh = q.head(b, h);
  const T* doh = dout.head(b, h);
  const std::int64_t rows0 = static_cast<std::int64_t>(bh) * g.q_len;  // lse/delta index of query 0
  const float* lse_h = lse + rows0;
  const float* delta_h = delta + rows0;
  const int t_first = causal ? j0 / BQ : 0;  // queries before the block's first key see none of its keys
  const int t_end = (g.q_len + BQ - 1) / BQ;

  load_tile<kBlock, DMAX>(sk, k.head(b, h), k.st, j0, g.k_len, g.dim, vec);
  load_tile<kBlock, DMAX>(sv, v.head(b, h), v.st, j0, g.k_len, g.dim, vec);
  if (t_first < t_end) {
    load_tile<BQ, DMAX>(sq, qh, q.st, t_first * BQ, g.q_len, g.dim, vec);
    load_tile<BQ, DMAX>(sdo, doh, dout.st, t_first * BQ, g.q_len, g.dim, vec);
    load_floats(slse, lse_h, t_first * BQ, g.q_len, BQ, 0);
    load_floats(sdelta, delta_h, t_first * BQ, g.q_len, BQ, BQ);
  }
  cp_async_commit();

  const T* my_k = sk + 16 * warp * P;
  const T* my_v = sv + 16 * warp * P;

  std::uint32_t kf[REGS ? KS : 1][4], vf[REGS ? KS : 1][4];
  float dka[OT][4], dva[OT][4];
  zero(dka);
  zero(dva);
  std::uint32_t run_next = 0;  // the stored mask's runs of the next query tile (dropout)
  if constexpr (DROP)
    if (t_first < t_end)
      run_next = stored_cols_run<BQ>(drop, static_cast<std::uint64_t>(rows0 + t_first * BQ), g.q_len - t_first * BQ,
                                     g.k_len, jw, lane);

  for (int t = t_first; t < t_end; ++t) {
    const int i0 = t * BQ, buf = (t - t_first) & 1;
    cp_async_wait<0>();
    if (t == t_first) {
      round_tile<kBlock, DMAX>(sk);
      round_tile<kBlock, DMAX>(sv);
    }
    round_tile<BQ, DMAX>(sq + buf * kQTile);
    round_tile<BQ, DMAX>(sdo + buf * kQTile);
    __syncthreads();
    if (t + 1 < t_end) {
      const int nb = buf ^ 1;
      load_tile<BQ, DMAX>(sq + nb * kQTile, qh, q.st, i0 + BQ, g.q_len, g.dim, vec);
      load_tile<BQ, DMAX>(sdo + nb * kQTile, doh, dout.st, i0 + BQ, g.q_len, g.dim, vec);
      load_floats(slse + nb * BQ, lse_h, i0 + BQ, g.q_len, BQ, 0);
      load_floats(sdelta + nb * BQ, delta_h, i0 + BQ, g.q_len, BQ, BQ);
    }
    cp_async_commit();
    if constexpr (REGS) {
      if (t == t_first) {
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
          load_a<P>(kf[kk], my_k, kk, lane);
          load_a<P>(vf[kk], my_v, kk, lane);
        }
      }
    }
    const T* cq = sq + buf * kQTile;
    const T* cdo = sdo + buf * kQTile;
    const float* cl = slse + buf * BQ;
    const float* cd = sdelta + buf * BQ;

    // Queries that see a key of this warp: causal, none before its first key; none past L.
    const int lo = causal ? jw - i0 : 0, hi = g.q_len - i0;
    std::uint32_t keep = 0;
    if constexpr (DROP) {
      const std::uint32_t run = run_next;
      if (t + 1 < t_end)
        run_next = stored_cols_run<BQ>(drop, static_cast<std::uint64_t>(rows0 + i0 + BQ), g.q_len - i0 - BQ, g.k_len,
                                       jw, lane);
      if (lo < min(hi, BQ)) keep = spread_cols<BQ>(run, lane);
    }
    float s[NT][4], dp[NT][4];  // transposed: rows keys grp, grp + 8 of the warp; columns queries
    zero(s);
    zero(dp);
    mma_abt<REGS, KS, NT, P>(s, kf, my_k, cq, lane, lo, hi);
    mma_abt<REGS, KS, NT, P>(dp, vf, my_v, cdo, lane, lo, hi);
    const bool mask = i0 + BQ > g.q_len || (causal && jw + 15 > i0);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const float2 ls = *reinterpret_cast<const float2*>(cl + 8 * nt + 2 * tig);
      const float2 de = *reinterpret_cast<const float2*>(cd + 8 * nt + 2 * tig);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int e = c & 1;
        float p = exp2_approx(fmaf(s[nt][c], scale2, -(e ? ls.y : ls.x) * kLog2e));
        if (mask) {
          const int i = i0 + 8 * nt + 2 * tig + e, j = jw + grp + 8 * (c >> 1);
          if (i >= g.q_len || (causal && j > i)) p = 0.0f;
        }
        float d = dp[nt][c], pz = p;
        if constexpr (DROP) {
          const bool kept = (keep >> (4 * nt + c)) & 1;
          d = kept ? d * drop.scale : 0.0f;
          pz = kept ? p * drop.scale : 0.0f;
        }
        dp[nt][c] = p * (d - (e ? de.y : de.x));  // dS^T
        s[nt][c] = pz;                            // (P o Z)^T
      }
    }

#pragma unroll
    for (int kk = 0; kk < BQ / kStep<T>; ++kk) {
      if (!live_step<T>(kk, lo, hi)) continue;  // P o Z = dS = 0 there
      std::uint32_t a[4];
      acc_to_a<T>(a, s, kk);
      mma_ab<OT, P>(dva, a, cdo + kStep<T> * kk * P, lane);
      acc_to_a<T>(a, dp, kk);
      mma_ab<OT, P>(dka, a, cq + kStep<T> * kk * P, lane);
    }
    if constexpr (FUSED) fused_dq<T, BQ>(dqa.head(b, h), dqa.st, sdo + buf * kQTile, sk, dp, i0, g, scale, pairs, warp, lane);
  }

  cp_async_wait<0>();  // (no query tile: K and V, loaded by every warp, may still be landing)
  __syncthreads();
  T* krows = sk + 16 * warp * P;  // this warp's own rows of K and V: no other warp reads them
  T* vrows = sv + 16 * warp * P;
  stage<T, OT, P>(krows, dka, scale, scale, lane);
  stage<T, OT, P>(vrows, dva, 1.0f, 1.0f, lane);
  __syncwarp();
  store_rows<DMAX>(dk.head(b, h), dk.st, krows, jw, g.k_len, g.dim, vec, lane);
  store_rows<DMAX>(dv.head(b, h), dv.st, vrows, jw, g.k_len, g.dim, vec, lane);
}

// ---- launches ----------------------------------------------------------------------------

// Calls f.template operator()<T, DMAX>() for bf16/f16/f32 and the smallest of 32, 64, 128 >= dim.
template <class F> int with_mma_types(DType dtype, int dim, F&& f) {
  const auto by_dim = [&]<class T>() {
    if (dim <= 32) return f.template operator()<T, 32>();
    if (dim <= 64) return f.template operator()<T, 64>();
    return f.template operator()<T, 128>();
  };
  if (dtype == DType::bf16) return by_dim.template operator()<__nv_bfloat16>();
  if (dtype == DType::f16) return by_dim.template operator()<__half>();
  if (dtype == DType::f32) return by_dim.template operator()<float>();  // TF32 products
  return static_cast<int>(cudaErrorInvalidValue);
}

// 16-byte loads and stores of whole chunks (8 16-bit or 4 f32 elements) are possible for every row.
bool vectorizable(const Operand& o) {
  const std::int64_t v = o.dtype == DType::f32 ? 4 : 8;
  return o.sizes[3] % v == 0 && o.strides[0] % v == 0 && o.strides[1] % v == 0 && o.strides[2] % v == 0 &&
         reinterpret_cast<std::uintptr_t>(o.data) % 16 == 0;
}

Dims dims_of(const Operand& q, const Operand& k) {
  return {static_cast<int>(q.sizes[0] * q.sizes[1]), static_cast<int>(q.sizes[1]), static_cast<int>(q.sizes[2]),
          static_cast<int>(k.sizes[2]), static_cast<int>(q.sizes[3])};
}

// Lengths, B*H and the grid (B*H times tiles of `tile_len`) within int / gridDim.x.
bool fits(const Operand& q, const Operand& k, std::int64_t tile_len, int rows) {
  const std::int64_t bh = q.sizes[0] * q.sizes[1];
  const std::int64_t tiles = (tile_len + rows - 1) / rows;
  return q.sizes[2] <= INT32_MAX && k.sizes[2] <= INT32_MAX && bh <= INT32_MAX && bh * tiles <= INT32_MAX;
}

// Dynamic shared memory past the default 48 KiB must be allowed per kernel (cheap; done at
// every launch, as the attribute belongs to the current device's instance of the kernel).
template <class K> cudaError_t allow_smem(K* kernel, std::size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

}  // namespace

int attention_forward_mma(const Operand& out, const Operand& lse, const Operand& q, const Operand& k,
                          const Operand& v, double scale, bool causal, const AttentionDropout& dropout,
                          cudaStream_t stream) {
  return with_mma_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    if (!fits(q, k, q.sizes[2], kBlock)) return static_cast<int>(cudaErrorInvalidConfiguration);
    const Dims g = dims_of(q, k);
    const bool vec = vectorizable(q) && vectorizable(k) && vectorizable(v) && vectorizable(out);
    const std::size_t smem = (kBlock + 4 * kKeys<T, DMAX>) * static_cast<std::size_t>(kPitch<T, DMAX>) * sizeof(T);
    auto* kernel = dropout.p > 0 ? mma_forward_kernel<T, DMAX, true> : mma_forward_kernel<T, DMAX, false>;
    if (cudaError_t e = allow_smem(kernel, smem); e != cudaSuccess) return static_cast<int>(e);
    Dropout drop = dropout_of(dropout);
    drop.words = static_cast<int>(attention_keep_words(g.k_len));
    if (dropout.p > 0 && drop.bits != nullptr) {  // the words no row draws stay zero
      const std::size_t bytes = static_cast<std::size_t>(g.bh) * static_cast<std::size_t>(g.q_len) * drop.words * 4;
      if (cudaError_t e = cudaMemsetAsync(drop.bits, 0, bytes, stream); e != cudaSuccess) return static_cast<int>(e);
    }
    const auto blocks = static_cast<unsigned>(static_cast<std::int64_t>(g.bh) * ((g.q_len + kBlock - 1) / kBlock));
    launch_pdl(kernel, blocks, kThreads, smem, stream, heads<T>(out), static_cast<float*>(lse.data), heads<const T>(q),
               heads<const T>(k), heads<const T>(v), g, static_cast<float>(scale * 1.4426950408889634), causal, drop,
               vec);
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
// The fused backward (no dq kernel: dK/dV adds into dq with atomics): f32 (TF32) with
// 32 < D <= 64, unless deterministic. bf16/f16 took it too at first and were slower (the GPT's
// attention 0.199 -> 0.226 ms forward + backward, the step 5.53 -> 5.98 ms, H100): their
// two-kernel backward keeps K, V or Q, dO fragments in registers, and the fused one needs dq's
// f32 sums zeroed and converted besides.
bool fused_backward(const Operand& q, bool deterministic) {
  return !deterministic && q.dtype == DType::f32 && q.sizes[3] > 32 && q.sizes[3] <= 64;
}
}  // namespace

int attention_backward_mma(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout,
                           const Operand& q, const Operand& k, const Operand& v, const Operand& out,
                           const Operand& lse, double scale, bool causal, const AttentionDropout& dropout,
                           bool deterministic, void* workspace, cudaStream_t stream) {
  return with_mma_types(q.dtype, static_cast<int>(q.sizes[3]), [&]<class T, int DMAX>() {
    constexpr int BQ = kQueriesDkdv<T, DMAX>, P = kPitch<T, DMAX>;
    if (!fits(q, k, q.sizes[2], kBlock) || !fits(q, k, k.sizes[2], kBlock))
      return static_cast<int>(cudaErrorInvalidConfiguration);
    const Dims g = dims_of(q, k);
    const bool vec = vectorizable(q) && vectorizable(k) && vectorizable(v) && vectorizable(out) &&
                     vectorizable(dout) && vectorizable(dq) && vectorizable(dk) && vectorizable(dv);
    const bool drop = dropout.p > 0;
    Dropout args = dropout_of(dropout);
    args.words = static_cast<int>(attention_keep_words(g.k_len));
    if (drop && args.bits == nullptr) return static_cast<int>(cudaErrorInvalidValue);  // the forward's bits are needed
    const auto s = static_cast<float>(scale), s2 = static_cast<float>(scale * 1.4426950408889634);
    auto* delta = static_cast<float*>(workspace);
    const auto* lse_p = static_cast<const float*>(lse.data);
    const std::size_t kv_smem =
        (2 * static_cast<std::size_t>(kBlock) + 4 * BQ) * P * sizeof(T) + 4 * BQ * sizeof(float);
    const auto kv_blocks = static_cast<unsigned>(static_cast<std::int64_t>(g.bh) * ((g.k_len + kBlock - 1) / kBlock));

    if constexpr (DMAX == 64 && kTf32<T>) {
      if (fused_backward(q, deterministic)) {
        const Heads<float> acc = heads<float>(dq);  // dq's sums: dq itself, zeroed by the delta launch
        const bool pairs = reinterpret_cast<std::uintptr_t>(acc.data) % 8 == 0 && acc.sb % 2 == 0 && acc.sh % 2 == 0 &&
                           acc.st % 2 == 0;
        constexpr int kLanes = DMAX / kVec<T>;
        const std::int64_t threads = static_cast<std::int64_t>(g.bh) * g.q_len * kLanes;
        if ((threads + 255) / 256 > INT32_MAX) return static_cast<int>(cudaErrorInvalidConfiguration);
        launch_pdl(mma_delta_kernel<DMAX>, static_cast<unsigned>((threads + 255) / 256), 256, 0, stream, delta, acc,
                   heads<const T>(dout), heads<const T>(out), g, vectorizable(dout) && vectorizable(out));
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);
        auto* kernel = drop ? mma_dkdv_kernel<T, DMAX, true, true> : mma_dkdv_kernel<T, DMAX, false, true>;
        if (cudaError_t e = allow_smem(kernel, kv_smem); e != cudaSuccess) return static_cast<int>(e);
        launch_pdl(kernel, kv_blocks, kThreads, kv_smem, stream, heads<T>(dk), heads<T>(dv), heads<const T>(dout),
                   heads<const T>(q), heads<const T>(k), heads<const T>(v), lse_p, delta, g, s, s2, causal, args, vec,
                   acc, pairs);
        return static_cast<int>(cudaGetLastError());
      }
    }

    const std::size_t dq_smem = (2 * kBlock + 4 * kKeys<T, DMAX>) * static_cast<std::size_t>(P) * sizeof(T);
    auto* dq_kernel = drop ? mma_dq_kernel<T, DMAX, true> : mma_dq_kernel<T, DMAX, false>;
    if (cudaError_t e = allow_smem(dq_kernel, dq_smem); e != cudaSuccess) return static_cast<int>(e);
    const auto dq_blocks = static_cast<unsigned>(static_cast<std::int64_t>(g.bh) * ((g.q_len + kBlock - 1) / kBlock));
    launch_pdl(dq_kernel, dq_blocks, kThreads, dq_smem, stream, heads<T>(dq), delta, heads<const T>(dout),
               heads<const T>(q), heads<const T>(k), heads<const T>(v), heads<const T>(out), lse_p, g, s, s2, causal,
               args, vec);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return static_cast<int>(e);

    auto* kv_kernel = drop ? mma_dkdv_kernel<T, DMAX, true, false> : mma_dkdv_kernel<T, DMAX, false, false>;
    if (cudaError_t e = allow_smem(kv_kernel, kv_smem); e != cudaSuccess) return static_cast<int>(e);
    launch_pdl(kv_kernel, kv_blocks, kThreads, kv_smem, stream, heads<T>(dk), heads<T>(dv), heads<const T>(dout),
               heads<const T>(q), heads<const T>(k), heads<const T>(v), lse_p, delta, g, s, s2, causal, args, vec,
               Heads<float>{}, false);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace brrr::kernels
