// CudaBackend's elementwise members: check the launch status of ops/cuda/elementwise.cu.
// Integer rounding divisions pass the deferred device error flag for zero divisors.
module;
#include "backend/contract.hpp"
#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// The deferred error flag and code for integer rounding divisions (zero divisors); none for
// anything else, so that other ops never create the flag.
struct DivisionReport {
  int* flag = nullptr;
  int code = 0;
};
DivisionReport division_report(BinaryOp op, const Operand& out) {
  if (is_floating_point(out.dtype)) return {};
  switch (op) {
    case BinaryOp::floor_divide: return {device_error_flag(out.device), static_cast<int>(CheckedOp::floor_divide)};
    case BinaryOp::trunc_divide: return {device_error_flag(out.device), static_cast<int>(CheckedOp::trunc_divide)};
    case BinaryOp::remainder: return {device_error_flag(out.device), static_cast<int>(CheckedOp::remainder)};
    case BinaryOp::fmod: return {device_error_flag(out.device), static_cast<int>(CheckedOp::fmod)};
    default: return {};
  }
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Operand& out, const Operand& in, double p0, double p1) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::unary(op, out, in, p0, p1, current_stream(out.device)->handle));
}

void CudaBackend::binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b) {
  DeviceGuard g(out.device);
  DivisionReport r = division_report(op, out);
  BRRR_CUDA_CHECK(kernels::binary(op, out, a, b, r.flag, r.code, current_stream(out.device)->handle));
}

void CudaBackend::binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first) {
  DeviceGuard g(out.device);
  DivisionReport r = division_report(op, out);
  BRRR_CUDA_CHECK(kernels::binary_scalar(op, out, a, s, scalar_first, r.flag, r.code,
                                         current_stream(out.device)->handle));
}

void CudaBackend::where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b) {
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::where(out, cond, a, b, current_stream(out.device)->handle));
}

}  // namespace brrr::backend
