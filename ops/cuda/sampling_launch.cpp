// CudaBackend::poisson: launches ops/cuda/sampling.cu on the current stream of the operands'
// device; negative or NaN rates are reported through the device's deferred error flag
// (cuda/device_errors.cpp) as CheckedOp::poisson, so nothing here waits for the device.
module;
#include <cstdint>
#include <string>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

void CudaBackend::poisson(const Operand& out, const Operand& rates, std::uint64_t seed, std::uint64_t offset) {
  if (out.numel == 0) return;
  if (!is_floating_point(out.dtype) || rates.dtype != out.dtype || rates.numel != out.numel)
    throw Error(ErrorKind::value, std::string("CudaBackend::poisson: invalid operands (out ") + to_string(out.dtype) + ", rates " +
                                      to_string(rates.dtype) + ")");
  DeviceGuard guard(out.device);
  BRRR_CUDA_CHECK(kernels::poisson(out, rates, seed, offset, device_error_flag(out.device),
                                   static_cast<int>(CheckedOp::poisson), current_stream(out.device)->handle));
}

}  // namespace brrr::backend
