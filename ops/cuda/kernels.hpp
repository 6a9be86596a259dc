// The CUDA kernels' launch functions: a plain header (no modules, no CUDA headers) shared by
// nvcc (.cu files) and the clang-built backend (ops/cuda/backend_cuda.cpp). Every launch
// enqueues on `stream` (a cudaStream_t) and returns the cudaError_t of the launch as int.
#pragma once
#include <cstdint>

namespace brrr::kernels {

/// Mirrors brrr::DType's order (static_asserts in backend_cuda.cpp keep them equal).
enum class ScalarType : std::uint8_t { f32, f64, bf16, f16, i32, i64, boolean };

inline constexpr int max_dims = 8;

/// A strided operand passed to kernels by value (no device-side metadata upload).
struct Strided {
  void* data;
  ScalarType dtype;
  int ndim;
  std::int64_t numel;
  std::int64_t sizes[max_dims];
  std::int64_t strides[max_dims];
};

/// out[i] = value (converted to out's dtype).
int fill(const Strided& out, double value, void* stream);
/// dst[i] = convert(src[i]) for same-shape operands of any dtypes and strides.
int copy(const Strided& dst, const Strided& src, void* stream);
/// out (contiguous)[i] = start + i * step.
int arange(const Strided& out, double start, double step, void* stream);
/// Turns Philox words into values (ops/random_transform.hpp): dist 0 uniform, 1 normal,
/// 2 integer in [low, high). out is contiguous.
int random_transform(const Strided& out, const std::uint32_t* words, int dist, std::int64_t low,
                     std::int64_t high, void* stream);

/// Elementwise ops (codes: brrr::elementwise::Unary / Binary in ops/elementwise_math.hpp).
/// out and in share a shape; for binary, a and b are already broadcast to out's shape and
/// share a dtype; comparisons write bool. lo/hi: clamp's bounds.
int unary(int op, const Strided& out, const Strided& in, double lo, double hi, void* stream);
int binary(int op, const Strided& out, const Strided& a, const Strided& b, void* stream);
int binary_scalar(int op, const Strided& out, const Strided& a, double s, bool scalar_first, void* stream);
int where(const Strided& out, const Strided& cond, const Strided& a, const Strided& b, void* stream);

}  // namespace brrr::kernels
