// CUDA im2col / col2im. im2col: one thread per column entry. col2im: one thread per input
// cell, which sums the column entries that read it (a gather: no atomics, deterministic).
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {

template <class T>
__global__ void im2col_kernel(T* out, Operand in, Window2d g, T pad, std::int64_t total) {
  const T* x = static_cast<const T*>(in.data);
  const std::int64_t L = g.out_h * g.out_w;
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += std::int64_t(blockDim.x) * gridDim.x) {
    std::int64_t l = idx % L;
    std::int64_t rest = idx / L;  // n * C*kh*kw + r
    std::int64_t r = rest % (g.c * g.kh * g.kw);
    std::int64_t n = rest / (g.c * g.kh * g.kw);
    std::int64_t j = r % g.kw, i = (r / g.kw) % g.kh, c = r / (g.kw * g.kh);
    std::int64_t oy = l / g.out_w, ox = l % g.out_w;
    std::int64_t y = oy * g.sh - g.ph + i * g.dh, xx = ox * g.sw - g.pw + j * g.dw;
    bool inside = y >= 0 && y < g.h && xx >= 0 && xx < g.w;
    out[idx] = inside ? x[n * in.strides[0] + c * in.strides[1] + y * in.strides[2] + xx * in.strides[3]] : pad;
  }
}

template <class T>
__global__ void col2im_kernel(T* out, Operand col, Window2d g, std::int64_t total) {
  const T* cp = static_cast<const T*>(col.data);
  for (std::int64_t idx = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += std::int64_t(blockDim.x) * gridDim.x) {
    std::int64_t xx = idx % g.w, y = (idx / g.w) % g.h, c = (idx / (g.w * g.h)) % g.c, n = idx / (g.w * g.h * g.c);
    wide_t<T> acc = 0;  // double for floating types, int64 for integers
    for (std::int64_t i = 0; i < g.kh; ++i) {
      std::int64_t ty = y + g.ph - i * g.dh;  // = oy * sh
      if (ty < 0 || ty % g.sh != 0) continue;
      std::int64_t oy = ty / g.sh;
      if (oy >= g.out_h) continue;
      for (std::int64_t j = 0; j < g.kw; ++j) {
        std::int64_t tx = xx + g.pw - j * g.dw;
        if (tx < 0 || tx % g.sw != 0) continue;
        std::int64_t ox = tx / g.sw;
        if (ox >= g.out_w) continue;
        std::int64_t r = (c * g.kh + i) * g.kw + j;
        acc += widen(cp[n * col.strides[0] + r * col.strides[1] + (oy * g.out_w + ox) * col.strides[2]]);
      }
    }
    out[idx] = narrow_to<T>(acc);
  }
}

}  // namespace

int im2col(const Operand& out, const Operand& in, const Window2d& g, double pad_value, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(in.dtype, [&]<class T>(T*) {
    const T pad = narrow_to<T>(pad_value);
    im2col_kernel<T><<<blocks_for(out.numel), 256, 0, s>>>(static_cast<T*>(out.data), in, g, pad, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

int col2im(const Operand& out, const Operand& col, const Window2d& g, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    col2im_kernel<T><<<blocks_for(out.numel), 256, 0, s>>>(static_cast<T*>(out.data), col, g, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
