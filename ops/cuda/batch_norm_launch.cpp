// CudaBackend's batch-norm kernels: launch ops/cuda/batch_norm.cu on the current stream of
// the operands' device (the reductions' workspace from the caching allocator on that stream)
// and check the launch status. Never waits for the device.
module;
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

void* data_or_null(const Operand* o) { return o ? o->data : nullptr; }

// The per-block partial results of the two channel reductions, from the caching allocator on
// the stream that will use them.
Storage workspace_for(const Operand& in, const StreamPtr& stream) {
  const std::size_t bytes = kernels::batch_norm_workspace_bytes(in.dtype, in.sizes[0], in.sizes[1], in.sizes[2]);
  return allocate_device(bytes > 0 ? bytes : 1, in.device, stream);
}

}  // namespace

void CudaBackend::batch_norm_stats(const Operand& mean, const Operand& invstd, const Operand& in, double eps,
                                   const Operand* running_mean, const Operand* running_var, double momentum) {
  DeviceGuard g(in.device);
  StreamPtr stream = current_stream(in.device);
  Storage workspace = workspace_for(in, stream);
  BRRR_CUDA_CHECK(kernels::batch_norm_stats(mean.data, invstd.data, in.data, in.dtype, in.sizes[0], in.sizes[1],
                                            in.sizes[2], eps, data_or_null(running_mean), data_or_null(running_var),
                                            momentum, workspace.data(), stream->handle));
}

void CudaBackend::batch_norm_elemt(const Operand& out, const Operand& in, const Operand& mean, const Operand& invstd,
                                   const Operand* weight, const Operand* bias) {
  DeviceGuard g(in.device);
  BRRR_CUDA_CHECK(kernels::batch_norm_elemt(out.data, in.data, mean.data, invstd.data, data_or_null(weight),
                                            data_or_null(bias), in.dtype, in.sizes[0], in.sizes[1], in.sizes[2],
                                            current_stream(in.device)->handle));
}

void CudaBackend::batch_norm_backward_reduce(const Operand& sum_dy, const Operand& sum_dy_xmu, const Operand& grad,
                                             const Operand& in, const Operand& mean) {
  DeviceGuard g(in.device);
  StreamPtr stream = current_stream(in.device);
  Storage workspace = workspace_for(in, stream);
  BRRR_CUDA_CHECK(kernels::batch_norm_backward_reduce(sum_dy.data, sum_dy_xmu.data, grad.data, in.data, mean.data,
                                                      in.dtype, in.sizes[0], in.sizes[1], in.sizes[2],
                                                      workspace.data(), stream->handle));
}

void CudaBackend::batch_norm_backward_elemt(const Operand& grad_in, const Operand& grad, const Operand& in,
                                            const Operand& mean, const Operand& invstd, const Operand* weight,
                                            const Operand& sum_dy, const Operand& sum_dy_xmu) {
  DeviceGuard g(in.device);
  BRRR_CUDA_CHECK(kernels::batch_norm_backward_elemt(grad_in.data, grad.data, in.data, mean.data, invstd.data,
                                                     data_or_null(weight), sum_dy.data, sum_dy_xmu.data, in.dtype,
                                                     in.sizes[0], in.sizes[1], in.sizes[2],
                                                     current_stream(in.device)->handle));
}

}  // namespace brrr::backend
