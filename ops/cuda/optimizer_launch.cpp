// CudaBackend::optimizer_step: hands one (device, dtype) group of parameters to the
// multi-tensor kernel of ops/cuda/optimizer.cu (one launch per 48 tensors on the current
// stream of the device) and checks the launch status; multi_tensor_norm/scale likewise
// (ops/cuda/multi_tensor.cu, the norm's workspace from the caching allocator on that
// stream). Nothing here waits for the device.
module;
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::optimizer_step(const OptimizerStep& s) {
  const std::size_t count = s.params.size();
  if (s.grads.size() != count || s.state1.size() != count || s.state2.size() != count || s.state3.size() != count ||
      s.numels.size() != count)
    throw Error(ErrorKind::value, "optimizer_step: inconsistent tensor lists");
  if (!is_floating_point(s.dtype))
    throw Error(ErrorKind::dtype, std::string("optimizer_step: parameters of dtype ") + to_string(s.dtype) +
                                      " cannot be optimized (floating dtypes only)");
  for (std::size_t k = 0; k < count; ++k) {
    bool ok = s.params[k] != nullptr && s.grads[k] != nullptr;
    switch (s.kind) {
      case OptimizerKind::sgd: ok = ok && (s.momentum == 0 || s.state1[k] != nullptr); break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw:
        ok = ok && s.state1[k] != nullptr && s.state2[k] != nullptr && (!s.amsgrad || s.state3[k] != nullptr);
        break;
    }
    if (!ok && s.numels[k] > 0)
      throw Error(ErrorKind::value, "optimizer_step: tensor " + std::to_string(k) + " lacks a pointer its update needs");
  }
  if (count == 0) return;
  DeviceGuard g(s.device);
  BRRR_CUDA_CHECK(kernels::optimizer_step(s, current_stream(s.device)->handle));
}

void CudaBackend::multi_tensor_norm(const Operand& out, const MultiTensor& tensors, double norm_type) {
  if (tensors.data.empty()) return;
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  Storage workspace = allocate_device(kernels::multi_tensor_norm_workspace_bytes(tensors), out.device, stream);
  BRRR_CUDA_CHECK(kernels::multi_tensor_norm(out.data, tensors, norm_type, workspace.data(), stream->handle));
}

void CudaBackend::multi_tensor_scale(const MultiTensor& tensors, const Operand& scale) {
  if (tensors.data.empty()) return;
  DeviceGuard g(scale.device);
  BRRR_CUDA_CHECK(kernels::multi_tensor_scale(tensors, scale.data, current_stream(scale.device)->handle));
}

std::size_t optimizer_coeffs_bytes() { return kernels::optimizer_coeffs_bytes(); }

void optimizer_write_coeffs(const OptimizerStep& step, void* dst, const StreamState& stream) {
  DeviceGuard g(stream.device);
  BRRR_CUDA_CHECK(kernels::optimizer_write_coeffs(step, dst, stream.handle));
}

}  // namespace brrr::backend
