// fill and arange kernels.
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {
template <class T> __global__ void fill_contiguous(T* out, T value, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = value;
}
template <class T> __global__ void fill_strided(Operand out, T value) {
  pdl_begin();
  T* p = static_cast<T*>(out.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    p[offset_of(out, i)] = value;
}
template <class T> __global__ void arange_kernel(T* out, double start, double step, std::int64_t n) {
  pdl_begin();
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = narrow_to<T>(start + static_cast<double>(i) * step);
}
}  // namespace

int fill(const Operand& out, double value, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    const T v = narrow_to<T>(value);  // on the host, by the contract's rules
    if (is_contiguous(out))
      launch_pdl(fill_contiguous<T>, blocks_for(out.numel), 256, 0, s, static_cast<T*>(out.data), v, out.numel);
    else
      launch_pdl(fill_strided<T>, blocks_for(out.numel), 256, 0, s, out, v);
  });
  return static_cast<int>(cudaGetLastError());
}

int arange(const Operand& out, double start, double step, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&]<class T>(T*) {
    launch_pdl(arange_kernel<T>, blocks_for(out.numel), 256, 0, s, static_cast<T*>(out.data), start, step, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
