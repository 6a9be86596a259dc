// brrr.ops — differentiable tensor ops: elementwise (with NumPy broadcasting and PyTorch's
// type promotion), reductions, matmul, joining and splitting. Each op is defined once in
// ops/<family>.cpp (checks, output allocation, dispatch, backward rule); kernels live in
// ops/cpu/ and ops/cuda/. All inputs of one op must be on one device (Error(device)).
module;
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>
export module brrr.ops;
import brrr.tensor;

export namespace brrr {

/// A number operand of an op: `x * 2` or `x + 0.5`. Integral scalars keep an integer
/// tensor's dtype; floating ones make bool/integer tensors f32 (PyTorch's rule for Python
/// scalars). Floating tensors keep their dtype either way.
struct Scalar {
  double value = 0;
  bool is_integral = false;
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T v) : value(static_cast<double>(v)), is_integral(std::is_integral_v<T>) {}
};

// ---------------------------------------------------------------------------------------
// Type promotion and broadcasting (docs/semantics.md)
// ---------------------------------------------------------------------------------------

/// PyTorch's promotion of two tensor dtypes: bool < integers < floats; within a kind the
/// wider wins; f16 with bf16 gives f32. E.g. i32+i64 -> i64, i64+f16 -> f16, f16+bf16 -> f32.
DType promote_types(DType a, DType b);
/// The dtype of (tensor op scalar): the tensor's, unless the scalar is floating and the
/// tensor is bool/integer (then f32).
DType result_type(DType tensor, const Scalar& scalar);
/// NumPy broadcasting of two shapes: align from the right, sizes equal or 1. Throws
/// Error(shape) naming both shapes and `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// ---------------------------------------------------------------------------------------
// Elementwise binary: [broadcast(a, b)] -> same shape, promoted dtype
// ---------------------------------------------------------------------------------------

[[nodiscard]] Tensor add(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor add(const Tensor& a, Scalar b);
[[nodiscard]] Tensor sub(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor sub(const Tensor& a, Scalar b);
[[nodiscard]] Tensor sub(Scalar a, const Tensor& b);
[[nodiscard]] Tensor mul(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor mul(const Tensor& a, Scalar b);
/// True division: integer inputs give f32 (PyTorch).
[[nodiscard]] Tensor div(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor div(const Tensor& a, Scalar b);
[[nodiscard]] Tensor div(Scalar a, const Tensor& b);
/// a^b elementwise (floating dtypes; integer bases with integer exponents stay integer).
[[nodiscard]] Tensor pow(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor pow(const Tensor& a, Scalar exponent);
[[nodiscard]] Tensor pow(Scalar base, const Tensor& exponent);
/// Elementwise max/min; ties send half the gradient to each input (PyTorch).
[[nodiscard]] Tensor maximum(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor minimum(const Tensor& a, const Tensor& b);

/// Comparisons: broadcast, compare in the promoted dtype, -> bool. Not differentiable.
[[nodiscard]] Tensor eq(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor ne(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor lt(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor le(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor gt(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor ge(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor eq(const Tensor& a, Scalar b);
[[nodiscard]] Tensor ne(const Tensor& a, Scalar b);
[[nodiscard]] Tensor lt(const Tensor& a, Scalar b);
[[nodiscard]] Tensor le(const Tensor& a, Scalar b);
[[nodiscard]] Tensor gt(const Tensor& a, Scalar b);
[[nodiscard]] Tensor ge(const Tensor& a, Scalar b);

/// where(cond, a, b): cond (bool) ? a : b, all three broadcast; a and b promote. Gradients
/// flow to a where cond is true and to b where false.
[[nodiscard]] Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor where(const Tensor& condition, const Tensor& a, Scalar b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a);

// ---------------------------------------------------------------------------------------
// Elementwise unary: same shape and dtype (floating dtypes unless noted)
// ---------------------------------------------------------------------------------------

/// -x (any dtype but bool).
[[nodiscard]] Tensor neg(const Tensor& x);
/// |x| (any dtype but bool); gradient sign(x), 0 at 0.
[[nodiscard]] Tensor abs(const Tensor& x);
[[nodiscard]] Tensor exp(const Tensor& x);
[[nodiscard]] Tensor log(const Tensor& x);
/// log(1 + x), accurate near 0.
[[nodiscard]] Tensor log1p(const Tensor& x);
[[nodiscard]] Tensor sqrt(const Tensor& x);
/// 1 / sqrt(x).
[[nodiscard]] Tensor rsqrt(const Tensor& x);
[[nodiscard]] Tensor tanh(const Tensor& x);
/// 1 / (1 + exp(-x)).
[[nodiscard]] Tensor sigmoid(const Tensor& x);
/// max(x, 0); gradient 0 at 0 (any dtype but bool).
[[nodiscard]] Tensor relu(const Tensor& x);
/// Gaussian Error Linear Unit (Hendrycks & Gimpel 2016): "none" = x * Phi(x) with erf,
/// "tanh" = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Error(value) otherwise.
[[nodiscard]] Tensor gelu(const Tensor& x, const std::string& approximate = "none");
/// x * sigmoid(x) (Elfwing et al. 2018; Ramachandran et al. 2017).
[[nodiscard]] Tensor silu(const Tensor& x);
[[nodiscard]] Tensor sin(const Tensor& x);
[[nodiscard]] Tensor cos(const Tensor& x);
/// Gauss error function.
[[nodiscard]] Tensor erf(const Tensor& x);
/// -1, 0 or 1 (any dtype but bool). Not differentiable (gradient 0).
[[nodiscard]] Tensor sign(const Tensor& x);
/// min(max(x, min), max); either bound may be absent. Gradient 1 where min <= x <= max
/// (bounds included), else 0 (PyTorch).
[[nodiscard]] Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
[[nodiscard]] Tensor clamp_min(const Tensor& x, double min);
[[nodiscard]] Tensor clamp_max(const Tensor& x, double max);

// ---------------------------------------------------------------------------------------
// Reductions. dims may be negative; an empty dims list reduces over all dims. keepdim keeps
// reduced dims with size 1. bf16/f16 accumulate in f32.
// ---------------------------------------------------------------------------------------

/// Sum: floating dtypes keep their dtype; integers and bool give i64 (PyTorch).
[[nodiscard]] Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
/// Mean (floating dtypes only; Error(dtype) otherwise). Empty input gives NaN.
[[nodiscard]] Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
/// Max/min over all elements; ties share the gradient evenly (PyTorch's amax rule).
[[nodiscard]] Tensor max(const Tensor& x);
[[nodiscard]] Tensor min(const Tensor& x);
/// Max/min over several dims (values only), ties share the gradient evenly.
[[nodiscard]] Tensor amax(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim = false);
[[nodiscard]] Tensor amin(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim = false);
/// Values and (i64) indices of the max/min along one dim; the first index on ties. The
/// gradient goes to the returned index only.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
[[nodiscard]] ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim = false);
[[nodiscard]] ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// i64 index of the max/min: over all elements (flattened) or along dim.
[[nodiscard]] Tensor argmax(const Tensor& x);
[[nodiscard]] Tensor argmin(const Tensor& x);
[[nodiscard]] Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
[[nodiscard]] Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// Variance sum((x - mean)^2) / (N - correction); correction 1 (unbiased, the default) or 0.
/// N - correction <= 0 gives NaN (PyTorch).
[[nodiscard]] Tensor var(const Tensor& x, std::vector<std::int64_t> dims = {}, std::int64_t correction = 1,
                         bool keepdim = false);
[[nodiscard]] Tensor std(const Tensor& x, std::vector<std::int64_t> dims = {}, std::int64_t correction = 1,
                         bool keepdim = false);
/// log(sum(exp(x))) computed stably (max subtracted first).
[[nodiscard]] Tensor logsumexp(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim = false);
/// Sums `x` down to `shape` (the inverse of broadcasting): the gradient rule of expand.
[[nodiscard]] Tensor sum_to_size(const Tensor& x, const Shape& shape);

// ---------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------

/// Matrix product with NumPy/PyTorch semantics: 1-D x 1-D -> [] (dot); [n, k] x [k, m] ->
/// [n, m]; 1-D operands get a dim prepended/appended and removed again; batched [..., n, k] x
/// [..., k, m] broadcasts the batch dims. f32/f64/bf16/f16. CUDA: cuBLAS strided-batched
/// GEMM, transposed views mapped to transpose flags (no copy); CPU: Eigen.
/// Throws Error(shape) e.g. "matmul: shapes [32, 784] and [128, 10] cannot be multiplied
/// (784 != 128)".
[[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b);
/// Allow TF32 tensor-core math for f32 matmul on CUDA (10-bit mantissa products, f32
/// accumulate; ~3e-4 relative error). Off by default, like PyTorch's
/// torch.backends.cuda.matmul.allow_tf32.
void set_allow_tf32(bool allow);
bool allow_tf32();

// ---------------------------------------------------------------------------------------
// Joining and splitting
// ---------------------------------------------------------------------------------------

/// Concatenates along `dim`; all other sizes equal; dtypes promote. Zero-size inputs of
/// shape [0] are skipped, as in PyTorch.
[[nodiscard]] Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
/// Stacks equal-shape tensors along a new dim.
[[nodiscard]] Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim = 0);
/// Views of `split_size` elements along dim (the last may be smaller).
[[nodiscard]] std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim = 0);
/// Views with the given sizes along dim (they must sum to the dim's size).
[[nodiscard]] std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim = 0);
/// `chunks` views of ceil(size / chunks) elements along dim (fewer if the size is small).
[[nodiscard]] std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim = 0);

// ---------------------------------------------------------------------------------------
// Profiling
// ---------------------------------------------------------------------------------------

/// When on, every op opens an NVTX range named after it (e.g. "matmul") around its host-side
/// work, so Nsight Systems timelines show brrr's ops above their kernels. Off by default;
/// the cost when off is one relaxed atomic load per op.
void set_nvtx_enabled(bool enabled);
bool nvtx_enabled();

}  // namespace brrr

// Not exported: helpers shared by the op families' implementation units.
namespace brrr::ops_detail {

/// "[2, 3] f32 on cuda:0".
std::string describe(const Tensor& t);
/// Throws Error(device) unless all defined tensors are on one device; returns it.
Device common_device(const char* op, std::initializer_list<Tensor> tensors);
/// Throws Error(value) for an undefined tensor.
void require_defined(const char* op, const Tensor& t, const char* name = "input");
/// Wraps dim into [0, ndim); Error(index) names op and shape.
std::int64_t wrap_dim(const char* op, std::int64_t dim, std::int64_t ndim, const Shape& shape);
/// Bitmask of the (wrapped, deduplicated) dims; empty dims = all dims.
std::uint32_t dims_mask(const char* op, const std::vector<std::int64_t>& dims, const Shape& shape);
/// Shape after reducing `mask` dims (kept as 1 when keepdim).
Shape reduced_shape(const Shape& shape, std::uint32_t mask, bool keepdim);
/// Reinserts size-1 dims removed by a keepdim=false reduction, so that the result
/// broadcasts against the input again.
Tensor unsqueeze_reduced(const Tensor& t, std::uint32_t mask, std::int64_t input_dim, bool keepdim);

extern std::atomic<bool> nvtx_on;
void nvtx_push(const char* name);
void nvtx_pop();
/// Opens an NVTX range named `name` for its scope when profiling is on (RAII). Every public
/// op starts with one.
class OpRange {
public:
  explicit OpRange(const char* name) : active_(nvtx_on.load(std::memory_order_relaxed)) {
    if (active_) nvtx_push(name);
  }
  ~OpRange() {
    if (active_) nvtx_pop();
  }
  OpRange(const OpRange&) = delete;
  OpRange& operator=(const OpRange&) = delete;

private:
  bool active_;
};

}  // namespace brrr::ops_detail
