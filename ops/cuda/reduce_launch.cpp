// CudaBackend::reduce: plans the workspace, takes it from the caching allocator on the
// current stream (stream-ordered: released at the end of this call, reused only by work
// queued after the kernels), launches ops/cuda/reduce.cu and checks the launch status.
// Nothing here waits for the device.
module;
#include <cstddef>
#include <cstdint>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::reduce(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                         const Operand* indices) {
  check_reduce_operands(op, out, in, dims_mask, indices);
  if (out.numel == 0) return;
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  std::size_t bytes = kernels::reduce_workspace_bytes(op, out, in, dims_mask, indices, out.device);
  Storage workspace;
  if (bytes > 0) workspace = allocate_device(bytes, out.device, stream);
  BRRR_CUDA_CHECK(kernels::reduce(op, out, in, dims_mask, indices,
                                  workspace.defined() ? workspace.data() : nullptr, bytes, out.device,
                                  stream->handle));
}

}  // namespace brrr::backend
