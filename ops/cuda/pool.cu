// CUDA max pooling. Forward: one thread per output, the CPU kernel's loop (ops/cpu/pool.cpp).
// Backward: one thread per input cell, which sums the output gradients whose saved index names
// it over the outputs whose windows may hold it (a gather, as PyTorch's max_pool2d backward:
// no atomics, deterministic).
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {

struct Span {
  std::int64_t lo, hi, step;
};

__device__ __forceinline__ std::int64_t smaller(std::int64_t a, std::int64_t b) { return a < b ? a : b; }

// The input rows [lo, hi) step `step` that output row `o` reads (padding skipped).
__device__ __forceinline__ Span window_span(std::int64_t o, std::int64_t in, std::int64_t k, std::int64_t s,
                                            std::int64_t p, std::int64_t d) {
  std::int64_t lo = o * s - p, hi = smaller(lo + (k - 1) * d + 1, in);
  while (lo < 0) lo += d;
  return {lo, hi, d};
}
// PyTorch's adaptive bins: [floor(o in / out), ceil((o + 1) in / out)).
__device__ __forceinline__ Span bin_span(std::int64_t o, std::int64_t in, std::int64_t out) {
  return {o * in / out, ((o + 1) * in + out - 1) / out, 1};
}

// The outputs [lo, hi) whose windows may hold input row y.
__device__ __forceinline__ Span outputs_of(std::int64_t y, std::int64_t in, std::int64_t out, std::int64_t k,
                                           std::int64_t s, std::int64_t p, std::int64_t d, bool adaptive) {
  if (adaptive) return {y * out / in, smaller(((y + 1) * out + in - 1) / in, out), 1};
  std::int64_t first = y + p - (k - 1) * d;  // o * s must lie in [first, y + p]
  std::int64_t lo = first <= 0 ? 0 : (first + s - 1) / s;
  return {lo, smaller((y + p) / s + 1, out), 1};
}

template <class T>
__global__ void max_pool_kernel(T* out, std::int64_t* indices, Operand in, Window2d g, bool adaptive,
                                std::int64_t total) {
  pdl_begin();
  using A = accumulate_t<T>;
  const T* x = static_cast<const T*>(in.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    std::int64_t ox = i % g.out_w, oy = (i / g.out_w) % g.out_h, p = i / (g.out_w * g.out_h);
    const T* plane = x + (p / g.c) * in.strides[0] + (p % g.c) * in.strides[1];
    Span ys = adaptive ? bin_span(oy, g.h, g.out_h) : window_span(oy, g.h, g.kh, g.sh, g.ph, g.dh);
    Span xs = adaptive ? bin_span(ox, g.w, g.out_w) : window_span(ox, g.w, g.kw, g.sw, g.pw, g.dw);
    // PyTorch's loop: -inf at the first real cell, then v wins when v > max or v is NaN.
    A best = -std::numeric_limits<A>::infinity();
    std::int64_t at = ys.lo < ys.hi && xs.lo < xs.hi ? ys.lo * g.w + xs.lo : -1;
    for (std::int64_t y = ys.lo; y < ys.hi; y += ys.step)
      for (std::int64_t xx = xs.lo; xx < xs.hi; xx += xs.step) {
        const A v = load_acc(plane[y * in.strides[2] + xx * in.strides[3]]);
        const bool take = (v > best) | (v != v);
        best = take ? v : best;
        at = take ? y * g.w + xx : at;
      }
    out[i] = narrow_to<T>(best);
    indices[i] = at;
  }
}

template <class T>
__global__ void max_pool_backward_kernel(T* grad_in, Operand grad_out, const std::int64_t* indices, Window2d g,
                                         bool adaptive, std::int64_t total) {
  pdl_begin();
  const T* go = static_cast<const T*>(grad_out.data);
  const std::int64_t* st = grad_out.strides;
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    std::int64_t xx = i % g.w, y = (i / g.w) % g.h, p = i / (g.w * g.h);
    const std::int64_t cell = y * g.w + xx;
    const std::int64_t* ip = indices + p * g.out_h * g.out_w;
    const T* gp = go + (p / g.c) * st[0] + (p % g.c) * st[1];
    Span ys = outputs_of(y, g.h, g.out_h, g.kh, g.sh, g.ph, g.dh, adaptive);
    Span xs = outputs_of(xx, g.w, g.out_w, g.kw, g.sw, g.pw, g.dw, adaptive);
    accumulate_t<T> acc = 0;
    for (std::int64_t oy = ys.lo; oy < ys.hi; ++oy)
      for (std::int64_t ox = xs.lo; ox < xs.hi; ++ox)
        if (ip[oy * g.out_w + ox] == cell) acc += load_acc(gp[oy * st[2] + ox * st[3]]);
    grad_in[i] = narrow_to<T>(acc);
  }
}

}  // namespace

int max_pool2d(const Operand& out, const Operand& indices, const Operand& in, const Window2d& g, bool adaptive,
               void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>)
      launch_pdl(max_pool_kernel<T>, blocks_for(out.numel), 256, 0, s, static_cast<T*>(out.data),
                 static_cast<std::int64_t*>(indices.data), in, g, adaptive, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

int max_pool2d_backward(const Operand& grad_in, const Operand& grad_out, const Operand& indices, const Window2d& g,
                        bool adaptive, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(grad_in.dtype, [&]<class T>(T*) {
    if constexpr (is_floating<T>)
      launch_pdl(max_pool_backward_kernel<T>, blocks_for(grad_in.numel), 256, 0, s, static_cast<T*>(grad_in.data),
                 grad_out, static_cast<const std::int64_t*>(indices.data), g, adaptive, grad_in.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
