// CUDA kernels of the fused cross entropy (ops/loss.cpp): one kernel computes each row's
// log-sum-exp, loss and weight; one elementwise kernel writes the gradient of the logits.
// Rows of up to 1024 classes take a warp each (shuffle reductions only); wider rows take a
// block of 256 threads. The row is read twice (max and sum of x, then sum of exp(x - max)).
// Arithmetic in f32 (f64 for f64 logits). NaN or +inf in a row, or a row of all -inf, give
// NaN (PyTorch's log_softmax).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/cuda/common.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

template <class I> __device__ __forceinline__ std::int64_t target_at(const void* target, std::int64_t row) {
  return static_cast<std::int64_t>(static_cast<const I*>(target)[row]);
}

// G threads per row: 32 (a warp; blockDim 128 holds 4 rows) or blockDim.x (one row per block).
template <class T, class I, bool Warp>
__global__ void __launch_bounds__(256) ce_forward(racc_t<T>* __restrict__ out, racc_t<T>* __restrict__ lse_out,
                                                  const T* __restrict__ logits, const void* target, std::int64_t rows,
                                                  std::int64_t cols, std::int64_t ignore_index, racc_t<T> eps,
                                                  int* flag, int code) {
  pdl_begin();
  using A = racc_t<T>;
  __shared__ A red[33];
  const int group = Warp ? 32 : blockDim.x;
  const int lane = Warp ? (threadIdx.x & 31) : threadIdx.x;
  const std::int64_t per_block = Warp ? (blockDim.x >> 5) : 1;
  const std::int64_t first = blockIdx.x * per_block + (Warp ? (threadIdx.x >> 5) : 0);
  for (std::int64_t row = first; row < rows; row += gridDim.x * per_block) {  // uniform per group
    const T* x = logits + row * cols;
    A m = neg_inf<A>(), sx = 0;
    for (std::int64_t c = lane; c < cols; c += group) {
      A v = to_acc<A>(x[c]);
      m = max_(m, v);
      sx += v;
    }
    if constexpr (Warp) m = warp_max(m), sx = warp_sum(sx);
    else m = block_reduce<A, true>(m, red), sx = block_reduce<A, false>(sx, red);
    A s = 0;
    for (std::int64_t c = lane; c < cols; c += group) s += exp_(to_acc<A>(x[c]) - m);
    if constexpr (Warp) s = warp_sum(s);
    else s = block_reduce<A, false>(s, red);
    if (lane == 0) {
      const A lse = m + log_(s);
      const std::int64_t t = target_at<I>(target, row);
      A loss = 0, weight = 0;
      if (t != ignore_index) {
        if (t < 0 || t >= cols) {
          if (flag) *reinterpret_cast<volatile int*>(flag) = code;  // reported at the next sync
        } else {
          loss = (A(1) - eps) * (lse - to_acc<A>(x[t]));
          // Only with smoothing: a -inf logit makes the mean infinite, and 0 * inf is NaN.
          if (eps != A(0)) loss += eps * (lse - sx / static_cast<A>(cols));
          weight = 1;
        }
      }
      out[row] = loss;
      out[rows + row] = weight;
      lse_out[row] = lse;
    }
  }
}

// grad[i, c] = s_i (exp(x - lse_i) - (1 - eps) [c == t_i] - eps / C).
template <class T, class I>
__global__ void ce_backward(T* __restrict__ grad, const T* __restrict__ logits, const racc_t<T>* __restrict__ lse,
                            const void* target, const racc_t<T>* __restrict__ g, bool per_row,
                            const racc_t<T>* __restrict__ count, std::int64_t rows, std::int64_t cols,
                            std::int64_t ignore_index, racc_t<T> eps) {
  pdl_begin();
  using A = racc_t<T>;
  const std::int64_t n = rows * cols;
  const A scale_all = count ? g[0] / count[0] : g[0];  // count 0 means every row is ignored
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    const std::int64_t row = i / cols, c = i - row * cols;
    const std::int64_t t = target_at<I>(target, row);
    A r = 0;
    if (t != ignore_index && t >= 0 && t < cols) {
      const A scale = per_row ? g[row] : scale_all;
      r = scale * (exp_(to_acc<A>(logits[i]) - lse[row]) - (c == t ? A(1) - eps : A(0)) - eps / static_cast<A>(cols));
    }
    grad[i] = narrow_to<T>(r);
  }
}

// Calls f(T{}, I{}) for floating logits T and target index type I (i64 or i32); returns
// false (and calls nothing) for other logit dtypes.
template <class F> bool with_logits_and_target(DType dtype, bool target_i64, F&& f) {
  bool ok = false;
  dispatch(dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      ok = true;
      if (target_i64) f(T{}, std::int64_t{});
      else f(T{}, std::int32_t{});
    }
  });
  return ok;
}

}  // namespace

int cross_entropy_forward(void* out, void* lse, const void* logits, DType dtype, const void* target,
                          bool target_i64, std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                          double label_smoothing, int* error_flag, int error_code, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (rows == 0) return 0;
  const bool ok = with_logits_and_target(dtype, target_i64, [&](auto tag, auto itag) {
    using T = decltype(tag);
    using I = decltype(itag);
    using A = racc_t<T>;
    auto* o = static_cast<A*>(out);
    auto* l = static_cast<A*>(lse);
    const auto* x = static_cast<const T*>(logits);
    const A eps = static_cast<A>(label_smoothing);
    if (cols <= 1024) {  // a warp per row, 4 rows per block
      const std::int64_t blocks = std::min<std::int64_t>((rows + 3) / 4, 65535);
      launch_pdl(ce_forward<T, I, true>, blocks, 128, 0, st, o, l, x, target, rows, cols, ignore_index, eps, error_flag,
                 error_code);
    } else {  // a block per row
      const std::int64_t blocks = std::min<std::int64_t>(rows, 65535);
      launch_pdl(ce_forward<T, I, false>, blocks, 256, 0, st, o, l, x, target, rows, cols, ignore_index, eps,
                 error_flag, error_code);
    }
  });
  return ok ? static_cast<int>(cudaGetLastError()) : static_cast<int>(cudaErrorInvalidValue);
}

int cross_entropy_backward(void* grad_logits, const void* logits, const void* lse, const void* target,
                           DType dtype, bool target_i64, const void* grad, bool per_row, const void* count,
                           std::int64_t rows, std::int64_t cols, std::int64_t ignore_index, double label_smoothing,
                           void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  if (rows == 0 || cols == 0) return 0;
  const bool ok = with_logits_and_target(dtype, target_i64, [&](auto tag, auto itag) {
    using T = decltype(tag);
    using I = decltype(itag);
    using A = racc_t<T>;
    launch_pdl(ce_backward<T, I>, blocks_for(rows * cols), 256, 0, st, static_cast<T*>(grad_logits),
               static_cast<const T*>(logits), static_cast<const A*>(lse), target, static_cast<const A*>(grad), per_row,
               static_cast<const A*>(count), rows, cols, ignore_index, static_cast<A>(label_smoothing));
  });
  return ok ? static_cast<int>(cudaGetLastError()) : static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace brrr::kernels
