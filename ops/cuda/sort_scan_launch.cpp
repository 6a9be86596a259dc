// CudaBackend's scan, sort, topk and searchsorted: workspace from the caching allocator on the
// current stream (stream-ordered), the launches of ops/cuda/sort_scan.cu, status checks.
// Nothing here waits for the device.
module;
#include <cstddef>
#include <cstdint>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::scan(ScanOp op, const Operand& out, const Operand& in, const Operand* indices) {
  if (in.numel == 0) return;
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  const std::size_t bytes = kernels::scan_workspace_bytes(op, in, indices != nullptr);
  Storage workspace = allocate_device(bytes > 0 ? bytes : 1, out.device, stream);
  BRRR_CUDA_CHECK(kernels::scan(op, out, in, indices, workspace.data(), bytes, stream->handle));
}

void CudaBackend::sort(const Operand& values, const Operand& indices, const Operand& in, bool descending) {
  if (in.numel == 0) return;
  DeviceGuard g(values.device);
  StreamPtr stream = current_stream(values.device);
  const std::size_t bytes = kernels::sort_workspace_bytes(in, descending);
  Storage workspace = allocate_device(bytes > 0 ? bytes : 1, values.device, stream);
  BRRR_CUDA_CHECK(kernels::sort(values, indices, in, descending, workspace.data(), bytes, stream->handle));
}

void CudaBackend::topk(const Operand& values, const Operand& indices, const Operand& in, std::int64_t k,
                       bool largest) {
  if (in.numel == 0 || k == 0) return;
  DeviceGuard g(values.device);
  StreamPtr stream = current_stream(values.device);
  const std::size_t bytes = kernels::topk_workspace_bytes(in, k, largest);
  Storage workspace = allocate_device(bytes > 0 ? bytes : 1, values.device, stream);
  BRRR_CUDA_CHECK(kernels::topk(values, indices, in, k, largest, workspace.data(), bytes, stream->handle));
}

void CudaBackend::searchsorted(const Operand& out, const Operand& sorted, const Operand& values, bool right) {
  if (out.numel == 0) return;
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::searchsorted(out, sorted, values, right, current_stream(out.device)->handle));
}

}  // namespace brrr::backend
