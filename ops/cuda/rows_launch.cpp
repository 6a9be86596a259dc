// CudaBackend's row ops (softmax, layer_norm; layer_norm's backward is ops/cuda/
// layer_norm_backward.cu): launch the kernels on the current stream of the operands' device
// and check the launch status. Never waits for the device.
module;
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// [rows, cols] of a contiguous operand whose last dim is the row (cols = 1 for 0-d).
struct RowsCols {
  std::int64_t rows = 0, cols = 0;
};
RowsCols rows_cols(const Operand& o) {
  RowsCols r;
  r.cols = o.ndim == 0 ? 1 : o.sizes[o.ndim - 1];
  r.rows = r.cols == 0 ? 0 : o.numel / r.cols;
  return r;
}

}  // namespace

void CudaBackend::softmax(const Operand& out, const Operand& in, bool log) {
  RowsCols rc = rows_cols(in);
  if (rc.rows == 0) return;
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::softmax_rows(out.data, in.data, in.dtype, rc.rows, rc.cols,
                                        log, current_stream(out.device)->handle));
}

void CudaBackend::layer_norm(const Operand& out, const Operand& mean, const Operand& rstd, const Operand& in,
                             const Operand* weight, const Operand* bias, double eps) {
  RowsCols rc = rows_cols(in);
  if (rc.rows == 0) return;
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::layer_norm_rows(out.data, mean.data, rstd.data, in.data, weight ? weight->data : nullptr,
                                           bias ? bias->data : nullptr, in.dtype,
                                           rc.rows, rc.cols, eps, current_stream(out.device)->handle));
}

void CudaBackend::layer_norm_backward(const Operand* dx, const Operand* dweight, const Operand* dbias,
                                      const Operand& grad, const Operand& in, const Operand& mean,
                                      const Operand& rstd, const Operand* weight) {
  RowsCols rc = rows_cols(in);
  if (rc.rows == 0) return;
  DeviceGuard g(in.device);
  StreamPtr stream = current_stream(in.device);
  // The partial column sums of dweight/dbias: a workspace from the caching allocator on this
  // stream (freed back to it once this launch's work is queued, as the stream orders reuse).
  Storage workspace;
  if (dweight || dbias) {
    const std::size_t bytes = kernels::layer_norm_backward_workspace_bytes(in.dtype, rc.rows, rc.cols);
    workspace = allocate_device(bytes > 0 ? bytes : 1, in.device, stream);
  }
  BRRR_CUDA_CHECK(kernels::layer_norm_backward(
      dx ? dx->data : nullptr, dweight ? dweight->data : nullptr, dbias ? dbias->data : nullptr, grad.data, in.data,
      mean.data, rstd.data, weight ? weight->data : nullptr, in.dtype, rc.rows, rc.cols,
      workspace.defined() ? workspace.data() : nullptr, stream->handle));
}

void CudaBackend::dropout_add_layer_norm(const Operand& out, const Operand& sum, const Operand* mask,
                                         const Operand& mean, const Operand& rstd, const Operand& x0,
                                         const Operand* residual, const Operand* weight, const Operand* bias,
                                         double eps, const AttentionDropout& d) {
  if (x0.numel == 0) return;
  DeviceGuard g(x0.device);
  BRRR_CUDA_CHECK(kernels::dropout_add_layer_norm(out, sum, mask, mean, rstd, x0, residual, weight, bias, eps, d,
                                                  current_stream(x0.device)->handle));
}

void CudaBackend::dropout_add_layer_norm_backward(const Operand* dx0, const Operand* dresidual,
                                                  const Operand* dweight, const Operand* dbias,
                                                  const Operand& grad_out, const Operand* grad_sum,
                                                  const Operand& sum, const Operand& mean, const Operand& rstd,
                                                  const Operand* weight, const Operand* mask, double p) {
  RowsCols rc = rows_cols(sum);
  if (rc.rows == 0) return;
  DeviceGuard g(sum.device);
  StreamPtr stream = current_stream(sum.device);
  Storage workspace;  // the partial column sums, as layer_norm_backward's
  if (dweight || dbias) {
    const std::size_t bytes = kernels::layer_norm_backward_workspace_bytes(sum.dtype, rc.rows, rc.cols);
    workspace = allocate_device(bytes > 0 ? bytes : 1, sum.device, stream);
  }
  BRRR_CUDA_CHECK(kernels::dropout_add_layer_norm_backward(dx0, dresidual, dweight, dbias, grad_out, grad_sum, sum,
                                                           mean, rstd, weight, mask, p,
                                                           workspace.defined() ? workspace.data() : nullptr,
                                                           stream->handle));
}

}  // namespace brrr::backend
