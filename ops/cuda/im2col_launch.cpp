// CudaBackend's im2col/col2im members (ops/cuda/im2col.cu).
module;
#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::im2col(const Operand& out, const Operand& in, const Window2d& w, double pad_value) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::im2col(out, in, w, pad_value, current_stream(out.device)->handle));
}

void CudaBackend::col2im(const Operand& out, const Operand& in, const Window2d& w) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::col2im(out, in, w, current_stream(out.device)->handle));
}

}  // namespace brrr::backend
