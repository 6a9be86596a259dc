// CUDA kernels of batch norm over contiguous [N, C, M] (ops/batch_norm.cpp), arithmetic in
// f32 (f64 for f64 data):
//   - the two per-channel reductions (statistics; the backward's sum_dy and sum_dy_xmu) run
//     one block per channel, each thread striding over the channel's N*M elements (by rows
//     of M when M is at least the block, else over the flattened N*M), then a block
//     reduction. Statistics are two-pass (mean, then squared deviations) as the CPU's; the
//     block that owns a channel also updates its running statistics, so training costs no
//     extra launch.
//   - the two elementwise kernels (normalise; input gradient) are grid-stride loops over
//     all elements with the channel (i / M) % C, 32-bit index math below 2^31 elements.
#include <cmath>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

constexpr int reduce_threads = 512;
constexpr int elemt_threads = 256;

// f(i) for the flat index of each element of channel c this thread owns.
template <class F>
__device__ __forceinline__ void for_channel(std::int64_t n, std::int64_t channels, std::int64_t m, std::int64_t c,
                                            F&& f) {
  if (m >= blockDim.x) {
    for (std::int64_t b = 0; b < n; ++b) {
      const std::int64_t base = (b * channels + c) * m;
      for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) f(base + k);
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < n * m; j += blockDim.x) {
      const std::int64_t b = j / m;
      f((b * channels + c) * m + (j - b * m));
    }
  }
}

template <class T>
__global__ void __launch_bounds__(reduce_threads)
    stats_kernel(racc_t<T>* __restrict__ mean, racc_t<T>* __restrict__ invstd, const T* __restrict__ x,
                 std::int64_t n, std::int64_t channels, std::int64_t m, racc_t<T> eps, racc_t<T>* running_mean,
                 racc_t<T>* running_var, racc_t<T> momentum) {
  using A = racc_t<T>;
  __shared__ A shared[33];
  const std::int64_t c = blockIdx.x;
  const A count = static_cast<A>(n * m);
  A s = 0;
  for_channel(n, channels, m, c, [&](std::int64_t i) { s += to_acc<A>(x[i]); });
  const A mu = block_reduce<A, false>(s, shared) / count;
  A q = 0;
  for_channel(n, channels, m, c, [&](std::int64_t i) {
    const A d = to_acc<A>(x[i]) - mu;
    q += d * d;
  });
  const A sq = block_reduce<A, false>(q, shared);
  if (threadIdx.x == 0) {
    mean[c] = mu;
    invstd[c] = rsqrt_(sq / count + eps);
    if (running_mean) running_mean[c] = (A(1) - momentum) * running_mean[c] + momentum * mu;
    if (running_var)
      running_var[c] = (A(1) - momentum) * running_var[c] + momentum * (count > A(1) ? sq / (count - A(1)) : sq / count);
  }
}

template <class T>
__global__ void __launch_bounds__(reduce_threads)
    backward_reduce_kernel(racc_t<T>* __restrict__ sum_dy, racc_t<T>* __restrict__ sum_dy_xmu, const T* __restrict__ g,
                           const T* __restrict__ x, const racc_t<T>* __restrict__ mean, std::int64_t n,
                           std::int64_t channels, std::int64_t m) {
  using A = racc_t<T>;
  __shared__ A shared[33];
  const std::int64_t c = blockIdx.x;
  const A mu = mean[c];
  A a = 0, b = 0;
  for_channel(n, channels, m, c, [&](std::int64_t i) {
    const A gi = to_acc<A>(g[i]);
    a += gi;
    b += gi * (to_acc<A>(x[i]) - mu);
  });
  a = block_reduce<A, false>(a, shared);
  b = block_reduce<A, false>(b, shared);
  if (threadIdx.x == 0) {
    sum_dy[c] = a;
    sum_dy_xmu[c] = b;
  }
}

template <class T, class I>
__global__ void elemt_kernel(T* __restrict__ y, const T* __restrict__ x, const racc_t<T>* __restrict__ mean,
                             const racc_t<T>* __restrict__ invstd, const T* __restrict__ w, const T* __restrict__ b,
                             I total, I channels, I m) {
  using A = racc_t<T>;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c = (i / m) % channels;
    A scale = invstd[c];
    if (w) scale *= to_acc<A>(w[c]);
    A r = (to_acc<A>(x[i]) - mean[c]) * scale;
    if (b) r += to_acc<A>(b[c]);
    y[i] = narrow_to<T>(r);
  }
}

template <class T, class I>
__global__ void backward_elemt_kernel(T* __restrict__ dx, const T* __restrict__ g, const T* __restrict__ x,
                                      const racc_t<T>* __restrict__ mean, const racc_t<T>* __restrict__ invstd,
                                      const T* __restrict__ w, const racc_t<T>* __restrict__ sum_dy,
                                      const racc_t<T>* __restrict__ sum_dy_xmu, I total, I channels, I m,
                                      racc_t<T> inv_count) {
  using A = racc_t<T>;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < total; i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I c = (i / m) % channels;
    const A inv = invstd[c];
    A scale = inv;
    if (w) scale *= to_acc<A>(w[c]);
    const A proj = sum_dy_xmu[c] * inv_count * inv * inv;
    dx[i] = narrow_to<T>((to_acc<A>(g[i]) - sum_dy[c] * inv_count - (to_acc<A>(x[i]) - mean[c]) * proj) * scale);
  }
}

// Calls f(T*) for the floating element types; false for the others.
template <class F> bool floating(DType dtype, F&& f) {
  bool ok = false;
  dispatch(dtype, [&]<class T>(T* tag) {
    if constexpr (is_floating<T>) {
      f(tag);
      ok = true;
    }
  });
  return ok;
}

int status(bool ok) { return static_cast<int>(ok ? cudaGetLastError() : cudaErrorInvalidValue); }

}  // namespace

int batch_norm_stats(void* mean, void* invstd, const void* in, DType dtype, std::int64_t n, std::int64_t c,
                     std::int64_t m, double eps, void* running_mean, void* running_var, double momentum, void* stream) {
  if (c <= 0 || n * m <= 0) return static_cast<int>(cudaSuccess);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    stats_kernel<T><<<static_cast<unsigned>(c), reduce_threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<A*>(mean), static_cast<A*>(invstd), static_cast<const T*>(in), n, c, m, static_cast<A>(eps),
        static_cast<A*>(running_mean), static_cast<A*>(running_var), static_cast<A>(momentum));
  });
  return status(ok);
}

int batch_norm_backward_reduce(void* sum_dy, void* sum_dy_xmu, const void* grad, const void* in, const void* mean,
                               DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* stream) {
  if (c <= 0) return static_cast<int>(cudaSuccess);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    backward_reduce_kernel<T><<<static_cast<unsigned>(c), reduce_threads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<A*>(sum_dy), static_cast<A*>(sum_dy_xmu), static_cast<const T*>(grad), static_cast<const T*>(in),
        static_cast<const A*>(mean), n, c, m);
  });
  return status(ok);
}

int batch_norm_elemt(void* out, const void* in, const void* mean, const void* invstd, const void* weight,
                     const void* bias, DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* stream) {
  const std::int64_t total = n * c * m;
  if (total <= 0) return static_cast<int>(cudaSuccess);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    auto launch = [&]<class I>(I) {
      elemt_kernel<T, I><<<blocks_for(total, elemt_threads), elemt_threads, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<T*>(out), static_cast<const T*>(in), static_cast<const A*>(mean), static_cast<const A*>(invstd),
          static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<I>(total), static_cast<I>(c),
          static_cast<I>(m));
    };
    if (total < (std::int64_t(1) << 31)) launch(std::uint32_t{});  // i + stride cannot wrap
    else launch(std::int64_t{});
  });
  return status(ok);
}

int batch_norm_backward_elemt(void* grad_in, const void* grad, const void* in, const void* mean, const void* invstd,
                              const void* weight, const void* sum_dy, const void* sum_dy_xmu, DType dtype,
                              std::int64_t n, std::int64_t c, std::int64_t m, void* stream) {
  const std::int64_t total = n * c * m;
  if (total <= 0) return static_cast<int>(cudaSuccess);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    auto launch = [&]<class I>(I) {
      backward_elemt_kernel<T, I>
          <<<blocks_for(total, elemt_threads), elemt_threads, 0, static_cast<cudaStream_t>(stream)>>>(
              static_cast<T*>(grad_in), static_cast<const T*>(grad), static_cast<const T*>(in),
              static_cast<const A*>(mean), static_cast<const A*>(invstd), static_cast<const T*>(weight),
              static_cast<const A*>(sum_dy), static_cast<const A*>(sum_dy_xmu), static_cast<I>(total),
              static_cast<I>(c), static_cast<I>(m), static_cast<A>(1.0 / static_cast<double>(n * m)));
    };
    if (total < (std::int64_t(1) << 31)) launch(std::uint32_t{});  // i + stride cannot wrap
    else launch(std::int64_t{});
  });
  return status(ok);
}

}  // namespace brrr::kernels
