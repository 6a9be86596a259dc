// CudaBackend's elementwise members: check the launch status of ops/cuda/elementwise.cu.
module;
#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

kernels::Strided strided(const Operand& o);  // ops/cuda/backend_cuda.cpp

void CudaBackend::unary(UnaryOp op, const Operand& out, const Operand& in, double p0, double p1) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::unary(static_cast<int>(op), strided(out), strided(in), p0, p1,
                                 current_stream(out.device)->handle));
}

void CudaBackend::binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::binary(static_cast<int>(op), strided(out), strided(a), strided(b),
                                  current_stream(out.device)->handle));
}

void CudaBackend::binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::binary_scalar(static_cast<int>(op), strided(out), strided(a), s, scalar_first,
                                         current_stream(out.device)->handle));
}

void CudaBackend::where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::where(strided(out), strided(cond), strided(a), strided(b), current_stream(out.device)->handle));
}

}  // namespace brrr::backend
