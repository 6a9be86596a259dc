// backend/contract.hpp — the one vocabulary of the backend contract, for both compilers.
// clang includes it in the global module fragment of brrr.tensor (which exports DType) and
// brrr.backend (which exports the rest); nvcc includes it in every .cu file. So a kernel sees
// exactly the types the op layer builds: one dtype enum, one strided operand, one window and
// optimizer struct, one set of conversion rules, and ONE list per op kind (an X-macro), from
// which the enums, their names and the exhaustive dispatch are generated. Standard headers
// only (it is installed with the interface units); nothing here allocates or throws.
//
// Adding an op to a list: the kernels of both backends are instantiated for every entry by
// with_op(), and ops/elementwise_math.hpp static_asserts that each entry has its math, so an
// entry without a kernel does not compile on either backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

// Functions compiled for the host and, under nvcc, for the device too.
#ifdef __CUDACC__
#define BRRR_HD __host__ __device__ __forceinline__
#else
#define BRRR_HD inline
#endif

namespace brrr {

// ---------------------------------------------------------------------------------------
// Element types (exported by brrr.tensor)
// ---------------------------------------------------------------------------------------

/// Element types. A closed set: every switch over it is exhaustive (-Werror=switch).
/// `boolean` is PyTorch's torch.bool (one byte, 0 or 1).
enum class DType : std::uint8_t { f32, f64, bf16, f16, i32, i64, boolean };

/// Bytes per element: f32 4, f64 8, bf16 2, f16 2, i32 4, i64 8, boolean 1.
BRRR_HD constexpr std::size_t itemsize(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

/// f32, f64, bf16, f16.
BRRR_HD constexpr bool is_floating_point(DType dtype) {
  switch (dtype) {
    case DType::f32: case DType::f64: case DType::bf16: case DType::f16: return true;
    case DType::i32: case DType::i64: case DType::boolean: return false;
  }
  return false;
}

}  // namespace brrr

namespace brrr::stream_check {
class AccessLog;  // backend/stream_check.hpp: the streams that used an allocation
}  // namespace brrr::stream_check

namespace brrr::backend {

// ---------------------------------------------------------------------------------------
// Operands and argument structs: what every kernel receives, by value
// ---------------------------------------------------------------------------------------

/// Most dims an operand may have: shapes and strides travel by value in fixed arrays.
inline constexpr int max_dims = 8;

/// A strided view as kernels see it (CUDA kernels take it by value: no device-side metadata
/// upload). `data` already includes the layout offset; sizes and strides are in elements.
struct Operand {
  void* data = nullptr;
  DType dtype = DType::f32;
  int device = -1;  ///< CUDA device index, -1 on the CPU
  int ndim = 0;
  std::int64_t numel = 0;
  std::int64_t sizes[max_dims] = {};
  std::int64_t strides[max_dims] = {};
  // Host-side bookkeeping, ignored by kernels: the storage's stream record and the op's name
  // (backend::note_access, cuda/stream_order.cpp).
  stream_check::AccessLog* log = nullptr;
  const char* op = "";
};

/// Dropout of the fused attention's probabilities (attention_forward / attention_backward;
/// Srivastava et al. 2014, inverted as in PyTorch): element (b, h, i, j) of the [B, H, L, S]
/// probabilities is kept, and scaled by 1 / (1 - p), iff the uniform that rand() would draw
/// for element e = ((b H + h) L + i) S + j of a [B, H, L, S] tensor at (seed, offset) is >= p:
/// f32 (every dtype but f64) uniform_bits(word(offset + e), 24) >= float(p); f64 two words,
/// uniform53(word(offset + 2e), word(offset + 2e + 1)) >= p. That is exactly the mask of
/// dropout(weights, p) in the composite attention from the same generator state. p == 0: no
/// dropout. Under a CUDA graph capture seed_offset points to device memory {seed, offset}
/// that the graph's replay hook writes, and the words are read at (seed_offset[0],
/// seed_offset[1] + offset); otherwise it is null and (seed, offset) are used as given.
/// keep_bits: null, or the mask as bits, [B H L, attention_keep_words(S)] 32-bit words, bit
/// j % 32 of word (row, j / 32) set iff element (row, j) is kept. CUDA's tensor-core kernels
/// (bf16/f16, f32 with TF32) write it in the forward, where they draw the words, and read it in
/// the backward instead of drawing them again (there it is required); bits of elements the
/// attention masks (causal, past S) are unspecified, words of tiles the forward skips zero. The
/// CPU and CUDA's f32/f64 kernels neither write nor read it.
struct AttentionDropout {
  double p = 0;
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
  const std::uint64_t* seed_offset = nullptr;
  std::uint32_t* keep_bits = nullptr;
};
/// 32-bit words per row of AttentionDropout::keep_bits for S keys.
constexpr std::int64_t attention_keep_words(std::int64_t s) { return (s + 31) / 32; }

/// Geometry of a 2-D convolution/pooling window sweep over an [N, C, H, W] input.
struct Window2d {
  std::int64_t n = 0, c = 0, h = 0, w = 0;  ///< input
  std::int64_t kh = 1, kw = 1;              ///< kernel
  std::int64_t sh = 1, sw = 1;              ///< stride
  std::int64_t ph = 0, pw = 0;              ///< padding (top/left; bottom/right as needed)
  std::int64_t dh = 1, dw = 1;              ///< dilation
  std::int64_t out_h = 0, out_w = 0;        ///< output positions
};

/// How interpolate (ops/interpolate.cpp) maps output positions to input positions, per
/// spatial dim of an [N, C, D, H, W] operand pair (4-D inputs have D = 1, 3-D inputs D = H = 1
/// on both sides): nearest (PyTorch's floor rule), nearest_exact (PyTorch's "nearest-exact",
/// pixel centres rounded half up), linear (bi/trilinear over the dims) or cubic (Keys' cubic
/// convolution, A = -0.75, 4 taps per dim). Math: ops/interpolate_math.hpp.
enum class UpsampleMode : std::uint8_t { nearest, nearest_exact, linear, cubic };
struct Upsample {
  UpsampleMode mode = UpsampleMode::nearest;
  bool align_corners = false;  ///< linear and cubic only
  /// The user's scale factors, 0 where none is used (then in / out): PyTorch's source-index
  /// scale is 1 / scale_factor when one is given and recompute_scale_factor is not set.
  double scale_factor_d = 0, scale_factor_h = 0, scale_factor_w = 0;
};

/// Which update an optimizer_step applies (formulas in optim/, with their sources).
enum class OptimizerKind : std::uint8_t { sgd, adam, adamw };

/// One fused optimizer update over many same-dtype, contiguous tensors of one device.
/// Pointers per tensor: param, grad, and up to three state buffers (SGD: momentum;
/// Adam/AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq when amsgrad). Unused entries are nullptr.
struct OptimizerStep {
  OptimizerKind kind = OptimizerKind::sgd;
  DType dtype = DType::f32;
  int device = -1;
  std::vector<void*> params, state1, state2, state3;
  std::vector<const void*> grads;
  std::vector<std::int64_t> numels;
  double lr = 0, weight_decay = 0;
  double momentum = 0, dampening = 0;                 ///< SGD
  bool nesterov = false, first_step = false;          ///< SGD: first_step initialises momentum = grad
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;      ///< Adam/AdamW
  double bias_correction1 = 1, bias_correction2 = 1;  ///< 1 - beta^t
  bool amsgrad = false, maximize = false;
  /// CUDA only: when set, the kernel reads the derived hyperparameters from this device
  /// memory (written by optimizer_write_coeffs) instead of the numbers above: a captured step
  /// whose learning rate and bias corrections change between replays.
  const void* device_coeffs = nullptr;
};

/// Many contiguous tensors of one floating dtype on one device, each of numels[k] >= 1 elements
/// at data[k] (the multi-tensor kernels: clip_grad_norm_'s norms and scaling).
struct MultiTensor {
  DType dtype = DType::f32;
  int device = -1;
  std::vector<void*> data;
  std::vector<std::int64_t> numels;
};

/// The operand of a GEMM whose sum over k a bias-gradient epilogue writes (GemmArgs).
enum class GemmOperand : std::uint8_t { a, b };
/// A GEMM's activation epilogue (GemmArgs::activation).
enum class GemmActivation : std::uint8_t { none, gelu_tanh, gelu_tanh_backward };

/// A batched matrix product C[b] = alpha * A[b] @ B[b] + beta * C[b] with A [batch, m, k],
/// B [batch, k, n], C [batch, m, n] contiguous. In A and B one of the row/col strides is 1
/// (the op layer copies otherwise); batch strides may be 0 (broadcast). All in elements.
/// Optional epilogues, at most one of the two, batch == 1 only (CUDA: fused into the GEMM by
/// cuBLASLt where it has a kernel for the case, else a separate kernel after it):
///  * bias (C's dtype, contiguous [n]): C[i, j] = alpha (A B)[i, j] + beta C[i, j] + bias[j],
///    computed in the accumulation type and rounded once.
///  * bias_grad (C's dtype, contiguous; alpha == 1): the sum over k of one operand, written
///    beside C: of B, bias_grad[j] = sum_k B[k, j] ([n]); of A, bias_grad[i] = sum_k A[i, k]
///    ([m]); accumulated in f32 (f64 for f64; the CPU in f64), zeros for k == 0. A linear
///    layer's weight-gradient GEMM gives its bias gradient so.
///  * activation (ops/fused_mlp.cpp; batch 1, no bias_grad, no f32_out, alpha 1, beta 0),
///    with aux contiguous [m, n] of C's dtype:
///    gelu_tanh: aux = A B (+ bias) and C = gelu(aux) in its tanh form (Hendrycks & Gimpel
///    2016, the form GPT-2 trains with; cuBLASLt's GELU_AUX epilogue), the pre-activation
///    kept for the backward; gelu_tanh_backward: C = (A B) * gelu'(aux), the gradient through
///    the activation of the product that produced aux. A backend may run either as the product
///    and then elementwise kernels (backend::gemm_activation_unfused).
/// A and B are of `dtype`; C (and bias_grad) too, unless f32_out.
struct GemmArgs {
  DType dtype = DType::f32;
  /// bf16/f16 operands only: C and bias_grad are f32, the f32 accumulation stored unrounded
  /// (no bias epilogue then). Autocast's linear writes its f32 input's and weight's gradients
  /// so, without a bf16 result and a cast (ops/linalg.cpp).
  bool f32_out = false;
  int device = -1;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  const void* a = nullptr;
  std::int64_t a_batch_stride = 0, a_row_stride = 0, a_col_stride = 0;
  const void* b = nullptr;
  std::int64_t b_batch_stride = 0, b_row_stride = 0, b_col_stride = 0;
  void* c = nullptr;
  double alpha = 1, beta = 0;
  bool allow_tf32 = false;
  const void* bias = nullptr;
  void* bias_grad = nullptr;
  GemmOperand bias_grad_of = GemmOperand::b;
  GemmActivation activation = GemmActivation::none;
  void* aux = nullptr;  ///< the activation's pre-activation: written (gelu_tanh) or read
};

/// What a random fill draws.
enum class Distribution : std::uint8_t { uniform, normal, integer };

// ---------------------------------------------------------------------------------------
// The op lists. One entry per op; the enum, its names and with_op() come from the list.
// ---------------------------------------------------------------------------------------

/// The parametrised activations (ops/activation.cpp, math in ops/activation_math.hpp), part
/// of BRRR_UNARY_OPS; p0/p1 carry their parameters: leaky_relu (negative_slope), elu (alpha,
/// scale; selu is elu with fixed ones), celu (alpha), softplus (beta, threshold), hardtanh
/// (min_val, max_val).
#define BRRR_ACTIVATION_OPS(X)           \
  X(leaky_relu, "leaky_relu", promote)   \
  X(elu, "elu", promote)                 \
  X(celu, "celu", promote)               \
  X(softplus, "softplus", promote)       \
  X(hardtanh, "hardtanh", promote)       \
  X(hardswish, "hardswish", promote)     \
  X(hardsigmoid, "hardsigmoid", promote) \
  X(mish, "mish", promote)               \
  X(logsigmoid, "logsigmoid", promote)   \
  X(softsign, "softsign", promote)

/// Elementwise functions of one operand: X(op, name, integers). `name` is the public op's
/// (errors, NVTX ranges); `integers`: keep (integer inputs keep their dtype; bool is refused),
/// promote (integer and bool inputs compute in f32, as PyTorch's floating functions) or only
/// (integer kernels only: the op layer refuses floats). The kernels exist for floating dtypes
/// unless `only`, and for integers unless `promote`. Parameters p0/p1: clamp's bounds lo/hi
/// (-inf/+inf when absent; NaN stays NaN); round's decimals (p0); nan_to_num's replacements
/// of -inf/+inf (p0/p1; NaN becomes 0).
#define BRRR_UNARY_OPS(X)             \
  X(neg, "neg", keep)                 \
  X(abs, "abs", keep)                 \
  X(exp, "exp", promote)              \
  X(log, "log", promote)              \
  X(log1p, "log1p", promote)          \
  X(sqrt, "sqrt", promote)            \
  X(rsqrt, "rsqrt", promote)          \
  X(tanh, "tanh", promote)            \
  X(sigmoid, "sigmoid", promote)      \
  X(relu, "relu", keep)               \
  BRRR_ACTIVATION_OPS(X)              \
  X(gelu_tanh, "gelu", promote)       \
  X(gelu_erf, "gelu", promote)        \
  X(silu, "silu", promote)            \
  X(sin, "sin", promote)              \
  X(cos, "cos", promote)              \
  X(erf, "erf", promote)              \
  X(sign, "sign", keep)               \
  X(clamp, "clamp", keep)             \
  X(tan, "tan", promote)              \
  X(asin, "asin", promote)            \
  X(acos, "acos", promote)            \
  X(atan, "atan", promote)            \
  X(sinh, "sinh", promote)            \
  X(cosh, "cosh", promote)            \
  X(expm1, "expm1", promote)          \
  X(log2, "log2", promote)            \
  X(log10, "log10", promote)          \
  X(exp2, "exp2", promote)            \
  X(erfc, "erfc", promote)            \
  X(erfinv, "erfinv", promote)        \
  X(lgamma, "lgamma", promote)        \
  X(digamma, "digamma", promote)      \
  X(trigamma, "polygamma", promote)   \
  X(floor, "floor", keep)             \
  X(ceil, "ceil", keep)               \
  X(round, "round", keep)             \
  X(trunc, "trunc", keep)             \
  X(frac, "frac", promote)            \
  X(reciprocal, "reciprocal", promote) \
  X(square, "square", keep)           \
  X(nan_to_num, "nan_to_num", keep)   \
  X(bitwise_not, "bitwise_not", only)

/// Elementwise functions of two operands of one dtype: X(op, name, kind). Kinds:
/// arithmetic (the result has the operands' dtype), floating (likewise, but integer and bool
/// operands compute in f32, as true division), comparison (writes bool; the logical ops are
/// comparisons with zero), bitwise (integers and bool only), rounding (the rounding
/// divisions: on integers a zero divisor is reported, Error(value) on the CPU, the deferred
/// device error on CUDA). relu_backward(grad, x) = x <= 0 ? 0 : grad; gelu_erf_backward and
/// gelu_tanh_backward(grad, x) = grad * gelu'(x) (exact and tanh-approximated gelu).
#define BRRR_BINARY_OPS(X)                                        \
  X(add, "add", arithmetic)                                       \
  X(sub, "sub", arithmetic)                                       \
  X(mul, "mul", arithmetic)                                       \
  X(div, "div", floating)                                         \
  X(pow, "pow", arithmetic)                                       \
  X(maximum, "maximum", arithmetic)                               \
  X(minimum, "minimum", arithmetic)                               \
  X(eq, "eq", comparison)                                         \
  X(ne, "ne", comparison)                                         \
  X(lt, "lt", comparison)                                         \
  X(le, "le", comparison)                                         \
  X(gt, "gt", comparison)                                         \
  X(ge, "ge", comparison)                                         \
  X(floor_divide, "floor_divide", rounding)                       \
  X(trunc_divide, "div (rounding_mode trunc)", rounding)          \
  X(remainder, "remainder", rounding)                             \
  X(fmod, "fmod", rounding)                                       \
  X(relu_backward, "relu_backward", arithmetic)                   \
  X(gelu_erf_backward, "gelu_backward", floating)                 \
  X(gelu_tanh_backward, "gelu_backward", floating)                \
  X(atan2, "atan2", floating)                                     \
  X(hypot, "hypot", floating)                                     \
  X(logaddexp, "logaddexp", floating)                             \
  X(xlogy, "xlogy", floating)                                     \
  X(copysign, "copysign", floating)                               \
  X(logical_and, "logical_and", comparison)                       \
  X(logical_or, "logical_or", comparison)                         \
  X(logical_xor, "logical_xor", comparison)                       \
  X(bitwise_and, "bitwise_and", bitwise)                          \
  X(bitwise_or, "bitwise_or", bitwise)                            \
  X(bitwise_xor, "bitwise_xor", bitwise)                          \
  X(bitwise_left_shift, "bitwise_left_shift", bitwise)            \
  X(bitwise_right_shift, "bitwise_right_shift", bitwise)

/// Reductions over a dims mask: X(op, name). max/min optionally write the index along a
/// single reduced dim.
#define BRRR_REDUCE_OPS(X) \
  X(sum, "sum")            \
  X(max, "max")            \
  X(min, "min")

/// Inclusive scans along the last dim of a contiguous [rows, n] operand: X(op, name).
/// cummax/cummin also write the index of the running extreme (the last one on ties; a NaN
/// is the extreme once seen, PyTorch's rule).
#define BRRR_SCAN_OPS(X)          \
  X(cumsum, "cumsum")             \
  X(cumprod, "cumprod")           \
  X(cummax, "cummax")             \
  X(cummin, "cummin")             \
  X(logcumsumexp, "logcumsumexp")

/// The non-additive reductions of scatter_reduce's kernel (sum is scatter_add's, mean is the
/// op layer's sum / count): X(op, name). assign: the destination takes the source (one of
/// them where several meet: the last in row-major order on the CPU, any on CUDA). amax/amin
/// propagate NaN. The math: ops/scatter_math.hpp.
#define BRRR_SCATTER_OPS(X) \
  X(assign, "assign")       \
  X(prod, "prod")           \
  X(amax, "amax")           \
  X(amin, "amin")

/// The ops whose kernels validate their inputs: X(op, name, kind). The CPU kernels throw at
/// the call (kind index: Error(index); division: Error(value)); the CUDA kernels store the
/// op's code (its enumerator) into the device's deferred error flag, raised at the next sync
/// point (cuda/device_errors.cpp). `name` is the public op's, for the message.
#define BRRR_CHECKED_OPS(X)                                 \
  X(embedding, "embedding", index)                          \
  X(gather, "gather", index)                                \
  X(scatter_add, "scatter_add", index)                      \
  X(scatter, "scatter", index)                              \
  X(scatter_reduce, "scatter_reduce", index)                \
  X(index_add, "index_add", index)                          \
  X(index_copy, "index_copy", index)                        \
  X(index_fill, "index_fill", index)                        \
  X(index_select, "index_select", index)                    \
  X(one_hot, "one_hot", index)                              \
  X(nll_target, "cross_entropy/nll_loss (target)", index)  \
  X(floor_divide, "floor_divide", division)                 \
  X(trunc_divide, "div (rounding_mode trunc)", division)    \
  X(remainder, "remainder", division)                       \
  X(fmod, "fmod", division)                                 \
  X(max_unpool2d, "max_unpool2d", index)                    \
  X(poisson, "poisson", domain)

#define BRRR_ENUMERATOR(op, ...) op,
enum class UnaryOp : std::uint8_t { BRRR_UNARY_OPS(BRRR_ENUMERATOR) };
enum class BinaryOp : std::uint8_t { BRRR_BINARY_OPS(BRRR_ENUMERATOR) };
enum class ReduceOp : std::uint8_t { BRRR_REDUCE_OPS(BRRR_ENUMERATOR) };
enum class ScanOp : std::uint8_t { BRRR_SCAN_OPS(BRRR_ENUMERATOR) };
enum class ScatterOp : std::uint8_t { BRRR_SCATTER_OPS(BRRR_ENUMERATOR) };
/// 0 is no op: a clear deferred error flag.
enum class CheckedOp : std::uint8_t { none, BRRR_CHECKED_OPS(BRRR_ENUMERATOR) };
#undef BRRR_ENUMERATOR

/// How a unary op treats integer inputs (the third column of BRRR_UNARY_OPS).
enum class Integers : std::uint8_t { keep, promote, only };
/// What a binary op computes (the third column of BRRR_BINARY_OPS).
enum class BinaryKind : std::uint8_t { arithmetic, floating, comparison, bitwise, rounding };

#define BRRR_NAME_CASE(E, op, name, ...) \
  case E::op: return name;
#define BRRR_COLUMN_CASE(E, V, op, name, value) \
  case E::op: return V::value;

BRRR_HD constexpr const char* name_of(UnaryOp op) {
  switch (op) {
#define BRRR_CASE(op, name, integers) BRRR_NAME_CASE(UnaryOp, op, name)
    BRRR_UNARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}
BRRR_HD constexpr Integers integers_of(UnaryOp op) {
  switch (op) {
#define BRRR_CASE(op, name, integers) BRRR_COLUMN_CASE(UnaryOp, Integers, op, name, integers)
    BRRR_UNARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return Integers::promote;
}
BRRR_HD constexpr bool keeps_integers(UnaryOp op) { return integers_of(op) != Integers::promote; }
/// Whether a unary op has kernels for floating dtypes (all but the integer-only ones).
BRRR_HD constexpr bool takes_floats(UnaryOp op) { return integers_of(op) != Integers::only; }
BRRR_HD constexpr const char* name_of(BinaryOp op) {
  switch (op) {
#define BRRR_CASE(op, name, kind) BRRR_NAME_CASE(BinaryOp, op, name)
    BRRR_BINARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}
BRRR_HD constexpr BinaryKind kind_of(BinaryOp op) {
  switch (op) {
#define BRRR_CASE(op, name, kind) BRRR_COLUMN_CASE(BinaryOp, BinaryKind, op, name, kind)
    BRRR_BINARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return BinaryKind::arithmetic;
}
BRRR_HD constexpr bool is_comparison(BinaryOp op) { return kind_of(op) == BinaryKind::comparison; }
BRRR_HD constexpr bool is_rounding_division(BinaryOp op) { return kind_of(op) == BinaryKind::rounding; }
/// Whether a binary op computes integer operands in f32 (true division, atan2, ...).
BRRR_HD constexpr bool is_floating_only(BinaryOp op) { return kind_of(op) == BinaryKind::floating; }
/// Whether a binary op exists for integers and bool only.
BRRR_HD constexpr bool is_bitwise(BinaryOp op) { return kind_of(op) == BinaryKind::bitwise; }
/// Whether `binary` takes a and b of these dtypes as they are (the op layer converts them to
/// their promoted dtype first otherwise): add, sub, mul and div of f32 with bf16 or f16, in
/// either order, out f32 (autocast's residual adds: an f32 stream plus a bf16 branch).
BRRR_HD constexpr bool mixed_float_binary(BinaryOp op, DType a, DType b) {
  const bool arith = op == BinaryOp::add || op == BinaryOp::sub || op == BinaryOp::mul || op == BinaryOp::div;
  const auto half = [](DType d) { return d == DType::bf16 || d == DType::f16; };
  return arith && ((a == DType::f32 && half(b)) || (half(a) && b == DType::f32));
}
BRRR_HD constexpr const char* name_of(ReduceOp op) {
  switch (op) {
#define BRRR_CASE(op, name) BRRR_NAME_CASE(ReduceOp, op, name)
    BRRR_REDUCE_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}
BRRR_HD constexpr const char* name_of(ScatterOp op) {
  switch (op) {
#define BRRR_CASE(op, name) BRRR_NAME_CASE(ScatterOp, op, name)
    BRRR_SCATTER_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}
BRRR_HD constexpr const char* name_of(ScanOp op) {
  switch (op) {
#define BRRR_CASE(op, name) BRRR_NAME_CASE(ScanOp, op, name)
    BRRR_SCAN_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "?";
}
BRRR_HD constexpr const char* name_of(CheckedOp op) {
  switch (op) {
    case CheckedOp::none: return "kernel";
#define BRRR_CASE(op, name, kind) BRRR_NAME_CASE(CheckedOp, op, name)
    BRRR_CHECKED_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return "kernel";
}
/// What a checked op reports (the third column of BRRR_CHECKED_OPS).
enum class CheckKind : std::uint8_t { index, division, domain };
BRRR_HD constexpr CheckKind kind_of(CheckedOp op) {
  switch (op) {
    case CheckedOp::none: return CheckKind::index;
#define BRRR_CASE(op, name, kind) BRRR_COLUMN_CASE(CheckedOp, CheckKind, op, name, kind)
    BRRR_CHECKED_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
  return CheckKind::index;
}
/// Whether a checked op reports a division by zero (otherwise an index out of range).
BRRR_HD constexpr bool is_division(CheckedOp op) { return kind_of(op) == CheckKind::division; }
/// Whether a checked op reports an argument outside its domain (poisson's negative rate).
BRRR_HD constexpr bool is_domain(CheckedOp op) { return kind_of(op) == CheckKind::domain; }
#undef BRRR_NAME_CASE
#undef BRRR_COLUMN_CASE

/// Turns a runtime op into a compile-time one: calls f.template operator()<OP>() for the op.
/// Every entry of the op's list is instantiated, so a kernel written as `f` exists for all
/// of them (or the build fails).
template <class F> void with_op(UnaryOp op, F&& f) {
  switch (op) {
#define BRRR_CASE(op, ...) \
  case UnaryOp::op: return f.template operator()<UnaryOp::op>();
    BRRR_UNARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
}
template <class F> void with_op(BinaryOp op, F&& f) {
  switch (op) {
#define BRRR_CASE(op, ...) \
  case BinaryOp::op: return f.template operator()<BinaryOp::op>();
    BRRR_BINARY_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
}
template <class F> void with_op(ScatterOp op, F&& f) {
  switch (op) {
#define BRRR_CASE(op, ...) \
  case ScatterOp::op: return f.template operator()<ScatterOp::op>();
    BRRR_SCATTER_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
}
template <class F> void with_op(ScanOp op, F&& f) {
  switch (op) {
#define BRRR_CASE(op, ...) \
  case ScanOp::op: return f.template operator()<ScanOp::op>();
    BRRR_SCAN_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
}
template <class F> void with_op(ReduceOp op, F&& f) {
  switch (op) {
#define BRRR_CASE(op, ...) \
  case ReduceOp::op: return f.template operator()<ReduceOp::op>();
    BRRR_REDUCE_OPS(BRRR_CASE)
#undef BRRR_CASE
  }
}

/// The kernels of the contract, each written once: X(name, (parameters)). modules/backend.cppm
/// generates class Backend (pure virtual) and the CpuBackend and CudaBackend overrides from
/// it; a build without CUDA generates CudaBackend's (unreachable) members in cuda/no_cuda.cpp.
/// CUDA implementations enqueue on the current stream of the operands' device and return at
/// once; CPU ones run before returning.
#define BRRR_BACKEND_KERNELS(X)                                                                                      \
  /* out[i] = value, converted to out.dtype. */                                                                     \
  X(fill, (const Operand& out, double value))                                                                       \
  /* dst[i] = convert(src[i]); same shape, any strides, any dtype pair. */                                          \
  X(copy, (const Operand& dst, const Operand& src))                                                                 \
  /* out (contiguous) [i] = start + i * step, converted to out.dtype. */                                            \
  X(arange, (const Operand& out, double start, double step))                                                        \
  /* out (contiguous) from Philox words at (seed, offset); low/high bound integers. */                              \
  X(random, (const Operand& out, Distribution dist, std::uint64_t seed, std::uint64_t offset, std::int64_t low,     \
             std::int64_t high))                                                                                    \
  /* Dropout (inverted) of contiguous `in` into contiguous `out` (in's floating dtype and shape) and `mask`       \
     (boolean, in's shape): mask[i] = u_i >= p and out[i] = in[i] * z_i with z_i = mask[i] ? 1 / (1 - p) : 0      \
     rounded to the dtype, u_i the uniform that rand() (f32; f64 for f64) would draw for element i at the          \
     generator state `d` (AttentionDropout's rule over the flat index; under a CUDA graph capture read from         \
     d.seed_offset). 0 < p < 1. */                                                                                  \
  X(dropout, (const Operand& out, const Operand& mask, const Operand& in, const AttentionDropout& d))              \
  /* Dropout's backward: grad_in[i] = grad_out[i] * z_i, z_i as in `dropout` from the boolean mask and p (so a NaN  \
     gradient stays NaN where dropped, as grad * noise does). All contiguous, grad_in and grad_out one floating     \
     dtype. 0 < p < 1. */                                                                                           \
  X(dropout_backward, (const Operand& grad_in, const Operand& grad_out, const Operand& mask, double p))             \
  /* out[i] = f(in[i]); same shape and dtype (p0/p1: clamp's bounds). */                                            \
  X(unary, (UnaryOp op, const Operand& out, const Operand& in, double p0, double p1))                               \
  /* out[i] = f(a[i], b[i]); a and b already broadcast to out's shape (stride 0) and of one dtype; out has that     \
     dtype (bool for comparisons). Except (mixed_float_binary): add/sub/mul/div of an f32 operand with a bf16 or    \
     f16 one, out f32, each operand widened as it is read. */                                                       \
  X(binary, (BinaryOp op, const Operand& out, const Operand& a, const Operand& b))                                  \
  /* out[i] = f(a[i], s) (or f(s, a[i]) when scalar_first); s converted to a's dtype. */                            \
  X(binary_scalar, (BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first))                \
  /* out[i] = cond[i] ? a[i] : b[i]; all broadcast to out's shape, a/b of out's dtype. */                           \
  X(where, (const Operand& out, const Operand& cond, const Operand& a, const Operand& b))                           \
  /* Reduces `in` over the dims set in dims_mask into `out` (same ndim, size 1 on reduced dims). sum: out dtype =   \
     in's for floats (or f32 for bf16/f16), i64 for integers and bool (CPU accumulates floats in f64, CUDA in      \
     f32/f64). max/min: out dtype = in's; with `indices` (i64, out's shape) exactly one dim is reduced and the     \
     first index of the extreme is written. NaN propagates through max/min. */                                      \
  X(reduce, (ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask, const Operand* indices))  \
  /* Batched matrix product (see GemmArgs). */                                                                      \
  X(gemm, (const GemmArgs& args))                                                                                   \
  /* Row softmax (log_softmax when `log`) over the last dim of contiguous [rows, cols] operands, numerically       \
     stable (max subtracted; rows of -inf give NaN as PyTorch). */                                                  \
  X(softmax, (const Operand& out, const Operand& in, bool log))                                                     \
  /* out[i][j][k] = in[i][index[i][j][k]][k] for dim 1 (likewise for any dim); index i64 with out's shape.          \
     Out-of-range indices: Error(index) naming `op` on the CPU; on CUDA clamped and reported as `op` through the   \
     deferred device error flag (ops/index.cpp). */                                                                 \
  X(gather, (const Operand& out, const Operand& in, int dim, const Operand& index, CheckedOp op))                   \
  /* out[i][index[i][j][k]][k] += src[i][j][k] for dim 1 (likewise for any dim), in place. deterministic: a fixed   \
     summation order (slower on CUDA) instead of atomics. Out-of-range indices as gather's. */                      \
  X(scatter_add, (const Operand& out, int dim, const Operand& index, const Operand& src, bool deterministic,        \
                  CheckedOp op))                                                                                    \
  /* out[i][index[i][j][k]][k] = op(that, src[i][j][k]) for dim 1 (likewise for any dim), in place; operands as     \
     scatter_add's (bool too for assign). CPU: row-major order of index; CUDA: atomics (compare-and-swap on the      \
     element's aligned 32/64-bit word), so prod's rounding order varies. Out-of-range indices as gather's. */         \
  X(scatter_reduce, (ScatterOp op, const Operand& out, int dim, const Operand& index, const Operand& src,          \
                     CheckedOp code))                                                                               \
  /* im2col: in [N, C, H, W] -> out [N, C*kh*kw, out_h*out_w] (contiguous); cells in the padding read pad_value. */ \
  X(im2col, (const Operand& out, const Operand& in, const Window2d& w, double pad_value))                           \
  /* col2im, the adjoint of im2col: out [N, C, H, W] (contiguous, every cell written: the caller need not zero     \
     it) = the sum of the entries of in [N, C*kh*kw, L] that read each cell. */                                      \
  X(col2im, (const Operand& out, const Operand& in, const Window2d& w))                                             \
  /* Max pooling of in [N, C, H, W] (floating, any strides) into contiguous out [N, C, out_h, out_w] (in's dtype)  \
     and indices (i64, out's shape): the flat index y * W + x of each window's max in its input plane. Windows are  \
     w's (kernel, stride, padding, dilation; padding never wins) or, when `adaptive`, PyTorch's adaptive bins (row  \
     bin i spans [floor(i H / out_h), ceil((i + 1) H / out_h)), columns likewise). The first max wins ties; a NaN   \
     is the max (the window's last NaN, PyTorch's rule); a window holding no input cell gives -inf and index -1. */ \
  X(max_pool2d, (const Operand& out, const Operand& indices, const Operand& in, const Window2d& w, bool adaptive))   \
  /* Its adjoint: grad_in (contiguous [N, C, H, W], grad_out's dtype; every cell written) = the sum of grad_out     \
     (any strides) over the outputs whose index (as max_pool2d wrote it, same w and adaptive) names the cell. CPU:  \
     a scatter per plane in output order; CUDA: one thread per input cell summing the outputs whose windows may    \
     hold it (no atomics, deterministic). */                                                                       \
  X(max_pool2d_backward, (const Operand& grad_in, const Operand& grad_out, const Operand& indices, const Window2d& w, \
                          bool adaptive))                                                                           \
  /* Layer norm over the last dim of contiguous [rows, cols]: out = (x - mean) * rstd * w + b; mean and rstd        \
     ([rows], f32 for bf16/f16/f32 inputs, f64 for f64) are written for backward. weight/bias may be nullptr. */    \
  X(layer_norm, (const Operand& out, const Operand& mean, const Operand& rstd, const Operand& in,                   \
                 const Operand* weight, const Operand* bias, double eps))                                           \
  /* Its gradients over contiguous [rows, cols] x and grad (one floating dtype), mean/rstd as layer_norm wrote      \
     them, weight [cols] in the accumulation dtype (f32; f64 for f64) or nullptr (1). With x_hat = (x - mean) rstd \
     and gw = grad * weight: dx (x's dtype) = rstd ((gw - mean_row(gw)) - x_hat mean_row(gw x_hat)); dweight =     \
     sum over rows of grad x_hat, dbias = sum over rows of grad ([cols], accumulation dtype). Any of dx, dweight,  \
     dbias may be nullptr (not wanted). rows, cols >= 1. Column sums in a fixed order (bit-identical every run;    \
     CUDA: per-block partial sums in a workspace, then a sum over blocks, no atomics). */                          \
  X(layer_norm_backward, (const Operand* dx, const Operand* dweight, const Operand* dbias, const Operand& grad,     \
                          const Operand& in, const Operand& mean, const Operand& rstd, const Operand* weight))     \
  /* Dropout, residual add and layer norm in one pass (FlashAttention's dropout_add_layer_norm, prenorm) over        \
     contiguous [rows, cols]: t = x0 * z rounded to x0's dtype (z as `dropout`'s for element i of x0 at `d`; t = x0 \
     when d.p == 0), sum = t + residual rounded to sum's dtype (sum = t when residual is nullptr), out = layer_norm \
     of sum as stored (as `layer_norm`: mean/rstd written, weight/bias in sum's dtype or nullptr) rounded to out's   \
     dtype; mask (bool) as `dropout` writes it, when d.p > 0 (else nullptr). Dtypes: x0 and out one floating dtype;  \
     residual and sum one dtype, x0's or f32 for bf16/f16 x0. cols % 4 == 0 and cols <= 1024 (512 for f64). */      \
  X(dropout_add_layer_norm, (const Operand& out, const Operand& sum, const Operand* mask, const Operand& mean,      \
                             const Operand& rstd, const Operand& x0, const Operand* residual, const Operand* weight, \
                             const Operand* bias, double eps, const AttentionDropout& d))                             \
  /* Its gradients: ds = layer_norm_backward's dx of grad_out over `sum` (weight in the accumulation dtype or       \
     nullptr) plus grad_sum (sum's dtype; nullptr: none), in the accumulation dtype; dresidual (sum's dtype) = ds;   \
     dx0 (x0's dtype) = g * z with g = ds rounded to x0's dtype (z from the mask and p as dropout_backward's; g      \
     alone when mask is nullptr); dweight/dbias as layer_norm_backward's. Any of dx0, dresidual, dweight, dbias may  \
     be nullptr. grad_out in x0's dtype; shapes, dtypes and cols as in the forward. */                               \
  X(dropout_add_layer_norm_backward, (const Operand* dx0, const Operand* dresidual, const Operand* dweight,          \
                                      const Operand* dbias, const Operand& grad_out, const Operand* grad_sum,        \
                                      const Operand& sum, const Operand& mean, const Operand& rstd,                 \
                                      const Operand* weight, const Operand* mask, double p))                        \
  /* Batch-norm statistics per channel c of contiguous in [N, C, M] (floating): mean[c] and invstd[c] = 1 /       \
     sqrt(var + eps), var the biased variance over the N*M elements (CPU: two-pass; CUDA: one pass, Welford per    \
     thread and Chan's pairwise combination, in a fixed order); mean/invstd [C] in the accumulation dtype (f64 for \
     f64, f32 otherwise). running_mean/running_var ([C], that same dtype) may be nullptr; if given they are        \
     updated in place: r = (1 - momentum) r + momentum s, with the unbiased variance (N*M > 1). */                 \
  X(batch_norm_stats, (const Operand& mean, const Operand& invstd, const Operand& in, double eps,                   \
                       const Operand* running_mean, const Operand* running_var, double momentum))                 \
  /* out = (in - mean[c]) * invstd[c] * weight[c] + bias[c] over contiguous [N, C, M]; mean/invstd as              \
     batch_norm_stats writes them; weight/bias ([C], in's dtype) may be nullptr. */                                \
  X(batch_norm_elemt, (const Operand& out, const Operand& in, const Operand& mean, const Operand& invstd,          \
                       const Operand* weight, const Operand* bias))                                                \
  /* Per channel of contiguous grad and in [N, C, M]: sum_dy[c] = sum of grad, sum_dy_xmu[c] = sum of grad (in -  \
     mean[c]); [C] in the accumulation dtype. */                                                                   \
  X(batch_norm_backward_reduce, (const Operand& sum_dy, const Operand& sum_dy_xmu, const Operand& grad,            \
                                 const Operand& in, const Operand& mean))                                          \
  /* grad_in = (grad - sum_dy[c] / n - (in - mean[c]) invstd[c]^2 sum_dy_xmu[c] / n) invstd[c] weight[c] over      \
     contiguous [N, C, M], n = N*M (the training-mode input gradient); weight may be nullptr (1). */              \
  X(batch_norm_backward_elemt, (const Operand& grad_in, const Operand& grad, const Operand& in, const Operand& mean, \
                                const Operand& invstd, const Operand* weight, const Operand& sum_dy,               \
                                const Operand& sum_dy_xmu))                                                        \
  /* Fused cross entropy over the rows of contiguous logits [rows, C] (floating) with class indices `target`       \
     [rows] (i32/i64). Writes `out` [2, rows] (the accumulation dtype: f64 for f64 logits, f32 otherwise): row 0   \
     the losses (1 - e)(lse - x_t) + e (lse - mean_c x), row 1 the weights (1, or 0 where the target is            \
     ignore_index); and `lse` [rows], each row's log-sum-exp. A target outside [0, C) that is not ignore_index:    \
     Error(index) on the CPU, the deferred device error on CUDA (its row weighs 0). */                              \
  X(cross_entropy_forward, (const Operand& out, const Operand& lse, const Operand& logits, const Operand& target,  \
                            std::int64_t ignore_index, double label_smoothing))                                     \
  /* grad_logits [rows, C] (logits' dtype) = s_i (softmax(x_i) - (1 - e) onehot(t_i) - e / C), s_i = 0 for ignored \
     rows, else grad[i] (per_row) or grad[0] / count[0] (count nullptr: grad[0]); grad, count and lse in the       \
     accumulation dtype, on the logits' device. */                                                                  \
  X(cross_entropy_backward, (const Operand& grad_logits, const Operand& logits, const Operand& lse,                 \
                             const Operand& target, const Operand& grad, bool per_row, const Operand* count,        \
                             std::int64_t ignore_index, double label_smoothing))                                    \
  /* Inclusive scan along the last dim of contiguous [rows, n] `in` into contiguous `out` of the same shape and    \
     dtype (the op layer converts integers to i64 for cumsum/cumprod; logcumsumexp is floating only), accumulated  \
     in accumulate_t on CUDA, in double for floats on the CPU (its sequential order is the worst for rounding);     \
     cummax/cummin write the i64 index of the running extreme into `indices` (else nullptr). */                     \
  X(scan, (ScanOp op, const Operand& out, const Operand& in, const Operand* indices))                              \
  /* Stable sort of each row of contiguous [rows, n] `in` (any dtype): sorted `values` (in's dtype) and their i64   \
     positions `indices`, both contiguous [rows, n]; NaN sorts as the largest value, -0.0 equals 0.0. */            \
  X(sort, (const Operand& values, const Operand& indices, const Operand& in, bool descending))                     \
  /* The k (0 <= k <= n) first elements of each row of contiguous [rows, n] `in` in sort's order (descending when  \
     `largest`; ties by position, NaN the largest, -0.0 == 0.0), i.e. the first k columns of sort's result:        \
     `values` (in's dtype) and i64 `indices`, both contiguous [rows, k]. */                                        \
  X(topk, (const Operand& values, const Operand& indices, const Operand& in, std::int64_t k, bool largest))       \
  /* out (i64, [rows, m]) = for each value of row r of `values` ([rows, m]), the first position in row r of         \
     `sorted` ([rows, n], ascending; rows 1 broadcasts) where it could be inserted keeping the order: the first     \
     sorted >= v, or > v when `right`. Both contiguous, one dtype. */                                               \
  X(searchsorted, (const Operand& out, const Operand& sorted, const Operand& values, bool right))                   \
  /* Fused attention (FlashAttention-2) of 4-D [B, H, L|S, D] q, k, v (one floating dtype, last stride 1, D <=     \
     128): out [B, H, L, D] (q's dtype, last stride 1) = softmax(scale q k^T, causal: keys j <= i only) v, and lse \
     [B, H, L] (contiguous, f32; f64 for f64) = each row's log-sum-exp of its scaled scores. S >= 1. With          \
     dropout.p > 0, out = (P o Z) v with Z the AttentionDropout mask scaled by 1 / (1 - p); lse stays that of P.    \
     allow_tf32 (set_allow_tf32 when the op ran): f32's products may round their operands to TF32 (CUDA). */       \
  X(attention_forward, (const Operand& out, const Operand& lse, const Operand& q, const Operand& k,                 \
                        const Operand& v, double scale, bool causal, const AttentionDropout& dropout,                \
                        bool allow_tf32))                                                                            \
  /* Its gradients dq, dk, dv (shapes and dtypes of q, k, v; last stride 1) from dout (out's shape), q, k, v, out   \
     and lse as attention_forward wrote them; the probabilities are recomputed from lse and the dropout mask from   \
     the same `dropout` (its keep_bits as the forward wrote them, where used) (dV = (P o Z)^T dO, dP = (dO V^T) o  \
     Z, dS = P o (dP - rowsum(dO o O))); allow_tf32 as in attention_forward. deterministic (set_deterministic):     \
     dq summed in a fixed order; off, CUDA may add dq's partial sums with atomics (the order varies by run). */     \
  X(attention_backward, (const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout,               \
                         const Operand& q, const Operand& k, const Operand& v, const Operand& out,                  \
                         const Operand& lse, double scale, bool causal, const AttentionDropout& dropout,            \
                         bool allow_tf32, bool deterministic))                                                      \
  /* Nearest / nearest-exact / (bi,tri)linear / cubic resampling of in [N, C, D, H, W] into out [N, C, OD, OH, OW]  \
     (both contiguous), one floating dtype, accumulated in compute_t; the index and weight math of                 \
     ops/interpolate_math.hpp. */                                                                                    \
  X(upsample, (const Operand& out, const Operand& in, const Upsample& g))                                           \
  /* Its adjoint: grad_out [N, C, OD, OH, OW] summed into grad_in [N, C, D, H, W] (both contiguous, grad_in zeroed  \
     by the caller; CUDA: atomic adds, so the rounding order of overlapping sources varies). f32/f64 only: the op   \
     layer computes bf16/f16 gradients in f32. */                                                                    \
  X(upsample_backward, (const Operand& grad_in, const Operand& grad_out, const Upsample& g))                         \
  /* Poisson samples out[i] with rate rates[i] (both contiguous, one floating dtype, one shape) from the Philox    \
     words offset + i * words_poisson ... of `seed` (ops/random_transform.hpp, random_transform::poisson).         \
     A negative or NaN rate: NaN written and reported as CheckedOp::poisson (CPU: Error(value) at the call). */    \
  X(poisson, (const Operand& out, const Operand& rates, std::uint64_t seed, std::uint64_t offset))                  \
  /* Updates every parameter of `step` in place (CUDA: a few launches for all tensors). */                          \
  X(optimizer_step, (const OptimizerStep& step))                                                                    \
  /* out[k] (contiguous f32 [count]) = the sum over tensor k of |x|^p (p = norm_type > 0; x*x for 2, |x| for 1),    \
     or max |x| for p = +inf (NaN propagates), accumulated in f32 (f64 for f64 tensors; the CPU in f64) in a fixed \
     order: bit-identical every run (CUDA: per-chunk partials, then one sum per tensor; no atomics). */           \
  X(multi_tensor_norm, (const Operand& out, const MultiTensor& tensors, double norm_type))                          \
  /* x = x * scale[0] in place for every tensor, computed in the accumulation dtype (f32; f64 for f64 tensors),    \
     `scale` a one-element operand of that dtype on the tensors' device (read there: no host sync). */            \
  X(multi_tensor_scale, (const MultiTensor& tensors, const Operand& scale))


// ---------------------------------------------------------------------------------------
// Element types in kernels, and the conversion rules both backends apply
// ---------------------------------------------------------------------------------------

/// The 16-bit floating types, whichever the compiler's: brrr::half and brrr::bfloat16 in
/// the CPU backend, __half and __nv_bfloat16 in .cu files (both are 2-byte classes with an
/// explicit conversion from float, rounding to nearest even, and back to float).
template <class T> inline constexpr bool is_float16 = std::is_class_v<T> && sizeof(T) == 2;
/// bool tensors hold one byte, 0 or 1: kernels see them as std::uint8_t.
template <class T> inline constexpr bool is_bool_storage = std::is_same_v<T, std::uint8_t>;
/// Floating element types: float, double and the two 16-bit ones.
template <class T> inline constexpr bool is_floating = std::is_floating_point_v<T> || is_float16<T>;

/// Calls f(static_cast<T*>(nullptr)) with the element type of `dtype`: float, double,
/// BFloat16, Float16, int32_t, int64_t, uint8_t (bool). Each backend names its 16-bit types.
template <class Float16, class BFloat16, class F> void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));
    case DType::bf16: return f(static_cast<BFloat16*>(nullptr));
    case DType::f16: return f(static_cast<Float16*>(nullptr));
    case DType::i32: return f(static_cast<std::int32_t*>(nullptr));
    case DType::i64: return f(static_cast<std::int64_t*>(nullptr));
    case DType::boolean: return f(static_cast<std::uint8_t*>(nullptr));
  }
}

namespace detail {
template <class T> struct Compute { using type = T; };  // integers compute in themselves
template <> struct Compute<double> { using type = double; };
template <> struct Compute<std::uint8_t> { using type = std::int64_t; };
template <class T> struct Accumulate { using type = std::int64_t; };  // integers and bool
template <> struct Accumulate<double> { using type = double; };
template <> struct Accumulate<float> { using type = float; };
}  // namespace detail

/// The arithmetic type of elementwise math: float for f32/f16/bf16, double for f64, the
/// integer itself for integers, int64 for bool.
template <class T> using compute_t =
    typename std::conditional_t<is_float16<T>, std::type_identity<float>, detail::Compute<T>>::type;
/// The accumulator of sums and extremes: float for f32/f16/bf16, double for f64, int64 for
/// integers and bool.
template <class T> using accumulate_t =
    typename std::conditional_t<is_float16<T>, std::type_identity<float>, detail::Accumulate<T>>::type;

/// An element in its arithmetic type (bool reads as 0/1).
template <class T> BRRR_HD compute_t<T> load(T v) {
  if constexpr (is_float16<T>) return static_cast<float>(v);
  else if constexpr (is_bool_storage<T>) return v != 0;
  else return v;
}

/// An element in its accumulator type.
template <class T> BRRR_HD accumulate_t<T> load_acc(T v) { return static_cast<accumulate_t<T>>(load(v)); }

/// An element in the widest type of its kind: double for floats, int64 for integers and
/// bool (exact for every value).
template <class T> BRRR_HD auto widen(T v) {
  if constexpr (is_float16<T>) return static_cast<double>(static_cast<float>(v));
  else if constexpr (is_bool_storage<T>) return static_cast<std::int64_t>(v != 0);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<std::int64_t>(v);
}
template <class T> using wide_t = decltype(widen(T{}));

/// float -> integer: truncate toward zero, NaN -> 0, saturate at the type's range (defined
/// where C++ leaves it undefined; CUDA's cvt.rzi.sat does the same).
template <class I, class F> BRRR_HD I float_to_int(F v) {
  if (v != v) return I(0);
  constexpr double lo = static_cast<double>(std::numeric_limits<I>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (static_cast<double>(v) <= lo) return std::numeric_limits<I>::min();
  if (static_cast<double>(v) >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

/// Any arithmetic value -> element type T: to bool as v != 0; to bf16/f16 through float,
/// rounding to nearest even (double -> float -> 16-bit rounds twice; for values from
/// f32/f16/bf16/int sources the first step is exact, and from f64 the double rounding matches
/// PyTorch's CPU path); floats to integers by float_to_int; integers by static_cast.
template <class T, class W> BRRR_HD T narrow_to(W v) {
  if constexpr (is_bool_storage<T>) return static_cast<std::uint8_t>(v != 0);
  else if constexpr (is_float16<T>) return T(static_cast<float>(v));
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else if constexpr (std::is_floating_point_v<W>) return float_to_int<T>(v);
  else return static_cast<T>(v);
}

}  // namespace brrr::backend
