// CUDA kernels of layer_norm's backward (the contract's layer_norm_backward) over contiguous
// [rows, cols] operands. With x_hat = (x - mean) rstd and gw = dy w, per row
//   dx = rstd ((gw - sum(gw) / cols) - x_hat sum(gw x_hat) / cols)
// and over rows dweight = sum dy x_hat, dbias = sum dy. Arithmetic in f32 (f64 for f64).
// No atomics: the column sums are a two-stage reduction in a fixed order (each block writes
// one row of partial sums into the workspace, then a final kernel adds the rows in a fixed
// order per column), so every run gives the same bits.
//   - rows of up to 1024 elements (512 for f64): one warp per row, each lane keeping its
//     cols/32 elements of x and dy in registers; x and dy are read once and the lanes carry
//     their columns' partial sums across the rows of their warp, which the block's warps
//     add in warp order through shared memory.
//   - wider rows: one block per row for dx (the row read twice: the two sums, then dx), and
//     a column kernel for the partial sums (a thread per column walking a chunk of rows).
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/pack.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

constexpr int lnb_warps = 4;                // rows (warps) per block of the warp kernel
constexpr std::int64_t lnb_max_parts = 1024;  // partial-sum rows: at most this many blocks
constexpr int lnb_block_threads = 256;      // dx kernel of wide rows, and the column kernels

// The largest N (elements per lane) of the warp kernel: 32 f32 values (cols <= 1024), 16 f64
// values (cols <= 512), so that x, dy and the two partial sums stay in registers.
template <class A> constexpr int lnb_max_n = sizeof(A) == 8 ? 16 : 32;

// Once every warp of the block stored its column sums of dy x_hat and dy in red
// ([lnb_warps][2][cols], shared memory): their sums over the warps, in warp order, as rows
// 2 * blockIdx.x and 2 * blockIdx.x + 1 of partial.
template <class A> __device__ __forceinline__ void block_partials_out(const A* red, A* partial, int cols) {
  __syncthreads();
  A* dst = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * cols;
  for (int k = threadIdx.x; k < 2 * cols; k += blockDim.x) {
    const int which = k / cols, c = k - which * cols;
    A s = 0;
    for (int v = 0; v < lnb_warps; ++v) s += red[(v * 2 + which) * cols + c];
    dst[k] = s;
  }
}

// dx (when given) of the rows of warp w, w + total warps, ...; partial (when given) receives
// this block's column sums of dy x_hat (row 2 * blockIdx.x) and dy (row 2 * blockIdx.x + 1).
// Shared memory: lnb_warps * 2 * cols values of A.
template <class T, int N>
__global__ void __launch_bounds__(lnb_warps * 32)
    layer_norm_backward_warp(T* __restrict__ dx, racc_t<T>* __restrict__ partial, const T* __restrict__ dy,
                             const T* __restrict__ x, const racc_t<T>* __restrict__ mean,
                             const racc_t<T>* __restrict__ rstd, const racc_t<T>* __restrict__ w, std::int64_t rows,
                             int cols) {
  pdl_begin();
  using A = racc_t<T>;
  extern __shared__ __align__(16) unsigned char lnb_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const A inv_cols = A(1) / static_cast<A>(cols);
  A pw[N], pb[N];  // this lane's partial sums of dy x_hat and dy, column i * 32 + lane
#pragma unroll
  for (int i = 0; i < N; ++i) pw[i] = pb[i] = A(0);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * lnb_warps;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * lnb_warps + warp; row < rows; row += warps) {
    const T* xr = x + row * cols;
    const T* gr = dy + row * cols;
    const A mu = mean[row], rs = rstd[row];
    A xh[N], gw[N];
    A s1 = 0, s2 = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int c = i * 32 + lane;
      xh[i] = gw[i] = A(0);
      if (c < cols) {
        xh[i] = (to_acc<A>(xr[c]) - mu) * rs;
        const A g = to_acc<A>(gr[c]);
        pw[i] += g * xh[i];
        pb[i] += g;
        gw[i] = w ? g * w[c] : g;
        s1 += gw[i];
        s2 += gw[i] * xh[i];
      }
    }
    if (dx) {
      const A a = warp_sum(s1) * inv_cols, b = warp_sum(s2) * inv_cols;
      T* out = dx + row * cols;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int c = i * 32 + lane;
        if (c < cols) out[c] = narrow_to<T>(rs * ((gw[i] - a) - xh[i] * b));
      }
    }
  }
  if (!partial) return;
  // The block's warps add their partial sums in warp order.
  A* red = reinterpret_cast<A*>(lnb_smem);  // [lnb_warps][2][cols]
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = i * 32 + lane;
    if (c < cols) {
      red[(warp * 2) * cols + c] = pw[i];
      red[(warp * 2 + 1) * cols + c] = pb[i];
    }
  }
  block_partials_out(red, partial, cols);
}

// dx of wide rows: one block per row (rows strided by the grid), the row read twice.
template <class T>
__global__ void __launch_bounds__(lnb_block_threads)
    layer_norm_backward_dx_block(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                 const racc_t<T>* __restrict__ mean, const racc_t<T>* __restrict__ rstd,
                                 const racc_t<T>* __restrict__ w, std::int64_t rows, std::int64_t cols) {
  pdl_begin();
  using A = racc_t<T>;
  __shared__ A red[33];
  const A inv_cols = A(1) / static_cast<A>(cols);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    const T* gr = dy + row * cols;
    const A mu = mean[row], rs = rstd[row];
    A s1 = 0, s2 = 0;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A xh = (to_acc<A>(xr[c]) - mu) * rs;
      const A g = w ? to_acc<A>(gr[c]) * w[c] : to_acc<A>(gr[c]);
      s1 += g;
      s2 += g * xh;
    }
    // block_reduce's barriers order the reuse of `red` (also by the next row).
    const A a = block_reduce<A, false>(s1, red) * inv_cols;
    const A b = block_reduce<A, false>(s2, red) * inv_cols;
    T* out = dx + row * cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const A xh = (to_acc<A>(xr[c]) - mu) * rs;
      const A g = w ? to_acc<A>(gr[c]) * w[c] : to_acc<A>(gr[c]);
      out[c] = narrow_to<T>(rs * ((g - a) - xh * b));
    }
  }
}

// Partial column sums of wide rows: block (i, p) covers columns [i blockDim, (i + 1) blockDim)
// and rows [p chunk, (p + 1) chunk), a thread per column walking its rows in order.
template <class T>
__global__ void __launch_bounds__(lnb_block_threads)
    layer_norm_backward_columns(racc_t<T>* __restrict__ partial, const T* __restrict__ dy, const T* __restrict__ x,
                                const racc_t<T>* __restrict__ mean, const racc_t<T>* __restrict__ rstd,
                                std::int64_t rows, std::int64_t cols, std::int64_t chunk) {
  pdl_begin();
  using A = racc_t<T>;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  A sw = 0, sb = 0;
  for (std::int64_t r = r0; r < r1; ++r) {
    const A g = to_acc<A>(dy[r * cols + c]);
    sw += g * ((to_acc<A>(x[r * cols + c]) - mean[r]) * rstd[r]);
    sb += g;
  }
  A* dst = partial + static_cast<std::int64_t>(blockIdx.y) * 2 * cols;
  dst[c] = sw;
  dst[cols + c] = sb;
}

// dweight[c] / dbias[c] (either may be nullptr) = the sum of the parts' partial rows, in a
// fixed order: a block of 8 columns x 128 slices, thread (tx, ty) adding parts ty, ty + 128,
// ... of its column, then a fixed tree over the 128 slices in shared memory (so the many parts
// of a tall input are read by many threads of many blocks at once, cols / 8 blocks, and every
// run adds in the same order).
constexpr int sum_cols = 8, sum_slices = 128;
template <class A>
__global__ void __launch_bounds__(sum_cols * sum_slices)
    layer_norm_backward_sum_parts(A* __restrict__ dw, A* __restrict__ db, const A* __restrict__ partial,
                                  std::int64_t parts, std::int64_t cols) {
  pdl_begin();
  __shared__ A red[2][sum_slices][sum_cols];
  const int tx = threadIdx.x % sum_cols, ty = threadIdx.x / sum_cols;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * sum_cols + tx;
  A sw = 0, sb = 0;
  if (c < cols)
    for (std::int64_t p = ty; p < parts; p += sum_slices) {
      sw += partial[(2 * p) * cols + c];
      sb += partial[(2 * p + 1) * cols + c];
    }
  red[0][ty][tx] = sw;
  red[1][ty][tx] = sb;
#pragma unroll
  for (int half = sum_slices / 2; half > 0; half /= 2) {
    __syncthreads();
    if (ty < half) {
      red[0][ty][tx] += red[0][ty + half][tx];
      red[1][ty][tx] += red[1][ty + half][tx];
    }
  }
  if (ty == 0 && c < cols) {
    if (dw) dw[c] = red[0][0][tx];
    if (db) db[c] = red[1][0][tx];
  }
}

// dropout_add_layer_norm's backward: the warp kernel's dx with grad_sum added (ds), written as
// dresidual and, through the dropout mask, as dx0; one lane per group of 4 adjacent columns
// (g * 32 + lane) as the forward, each group one vector access when VEC (every pointer aligned
// to 4 elements, the mask to 4 bytes). Partial column sums as the warp kernel's.
template <class T0, class TS, int G, bool VEC>
__global__ void __launch_bounds__(lnb_warps * 32)
    dropout_add_layer_norm_backward_warp(T0* __restrict__ dx0, TS* __restrict__ dres, racc_t<TS>* __restrict__ partial,
                                         const T0* __restrict__ dy, const TS* __restrict__ gsum,
                                         const TS* __restrict__ x, const racc_t<TS>* __restrict__ mean,
                                         const racc_t<TS>* __restrict__ rstd, const racc_t<TS>* __restrict__ w,
                                         const bool* __restrict__ mask, std::int64_t rows, int cols, T0 keep) {
  pdl_begin();
  using A = racc_t<TS>;
  extern __shared__ __align__(16) unsigned char lnb_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const A inv_cols = A(1) / static_cast<A>(cols);
  const T0 zero = narrow_to<T0>(0.0);
  A pw[G][4], pb[G][4];
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int r = 0; r < 4; ++r) pw[g][r] = pb[g][r] = A(0);
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * lnb_warps;
  for (std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * lnb_warps + warp; row < rows; row += warps) {
    const A mu = mean[row], rs = rstd[row];
    A xh[G][4], gw[G][4];
    // grad_sum and the mask are loaded with x and dy, before the row's sums: one memory round
    // trip a row, not two (the kernel is bound by memory latency as much as by bandwidth).
    TS gs[G][4];
    bool kept[G][4];
    A s1 = 0, s2 = 0;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c0 = (g * 32 + lane) * 4;
#pragma unroll
      for (int r = 0; r < 4; ++r) xh[g][r] = gw[g][r] = A(0), kept[g][r] = true;
      if (c0 >= cols) continue;
      const std::int64_t e0 = row * cols + c0;
      TS xv[4];
      T0 dv[4];
      load4<TS, VEC>(x + e0, xv);
      load4<T0, VEC>(dy + e0, dv);
      if ((dx0 || dres) && gsum) load4<TS, VEC>(gsum + e0, gs[g]);
      if (dx0 && mask) {
        if constexpr (VEC) {
          const uchar4 m = *reinterpret_cast<const uchar4*>(mask + e0);
          kept[g][0] = m.x, kept[g][1] = m.y, kept[g][2] = m.z, kept[g][3] = m.w;
        } else {
#pragma unroll
          for (int r = 0; r < 4; ++r) kept[g][r] = mask[e0 + r];
        }
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        xh[g][r] = (to_acc<A>(xv[r]) - mu) * rs;
        const A gv = to_acc<A>(dv[r]);
        pw[g][r] += gv * xh[g][r];
        pb[g][r] += gv;
        gw[g][r] = w ? gv * w[c0 + r] : gv;
        s1 += gw[g][r];
        s2 += gw[g][r] * xh[g][r];
      }
    }
    if (dx0 || dres) {
      const A a = warp_sum(s1) * inv_cols, bb = warp_sum(s2) * inv_cols;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int c0 = (g * 32 + lane) * 4;
        if (c0 >= cols) continue;
        const std::int64_t e0 = row * cols + c0;
        TS ds[4];
        T0 d0[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          ds[r] = narrow_to<TS>(rs * ((gw[g][r] - a) - xh[g][r] * bb));  // layer_norm's dx
          if (gsum) ds[r] = narrow_to<TS>(to_acc<A>(ds[r]) + to_acc<A>(gs[g][r]));
          const T0 gt = narrow_to<T0>(load(ds[r]));
          d0[r] = mask ? narrow_to<T0>(load(gt) * load(kept[g][r] ? keep : zero)) : gt;
        }
        if (dres) store4<TS, VEC>(dres + e0, ds);
        if (dx0) store4<T0, VEC>(dx0 + e0, d0);
      }
    }
  }
  if (!partial) return;
  A* red = reinterpret_cast<A*>(lnb_smem);  // [lnb_warps][2][cols]
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int c0 = (g * 32 + lane) * 4;
    if (c0 >= cols) continue;
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      red[(warp * 2) * cols + c0 + r] = pw[g][r];
      red[(warp * 2 + 1) * cols + c0 + r] = pb[g][r];
    }
  }
  block_partials_out(red, partial, cols);
}

// Elements per lane of the warp kernel: the smallest power of two with 32 N >= cols.
int lanes_n(std::int64_t cols) {
  int n = 1;
  while (n * 32 < cols) n *= 2;
  return n;
}

template <class T> bool warp_path(std::int64_t cols) { return cols <= 32 * lnb_max_n<racc_t<T>>; }

// How the rows are split into partial-sum rows.
struct Parts {
  std::int64_t parts = 0, chunk = 0;  // chunk: rows per part (column kernel only)
};
template <class T> Parts parts_of(std::int64_t rows, std::int64_t cols) {
  Parts p;
  if (rows <= 0 || cols <= 0) return p;
  if (warp_path<T>(cols)) {
    const std::int64_t blocks = (rows + lnb_warps - 1) / lnb_warps;
    p.parts = blocks < lnb_max_parts ? blocks : lnb_max_parts;
    return p;
  }
  // About 64 rows per part, at most 256 parts (enough blocks to fill the device), and at most
  // 64 MiB of partial sums for very wide rows.
  std::int64_t parts = (rows + 63) / 64;
  if (parts > 256) parts = 256;
  const std::int64_t by_memory = (std::int64_t(64) << 20) / (2 * cols * static_cast<std::int64_t>(sizeof(racc_t<T>)));
  if (parts > by_memory) parts = by_memory > 0 ? by_memory : 1;
  p.chunk = (rows + parts - 1) / parts;
  p.parts = (rows + p.chunk - 1) / p.chunk;
  return p;
}

template <class T>
int layer_norm_backward_typed(T* dx, racc_t<T>* dw, racc_t<T>* db, const T* dy, const T* x, const racc_t<T>* mean,
                              const racc_t<T>* rstd, const racc_t<T>* w, std::int64_t rows, std::int64_t cols,
                              racc_t<T>* workspace, cudaStream_t st) {
  using A = racc_t<T>;
  const bool sums = dw || db;
  const Parts p = parts_of<T>(rows, cols);
  A* partial = sums ? workspace : nullptr;
  if (warp_path<T>(cols)) {
    const auto grid = static_cast<unsigned>(p.parts);
    const std::size_t smem = sums ? static_cast<std::size_t>(lnb_warps) * 2 * static_cast<std::size_t>(cols) * sizeof(A) : 0;
    const int c = static_cast<int>(cols);
    with_pow2_upto32(lanes_n(cols), [&](auto n) {
      constexpr int N = decltype(n)::value;
      if constexpr (N <= lnb_max_n<A>)
        launch_pdl(layer_norm_backward_warp<T, N>, grid, lnb_warps * 32, smem, st, dx, partial, dy, x, mean, rstd, w,
                   rows, c);
    });
  } else {
    if (dx) {
      const auto grid = static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
      launch_pdl(layer_norm_backward_dx_block<T>, grid, lnb_block_threads, 0, st, dx, dy, x, mean, rstd, w, rows, cols);
    }
    if (sums) {
      const dim3 grid(static_cast<unsigned>((cols + lnb_block_threads - 1) / lnb_block_threads),
                      static_cast<unsigned>(p.parts));
      launch_pdl(layer_norm_backward_columns<T>, grid, lnb_block_threads, 0, st, partial, dy, x, mean, rstd, rows, cols,
                 p.chunk);
    }
  }
  if (sums) {
    const auto grid = static_cast<unsigned>((cols + sum_cols - 1) / sum_cols);
    launch_pdl(layer_norm_backward_sum_parts<A>, grid, sum_cols * sum_slices, 0, st, dw, db, partial, p.parts, cols);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

std::size_t layer_norm_backward_workspace_bytes(DType dtype, std::int64_t rows, std::int64_t cols) {
  std::size_t bytes = 0;
  dispatch(dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>)
      bytes = static_cast<std::size_t>(parts_of<T>(rows, cols).parts) * 2 * static_cast<std::size_t>(cols) *
              sizeof(racc_t<T>);
  });
  return bytes;
}

int layer_norm_backward(void* dx, void* dweight, void* dbias, const void* dy, const void* x, const void* mean,
                        const void* rstd, const void* weight, DType dtype, std::int64_t rows, std::int64_t cols,
                        void* workspace, void* stream) {
  if (rows <= 0 || cols <= 0) return static_cast<int>(cudaSuccess);
  auto st = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using A = racc_t<T>;
      status = layer_norm_backward_typed<T>(static_cast<T*>(dx), static_cast<A*>(dweight), static_cast<A*>(dbias),
                                            static_cast<const T*>(dy), static_cast<const T*>(x),
                                            static_cast<const A*>(mean), static_cast<const A*>(rstd),
                                            static_cast<const A*>(weight), rows, cols, static_cast<A*>(workspace), st);
    }
  });
  return status;
}

int dropout_add_layer_norm_backward(const Operand* dx0, const Operand* dresidual, const Operand* dweight,
                                    const Operand* dbias, const Operand& grad_out, const Operand* grad_sum,
                                    const Operand& sum, const Operand& mean, const Operand& rstd,
                                    const Operand* weight, const Operand* mask, double p, void* workspace,
                                    void* stream) {
  const std::int64_t cols = sum.ndim == 0 ? 1 : sum.sizes[sum.ndim - 1];
  if (cols <= 0 || sum.numel == 0) return static_cast<int>(cudaSuccess);
  const std::int64_t rows = sum.numel / cols;
  auto st = static_cast<cudaStream_t>(stream);
  int status = static_cast<int>(cudaErrorInvalidValue);
  dispatch(grad_out.dtype, [&]<class T0>(T0*) {
    if constexpr (is_floating<T0>) {
      auto run = [&]<class TS>(TS*) {
        using A = racc_t<TS>;
        if (cols % 4 != 0 || cols > (sizeof(A) == 8 ? 512 : 1024)) return;
        A* dw = dweight ? static_cast<A*>(dweight->data) : nullptr;
        A* db = dbias ? static_cast<A*>(dbias->data) : nullptr;
        const bool sums = dw || db;
        A* partial = sums ? static_cast<A*>(workspace) : nullptr;
        const Parts parts = parts_of<TS>(rows, cols);
        const auto grid = static_cast<unsigned>(parts.parts);
        const std::size_t smem = sums ? static_cast<std::size_t>(lnb_warps) * 2 * static_cast<std::size_t>(cols) * sizeof(A) : 0;
        const T0 keep = narrow_to<T0>(mask ? 1.0 / (1.0 - p) : 1.0);
        const auto al = [](const Operand* o, std::size_t bytes) {
          return o == nullptr || reinterpret_cast<std::uintptr_t>(o->data) % bytes == 0;
        };
        const bool vec = al(dx0, 4 * sizeof(T0)) && al(&grad_out, 4 * sizeof(T0)) && al(dresidual, 4 * sizeof(TS)) &&
                         al(grad_sum, 4 * sizeof(TS)) && al(&sum, 4 * sizeof(TS)) && al(mask, 4);
        // Groups of 128 columns (4 a lane) per row (the kernel skips groups past cols).
        bool launched = false;
        with_column_groups(cols, [&](auto n) {
          constexpr int G = decltype(n)::value;
          if constexpr (sizeof(A) == 4 || G <= 4) {
            launched = true;
            auto launch = [&](auto vec) {
              launch_pdl(dropout_add_layer_norm_backward_warp<T0, TS, G, decltype(vec)::value>, grid, lnb_warps * 32,
                         smem, st, dx0 ? static_cast<T0*>(dx0->data) : nullptr,
                         dresidual ? static_cast<TS*>(dresidual->data) : nullptr, partial,
                         static_cast<const T0*>(grad_out.data),
                         grad_sum ? static_cast<const TS*>(grad_sum->data) : nullptr, static_cast<const TS*>(sum.data),
                         static_cast<const A*>(mean.data), static_cast<const A*>(rstd.data),
                         weight ? static_cast<const A*>(weight->data) : nullptr,
                         mask ? static_cast<const bool*>(mask->data) : nullptr, rows, static_cast<int>(cols), keep);
            };
            if (vec) launch(std::true_type{});
            else launch(std::false_type{});
          }
        });
        if (!launched) return;  // status stays cudaErrorInvalidValue
        if (sums) {
          const auto g2 = static_cast<unsigned>((cols + sum_cols - 1) / sum_cols);
          launch_pdl(layer_norm_backward_sum_parts<A>, g2, sum_cols * sum_slices, 0, st, dw, db, partial, parts.parts,
                     cols);
        }
        status = static_cast<int>(cudaGetLastError());
      };
      if (sum.dtype == grad_out.dtype) run(static_cast<T0*>(nullptr));
      else if constexpr (sizeof(T0) == 2) {
        if (sum.dtype == DType::f32) run(static_cast<float*>(nullptr));
      }
    }
  });
  return status;
}

}  // namespace brrr::kernels
