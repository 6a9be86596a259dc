// CudaBackend's fused cross entropy: launch ops/cuda/cross_entropy.cu on the current stream
// of the logits' device and check the launch status. Out-of-range targets are reported
// through the device's deferred error flag (cuda/device_errors.cpp): no wait here.
module;
#include <cstdint>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::cross_entropy_forward(const Operand& out, const Operand& lse, const Operand& logits,
                                        const Operand& target, std::int64_t ignore_index, double label_smoothing) {
  const std::int64_t rows = target.numel;
  if (rows == 0) return;
  DeviceGuard g(logits.device);
  BRRR_CUDA_CHECK(kernels::cross_entropy_forward(
      out.data, lse.data, logits.data, logits.dtype, target.data,
      target.dtype == DType::i64, rows, logits.numel / rows, ignore_index, label_smoothing,
      device_error_flag(logits.device), static_cast<int>(CheckedOp::nll_target), current_stream(logits.device)->handle));
}

void CudaBackend::cross_entropy_backward(const Operand& grad_logits, const Operand& logits, const Operand& lse,
                                         const Operand& target, const Operand& grad, bool per_row,
                                         const Operand* count, std::int64_t ignore_index, double label_smoothing) {
  const std::int64_t rows = target.numel;
  if (rows == 0) return;
  DeviceGuard g(logits.device);
  BRRR_CUDA_CHECK(kernels::cross_entropy_backward(
      grad_logits.data, logits.data, lse.data, target.data, logits.dtype,
      target.dtype == DType::i64, grad.data, per_row, count ? count->data : nullptr, rows, logits.numel / rows,
      ignore_index, label_smoothing, current_stream(logits.device)->handle));
}

}  // namespace brrr::backend
