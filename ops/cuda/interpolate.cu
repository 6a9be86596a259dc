// CUDA kernels of interpolate (ops/interpolate.cpp): one thread per output element (forward)
// or per upstream-gradient element (backward, atomicAdd into the input gradient), in
// grid-stride loops with 64-bit indexing; the taps are ops/interpolate_math.hpp's, the CPU
// backend's own formula.
#include "ops/cuda/common.cuh"
#include "ops/interpolate_math.hpp"

namespace brrr::kernels {

namespace {

constexpr int threads = 256;

template <class T, class C>
__global__ void upsample_kernel(T* out, const T* in, std::int64_t n, std::int64_t ih, std::int64_t iw,
                                std::int64_t oh, std::int64_t ow, interpolate_math::Axis<C> ah,
                                interpolate_math::Axis<C> aw) {
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t x = i % ow, y = (i / ow) % oh, p = i / (ow * oh);
    const auto th = ah.taps(y), tw = aw.taps(x);
    const T* r0 = in + (p * ih + th.i0) * iw;
    if (ah.mode == UpsampleMode::nearest) {
      out[i] = r0[tw.i0];
      continue;
    }
    const T* r1 = in + (p * ih + th.i1) * iw;
    const C top = (C(1) - tw.w1) * load(r0[tw.i0]) + tw.w1 * load(r0[tw.i1]);
    const C bottom = (C(1) - tw.w1) * load(r1[tw.i0]) + tw.w1 * load(r1[tw.i1]);
    out[i] = narrow_to<T>((C(1) - th.w1) * top + th.w1 * bottom);
  }
}

template <class T>
__global__ void upsample_backward_kernel(T* grad_in, const T* grad_out, std::int64_t n, std::int64_t ih,
                                         std::int64_t iw, std::int64_t oh, std::int64_t ow,
                                         interpolate_math::Axis<T> ah, interpolate_math::Axis<T> aw) {
  const std::int64_t step = std::int64_t(blockDim.x) * gridDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t x = i % ow, y = (i / ow) % oh, p = i / (ow * oh);
    const auto th = ah.taps(y), tw = aw.taps(x);
    const T v = grad_out[i];
    T* r0 = grad_in + (p * ih + th.i0) * iw;
    if (ah.mode == UpsampleMode::nearest) {
      atomicAdd(r0 + tw.i0, v);
      continue;
    }
    T* r1 = grad_in + (p * ih + th.i1) * iw;
    const T top = (T(1) - th.w1) * v, bottom = th.w1 * v;
    atomicAdd(r0 + tw.i0, (T(1) - tw.w1) * top);
    atomicAdd(r0 + tw.i1, tw.w1 * top);
    atomicAdd(r1 + tw.i0, (T(1) - tw.w1) * bottom);
    atomicAdd(r1 + tw.i1, tw.w1 * bottom);
  }
}

}  // namespace

int upsample(const Operand& out, const Operand& in, const backend::Upsample2d& g, void* stream) {
  const std::int64_t ih = in.sizes[2], iw = in.sizes[3], oh = out.sizes[2], ow = out.sizes[3];
  const std::int64_t n = out.numel;
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>) {
      using C = compute_t<T>;
      const interpolate_math::Axis<C> ah(g.mode, g.align_corners, ih, oh, g.scale_factor_h),
          aw(g.mode, g.align_corners, iw, ow, g.scale_factor_w);
      upsample_kernel<T, C><<<blocks_for(n, threads), threads, 0, s>>>(
          static_cast<T*>(out.data), static_cast<const T*>(in.data), n, ih, iw, oh, ow, ah, aw);
    }
  });
  return static_cast<int>(cudaGetLastError());
}

int upsample_backward(const Operand& grad_in, const Operand& grad_out, const backend::Upsample2d& g, void* stream) {
  const std::int64_t ih = grad_in.sizes[2], iw = grad_in.sizes[3], oh = grad_out.sizes[2], ow = grad_out.sizes[3];
  const std::int64_t n = grad_out.numel;
  auto s = static_cast<cudaStream_t>(stream);
  auto launch = [&]<class T>(T*) {
    const interpolate_math::Axis<T> ah(g.mode, g.align_corners, ih, oh, g.scale_factor_h),
        aw(g.mode, g.align_corners, iw, ow, g.scale_factor_w);
    upsample_backward_kernel<T><<<blocks_for(n, threads), threads, 0, s>>>(
        static_cast<T*>(grad_in.data), static_cast<const T*>(grad_out.data), n, ih, iw, oh, ow, ah, aw);
  };
  if (grad_in.dtype == DType::f64) launch(static_cast<double*>(nullptr));
  else launch(static_cast<float*>(nullptr));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
