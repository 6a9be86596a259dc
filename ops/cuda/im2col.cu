// CUDA im2col / col2im. Both use a 2-D grid: blockIdx.x picks a chunk of positions inside a
// plane (threads over consecutive positions: coalesced), blockIdx.y a range of consecutive
// rows (im2col: the (n, c, i, j) rows of the columns) or planes (col2im: the (n, c) planes
// of the image). A thread works out what depends on its position once (its window origin;
// col2im: which kernel taps reach its cell) and then walks its rows or planes with counters,
// so no division runs per element (64-bit division is a long software sequence on the GPU).
//  - im2col: out[n, (c, i, j), l] = the input cell under tap (i, j) of window l, or pad.
//  - col2im: one thread per image cell sums the column entries that read it (a gather: no
//    atomics, deterministic), in wide_t (double for floats). The taps reaching row y are the
//    i with y + ph - i*dh a multiple of sh: an arithmetic progression in i of step
//    sh / gcd(sh, dh), along which the window row oy = (y + ph - i*dh) / sh falls by
//    dh / gcd(sh, dh); likewise for columns.
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {

constexpr int threads = 256;
constexpr std::int64_t target_blocks = 4096;

// a / b for a >= 0, b > 0: in 32 bits when both fit.
__device__ __forceinline__ std::int64_t divide(std::int64_t a, std::int64_t b) {
  if (((a | b) >> 31) == 0) return static_cast<std::int64_t>(static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b));
  return a / b;
}

// The grid: position chunks by row (or plane) ranges of `per_block` each.
struct Grid2 {
  dim3 blocks;
  std::int64_t per_block;
};
Grid2 grid_for(std::int64_t positions, std::int64_t rows) {
  const std::int64_t x = (positions + threads - 1) / threads;
  std::int64_t y = (target_blocks + x - 1) / x;
  if (y > rows) y = rows;
  if (y > 65535) y = 65535;
  if (y < 1) y = 1;
  const std::int64_t per = (rows + y - 1) / y;
  return {dim3(static_cast<unsigned>(x), static_cast<unsigned>((rows + per - 1) / per)), per};
}

template <class T>
__global__ void __launch_bounds__(threads)
    im2col_kernel(T* __restrict__ out, Operand in, Window2d g, T pad, std::int64_t rows_per_block) {
  pdl_begin();
  const T* __restrict__ x = static_cast<const T*>(in.data);
  const std::int64_t L = g.out_h * g.out_w, rows = g.n * g.c * g.kh * g.kw;
  const std::int64_t l = blockIdx.x * std::int64_t(threads) + threadIdx.x;
  const std::int64_t r0 = blockIdx.y * rows_per_block;
  if (l >= L || r0 >= rows) return;
  const std::int64_t r1 = r0 + rows_per_block < rows ? r0 + rows_per_block : rows;
  const std::int64_t oy = divide(l, g.out_w), ox = l - oy * g.out_w;
  const std::int64_t y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
  // Row r0 as (n, c, i, j), then counters.
  const std::int64_t ckk = g.c * g.kh * g.kw;
  std::int64_t n = divide(r0, ckk), r = r0 - n * ckk;
  std::int64_t c = divide(r, g.kh * g.kw);
  r -= c * g.kh * g.kw;
  std::int64_t i = divide(r, g.kw), j = r - i * g.kw;
#pragma unroll 4
  for (std::int64_t row = r0; row < r1; ++row) {
    const std::int64_t y = y0 + i * g.dh, xx = x0 + j * g.dw;
    const bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
    out[row * L + l] = inside ? x[n * in.strides[0] + c * in.strides[1] + y * in.strides[2] + xx * in.strides[3]] : pad;
    if (++j == g.kw) {
      j = 0;
      if (++i == g.kh) {
        i = 0;
        if (++c == g.c) {
          c = 0;
          ++n;
        }
      }
    }
  }
}

// The kernel taps of one dim that reach image coordinate `at`: tap first + t*step lands on
// window position o_first - t*o_step (t < count); the caller keeps the positions in range.
struct Taps {
  std::int64_t first, step, count, o_first, o_step;
};
__device__ __forceinline__ Taps taps_for(std::int64_t at, std::int64_t pad, std::int64_t k, std::int64_t s,
                                         std::int64_t d, std::int64_t step, std::int64_t o_step) {
  const std::int64_t t = at + pad;  // = o * s + tap * d
  for (std::int64_t i = 0; i < k && i < step; ++i) {
    const std::int64_t v = t - i * d;
    if (v < 0) break;  // every later tap lands before the first window
    if (v - divide(v, s) * s == 0) return {i, step, (k - i + step - 1) / step, divide(v, s), o_step};
  }
  return {0, step, 0, 0, o_step};
}

template <class T>
__global__ void __launch_bounds__(threads)
    col2im_kernel(T* __restrict__ out, Operand col, Window2d g, std::int64_t planes_per_block, std::int64_t step_h,
                  std::int64_t ostep_h, std::int64_t step_w, std::int64_t ostep_w) {
  pdl_begin();
  const T* __restrict__ cp = static_cast<const T*>(col.data);
  const std::int64_t hw = g.h * g.w, planes = g.n * g.c;
  const std::int64_t cell = blockIdx.x * std::int64_t(threads) + threadIdx.x;
  const std::int64_t q0 = blockIdx.y * planes_per_block;
  if (cell >= hw || q0 >= planes) return;
  const std::int64_t q1 = q0 + planes_per_block < planes ? q0 + planes_per_block : planes;
  const std::int64_t y = divide(cell, g.w), xx = cell - y * g.w;
  const Taps ty = taps_for(y, g.ph, g.kh, g.sh, g.dh, step_h, ostep_h);
  const Taps tx = taps_for(xx, g.pw, g.kw, g.sw, g.dw, step_w, ostep_w);
  const std::int64_t kk = g.kh * g.kw;
  std::int64_t n = divide(q0, g.c), c = q0 - n * g.c;
  for (std::int64_t q = q0; q < q1; ++q) {
    const T* base = cp + n * col.strides[0] + c * kk * col.strides[1];
    wide_t<T> acc = 0;  // double for floating types, int64 for integers
    for (std::int64_t a = 0; a < ty.count; ++a) {
      const std::int64_t oy = ty.o_first - a * ty.o_step;
      if (oy < 0) break;
      if (oy >= g.out_h) continue;
      const std::int64_t i = ty.first + a * ty.step;
      for (std::int64_t b = 0; b < tx.count; ++b) {
        const std::int64_t ox = tx.o_first - b * tx.o_step;
        if (ox < 0) break;
        if (ox >= g.out_w) continue;
        const std::int64_t j = tx.first + b * tx.step;
        acc += widen(base[(i * g.kw + j) * col.strides[1] + (oy * g.out_w + ox) * col.strides[2]]);
      }
    }
    out[q * hw + cell] = narrow_to<T>(acc);
    if (++c == g.c) {
      c = 0;
      ++n;
    }
  }
}

std::int64_t gcd(std::int64_t a, std::int64_t b) {
  while (b != 0) {
    const std::int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

}  // namespace

int im2col(const Operand& out, const Operand& in, const Window2d& g, double pad_value, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const Grid2 grid = grid_for(g.out_h * g.out_w, g.n * g.c * g.kh * g.kw);
  dispatch(in.dtype, [&]<class T>(T*) {
    const T pad = narrow_to<T>(pad_value);
    launch_pdl(im2col_kernel<T>, grid.blocks, threads, 0, s, static_cast<T*>(out.data), in, g, pad, grid.per_block);
  });
  return static_cast<int>(cudaGetLastError());
}

int col2im(const Operand& out, const Operand& col, const Window2d& g, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const Grid2 grid = grid_for(g.h * g.w, g.n * g.c);
  // Along each dim the taps reaching one cell are `step` apart and their windows `ostep` apart.
  const std::int64_t step_h = g.sh / gcd(g.sh, g.dh), step_w = g.sw / gcd(g.sw, g.dw);
  const std::int64_t ostep_h = g.dh * step_h / g.sh, ostep_w = g.dw * step_w / g.sw;
  dispatch(out.dtype, [&]<class T>(T*) {
    launch_pdl(col2im_kernel<T>, grid.blocks, threads, 0, s, static_cast<T*>(out.data), col, g, grid.per_block, step_h,
               ostep_h, step_w, ostep_w);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
