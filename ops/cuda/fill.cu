// fill and arange kernels.
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {
template <class T> __global__ void fill_contiguous(T* out, T value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = value;
}
template <class T> __global__ void fill_strided(Strided out, T value) {
  T* p = static_cast<T*>(out.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < out.numel;
       i += std::int64_t(blockDim.x) * gridDim.x)
    p[offset_of(out, i)] = value;
}
template <class T> __global__ void arange_kernel(T* out, double start, double step, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    out[i] = narrow_to<T>(start + static_cast<double>(i) * step);
}
template <class T> __global__ void convert_scalar(T* out, double value) { *out = narrow_to<T>(value); }
}  // namespace

int fill(const Strided& out, double value, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Convert on the host for exact types; bf16/f16 go through the device intrinsics so that
    // rounding matches every other conversion.
    T v{};
    if constexpr (is_half_like<T>) {
      if constexpr (std::is_same_v<T, __half>) v = __float2half_rn(static_cast<float>(value));
      else v = __float2bfloat16_rn(static_cast<float>(value));
    } else if constexpr (std::is_same_v<T, std::uint8_t>) {
      v = value != 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(value);
    } else {
      double lo = static_cast<double>(std::numeric_limits<T>::min()), hi = static_cast<double>(std::numeric_limits<T>::max());
      v = value != value ? T(0) : value <= lo ? std::numeric_limits<T>::min() : value >= hi ? std::numeric_limits<T>::max() : static_cast<T>(value);
    }
    if (is_contiguous(out))
      fill_contiguous<T><<<blocks_for(out.numel), 256, 0, s>>>(static_cast<T*>(out.data), v, out.numel);
    else
      fill_strided<T><<<blocks_for(out.numel), 256, 0, s>>>(out, v);
  });
  return static_cast<int>(cudaGetLastError());
}

int arange(const Strided& out, double start, double step, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(out.numel), 256, 0, s>>>(static_cast<T*>(out.data), start, step, out.numel);
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
