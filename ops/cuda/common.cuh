// Shared device helpers: element types, strided indexing, launch geometry. The conversion
// rules (load, widen, narrow_to, compute_t, accumulate_t) are the contract's
// (backend/contract.hpp), the same the CPU backend applies.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/contract.hpp"
#include "ops/cuda/kernels.hpp"

namespace brrr::kernels {

using namespace ::brrr::backend;  // the contract's types and conversion rules

/// Calls f(static_cast<T*>(nullptr)) with the element type of `dtype`: CUDA's __half and
/// __nv_bfloat16 for the 16-bit floats, std::uint8_t for bool (0/1).
template <class F> void dispatch(DType dtype, F&& f) { with_element_type<__half, __nv_bfloat16>(dtype, f); }

// Element offset of row-major index i (0 <= i < s.numel) in a strided operand. The inner dims
// take a division each, the outermost none (i < sizes[0] there). 64-bit division is a long
// software sequence on the GPU, so operands of fewer than 2^32 elements divide in 32 bits
// (a uniform branch: numel is the same for every thread); offsets stay 64-bit.
__device__ __forceinline__ std::int64_t offset_of(const Operand& s, std::int64_t i) {
  std::int64_t off = 0;
  if (s.numel <= 0xffffffffll) {
    auto j = static_cast<std::uint32_t>(i);
    for (int d = s.ndim - 1; d > 0; --d) {
      const auto size = static_cast<std::uint32_t>(s.sizes[d]);
      const std::uint32_t q = j / size;
      off += static_cast<std::int64_t>(j - q * size) * s.strides[d];
      j = q;
    }
    return s.ndim > 0 ? off + static_cast<std::int64_t>(j) * s.strides[0] : off;
  }
  for (int d = s.ndim - 1; d > 0; --d) {
    const std::int64_t size = s.sizes[d];
    const std::int64_t q = i / size;
    off += (i - q * size) * s.strides[d];
    i = q;
  }
  return s.ndim > 0 ? off + i * s.strides[0] : off;
}

inline bool is_contiguous(const Operand& s) {
  std::int64_t expect = 1;
  for (int d = s.ndim - 1; d >= 0; --d) {
    if (s.sizes[d] != 1 && s.strides[d] != expect) return false;
    expect *= s.sizes[d];
  }
  return true;
}

// Programmatic dependent launch (Hopper; CUDA C++ Programming Guide, "Programmatic Dependent
// Launch and Synchronization"). A kernel launched with it may be scheduled while the kernel
// before it in the stream is still running, so its launch latency hides behind that kernel's
// tail. So every brrr kernel starts with pdl_begin(): it waits (griddepcontrol.wait) until the
// previous kernel has finished and its writes are visible, before touching any memory, then
// lets the next kernel be scheduled (griddepcontrol.launch_dependents). Without the launch
// attribute both instructions return at once. Measured in docs/benchmarks.md (0.05-0.19 ms a
// GPT step on the H100).
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether launches carry the attribute: when every device has compute capability 9.0 or up,
// unless BRRR_PDL=0 is in the environment. Decided once, so a launch pays no query.
inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRRR_PDL");
    if (v != nullptr && v[0] == '0' && v[1] == '\0') return false;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
    for (int d = 0; d < count; ++d) {
      int major = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess || major < 9) return false;
    }
    return true;
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-dependent-launch
// attribute when pdl_enabled(). Errors are left for cudaGetLastError, as <<<>>> leaves them.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = pdl_enabled() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// Grid for a grid-stride loop over n elements.
inline unsigned blocks_for(std::int64_t n, int threads = 256) {
  std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b > 0 ? b : 1) : 65535 * 8);
}

// Merges dims that are contiguous in all operands; drops size-1 dims. Operands share sizes.
template <int N> inline void coalesce(Operand* (&ops)[N]) {
  Operand& s0 = *ops[0];
  int nd = 0;
  std::int64_t sizes[max_dims];
  std::int64_t strides[N][max_dims];
  for (int d = 0; d < s0.ndim; ++d) {
    std::int64_t size = s0.sizes[d];
    if (size == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = strides[k][nd - 1] == ops[k]->strides[d] * size;
    if (merge) {
      sizes[nd - 1] *= size;
      for (int k = 0; k < N; ++k) strides[k][nd - 1] = ops[k]->strides[d];
    } else {
      sizes[nd] = size;
      for (int k = 0; k < N; ++k) strides[k][nd] = ops[k]->strides[d];
      ++nd;
    }
  }
  for (int k = 0; k < N; ++k) {
    ops[k]->ndim = nd;
    for (int d = 0; d < nd; ++d) {
      ops[k]->sizes[d] = sizes[d];
      ops[k]->strides[d] = strides[k][d];
    }
  }
}

}  // namespace brrr::kernels
