// CudaBackend's fused attention: launches ops/cuda/attention.cu on the current stream of the
// operands' device (backward's workspace from the caching allocator on that stream) and
// checks the launch status. Nothing here waits for the device.
module;
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::attention_forward(const Operand& out, const Operand& lse, const Operand& q, const Operand& k,
                                    const Operand& v, double scale, bool causal, const AttentionDropout& dropout,
                                    bool allow_tf32) {
  if (out.numel == 0) return;
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(
      kernels::attention_forward(out, lse, q, k, v, scale, causal, dropout, allow_tf32,
                                 current_stream(out.device)->handle));
}

void CudaBackend::attention_backward(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout,
                                     const Operand& q, const Operand& k, const Operand& v, const Operand& out,
                                     const Operand& lse, double scale, bool causal,
                                     const AttentionDropout& dropout, bool allow_tf32, bool deterministic) {
  if (q.numel == 0 || k.numel == 0) return;
  const bool tensor_cores = q.dtype == DType::bf16 || q.dtype == DType::f16 || (q.dtype == DType::f32 && allow_tf32);
  if (dropout.p > 0 && tensor_cores && dropout.keep_bits == nullptr)
    throw Error(ErrorKind::value, std::string("attention_backward: the tensor-core kernels' dropout needs the "
                                              "forward's AttentionDropout::keep_bits (") + to_string(q.dtype) + ")");
  DeviceGuard g(dq.device);
  StreamPtr stream = current_stream(dq.device);
  const std::size_t bytes = kernels::attention_backward_workspace_bytes(q);
  Storage workspace = allocate_device(bytes > 0 ? bytes : 1, dq.device, stream);
  BRRR_CUDA_CHECK(kernels::attention_backward(dq, dk, dv, dout, q, k, v, out, lse, scale, causal, dropout, allow_tf32,
                                              deterministic, workspace.data(), stream->handle));
}

}  // namespace brrr::backend
