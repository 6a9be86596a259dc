// brrr.ops — differentiable tensor ops: elementwise (with NumPy broadcasting and PyTorch's
// type promotion), reductions, matmul, joining and splitting. Each op is defined once in
// ops/<family>.cpp (checks, output allocation, dispatch, backward rule); kernels live in
// ops/cpu/ and ops/cuda/. All inputs of one op must be on one device (Error(device)).
module;
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backend/contract.hpp"  // Window2d
#include "tensor/methods.hpp"    // BRRR_TENSOR_METHODS: TensorMethods below
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
/// Rounding divisions (PyTorch's): the result keeps the promoted dtype, so integers stay
/// integers; bool operands throw Error(dtype). For a = [-3, 3, -7, 7], b = [2, -2, 2, -2]:
///   floor_divide(a, b)  = [-2, -2, -4, -4]   (rounded toward -inf; = div(a, b, "floor"))
///   div(a, b, "trunc")  = [-1, -1, -3, -3]   (rounded toward 0)
///   remainder(a, b)     = [ 1, -1,  1, -1]   (sign of the divisor: a - b * floor(a / b))
///   fmod(a, b)          = [-1,  1, -1,  1]   (sign of the dividend: a - b * trunc(a / b))
/// Floats divided by 0 give inf/NaN. Integers divided by 0 are an error: Error(value) at the
/// call on the CPU (and for a zero number divisor on any device); on CUDA the kernel reports
/// it as a deferred device error, thrown at the next sync point (docs/semantics.md).
/// Gradients: floor/trunc division 0; remainder/fmod d/da = 1, d/db = -(rounded quotient).
[[nodiscard]] Tensor floor_divide(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor floor_divide(const Tensor& a, Scalar b);
/// div with rounding_mode "trunc" or "floor" (anything else: Error(value)).
[[nodiscard]] Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode);
[[nodiscard]] Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode);
[[nodiscard]] Tensor remainder(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor remainder(const Tensor& a, Scalar b);
[[nodiscard]] Tensor remainder(Scalar a, const Tensor& b);
[[nodiscard]] Tensor fmod(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor fmod(const Tensor& a, Scalar b);
/// relu's gradient in one kernel: x <= 0 ? 0 : grad (0 at the kink; at NaN the gradient
/// passes, as PyTorch's threshold_backward), broadcast and promoted like any binary op. Not
/// itself recorded (used inside backward passes).
[[nodiscard]] Tensor relu_backward(const Tensor& grad, const Tensor& x);
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

/// Comparison operators: eq, ne, lt, le, gt, ge (bool tensors, not differentiable). A
/// tensor's identity is Tensor::is_same, never ==.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator==(Scalar a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator!=(Scalar a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<(Scalar a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator<=(Scalar a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>(Scalar a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator>=(Scalar a, const Tensor& b);

/// Compound assignment: a = a op b in place (add_, sub_, mul_, div_ below, with PyTorch's
/// in-place rules). Returns a.
Tensor& operator+=(Tensor& a, const Tensor& b);
Tensor& operator+=(Tensor& a, Scalar b);
Tensor& operator-=(Tensor& a, const Tensor& b);
Tensor& operator-=(Tensor& a, Scalar b);
Tensor& operator*=(Tensor& a, const Tensor& b);
Tensor& operator*=(Tensor& a, Scalar b);
Tensor& operator/=(Tensor& a, const Tensor& b);
Tensor& operator/=(Tensor& a, Scalar b);

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
// Activations (ops/activation.cpp): same shape and dtype, floating dtypes (integer and bool
// inputs compute in f32). One elementwise kernel forward; gradients are Tensor ops, so
// second derivatives work. Argument names and defaults are torch.nn.functional's.
// ---------------------------------------------------------------------------------------

/// x > 0 ? x : negative_slope * x (Maas et al. 2013). Gradient 1 or negative_slope (the
/// latter at 0).
[[nodiscard]] Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// x > 0 ? x : alpha (exp(x) - 1) (Clevert et al. 2015, "Fast and Accurate Deep Network
/// Learning by Exponential Linear Units").
[[nodiscard]] Tensor elu(const Tensor& x, double alpha = 1.0);
/// scale * elu(x, alpha) with alpha = 1.6732632423543772, scale = 1.0507009873554805
/// (Klambauer et al. 2017, "Self-Normalizing Neural Networks").
[[nodiscard]] Tensor selu(const Tensor& x);
/// max(0, x) + min(0, alpha (exp(x / alpha) - 1)) (Barron 2017). alpha == 0: Error(value).
[[nodiscard]] Tensor celu(const Tensor& x, double alpha = 1.0);
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (for stability).
/// Gradient sigmoid(beta x) (1 above the threshold). beta == 0: Error(value).
[[nodiscard]] Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
/// clamp(x, min_val, max_val); gradient 1 strictly inside (min_val, max_val), 0 at and past
/// the bounds (PyTorch's hardtanh_backward; clamp's includes the bounds). min_val > max_val:
/// Error(value).
[[nodiscard]] Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
/// hardtanh(x, 0, 6).
[[nodiscard]] Tensor relu6(const Tensor& x);
/// x * relu6(x + 3) / 6 (Howard et al. 2019, "Searching for MobileNetV3"). Gradient 0 at and
/// below -3, x / 3 + 1/2 strictly inside (-3, 3), 1 at and above 3 (PyTorch's).
[[nodiscard]] Tensor hardswish(const Tensor& x);
/// relu6(x + 3) / 6; gradient 1/6 strictly inside (-3, 3), else 0.
[[nodiscard]] Tensor hardsigmoid(const Tensor& x);
/// x * tanh(softplus(x)) (Misra 2019, "Mish: A Self Regularized Non-Monotonic Activation").
[[nodiscard]] Tensor mish(const Tensor& x);
/// log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), stable for large |x|.
[[nodiscard]] Tensor logsigmoid(const Tensor& x);
/// x / (1 + |x|).
[[nodiscard]] Tensor softsign(const Tensor& x);
/// Gated linear unit (Dauphin et al. 2017): x split in halves a, b along `dim`, a * sigmoid(b).
/// The size along dim must be even (Error(shape)); a 0-d input is Error(shape).
[[nodiscard]] Tensor glu(const Tensor& x, std::int64_t dim = -1);

// ---------------------------------------------------------------------------------------
// Reductions. dims may be negative; an empty dims list reduces over all dims. keepdim keeps
// reduced dims with size 1. bf16/f16 accumulate in f32 (f32 too on CUDA; the CPU accumulates
// every floating dtype in f64). A dim out of range is Error(index) naming the op and shape;
// a repeated dim is Error(value).
// ---------------------------------------------------------------------------------------

/// Sum: floating dtypes keep their dtype; integers and bool give i64 (PyTorch).
[[nodiscard]] Tensor sum(const Tensor& x, DimList dims = {}, bool keepdim = false);
/// Mean (floating dtypes only; Error(dtype) otherwise). Empty input gives NaN. bf16/f16:
/// summed and divided in f32, rounded once.
[[nodiscard]] Tensor mean(const Tensor& x, DimList dims = {}, bool keepdim = false);
/// Max/min over all elements (any dtype); NaN propagates. Ties share the gradient evenly
/// (PyTorch's amax rule); a NaN result sends it to the NaNs. Empty input: Error(value).
[[nodiscard]] Tensor max(const Tensor& x);
[[nodiscard]] Tensor min(const Tensor& x);
/// Max/min over several dims (values only), ties share the gradient evenly. Reducing a
/// size-0 dim is Error(value).
[[nodiscard]] Tensor amax(const Tensor& x, DimList dims, bool keepdim = false);
[[nodiscard]] Tensor amin(const Tensor& x, DimList dims, bool keepdim = false);
/// Values and (i64) indices of the max/min along one dim; the first index on ties, the first
/// NaN when there is one. The gradient goes to the returned index only. A 0-d input takes
/// dim 0 or -1 (index 0); a size-0 dim is Error(value).
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
[[nodiscard]] ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim = false);
[[nodiscard]] ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// i64 index of the max/min: over all elements (a 0-d index into the row-major flattened
/// tensor) or along dim. Not differentiable.
[[nodiscard]] Tensor argmax(const Tensor& x);
[[nodiscard]] Tensor argmin(const Tensor& x);
[[nodiscard]] Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);
[[nodiscard]] Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim = false);
/// Variance sum((x - mean)^2) / max(0, N - correction) over `dims` (empty: all), N the
/// number of elements reduced into each output. `correction` as PyTorch's: 1 (Bessel's,
/// the default), 0, or any finite number (Error(value) otherwise). N - correction <= 0
/// divides by 0: NaN where all reduced elements are equal (one element, say), inf otherwise.
/// Floating dtypes only (Error(dtype)); bf16/f16 compute in f32. Gradient PyTorch's
/// var_backward: 2 / (N - correction) * g * (x - mean); with N - correction <= 0 over all
/// dims, g * (x == mean ? NaN : inf). std = sqrt(var), same arguments.
[[nodiscard]] Tensor var(const Tensor& x, DimList dims = {}, double correction = 1,
                         bool keepdim = false);
[[nodiscard]] Tensor std(const Tensor& x, DimList dims = {}, double correction = 1,
                         bool keepdim = false);
/// log(sum(exp(x))) computed stably: m = amax over dims (a constant for autograd; 0 where it
/// is +-inf), log(sum(exp(x - m))) + m. Reducing zero elements gives -inf; integer and bool
/// inputs compute in f32.
[[nodiscard]] Tensor logsumexp(const Tensor& x, DimList dims, bool keepdim = false);
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
/// matmul of two 2-D tensors [n, k] x [k, m] (PyTorch's mm); Error(shape) for other ranks.
[[nodiscard]] Tensor mm(const Tensor& a, const Tensor& b);
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
// Neural-network ops (forward + backward on both backends)
// ---------------------------------------------------------------------------------------

/// softmax along `dim`: exp(x - max) / sum(exp(x - max)), one fused row kernel. A row of all
/// -inf gives NaN; +inf gives NaN (PyTorch). Floating dtypes.
[[nodiscard]] Tensor softmax(const Tensor& x, std::int64_t dim = -1);
/// log_softmax along `dim`: x - max - log(sum(exp(x - max))), fused; -inf stays -inf.
[[nodiscard]] Tensor log_softmax(const Tensor& x, std::int64_t dim = -1);

/// How a loss reduces over elements.
enum class Reduction : std::uint8_t { none, mean, sum };

/// Options of cross_entropy.
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  /// Targets equal to it contribute nothing (and are not counted by the mean).
  std::int64_t ignore_index = -100;
  /// Mixes the one-hot target with the uniform distribution (Szegedy et al. 2016, "Rethinking
  /// the Inception Architecture", section 7): loss = (1-e) nll + e * mean_c(-log p_c).
  double label_smoothing = 0;
};
/// Cross entropy of logits [N, C] (or [C] with a 0-d target, or [N, C, d...] with target
/// [N, d...]) and class indices (i64/i32): log_softmax over dim 1 then negative log
/// likelihood. mean over non-ignored targets; all ignored gives NaN for mean (gradient 0), 0
/// for sum. Error(dtype) for other target dtypes, Error(shape) for a target shape mismatch,
/// Error(index) for a target outside [0, C) that is not ignore_index: at the call on the CPU,
/// at the next sync point on CUDA (a deferred device error; docs/semantics.md, "Softmax and
/// losses"). Fused: one kernel forward, one backward.
[[nodiscard]] Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});
/// Negative log likelihood of log-probabilities [N, C] at class indices [N]; same options as
/// cross_entropy (label_smoothing must be 0).
[[nodiscard]] Tensor nll_loss(const Tensor& log_probs, const Tensor& target, CrossEntropyOptions options = {});
/// mean/sum/none of (input - target)^2; shapes broadcast.
[[nodiscard]] Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// Binary cross entropy on logits, stable: max(x, 0) - x t + log(1 + exp(-|x|)); with
/// pos_weight p: the positive term weighted by p (PyTorch's formula).
[[nodiscard]] Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                                      Reduction reduction = Reduction::mean,
                                                      const Tensor& pos_weight = {});

/// Layer normalisation (Ba et al. 2016) over the trailing `normalized_shape` dims:
/// (x - mean) / sqrt(var + eps) * weight + bias (biased variance); weight/bias optional, of
/// normalized_shape. One fused row kernel forward.
[[nodiscard]] Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                                const Tensor& bias = {}, double eps = 1e-5);

/// Batch normalisation (Ioffe & Szegedy 2015), PyTorch's F.batch_norm, over input [N, C, *]
/// (floating) per channel c: (x - mean_c) / sqrt(var_c + eps) * weight[c] + bias[c].
/// training: mean/var are the batch's (biased variance over the N * prod(*) values of each
/// channel, Error(value) unless there are more than 1), and running_mean/running_var ([C],
/// when given) are updated in place: r = (1 - momentum) r + momentum s, with the unbiased
/// variance. Otherwise the running statistics normalise (both required: Error(value)).
/// weight/bias [C] optional; any [C] tensor of another shape is Error(shape); devices must
/// match. Fused: one statistics kernel (which also updates f32/f64 contiguous running stats)
/// and one elementwise kernel forward, one reduction and one elementwise kernel backward.
[[nodiscard]] Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                                const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                                double momentum = 0.1, double eps = 1e-5);
/// Group normalisation (Wu & He 2018): the C channels of [N, C, *] split into num_groups
/// groups, each (sample, group) normalised over its C/G * prod(*) values (biased variance),
/// then weight[c], bias[c] (optional, [C]). C not divisible by num_groups: Error(value).
[[nodiscard]] Tensor group_norm(const Tensor& input, std::int64_t num_groups, const Tensor& weight = {},
                                const Tensor& bias = {}, double eps = 1e-5);
/// Instance normalisation (Ulyanov et al. 2016) of [N, C, *] (at least 3-D), each (sample,
/// channel) over its spatial values; weight/bias [C] optional. use_input_stats: the
/// instance statistics (more than 1 spatial value, else Error(value)), and running stats,
/// when given, move toward their batch means (unbiased variance) with momentum; otherwise
/// the running statistics normalise, as batch_norm in evaluation mode.
[[nodiscard]] Tensor instance_norm(const Tensor& input, const Tensor& running_mean = {},
                                   const Tensor& running_var = {}, const Tensor& weight = {},
                                   const Tensor& bias = {}, bool use_input_stats = true, double momentum = 0.1,
                                   double eps = 1e-5);
/// Root-mean-square normalisation (Zhang & Sennrich 2019) over the trailing normalized_shape:
/// x / sqrt(mean(x^2) + eps) * weight. eps unset: the dtype's machine epsilon
/// (torch.finfo(dtype).eps). bf16/f16 compute in f32.
[[nodiscard]] Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                              std::optional<double> eps = std::nullopt);
/// x / max(||x||_p, eps) along dim (p > 0, inf allowed; Error(value) otherwise). The
/// gradient at a zero vector is 0 (the clamp is taken on the power sum).
[[nodiscard]] Tensor normalize(const Tensor& input, double p = 2.0, std::int64_t dim = 1, double eps = 1e-12);

/// Rows of `weight` [V, D] at `indices` (i32/i64, any shape) -> [..., D]. Backward is a
/// scatter-add into weight's gradient (deterministic order when set_deterministic(true)).
/// padding_idx: that row gets no gradient. Error(index) for an index outside [0, V).
[[nodiscard]] Tensor embedding(const Tensor& weight, const Tensor& indices,
                               std::optional<std::int64_t> padding_idx = std::nullopt);
/// Values along `dim` at `index` (i64, same ndim as x; other dims <= x's): out has index's
/// shape. Backward: scatter_add.
[[nodiscard]] Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index);
/// x with src added at `index` along dim (out of place). Backward: gather for src, identity
/// for x.
[[nodiscard]] Tensor scatter_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
/// Slices of x along dim at the positions in the 1-D `index` (i32/i64).
[[nodiscard]] Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index);
/// x with `value` where the bool `mask` (broadcast) is true.
[[nodiscard]] Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
/// The lower (upper) triangle of the last two dims; elements above (below) `diagonal` -> 0.
[[nodiscard]] Tensor tril(const Tensor& x, std::int64_t diagonal = 0);
[[nodiscard]] Tensor triu(const Tensor& x, std::int64_t diagonal = 0);
/// i64 one-hot encoding [..., num_classes] of integer `indices`. num_classes must be given
/// (> 0): inferring it would need a host sync.
[[nodiscard]] Tensor one_hot(const Tensor& indices, std::int64_t num_classes);
/// Zeroes elements with probability p and scales the rest by 1/(1-p) when training (identity
/// otherwise). The mask comes from rand() with the seeded generator: the same on CPU and GPU.
[[nodiscard]] Tensor dropout(const Tensor& x, double p = 0.5, bool training = true);
/// Channel dropout (Tompson et al. 2015): in training, whole channels of [N, C, H, W] (or an
/// unbatched [C, H, W]) are zeroed with probability p and the rest scaled by 1/(1-p); one
/// draw per (n, c), as dropout's from the seeded generator (the same on CPU and GPU).
/// Identity when not training or p == 0. Error(value) for p outside [0, 1], Error(shape)
/// for other ranks, Error(dtype) for non-floating inputs.
[[nodiscard]] Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true);
/// CUDA scatter-adds (embedding backward, scatter_add, index_select backward) in a fixed
/// order instead of with atomics: reproducible to the bit, slower. Off by default.
void set_deterministic(bool deterministic);
bool deterministic();

/// N sizes given as one number for all (`2` is {2, 2}) or as N numbers (`{2, 3}`), as
/// LibTorch's ExpandingArray<N>: `conv2d(x, w, {}, {.stride = 2})`, `{.padding = {1, 2}}`. A
/// braced list of another length is Error(value).
template <std::size_t N> struct ExpandingArray {
  std::array<std::int64_t, N> values{};
  ExpandingArray(std::int64_t value) { values.fill(value); }
  ExpandingArray(std::array<std::int64_t, N> v) : values(v) {}
  ExpandingArray(std::initializer_list<std::int64_t> list) {
    if (list.size() != N)
      throw Error(ErrorKind::value, "ExpandingArray: expected " + std::to_string(N) + " values, got " +
                                        std::to_string(list.size()));
    std::size_t i = 0;
    for (std::int64_t v : list) values[i++] = v;
  }
  operator const std::array<std::int64_t, N>&() const { return values; }
  std::int64_t operator[](std::size_t i) const { return values[i]; }
  friend bool operator==(const ExpandingArray& a, const ExpandingArray& b) { return a.values == b.values; }
};

/// Options of conv2d.
struct Conv2dOptions {
  ExpandingArray<2> stride{1, 1};
  ExpandingArray<2> padding{0, 0};
  ExpandingArray<2> dilation{1, 1};
  std::int64_t groups = 1;
};
/// 2-D convolution (cross-correlation, as PyTorch): input [N, C, H, W], weight
/// [O, C/groups, kh, kw], bias [O] or undefined -> [N, O, out_h, out_w] with
/// out = floor((H + 2p - d (k - 1) - 1) / s) + 1. im2col + GEMM.
[[nodiscard]] Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                            Conv2dOptions options = {});
/// Options of conv_transpose2d (PyTorch's argument names).
struct ConvTranspose2dOptions {
  std::array<std::int64_t, 2> stride{1, 1};
  std::array<std::int64_t, 2> padding{0, 0};
  /// Extra rows/columns at the bottom/right of the output (each < stride or < dilation).
  std::array<std::int64_t, 2> output_padding{0, 0};
  std::int64_t groups = 1;
  std::array<std::int64_t, 2> dilation{1, 1};
};
/// 2-D transposed convolution (the gradient of conv2d with respect to its input; Dumoulin &
/// Visin 2016, "A guide to convolution arithmetic"): input [N, Cin, H, W] (or [Cin, H, W]),
/// weight [Cin, Cout/groups, kh, kw], bias [Cout] or undefined -> [N, Cout, H', W'] with
/// H' = (H - 1) s - 2 p + d (kh - 1) + output_padding + 1. One batched GEMM and col2im per
/// group. Error(shape) for mismatched channels/ranks, Error(dtype) unless input, weight and
/// bias share a floating dtype, Error(value) for non-positive kernel/stride/dilation,
/// negative padding, or output_padding not below stride or dilation.
[[nodiscard]] Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                                      ConvTranspose2dOptions options = {});
/// Options of conv1d.
struct Conv1dOptions {
  std::int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
};
/// 1-D convolution: input [N, C, L] (or [C, L]), weight [O, C/groups, k], bias [O] ->
/// [N, O, L'], L' = floor((L + 2p - d (k - 1) - 1) / s) + 1; conv2d over a height-1 image.
[[nodiscard]] Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                            Conv1dOptions options = {});
/// PyTorch's F.pad: `padding` lists (before, after) pairs from the last dim backwards,
/// (left, right, top, bottom, ...). mode "constant" fills with `value` (negative amounts
/// crop); "reflect" mirrors without repeating the edge (amounts < the dim's size);
/// "replicate" repeats the edge; "circular" wraps around (amounts <= the size). The
/// non-constant modes pad at most the last ndim - 1 dims. Error(value) for another mode or a
/// bad amount, Error(shape) for an odd-length or too long padding. Gradients sum back into
/// the copied elements.
[[nodiscard]] Tensor pad(const Tensor& input, const std::vector<std::int64_t>& padding,
                         std::string_view mode = "constant", double value = 0.0);
/// [*, C r^2, H, W] -> [*, C, H r, W r]: each group of r^2 channels tiles an r x r block
/// (a view chain and one copy). Error(shape) unless the channels divide by r^2.
[[nodiscard]] Tensor pixel_shuffle(const Tensor& input, std::int64_t upscale_factor);
/// The inverse of pixel_shuffle: [*, C, H r, W r] -> [*, C r^2, H, W].
[[nodiscard]] Tensor pixel_unshuffle(const Tensor& input, std::int64_t downscale_factor);
/// Options of the 2-D pools.
struct Pool2dOptions {
  ExpandingArray<2> kernel_size{2, 2};
  /// Default (nullopt): the kernel size.
  std::optional<ExpandingArray<2>> stride;
  ExpandingArray<2> padding{0, 0};
  ExpandingArray<2> dilation{1, 1};  ///< max_pool2d only
  /// Output size rounds up, but the last window must start inside the input or the left
  /// padding (PyTorch's rule).
  bool ceil_mode = false;
  bool count_include_pad = true;  ///< avg_pool2d: padding counts in the divisor
};
/// Max over windows of [N, C, H, W] (or [C, H, W]); padding never wins (it is -inf).
[[nodiscard]] Tensor max_pool2d(const Tensor& x, Pool2dOptions options);
/// max_pool2d(x, 2): a square kernel, stride = kernel (LibTorch's torch::max_pool2d(x, 2)).
[[nodiscard]] Tensor max_pool2d(const Tensor& x, std::int64_t kernel_size);
/// Average over windows.
[[nodiscard]] Tensor avg_pool2d(const Tensor& x, Pool2dOptions options);
[[nodiscard]] Tensor avg_pool2d(const Tensor& x, std::int64_t kernel_size);
/// Average pooling to a fixed output size: bin i spans [floor(i H / out), ceil((i+1) H / out)).
[[nodiscard]] Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size);
/// im2col as an op (PyTorch F.unfold): [N, C, H, W] -> [N, C*kh*kw, L]. Backward: fold.
[[nodiscard]] Tensor unfold(const Tensor& x, std::array<std::int64_t, 2> kernel_size,
                            std::array<std::int64_t, 2> dilation = {1, 1},
                            std::array<std::int64_t, 2> padding = {0, 0},
                            std::array<std::int64_t, 2> stride = {1, 1});
/// col2im as an op (PyTorch F.fold): [N, C*kh*kw, L] -> [N, C, H, W] summing overlaps.
[[nodiscard]] Tensor fold(const Tensor& cols, std::array<std::int64_t, 2> output_size,
                          std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> dilation = {1, 1},
                          std::array<std::int64_t, 2> padding = {0, 0}, std::array<std::int64_t, 2> stride = {1, 1});

// ---------------------------------------------------------------------------------------
// In-place arithmetic, with PyTorch's rules (ops/inplace.cpp): x becomes x op y, written
// into x's own storage; its version is bumped (a tensor saved for backward before then makes
// that backward throw Error(autograd)). The result (broadcast of both shapes, promoted dtype)
// must fit x: its shape must be x's (Error(shape)) and its dtype must cast to x's within
// its kind or lower (float -> integer or -> bool is Error(dtype), as PyTorch's "result type
// Float can't be cast to the desired output type Long"). Under grad mode:
//   - a leaf that requires grad is refused (Error(autograd), PyTorch's "a leaf Variable that
//     requires grad is being used in an in-place operation"): update parameters under
//     NoGradGuard, as optimizers do;
//   - otherwise, if x or y requires grad, the op is recorded and x takes its history (x's
//     grad_fn becomes the op's node; x's previous values reach the rule through a copy). brrr
//     records this only for a tensor that is the sole owner of its storage: a view, a tensor
//     with views, or one saved by its own producer (exp's output, ...) is Error(autograd)
//     there (PyTorch would rebase the views' history; write y = y + ... instead).
// Without grad mode or a tensor requiring grad, nothing is recorded: one kernel when the
// dtypes match. Each returns x.
// ---------------------------------------------------------------------------------------

/// x += alpha * y.
const Tensor& add_(const Tensor& x, const Tensor& y, double alpha = 1.0);
const Tensor& add_(const Tensor& x, Scalar y);
const Tensor& sub_(const Tensor& x, const Tensor& y);
const Tensor& sub_(const Tensor& x, Scalar y);
/// x *= y (y broadcast, e.g. a 0-d device scalar).
const Tensor& mul_(const Tensor& x, const Tensor& y);
const Tensor& mul_(const Tensor& x, Scalar y);
/// x /= y (true division: an integer x is Error(dtype)).
const Tensor& div_(const Tensor& x, const Tensor& y);
const Tensor& div_(const Tensor& x, Scalar y);

// ---------------------------------------------------------------------------------------
// Indexing in LibTorch's spelling (ops/indexing.cpp):
//   x.index({Slice(0, 8), 2, None, Ellipsis, idx, mask})      (Python's x[0:8, 2, None, ..., idx, mask])
//   x.index_put_({Slice(), 0}, values)                         (x[:, 0] = values)
// ---------------------------------------------------------------------------------------

namespace indexing {
/// Python's start:stop:step; an unset bound is the dim's start or end, a negative one counts
/// from the end, out-of-range bounds clamp (Python slicing). step > 0 (Error(value)).
struct Slice {
  Slice(std::optional<std::int64_t> start = std::nullopt, std::optional<std::int64_t> stop = std::nullopt,
        std::optional<std::int64_t> step = std::nullopt)
      : start(start), stop(stop), step(step) {}
  std::optional<std::int64_t> start, stop, step;
};
/// Python's `...`: as many full slices as the other indices leave.
struct EllipsisIndexType {};
inline constexpr EllipsisIndexType Ellipsis{};
/// Python's `None`: inserts a size-1 dim.
inline constexpr std::nullopt_t None = std::nullopt;

/// One entry of an index list: an integer (selects, removing the dim; negative counts from
/// the end; Error(index) out of range), a Slice, None, Ellipsis, or a tensor: i64/i32 indices
/// (advanced indexing, as NumPy: several index tensors broadcast together; their result dims
/// replace theirs in place when they are adjacent, else they go first) or a bool mask over
/// the next mask.dim() dims (the positions where it is true: a host sync, as in PyTorch).
class TensorIndex {
public:
  enum class Kind : std::uint8_t { integer, slice, none, ellipsis, tensor };
  /// Any integer type (int, int64_t, size_t, ...); bool is not an index.
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  TensorIndex(I i) : kind_(Kind::integer), integer_(static_cast<std::int64_t>(i)) {}
  TensorIndex(Slice s) : kind_(Kind::slice), slice_(s) {}
  TensorIndex(std::nullopt_t) : kind_(Kind::none) {}
  TensorIndex(EllipsisIndexType) : kind_(Kind::ellipsis) {}
  TensorIndex(Tensor t) : kind_(Kind::tensor), tensor_(std::move(t)) {}
  Kind kind() const { return kind_; }
  std::int64_t integer() const { return integer_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

private:
  Kind kind_;
  std::int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};
}  // namespace indexing

/// x[indices] (see indexing::TensorIndex). Integers, slices, None and Ellipsis give a view;
/// index tensors and masks a copy (index_select on the flattened indexed dims), differentiable.
/// More indices than dims is Error(index); index tensors must be on x's device (Error(device))
/// and of dtype i64, i32 or bool (Error(dtype)).
[[nodiscard]] Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
/// x[indices] = values in place (values broadcast to x[indices]'s shape and converted to x's
/// dtype), PyTorch's index_put_ / Python's setitem, under the in-place rules above. With
/// accumulate, values are added instead (repeated indices add up); without, repeated indices
/// are undefined in PyTorch and add up here. Returns x.
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                         bool accumulate = false);
const Tensor& index_put_(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, Scalar value);

}  // namespace brrr

// Not exported: helpers shared by the op families' implementation units.
namespace brrr::ops_detail {

/// Throws Error(device) unless all defined tensors are on one device; returns it.
Device common_device(const char* op, std::initializer_list<Tensor> tensors);
/// The in-place rules of add_, sub_, mul_, div_ and index_put_ (ops/inplace.cpp): x becomes
/// compute(x) unrecorded (one_kernel, when given, may do it in place and return true), or,
/// when grad mode is on and x or `operand` requires grad, recorded with x taking the history
/// of compute(x's old values). Checks shape and dtype of the result against x.
const Tensor& update(const char* op, const Tensor& x, const Tensor& operand,
                     const std::function<Tensor(const Tensor&)>& compute, const std::function<bool()>& one_kernel);
/// Throws Error(value) for an undefined tensor.
void require_defined(const char* op, const Tensor& t, const char* name = "input");
/// Throws Error::dtype_not_supported unless t is floating (f32, f64, bf16, f16); `what`
/// names it in the message ("input", "weight", ...).
void require_floating(const char* op, const Tensor& t, const char* what = "input");
/// Throws Error::dtype_not_supported unless t holds indices (i32 or i64).
void require_index_dtype(const char* op, const Tensor& t, const char* what = "index");
/// Wraps dim into [0, ndim); Error(index) names op and shape.
std::int64_t wrap_dim(const char* op, std::int64_t dim, std::int64_t ndim, const Shape& shape);
/// Bitmask of the (wrapped, deduplicated) dims; empty dims = all dims.
std::uint32_t dims_mask(const char* op, const std::vector<std::int64_t>& dims, const Shape& shape);
/// Shape after reducing `mask` dims (kept as 1 when keepdim).
Shape reduced_shape(const Shape& shape, std::uint32_t mask, bool keepdim);
/// Reinserts size-1 dims removed by a keepdim=false reduction, so that the result
/// broadcasts against the input again.
Tensor unsqueeze_reduced(const Tensor& t, std::uint32_t mask, std::int64_t input_dim, bool keepdim);

/// Output positions of a window sweep along one dim: floor((in + 2p - d (k - 1) - 1) / s) + 1,
/// rounding toward -inf (ops/conv.cpp).
std::int64_t conv_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d);
/// The window geometry over an [N, C, H, W] input `x` with out_h x out_w positions.
backend::Window2d window(const Shape& x, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> d,
                         std::array<std::int64_t, 2> p, std::array<std::int64_t, 2> s, std::int64_t out_h,
                         std::int64_t out_w);
/// The elementwise op `op` of x with its parameters p0/p1 (clamp's bounds, the activations'
/// parameters), its backward rule recorded (ops/unary.cpp).
Tensor unary_op(backend::UnaryOp op, const Tensor& x, double p0 = 0, double p1 = 0);
/// The gradient of an activation of BRRR_ACTIVATION_OPS at input x (ops/activation.cpp).
Tensor activation_rule(backend::UnaryOp op, const Tensor& g, const Tensor& x, double p0, double p1);
/// Inverted-dropout noise of `shape` for x: 1 / (1 - p) where rand >= p, else 0, in x's
/// dtype on x's device (0 < p < 1; ops/dropout.cpp).
Tensor dropout_noise(const Tensor& x, const Shape& shape, double p);

/// fold of [N, C*kh*kw, L] columns into [N, C, H, W] (the geometry's input shape), summing
/// overlaps; differentiable (its adjoint is unfold; ops/conv.cpp).
Tensor fold_cols(const Tensor& cols, const backend::Window2d& g);
/// unfold with a chosen value for cells outside the input (0 for conv, -inf for max pools).
Tensor unfold_with_pad(const Tensor& x, const backend::Window2d& g, double pad_value);

}  // namespace brrr::ops_detail

// Not exported: what the op shortcuts of Tensor call (x.sum() -> TensorMethods::sum(x); the
// shortcuts are templates of brrr.tensor resolved where they are used, so brrr.tensor names
// this class without importing brrr.ops).
namespace brrr {
extern "C++" struct TensorMethods {
  using Scalar = brrr::Scalar;
  using TensorIndex = indexing::TensorIndex;
#define BRRR_TENSOR_METHOD(name, params, args) \
  static auto name BRRR_METHOD_SELF_PARAMS params { return brrr::name BRRR_METHOD_SELF_ARGS args; }
  BRRR_TENSOR_METHODS(BRRR_TENSOR_METHOD, Scalar)
  BRRR_TENSOR_INPLACE_METHODS(BRRR_TENSOR_METHOD, Scalar)
#undef BRRR_TENSOR_METHOD
  static Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) { return brrr::index(x, indices); }
  static Tensor index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values,
                           bool accumulate) {
    return brrr::index_put_(x, indices, values, accumulate);
  }
  static Tensor index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, Scalar value) {
    return brrr::index_put_(x, indices, value);
  }
};
}  // namespace brrr
