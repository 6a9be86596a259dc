// CudaBackend's max pooling members (ops/cuda/pool.cu).
module;
#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::max_pool2d(const Operand& out, const Operand& indices, const Operand& in, const Window2d& w,
                             bool adaptive) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::max_pool2d(out, indices, in, w, adaptive, current_stream(out.device)->handle));
}

void CudaBackend::max_pool2d_backward(const Operand& grad_in, const Operand& grad_out, const Operand& indices,
                                      const Window2d& w, bool adaptive) {
  DeviceGuard g(grad_in.device);
  BRRR_CUDA_CHECK(
      kernels::max_pool2d_backward(grad_in, grad_out, indices, w, adaptive, current_stream(grad_in.device)->handle));
}

}  // namespace brrr::backend
