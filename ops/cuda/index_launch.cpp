// CudaBackend::gather / scatter_add / scatter_reduce: launch ops/cuda/index.cu on the current stream of the
// operands' device and check the launch status. Out-of-range indices are reported through
// the device's deferred error flag (cuda/device_errors.cpp) with the code of the op the
// thread is running (set by ops/index.cpp), so nothing here waits for the device. The
// deterministic scatter_add takes its sort buffers from the caching allocator on the current
// stream (stream-ordered: released when this call returns, reused only by later work).
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

bool is_index_dtype(DType d) { return d == DType::i32 || d == DType::i64; }

[[noreturn]] void bad_operands(const char* what, const Operand& out, const Operand& index) {
  throw Error(ErrorKind::value, std::string("CudaBackend::") + what + ": invalid operands (out " +
                                    std::to_string(out.ndim) + "-d " + to_string(out.dtype) + ", index " +
                                    std::to_string(index.ndim) + "-d " + to_string(index.dtype) + ")");
}

}  // namespace

void CudaBackend::gather(const Operand& out, const Operand& in, int dim, const Operand& index, CheckedOp op) {
  if (out.numel == 0) return;
  if (!is_index_dtype(index.dtype) || in.dtype != out.dtype || index.ndim != out.ndim || in.ndim != out.ndim)
    bad_operands("gather", out, index);
  DeviceGuard g(out.device);
  const int code = static_cast<int>(op);
  BRRR_CUDA_CHECK(kernels::gather(out, in, dim, index, device_error_flag(out.device), code,
                                  current_stream(out.device)->handle));
}

void CudaBackend::scatter_add(const Operand& out, int dim, const Operand& index, const Operand& src,
                              bool deterministic, CheckedOp op) {
  if (index.numel == 0) return;
  if (!is_index_dtype(index.dtype) || src.dtype != out.dtype || index.ndim != out.ndim || src.ndim != index.ndim)
    bad_operands("scatter_add", out, index);
  if (out.dtype == DType::boolean)
    throw Error(ErrorKind::dtype, "scatter_add: bool tensors are not supported");
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  const int code = static_cast<int>(op);
  int* flag = device_error_flag(out.device);
  // Integer sums are exact in any order: atomics are already reproducible for them.
  if (!deterministic || !is_floating_point(out.dtype)) {
    BRRR_CUDA_CHECK(kernels::scatter_add_atomic(out, dim, index, src, flag, code, stream->handle));
    return;
  }
  std::size_t bytes = kernels::scatter_add_sorted_workspace_bytes(out, index);
  Storage workspace = allocate_device(bytes, out.device, stream);
  BRRR_CUDA_CHECK(kernels::scatter_add_sorted(out, dim, index, src, workspace.data(), bytes, flag, code, stream->handle));
}

void CudaBackend::scatter_reduce(ScatterOp op, const Operand& out, int dim, const Operand& index, const Operand& src,
                                 CheckedOp code) {
  if (index.numel == 0) return;
  if (!is_index_dtype(index.dtype) || src.dtype != out.dtype || index.ndim != out.ndim || src.ndim != index.ndim)
    bad_operands("scatter_reduce", out, index);
  DeviceGuard g(out.device);
  BRRR_CUDA_CHECK(kernels::scatter_reduce(op, out, dim, index, src, device_error_flag(out.device), static_cast<int>(code),
                                          current_stream(out.device)->handle));
}

}  // namespace brrr::backend
