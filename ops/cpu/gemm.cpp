// CpuBackend::gemm: C[b] = alpha * A[b] @ B[b] + beta * C[b] with Eigen.
// A and B are mapped in place (Eigen::Map) as row-major or column-major matrices with an
// outer stride, whichever their strides are; an operand with neither inner stride 1 is
// gathered into a dense matrix first. f32 and f64 multiply in their own type; bf16 and f16
// are widened to f32, multiplied there and rounded once when stored (as cuBLAS does with
// CUBLAS_COMPUTE_32F). Batch strides may be 0 (a broadcast operand).
module;
#include <Eigen/Dense>

#include <cstdint>
#include <string>
#include "backend/contract.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

using Eigen::Dynamic;
using Eigen::Index;
template <class T> using RowMat = Eigen::Matrix<T, Dynamic, Dynamic, Eigen::RowMajor>;
template <class T> using ColMat = Eigen::Matrix<T, Dynamic, Dynamic, Eigen::ColMajor>;
template <class T> using RowMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T> using ColMap = Eigen::Map<const ColMat<T>, 0, Eigen::OuterStride<>>;
template <class T> using AnyMap = Eigen::Map<const RowMat<T>, 0, Eigen::Stride<Dynamic, Dynamic>>;

// Calls f(matrix) with p viewed as a [rows, cols] matrix with strides (rs, cs): a row-major
// map when columns are contiguous, a column-major one when rows are, else a dense copy.
template <class T, class F>
void with_matrix(const T* p, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs, F&& f) {
  if (cs == 1 || cols <= 1) {
    f(RowMap<T>(p, rows, cols, Eigen::OuterStride<>(rows <= 1 ? cols : rs)));
  } else if (rs == 1 || rows <= 1) {
    f(ColMap<T>(p, rows, cols, Eigen::OuterStride<>(cols <= 1 ? rows : cs)));
  } else {
    RowMat<T> dense = AnyMap<T>(p, rows, cols, Eigen::Stride<Dynamic, Dynamic>(rs, cs));
    f(RowMap<T>(dense.data(), rows, cols, Eigen::OuterStride<>(cols)));
  }
}

// f32 / f64: Eigen's GEMM straight on the operands.
template <class T> void gemm_native(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  for (std::int64_t i = 0; i < g.batch; ++i) {
    Eigen::Map<RowMat<T>> C(c + i * g.m * g.n, g.m, g.n);
    with_matrix(a + i * g.a_batch_stride, g.m, g.k, g.a_row_stride, g.a_col_stride, [&](const auto& A) {
      with_matrix(b + i * g.b_batch_stride, g.k, g.n, g.b_row_stride, g.b_col_stride, [&](const auto& B) {
        if (g.beta == 0) {  // C is not read: it may hold anything, NaN included
          if (g.alpha == 1) C.noalias() = A * B;
          else C.noalias() = alpha * (A * B);
        } else {
          C = beta * C;
          C.noalias() += alpha * (A * B);
        }
      });
    });
  }
}

// bf16 / f16: widen to f32, multiply, round once.
template <class T> RowMat<float> widen(const T* p, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  RowMat<float> m(rows, cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t col = 0; col < cols; ++col) m(r, col) = static_cast<float>(p[r * rs + col * cs]);
  return m;
}

template <class T> void gemm_widened(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  for (std::int64_t i = 0; i < g.batch; ++i) {
    RowMat<float> A = widen(a + i * g.a_batch_stride, g.m, g.k, g.a_row_stride, g.a_col_stride);
    RowMat<float> B = widen(b + i * g.b_batch_stride, g.k, g.n, g.b_row_stride, g.b_col_stride);
    RowMat<float> C(g.m, g.n);
    C.noalias() = A * B;
    T* ci = c + i * g.m * g.n;
    for (std::int64_t r = 0; r < g.m; ++r)
      for (std::int64_t col = 0; col < g.n; ++col) {
        T& out = ci[r * g.n + col];
        float v = alpha * C(r, col);
        if (g.beta != 0) v += beta * static_cast<float>(out);
        out = T(v);
      }
  }
}

}  // namespace

void CpuBackend::gemm(const GemmArgs& args) {
  if (args.batch <= 0 || args.m <= 0 || args.n <= 0) return;
  switch (args.dtype) {
    case DType::f32: return gemm_native<float>(args);
    case DType::f64: return gemm_native<double>(args);
    case DType::bf16: return gemm_widened<bfloat16>(args);
    case DType::f16: return gemm_widened<half>(args);
    case DType::i32: case DType::i64: case DType::boolean:
      throw Error(ErrorKind::dtype, std::string("gemm: unsupported dtype ") + to_string(args.dtype));
  }
}

}  // namespace brrr::backend
