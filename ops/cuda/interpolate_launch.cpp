// CudaBackend::upsample / upsample_backward: launch ops/cuda/interpolate.cu on the current
// stream of the operands' device and check the launch status.
module;
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {
void check_operands(const char* what, const Operand& big, const Operand& small) {
  if (big.ndim != 5 || small.ndim != 5 || big.dtype != small.dtype || !is_floating_point(big.dtype) ||
      big.sizes[0] != small.sizes[0] || big.sizes[1] != small.sizes[1] || big.device != small.device)
    throw Error(ErrorKind::value, std::string("CudaBackend::") + what + ": invalid operands (" +
                                      std::to_string(big.ndim) + "-d " + to_string(big.dtype) + ", " +
                                      std::to_string(small.ndim) + "-d " + to_string(small.dtype) + ")");
}
}  // namespace

void CudaBackend::upsample(const Operand& out, const Operand& in, const Upsample& g) {
  check_operands("upsample", out, in);
  if (out.numel == 0) return;
  DeviceGuard guard(out.device);
  BRRR_CUDA_CHECK(kernels::upsample(out, in, g, current_stream(out.device)->handle));
}

void CudaBackend::upsample_backward(const Operand& grad_in, const Operand& grad_out, const Upsample& g) {
  check_operands("upsample_backward", grad_out, grad_in);
  if (grad_in.dtype != DType::f32 && grad_in.dtype != DType::f64)
    throw Error(ErrorKind::dtype, std::string("CudaBackend::upsample_backward: f32/f64 gradients only, got ") +
                                      to_string(grad_in.dtype));
  if (grad_out.numel == 0 || grad_in.numel == 0) return;
  DeviceGuard guard(grad_in.device);
  BRRR_CUDA_CHECK(kernels::upsample_backward(grad_in, grad_out, g, current_stream(grad_in.device)->handle));
}

}  // namespace brrr::backend
