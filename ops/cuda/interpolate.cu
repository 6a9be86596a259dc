// CUDA kernels of interpolate (ops/interpolate.cpp): one thread per output element (forward)
// or per upstream-gradient element (backward, atomicAdd into the input gradient), in
// grid-stride loops with 64-bit indexing, over contiguous [N, C, D, H, W] volumes. The taps
// are ops/interpolate_math.hpp's, the CPU backend's own formula, summed in the CPU's order
// (innermost dim first, each sum from its first term) for every mode: 1 tap per dim for the
// nearest modes (a copy), 2 for linear, 4 for cubic.
#include "ops/cuda/common.cuh"
#include "ops/interpolate_math.hpp"

namespace brrr::kernels {

namespace {

constexpr int threads = 256;

template <class C> struct Axes {
  interpolate_math::Axis<C> d, h, w;
};

BRRR_HD bool is_nearest(UpsampleMode m) { return m == UpsampleMode::nearest || m == UpsampleMode::nearest_exact; }

template <class T, class C>
__global__ void upsample_kernel(T* out, const T* in, std::int64_t n, Axes<C> ax) {
  pdl_begin();
  const std::int64_t id = ax.d.in, ih = ax.h.in, iw = ax.w.in, od = ax.d.out, oh = ax.h.out, ow = ax.w.out;
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t x = i % ow, y = (i / ow) % oh, z = (i / (ow * oh)) % od, p = i / (ow * oh * od);
    const auto td = ax.d.taps(z), th = ax.h.taps(y), tw = ax.w.taps(x);
    const T* xp = in + p * id * ih * iw;
    if (is_nearest(ax.w.mode)) {
      out[i] = xp[(td.index[0] * ih + th.index[0]) * iw + tw.index[0]];
      continue;
    }
    out[i] = narrow_to<T>(interpolate_math::resample_at(xp, ih, iw, td, th, tw));
  }
}

template <class T>
__global__ void upsample_backward_kernel(T* grad_in, const T* grad_out, std::int64_t n, Axes<T> ax) {
  pdl_begin();
  const std::int64_t id = ax.d.in, ih = ax.h.in, iw = ax.w.in, od = ax.d.out, oh = ax.h.out, ow = ax.w.out;
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t x = i % ow, y = (i / ow) % oh, z = (i / (ow * oh)) % od, p = i / (ow * oh * od);
    const auto td = ax.d.taps(z), th = ax.h.taps(y), tw = ax.w.taps(x);
    const T v = grad_out[i];
    T* gp = grad_in + p * id * ih * iw;
    if (is_nearest(ax.w.mode)) {
      atomicAdd(gp + (td.index[0] * ih + th.index[0]) * iw + tw.index[0], v);
      continue;
    }
    for (int a = 0; a < td.n; ++a) {
      const T vd = td.weight[a] * v;
      for (int b = 0; b < th.n; ++b) {
        const T vh = th.weight[b] * vd;
        T* r = gp + (td.index[a] * ih + th.index[b]) * iw;
        for (int c = 0; c < tw.n; ++c) atomicAdd(r + tw.index[c], tw.weight[c] * vh);
      }
    }
  }
}

template <class C> Axes<C> axes_of(const Operand& big_or_in, const Operand& out, const backend::Upsample& g) {
  return {interpolate_math::Axis<C>(g.mode, g.align_corners, big_or_in.sizes[2], out.sizes[2], g.scale_factor_d),
          interpolate_math::Axis<C>(g.mode, g.align_corners, big_or_in.sizes[3], out.sizes[3], g.scale_factor_h),
          interpolate_math::Axis<C>(g.mode, g.align_corners, big_or_in.sizes[4], out.sizes[4], g.scale_factor_w)};
}

}  // namespace

int upsample(const Operand& out, const Operand& in, const backend::Upsample& g, void* stream) {
  const std::int64_t n = out.numel;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      launch_pdl(upsample_kernel<T, C>, blocks_for(n, threads), threads, 0, s, static_cast<T*>(out.data),
                 static_cast<const T*>(in.data), n, axes_of<C>(in, out, g));
    }
  });
  return static_cast<int>(cudaGetLastError());
}

int upsample_backward(const Operand& grad_in, const Operand& grad_out, const backend::Upsample& g, void* stream) {
  const std::int64_t n = grad_out.numel;
  auto s = static_cast<cudaStream_t>(stream);
  auto launch = [&]<class T>(T*) {
    launch_pdl(upsample_backward_kernel<T>, blocks_for(n, threads), threads, 0, s, static_cast<T*>(grad_in.data),
               static_cast<const T*>(grad_out.data), n, axes_of<T>(grad_in, grad_out, g));
  };
  if (grad_in.dtype == DType::f64) launch(static_cast<double*>(nullptr));
  else launch(static_cast<float*>(nullptr));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
