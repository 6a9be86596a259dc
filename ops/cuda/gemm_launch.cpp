// CudaBackend::gemm: one cublasGemmStridedBatchedEx call on the current stream.
//
// Row-major onto column-major. brrr's C[m, n] is row-major and contiguous; read as
// column-major memory it is C^T, an [n, m] matrix with leading dimension n. Since
//     C^T = (A B)^T = B^T A^T,
// we ask cuBLAS for  C^T[n, m] = op(X)[n, k] * op(Y)[k, m]  with X over B's memory and Y
// over A's memory, i.e. cuBLAS's (m, n, k) = (n, m, k) and its first operand is B.
//
// Transpose flags. A [rows, cols] operand with strides (rs, cs) (in elements):
//   * row-major (cs == 1): element (r, c) sits at r*rs + c. Read column-major with leading
//     dimension rs that memory is the [cols, rows] matrix M^T. So op = N gives M^T, with
//     ld = rs, which cuBLAS needs >= cols (the rows of the stored column-major matrix).
//   * column-major (rs == 1): element (r, c) sits at r + c*cs: column-major M itself with
//     ld = cs >= rows. op = T gives M^T.
// Both operands must enter transposed (we want B^T and A^T), so in either case:
//     row-major -> CUBLAS_OP_N, ld = row stride (>= cols);
//     col-major -> CUBLAS_OP_T, ld = col stride (>= rows).
// For X = B [k, n]: N needs ld >= n, T needs ld >= k; for Y = A [m, k]: N needs ld >= k,
// T needs ld >= m: exactly "the other stride at least the size it steps over", which the op
// layer (ops/matmul.cpp) guarantees, copying otherwise. Strides of size-1 dims are
// normalised here too. Batch strides pass through (0: the same matrix for every batch).
//
// Compute types: f32 -> CUBLAS_COMPUTE_32F (CUBLAS_COMPUTE_32F_FAST_TF32 when allow_tf32),
// f64 -> CUBLAS_COMPUTE_64F, bf16/f16 -> CUBLAS_COMPUTE_32F (f32 accumulation, f32 alpha and
// beta). One cuBLAS handle per device, created on first use and never destroyed (destroying
// it at exit can outlive the CUDA context); calls on it are serialised by a mutex, and each
// call sets the current stream and a workspace of its own for that stream, allocated from
// brrr's caching allocator on that stream (cublasSetStream resets the workspace, and one
// workspace shared by two streams would race).
module;
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

struct DeviceBlas {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
  std::size_t workspace_bytes = 0;
  std::unordered_map<void*, Storage> workspaces;  // by cudaStream_t
};

DeviceBlas& device_blas(int device) {
  static std::mutex mutex;
  // Never destroyed: see the comment at the top.
  static auto* all = new std::unordered_map<int, std::unique_ptr<DeviceBlas>>;
  std::lock_guard lock(mutex);
  auto& entry = (*all)[device];
  if (!entry) entry = std::make_unique<DeviceBlas>();
  return *entry;
}

// An operand of cuBLAS (see the derivation at the top): its flag and leading dimension.
struct BlasOperand {
  cublasOperation_t op;
  std::int64_t ld;
};

BlasOperand blas_operand(const char* name, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  std::int64_t r = rows > 1 ? rows : 1, c = cols > 1 ? cols : 1;
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= c)) return {CUBLAS_OP_N, rows <= 1 ? c : rs};
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= r)) return {CUBLAS_OP_T, cols <= 1 ? r : cs};
  throw Error(ErrorKind::value, std::string("gemm: operand ") + name + " [" + std::to_string(rows) + ", " +
                                    std::to_string(cols) + "] with strides (" + std::to_string(rs) + ", " +
                                    std::to_string(cs) + ") is neither row- nor column-major");
}

bool fits_int(std::int64_t v) { return v >= 0 && v <= INT_MAX; }

// Called with blas.mutex held.
void ensure_handle(DeviceBlas& blas, int device) {
  if (blas.handle) return;
  BRRR_CUBLAS_CHECK(cublasCreate(&blas.handle));
  int major = 0;
  BRRR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before.
  blas.workspace_bytes = (major >= 9 ? 32u : 4u) << 20;
}

}  // namespace

void blas_prepare(int device) {
  DeviceGuard guard(device);
  DeviceBlas& blas = device_blas(device);
  std::lock_guard lock(blas.mutex);
  ensure_handle(blas, device);
}

void CudaBackend::gemm(const GemmArgs& g) {
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0) return;
  cudaDataType type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  double alpha64 = g.alpha, beta64 = g.beta;
  const void* alpha = &alpha32;
  const void* beta = &beta32;
  switch (g.dtype) {
    case DType::f32:
      type = CUDA_R_32F;
      compute = g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::f64:
      type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      alpha = &alpha64;
      beta = &beta64;
      break;
    case DType::bf16: type = CUDA_R_16BF; break;
    case DType::f16: type = CUDA_R_16F; break;
    case DType::i32: case DType::i64: case DType::boolean:
      throw Error(ErrorKind::dtype, std::string("gemm: unsupported dtype ") + to_string(g.dtype));
  }

  DeviceGuard device_guard(g.device);
  StreamPtr stream = current_stream(g.device);
  auto raw_stream = static_cast<cudaStream_t>(stream->handle);

  if (g.k == 0 && g.beta == 0) {  // an empty sum: C = 0 (all-zero bits in every float type)
    BRRR_CUDA_CHECK(cudaMemsetAsync(g.c, 0, static_cast<std::size_t>(g.batch * g.m * g.n) * itemsize(g.dtype), raw_stream));
    return;
  }

  // X over B's memory ([k, n]), Y over A's memory ([m, k]): C^T = op(X) op(Y).
  BlasOperand x = blas_operand("b", g.k, g.n, g.b_row_stride, g.b_col_stride);
  BlasOperand y = blas_operand("a", g.m, g.k, g.a_row_stride, g.a_col_stride);
  std::int64_t ldc = g.n;
  long long stride_x = g.b_batch_stride, stride_y = g.a_batch_stride, stride_c = g.m * g.n;

  DeviceBlas& blas = device_blas(g.device);
  std::lock_guard lock(blas.mutex);
  ensure_handle(blas, g.device);
  BRRR_CUBLAS_CHECK(cublasSetStream(blas.handle, raw_stream));
  void* workspace = nullptr;
  if (capture_underway(g.device)) {
    // Under CUDA graph capture: a workspace of the graph's own (cuBLAS must not allocate
    // while capturing, and a replay on another stream must not share eager work's one).
    workspace = capture_blas_workspace(g.device, *stream, blas.workspace_bytes);
  } else {
    auto ws = blas.workspaces.find(stream->handle);
    if (ws == blas.workspaces.end())
      ws = blas.workspaces.emplace(stream->handle, allocate_device(blas.workspace_bytes, g.device, stream)).first;
    workspace = ws->second.data();
  }
  BRRR_CUBLAS_CHECK(cublasSetWorkspace(blas.handle, workspace, blas.workspace_bytes));

  bool small = fits_int(g.n) && fits_int(g.m) && fits_int(g.k) && fits_int(x.ld) && fits_int(y.ld) &&
               fits_int(ldc) && fits_int(g.batch);
  if (small) {
    BRRR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas.handle, x.op, y.op, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), alpha, g.b,
        type, static_cast<int>(x.ld), stride_x, g.a, type, static_cast<int>(y.ld), stride_y, beta, g.c, type,
        static_cast<int>(ldc), stride_c, static_cast<int>(g.batch), compute, CUBLAS_GEMM_DEFAULT));
  } else {  // the 64-bit API for sizes past INT_MAX
    BRRR_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(blas.handle, x.op, y.op, g.n, g.m, g.k, alpha, g.b, type, x.ld,
                                                    stride_x, g.a, type, y.ld, stride_y, beta, g.c, type, ldc,
                                                    stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT));
  }
}

}  // namespace brrr::backend
