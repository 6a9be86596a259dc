// CUDA kernels of batch norm over contiguous [N, C, M] (ops/batch_norm.cpp), arithmetic in
// f32 (f64 for f64 data):
//   - the two per-channel reductions (statistics; the backward's sum_dy and sum_dy_xmu) split
//     each channel's N*M elements over several blocks, enough for the whole GPU (C alone may
//     be far fewer blocks than SMs). Each block writes its partial result to the workspace,
//     then a small kernel combines each channel's partials in order and writes the results
//     (the statistics' one also updates the running statistics). Statistics in one pass:
//     Welford's update per thread, Chan, Golub and LeVeque's pairwise combination ("Updating
//     formulae and a pairwise algorithm for computing sample variances", 1979) across lanes,
//     warps and blocks. Fixed orders everywhere (no atomics): the same result on every run.
//   - the two elementwise kernels: with M >= 256 (and fewer than 2^31 elements) a block per
//     chunk of an (n, c) plane, the channel known per block; otherwise grid-stride loops over
//     all elements with the channel (i / M) % C, 32-bit index math below 2^31 elements.
#include <cmath>
#include <cstdint>

#include "ops/cuda/common.cuh"
#include "ops/cuda/row_reduce.cuh"

namespace brrr::kernels {

namespace {

constexpr int reduce_threads = 256;
constexpr int elemt_threads = 256;
constexpr int loads_in_flight = 4;
constexpr std::int64_t reduce_target_blocks = 1024;   // channels x splits, when channels are few
constexpr std::int64_t reduce_min_per_block = 4096;  // elements per block at least
constexpr std::int64_t planes_min_m = 256;           // the per-plane elementwise kernels from here

// How a channel's N*M elements are split over blocks: `splits` ranges of `per_split`
// consecutive elements of the flattened (n, m) index.
struct Split {
  std::int64_t splits, per_split;
};
Split split_for(std::int64_t n, std::int64_t c, std::int64_t m) {
  const std::int64_t nm = n * m;
  std::int64_t s = (reduce_target_blocks + c - 1) / c;
  const std::int64_t most = (nm + reduce_min_per_block - 1) / reduce_min_per_block;
  if (s > most) s = most;
  if (s < 1) s = 1;
  const std::int64_t per = (nm + s - 1) / s;
  return {(nm + per - 1) / per, per};
}

// Walks this thread's elements of channel c's range [j0, j1) of the flattened (n, m) index,
// blockDim.x apart: next() gives their offsets in [N, C, M] with no division per element.
struct SplitWalk {
  std::int64_t j, j1, b, k, channels, c, m, step_b, step_k;
  __device__ SplitWalk(std::int64_t j0, std::int64_t j1_, std::int64_t channels_, std::int64_t c_, std::int64_t m_)
      : j(j0 + threadIdx.x), j1(j1_), channels(channels_), c(c_), m(m_) {
    b = j / m;
    k = j - b * m;
    step_b = blockDim.x / m;
    step_k = blockDim.x - step_b * m;
  }
  __device__ __forceinline__ bool next(std::int64_t& offset) {
    if (j >= j1) return false;
    offset = (b * channels + c) * m + k;
    j += blockDim.x;
    k += step_k;
    b += step_b;
    if (k >= m) {
      k -= m;
      ++b;
    }
    return true;
  }
};

// Count, mean and sum of squared deviations of a set of values.
template <class A> struct Moments {
  std::int64_t count;
  A mean, m2;
};

template <class A> __device__ __forceinline__ void welford_add(Moments<A>& s, A x) {
  ++s.count;
  const A d = x - s.mean;
  s.mean += d / static_cast<A>(s.count);
  s.m2 += d * (x - s.mean);
}

template <class A> __device__ __forceinline__ Moments<A> chan_combine(const Moments<A>& a, const Moments<A>& b) {
  if (b.count == 0) return a;
  if (a.count == 0) return b;
  const std::int64_t n = a.count + b.count;
  const A d = b.mean - a.mean, wb = static_cast<A>(b.count) / static_cast<A>(n);
  return {n, a.mean + d * wb, a.m2 + b.m2 + d * d * static_cast<A>(a.count) * wb};
}

// The block's combination, valid in thread 0: a shuffle tree per warp, then the warps in order.
template <class A> __device__ Moments<A> block_moments(Moments<A> s) {
  __shared__ Moments<A> warps[reduce_threads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Moments<A> other{__shfl_down_sync(full_mask, s.count, o), __shfl_down_sync(full_mask, s.mean, o),
                           __shfl_down_sync(full_mask, s.m2, o)};
    if (lane + o < 32) s = chan_combine(s, other);
  }
  if (lane == 0) warps[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < reduce_threads / 32; ++w) s = chan_combine(s, warps[w]);
  return s;
}

// Sums over the block, valid in thread 0 (the same fixed tree).
template <class A> __device__ A block_sum(A v) {
  __shared__ A warps[reduce_threads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(full_mask, v, o);
  __syncthreads();  // warps may still be read by a previous call's thread 0
  if (lane == 0) warps[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < reduce_threads / 32; ++w) v += warps[w];
  return v;
}

// One block per (channel, split): the moments of its range.
template <class T>
__global__ void __launch_bounds__(reduce_threads)
    stats_partial_kernel(Moments<racc_t<T>>* __restrict__ part, const T* __restrict__ x, std::int64_t channels,
                         std::int64_t m, std::int64_t nm, std::int64_t splits, std::int64_t per_split) {
  pdl_begin();
  using A = racc_t<T>;
  const std::int64_t c = blockIdx.x / splits, sp = blockIdx.x - c * splits;
  const std::int64_t j0 = sp * per_split, j1 = j0 + per_split < nm ? j0 + per_split : nm;
  SplitWalk walk(j0, j1, channels, c, m);
  Moments<A> s{0, A(0), A(0)};
  for (bool more = true; more;) {
    std::int64_t off[loads_in_flight];
    bool ok[loads_in_flight];
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) ok[u] = walk.next(off[u]);
    A v[loads_in_flight];
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) v[u] = ok[u] ? to_acc<A>(x[off[u]]) : A(0);
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u)
      if (ok[u]) welford_add(s, v[u]);
    more = ok[loads_in_flight - 1];
  }
  s = block_moments(s);
  if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// One thread per channel: its splits' moments combined in order, the statistics written and
// the running statistics updated.
template <class A>
__global__ void stats_finish_kernel(A* __restrict__ mean, A* __restrict__ invstd, const Moments<A>* __restrict__ part,
                                    std::int64_t channels, std::int64_t splits, A eps, A* running_mean,
                                    A* running_var, A momentum) {
  pdl_begin();
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  Moments<A> s = part[c * splits];
  for (std::int64_t sp = 1; sp < splits; ++sp) s = chan_combine(s, part[c * splits + sp]);
  const A count = static_cast<A>(s.count);
  mean[c] = s.mean;
  invstd[c] = rsqrt_(s.m2 / count + eps);
  if (running_mean) running_mean[c] = (A(1) - momentum) * running_mean[c] + momentum * s.mean;
  if (running_var)
    running_var[c] =
        (A(1) - momentum) * running_var[c] + momentum * (s.count > 1 ? s.m2 / (count - A(1)) : s.m2 / count);
}

// One block per (channel, split): the sums of grad and grad (x - mean) over its range.
template <class T>
__global__ void __launch_bounds__(reduce_threads)
    backward_partial_kernel(racc_t<T>* __restrict__ part, const T* __restrict__ g, const T* __restrict__ x,
                            const racc_t<T>* __restrict__ mean, std::int64_t channels, std::int64_t m, std::int64_t nm,
                            std::int64_t splits, std::int64_t per_split) {
  pdl_begin();
  using A = racc_t<T>;
  const std::int64_t c = blockIdx.x / splits, sp = blockIdx.x - c * splits;
  const std::int64_t j0 = sp * per_split, j1 = j0 + per_split < nm ? j0 + per_split : nm;
  const A mu = mean[c];
  SplitWalk walk(j0, j1, channels, c, m);
  A a = 0, b = 0;
  for (bool more = true; more;) {
    std::int64_t off[loads_in_flight];
    bool ok[loads_in_flight];
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) ok[u] = walk.next(off[u]);
    A gv[loads_in_flight], xv[loads_in_flight];
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) {
      gv[u] = ok[u] ? to_acc<A>(g[off[u]]) : A(0);
      xv[u] = ok[u] ? to_acc<A>(x[off[u]]) : mu;
    }
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) {
      a += gv[u];
      b += gv[u] * (xv[u] - mu);
    }
    more = ok[loads_in_flight - 1];
  }
  a = block_sum(a);
  b = block_sum(b);
  if (threadIdx.x == 0) {
    part[2 * blockIdx.x] = a;
    part[2 * blockIdx.x + 1] = b;
  }
}

template <class A>
__global__ void backward_finish_kernel(A* __restrict__ sum_dy, A* __restrict__ sum_dy_xmu, const A* __restrict__ part,
                                       std::int64_t channels, std::int64_t splits) {
  pdl_begin();
  const std::int64_t c = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  A a = 0, b = 0;
  for (std::int64_t sp = 0; sp < splits; ++sp) {
    a += part[2 * (c * splits + sp)];
    b += part[2 * (c * splits + sp) + 1];
  }
  sum_dy[c] = a;
  sum_dy_xmu[c] = b;
}

template <class T, class I>
__global__ void elemt_kernel(T* __restrict__ y, const T* __restrict__ x, const racc_t<T>* __restrict__ mean,
                             const racc_t<T>* __restrict__ invstd, const T* __restrict__ w, const T* __restrict__ b,
                             I total, I channels, I m) {
  pdl_begin();
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
  pdl_begin();
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

// The same two, a block per chunk of elemt_threads * loads_in_flight elements of an (n, c)
// plane of M elements (M >= planes_min_m, fewer than 2^31 elements in all): the channel is
// the block's, and each thread's loads are issued before its arithmetic.
template <class T>
__global__ void __launch_bounds__(elemt_threads)
    elemt_planes_kernel(T* __restrict__ y, const T* __restrict__ x, const racc_t<T>* __restrict__ mean,
                        const racc_t<T>* __restrict__ invstd, const T* __restrict__ w, const T* __restrict__ b,
                        std::uint32_t channels, std::uint32_t m, std::uint32_t chunks) {
  pdl_begin();
  using A = racc_t<T>;
  const std::uint32_t plane = blockIdx.x / chunks, part = blockIdx.x - plane * chunks, c = plane % channels;
  A scale = invstd[c];
  if (w) scale *= to_acc<A>(w[c]);
  const A mu = mean[c], shift = b ? to_acc<A>(b[c]) : A(0);
  const std::int64_t base = static_cast<std::int64_t>(plane) * m;
  const std::uint32_t k0 = part * (elemt_threads * loads_in_flight) + threadIdx.x;
  A v[loads_in_flight];
#pragma unroll
  for (int u = 0; u < loads_in_flight; ++u) {
    const std::uint32_t k = k0 + u * elemt_threads;
    v[u] = k < m ? to_acc<A>(x[base + k]) : A(0);
  }
#pragma unroll
  for (int u = 0; u < loads_in_flight; ++u) {
    const std::uint32_t k = k0 + u * elemt_threads;
    if (k >= m) continue;
    A r = (v[u] - mu) * scale;
    if (b) r += shift;
    y[base + k] = narrow_to<T>(r);
  }
}

template <class T>
__global__ void __launch_bounds__(elemt_threads)
    backward_elemt_planes_kernel(T* __restrict__ dx, const T* __restrict__ g, const T* __restrict__ x,
                                 const racc_t<T>* __restrict__ mean, const racc_t<T>* __restrict__ invstd,
                                 const T* __restrict__ w, const racc_t<T>* __restrict__ sum_dy,
                                 const racc_t<T>* __restrict__ sum_dy_xmu, std::uint32_t channels, std::uint32_t m,
                                 std::uint32_t chunks, racc_t<T> inv_count) {
  pdl_begin();
  using A = racc_t<T>;
  const std::uint32_t plane = blockIdx.x / chunks, part = blockIdx.x - plane * chunks, c = plane % channels;
  const A inv = invstd[c];
  A scale = inv;
  if (w) scale *= to_acc<A>(w[c]);
  const A proj = sum_dy_xmu[c] * inv_count * inv * inv, mean_dy = sum_dy[c] * inv_count, mu = mean[c];
  const std::int64_t base = static_cast<std::int64_t>(plane) * m;
  const std::uint32_t k0 = part * (elemt_threads * loads_in_flight) + threadIdx.x;
  A gv[loads_in_flight], xv[loads_in_flight];
#pragma unroll
  for (int u = 0; u < loads_in_flight; ++u) {
    const std::uint32_t k = k0 + u * elemt_threads;
    gv[u] = k < m ? to_acc<A>(g[base + k]) : A(0);
    xv[u] = k < m ? to_acc<A>(x[base + k]) : A(0);
  }
#pragma unroll
  for (int u = 0; u < loads_in_flight; ++u) {
    const std::uint32_t k = k0 + u * elemt_threads;
    if (k < m) dx[base + k] = narrow_to<T>((gv[u] - mean_dy - (xv[u] - mu) * proj) * scale);
  }
}

// The per-plane kernels' grid: chunks per plane, or 0 where the flat kernels are used.
std::int64_t plane_chunks(std::int64_t total, std::int64_t m) {
  if (m < planes_min_m || total >= (std::int64_t(1) << 31)) return 0;
  return (m + elemt_threads * loads_in_flight - 1) / (elemt_threads * loads_in_flight);
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

std::size_t batch_norm_workspace_bytes(DType dtype, std::int64_t n, std::int64_t c, std::int64_t m) {
  if (c <= 0 || n * m <= 0) return 0;
  std::size_t bytes = 0;
  floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    const std::size_t per = sizeof(Moments<A>) > 2 * sizeof(A) ? sizeof(Moments<A>) : 2 * sizeof(A);
    bytes = per * static_cast<std::size_t>(c * split_for(n, c, m).splits);
  });
  return bytes;
}

int batch_norm_stats(void* mean, void* invstd, const void* in, DType dtype, std::int64_t n, std::int64_t c,
                     std::int64_t m, double eps, void* running_mean, void* running_var, double momentum,
                     void* workspace, void* stream) {
  if (c <= 0 || n * m <= 0) return static_cast<int>(cudaSuccess);
  const Split sp = split_for(n, c, m);
  auto s = static_cast<cudaStream_t>(stream);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    auto* part = static_cast<Moments<A>*>(workspace);
    launch_pdl(stats_partial_kernel<T>, static_cast<unsigned>(c * sp.splits), reduce_threads, 0, s, part,
               static_cast<const T*>(in), c, m, n * m, sp.splits, sp.per_split);
    launch_pdl(stats_finish_kernel<A>, static_cast<unsigned>((c + 127) / 128), 128, 0, s, static_cast<A*>(mean),
               static_cast<A*>(invstd), part, c, sp.splits, static_cast<A>(eps), static_cast<A*>(running_mean),
               static_cast<A*>(running_var), static_cast<A>(momentum));
  });
  return status(ok);
}

int batch_norm_backward_reduce(void* sum_dy, void* sum_dy_xmu, const void* grad, const void* in, const void* mean,
                               DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* workspace,
                               void* stream) {
  if (c <= 0) return static_cast<int>(cudaSuccess);
  auto s = static_cast<cudaStream_t>(stream);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    if (n * m <= 0) {  // empty sums (all-zero bits are 0.0)
      if (cudaMemsetAsync(sum_dy, 0, sizeof(A) * c, s) == cudaSuccess) cudaMemsetAsync(sum_dy_xmu, 0, sizeof(A) * c, s);
      return;
    }
    const Split sp = split_for(n, c, m);
    auto* part = static_cast<A*>(workspace);
    launch_pdl(backward_partial_kernel<T>, static_cast<unsigned>(c * sp.splits), reduce_threads, 0, s, part,
               static_cast<const T*>(grad), static_cast<const T*>(in), static_cast<const A*>(mean), c, m, n * m,
               sp.splits, sp.per_split);
    launch_pdl(backward_finish_kernel<A>, static_cast<unsigned>((c + 127) / 128), 128, 0, s, static_cast<A*>(sum_dy),
               static_cast<A*>(sum_dy_xmu), part, c, sp.splits);
  });
  return status(ok);
}

int batch_norm_elemt(void* out, const void* in, const void* mean, const void* invstd, const void* weight,
                     const void* bias, DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* stream) {
  const std::int64_t total = n * c * m;
  if (total <= 0) return static_cast<int>(cudaSuccess);
  const std::int64_t chunks = plane_chunks(total, m);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    if (chunks > 0) {
      launch_pdl(elemt_planes_kernel<T>, static_cast<unsigned>(n * c * chunks), elemt_threads, 0,
                 static_cast<cudaStream_t>(stream), static_cast<T*>(out), static_cast<const T*>(in),
                 static_cast<const A*>(mean), static_cast<const A*>(invstd), static_cast<const T*>(weight),
                 static_cast<const T*>(bias), static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(m),
                 static_cast<std::uint32_t>(chunks));
      return;
    }
    auto launch = [&]<class I>(I) {
      launch_pdl(elemt_kernel<T, I>, blocks_for(total, elemt_threads), elemt_threads, 0,
                 static_cast<cudaStream_t>(stream), static_cast<T*>(out), static_cast<const T*>(in),
                 static_cast<const A*>(mean), static_cast<const A*>(invstd), static_cast<const T*>(weight),
                 static_cast<const T*>(bias), static_cast<I>(total), static_cast<I>(c), static_cast<I>(m));
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
  const std::int64_t chunks = plane_chunks(total, m);
  bool ok = floating(dtype, [&]<class T>(T*) {
    using A = racc_t<T>;
    const A inv_count = static_cast<A>(1.0 / static_cast<double>(n * m));
    if (chunks > 0) {
      launch_pdl(backward_elemt_planes_kernel<T>, static_cast<unsigned>(n * c * chunks), elemt_threads, 0,
                 static_cast<cudaStream_t>(stream), static_cast<T*>(grad_in), static_cast<const T*>(grad),
                 static_cast<const T*>(in), static_cast<const A*>(mean), static_cast<const A*>(invstd),
                 static_cast<const T*>(weight), static_cast<const A*>(sum_dy), static_cast<const A*>(sum_dy_xmu),
                 static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(chunks),
                 inv_count);
      return;
    }
    auto launch = [&]<class I>(I) {
      launch_pdl(backward_elemt_kernel<T, I>, blocks_for(total, elemt_threads), elemt_threads, 0,
                 static_cast<cudaStream_t>(stream), static_cast<T*>(grad_in), static_cast<const T*>(grad),
                 static_cast<const T*>(in), static_cast<const A*>(mean), static_cast<const A*>(invstd),
                 static_cast<const T*>(weight), static_cast<const A*>(sum_dy), static_cast<const A*>(sum_dy_xmu),
                 static_cast<I>(total), static_cast<I>(c), static_cast<I>(m), inv_count);
    };
    if (total < (std::int64_t(1) << 31)) launch(std::uint32_t{});  // i + stride cannot wrap
    else launch(std::int64_t{});
  });
  return status(ok);
}

}  // namespace brrr::kernels
