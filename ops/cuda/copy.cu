// Strided copy with dtype conversion: the kernel behind clone, contiguous, to(DType) and
// copy_. Contiguous same-dtype copies go to cudaMemcpyAsync; contiguous converting copies
// take a flat loop; everything else computes both offsets from the row-major index.
#include "ops/cuda/common.cuh"

namespace brrr::kernels {

namespace {
template <class D, class S> __global__ void copy_contiguous(D* dst, const S* src, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(blockDim.x) * gridDim.x)
    dst[i] = narrow_to<D>(widen(src[i]));
}
template <class D, class S> __global__ void copy_strided(Operand dst, Operand src) {
  D* d = static_cast<D*>(dst.data);
  const S* s = static_cast<const S*>(src.data);
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < dst.numel;
       i += std::int64_t(blockDim.x) * gridDim.x) {
    if constexpr (std::is_same_v<D, S>) d[offset_of(dst, i)] = s[offset_of(src, i)];
    else d[offset_of(dst, i)] = narrow_to<D>(widen(s[offset_of(src, i)]));
  }
}
}  // namespace

int copy(const Operand& dst, const Operand& src, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  bool contiguous = is_contiguous(dst) && is_contiguous(src);
  if (contiguous && dst.dtype == src.dtype) {
    return static_cast<int>(
        cudaMemcpyAsync(dst.data, src.data, dst.numel * itemsize(dst.dtype), cudaMemcpyDeviceToDevice, st));
  }
  dispatch(dst.dtype, [&]<class D>(D*) {
    dispatch(src.dtype, [&]<class S>(S*) {
      if (contiguous)
        copy_contiguous<D, S><<<blocks_for(dst.numel), 256, 0, st>>>(static_cast<D*>(dst.data),
                                                                      static_cast<const S*>(src.data), dst.numel);
      else
        copy_strided<D, S><<<blocks_for(dst.numel), 256, 0, st>>>(dst, src);
    });
  });
  return static_cast<int>(cudaGetLastError());
}

}  // namespace brrr::kernels
