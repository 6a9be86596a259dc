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
#include <utility>
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
/// gelu's gradient in one kernel: grad * gelu'(x) for gelu(x, approximate) ("none": x Phi(x),
/// "tanh": the tanh approximation), computed in f32 for bf16/f16 (f64 for f64), broadcast and
/// promoted like any binary op (integers compute in f32). Not itself recorded (used inside
/// backward passes; PyTorch's aten::gelu_backward). Error(value) for another `approximate`.
[[nodiscard]] Tensor gelu_backward(const Tensor& grad, const Tensor& x, const std::string& approximate = "none");
/// a^b elementwise (floating dtypes; integer bases with integer exponents stay integer).
[[nodiscard]] Tensor pow(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor pow(const Tensor& a, Scalar exponent);
[[nodiscard]] Tensor pow(Scalar base, const Tensor& exponent);
/// Elementwise max/min; ties send half the gradient to each input (PyTorch).
[[nodiscard]] Tensor maximum(const Tensor& a, const Tensor& b);
[[nodiscard]] Tensor minimum(const Tensor& a, const Tensor& b);

/// Floating binary functions: broadcast, promoted; integer and bool operands compute in f32.
/// atan2(input, other) = the angle of (other, input) in [-pi, pi]; hypot = sqrt(a^2 + b^2)
/// without overflow; logaddexp = log(e^a + e^b), stable; xlogy = a log(b), 0 where a == 0
/// (unless b is NaN); copysign = |a| with b's sign (including -0.0). Gradients as PyTorch's
/// derivatives.yaml (copysign: 0 for `other`; xlogy: 0 for `input` where a == 0 and b <= 0).
[[nodiscard]] Tensor atan2(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor hypot(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor logaddexp(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor xlogy(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor xlogy(const Tensor& input, Scalar other);
[[nodiscard]] Tensor xlogy(Scalar input, const Tensor& other);
[[nodiscard]] Tensor copysign(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor copysign(const Tensor& input, Scalar other);
/// input + weight * (end - input); input, end and weight floating (Error(dtype)), broadcast.
[[nodiscard]] Tensor lerp(const Tensor& input, const Tensor& end, const Tensor& weight);
[[nodiscard]] Tensor lerp(const Tensor& input, const Tensor& end, Scalar weight);
/// clamp with tensor bounds (either may be undefined, not both: Error(value)), broadcast and
/// promoted: minimum(maximum(x, min), max), so max wins where min > max and NaN (in x or a
/// bound) propagates. Gradients (PyTorch 2.x's): with one bound those of maximum/minimum;
/// with both, to whichever of x, min, max the result is (half each on a tie of x with a
/// bound, x at a NaN x, max wherever min > max). The number-bound forms are below.
[[nodiscard]] Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
[[nodiscard]] Tensor clamp_min(const Tensor& x, const Tensor& min);
[[nodiscard]] Tensor clamp_max(const Tensor& x, const Tensor& max);

/// Logical ops: any dtypes (x != 0 is true; NaN is true), broadcast -> bool.
[[nodiscard]] Tensor logical_and(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor logical_or(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor logical_xor(const Tensor& input, const Tensor& other);
/// x == 0, -> bool.
[[nodiscard]] Tensor logical_not(const Tensor& x);
/// Bitwise ops on integer and bool tensors (shifts: integers only); floats are Error(dtype).
/// Shifts as PyTorch's: by a negative count or by the width or more, left gives 0 and right
/// the sign fill (-1 or 0). bitwise_not of bool is logical_not.
[[nodiscard]] Tensor bitwise_and(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor bitwise_and(const Tensor& input, Scalar other);
[[nodiscard]] Tensor bitwise_or(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor bitwise_or(const Tensor& input, Scalar other);
[[nodiscard]] Tensor bitwise_xor(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor bitwise_xor(const Tensor& input, Scalar other);
[[nodiscard]] Tensor bitwise_left_shift(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor bitwise_left_shift(const Tensor& input, Scalar other);
[[nodiscard]] Tensor bitwise_right_shift(const Tensor& input, const Tensor& other);
[[nodiscard]] Tensor bitwise_right_shift(const Tensor& input, Scalar other);
[[nodiscard]] Tensor bitwise_not(const Tensor& x);

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
/// Trigonometric and hyperbolic functions (integers promote to f32). Gradients: tan 1 + tan^2,
/// asin 1/sqrt(1 - x^2), acos -1/sqrt(1 - x^2), atan 1/(1 + x^2), sinh cosh, cosh sinh.
[[nodiscard]] Tensor tan(const Tensor& x);
[[nodiscard]] Tensor asin(const Tensor& x);
[[nodiscard]] Tensor acos(const Tensor& x);
[[nodiscard]] Tensor atan(const Tensor& x);
[[nodiscard]] Tensor sinh(const Tensor& x);
[[nodiscard]] Tensor cosh(const Tensor& x);
/// e^x - 1, accurate near 0.
[[nodiscard]] Tensor expm1(const Tensor& x);
[[nodiscard]] Tensor log2(const Tensor& x);
[[nodiscard]] Tensor log10(const Tensor& x);
/// 2^x.
[[nodiscard]] Tensor exp2(const Tensor& x);
/// 1 - erf(x), accurate for large x.
[[nodiscard]] Tensor erfc(const Tensor& x);
/// Inverse of erf on [-1, 1]: +-inf at +-1, NaN outside (Giles 2011 refined by Newton steps).
[[nodiscard]] Tensor erfinv(const Tensor& x);
/// ln |Gamma(x)|; inf at the non-positive integers. Gradient digamma(x).
[[nodiscard]] Tensor lgamma(const Tensor& x);
/// psi(x) = d/dx ln Gamma(x): -inf at +0, NaN at the negative integers (PyTorch). Gradient
/// polygamma(1, x).
[[nodiscard]] Tensor digamma(const Tensor& x);
/// The n-th derivative of digamma, for n = 0 (digamma) and n = 1 (trigamma) only (Error(value)
/// otherwise); polygamma(1, x) itself is not differentiable (Error(value) from backward).
[[nodiscard]] Tensor polygamma(std::int64_t n, const Tensor& x);
/// Rounding (integers are returned as they are; bool is Error(dtype)); gradient 0.
/// round: half to even; decimals != 0 rounds x * 10^decimals (floats only), PyTorch's formula.
[[nodiscard]] Tensor floor(const Tensor& x);
[[nodiscard]] Tensor ceil(const Tensor& x);
[[nodiscard]] Tensor round(const Tensor& x, std::int64_t decimals = 0);
[[nodiscard]] Tensor trunc(const Tensor& x);
/// x - trunc(x), floating only (Error(dtype)); gradient 1.
[[nodiscard]] Tensor frac(const Tensor& x);
/// 1 / x (integers promote to f32).
[[nodiscard]] Tensor reciprocal(const Tensor& x);
/// x * x; integers keep their dtype, bool gives i64 (PyTorch).
[[nodiscard]] Tensor square(const Tensor& x);
/// NaN -> nan (default 0), +inf -> posinf, -inf -> neginf (default: the dtype's largest and
/// lowest finite values). Integers: a copy. Gradient: g where x is finite, else 0.
[[nodiscard]] Tensor nan_to_num(const Tensor& x, std::optional<double> nan = 0.0,
                                std::optional<double> posinf = std::nullopt,
                                std::optional<double> neginf = std::nullopt);
/// Classification -> bool (integers: never NaN or inf).
[[nodiscard]] Tensor isnan(const Tensor& x);
[[nodiscard]] Tensor isinf(const Tensor& x);
[[nodiscard]] Tensor isfinite(const Tensor& x);

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
/// `dtype`: x is converted to it first (differentiably), PyTorch's dtype argument: e.g. a
/// bf16 sum accumulated and returned in f32, or an i32 sum kept in i32 instead of i64.
[[nodiscard]] Tensor sum(const Tensor& x, DimList dims = {}, bool keepdim = false,
                         std::optional<DType> dtype = std::nullopt);
/// Mean (floating dtypes only; Error(dtype) otherwise). Empty input gives NaN. bf16/f16:
/// summed and divided in f32, rounded once.
/// `dtype` (floating): x converted to it first, so integer inputs can be averaged.
[[nodiscard]] Tensor mean(const Tensor& x, DimList dims = {}, bool keepdim = false,
                          std::optional<DType> dtype = std::nullopt);
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
/// (var, mean) and (std, mean) in one call, same arguments as var (PyTorch's var_mean,
/// std_mean); both differentiable.
[[nodiscard]] std::pair<Tensor, Tensor> var_mean(const Tensor& x, std::vector<std::int64_t> dims = {},
                                                 double correction = 1, bool keepdim = false);
[[nodiscard]] std::pair<Tensor, Tensor> std_mean(const Tensor& x, std::vector<std::int64_t> dims = {},
                                                 double correction = 1, bool keepdim = false);
/// Whether all (any) elements are non-zero, over all dims or over `dims` -> bool. Any dtype
/// (NaN counts as true). Zero elements: true for all, false for any. Not differentiable.
[[nodiscard]] Tensor all(const Tensor& x);
[[nodiscard]] Tensor all(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim = false);
[[nodiscard]] Tensor any(const Tensor& x);
[[nodiscard]] Tensor any(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim = false);
/// The vector ord-norm over `dims` (empty: all): (sum |x|^ord)^(1/ord); inf: max |x|;
/// -inf: min |x|; 0: the count of non-zeros (gradient 0). Floating inputs (Error(dtype)), or
/// any input with a floating `dtype` (converted first). bf16/f16 compute in f32. Gradient
/// x |x|^(ord-2) / norm^(ord-1), 0 where the norm is 0 (PyTorch's norm_backward).
[[nodiscard]] Tensor vector_norm(const Tensor& x, double ord = 2, std::vector<std::int64_t> dims = {},
                                 bool keepdim = false, std::optional<DType> dtype = std::nullopt);
/// log(sum(exp(x))) computed stably: m = amax over dims (a constant for autograd; 0 where it
/// is +-inf), log(sum(exp(x - m))) + m. Reducing zero elements gives -inf; integer and bool
/// inputs compute in f32.
[[nodiscard]] Tensor logsumexp(const Tensor& x, DimList dims, bool keepdim = false);
// ---------------------------------------------------------------------------------------
// Scans, sorting, sampling (ops/scan.cpp, ops/sort.cpp, ops/sampling.cpp)
// ---------------------------------------------------------------------------------------

/// Inclusive cumulative sum / product along dim (0-d: dim 0 or -1). Integer and bool inputs
/// give i64 (PyTorch), or `dtype` when given (x converted first). Floating accumulation in
/// accumulate_t (f32 for bf16/f16, rounded per element). Gradients: cumsum the reversed
/// cumulative sum of g; cumprod exact also where x holds zeros.
[[nodiscard]] Tensor cumsum(const Tensor& x, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
[[nodiscard]] Tensor cumprod(const Tensor& x, std::int64_t dim, std::optional<DType> dtype = std::nullopt);
/// Running max / min along dim with the (i64) index of the element it came from: the last
/// one on ties, a NaN once one is seen (PyTorch). Any dtype; the gradient goes to the index.
[[nodiscard]] ValuesIndices cummax(const Tensor& x, std::int64_t dim);
[[nodiscard]] ValuesIndices cummin(const Tensor& x, std::int64_t dim);
/// log(cumsum(exp(x))) along dim, stable (floating inputs only, Error(dtype)).
[[nodiscard]] Tensor logcumsumexp(const Tensor& x, std::int64_t dim);
/// x reversed along each of `dims` (a copy; an empty list copies). Gradient: flipped back.
[[nodiscard]] Tensor flip(const Tensor& x, std::vector<std::int64_t> dims);
/// Sorted values along dim and their (i64) positions. Always stable (`stable` is accepted
/// for PyTorch's signature): equal elements keep their order, so CPU and CUDA give the same
/// indices. NaN sorts as the largest value; -0.0 equals 0.0. CUDA: CUB radix sort (one row)
/// or segmented sort. The gradient goes back to the positions.
[[nodiscard]] ValuesIndices sort(const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
[[nodiscard]] Tensor argsort(const Tensor& x, std::int64_t dim = -1, bool descending = false, bool stable = false);
/// The k largest (smallest unless `largest`) along dim, sorted, with their positions; ties in
/// the order of sort (stable): exactly sort's first k. k outside [0, size] is Error(index).
/// CPU: a partial sort per row. CUDA: a radix select of the k, then the k sorted (no host
/// sync; very short rows or k > 1024: a full sort and a slice).
[[nodiscard]] ValuesIndices topk(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool largest = true,
                                 bool sorted = true);
/// The k-th smallest (k from 1) along dim and its position; Error(index) outside [1, size].
[[nodiscard]] ValuesIndices kthvalue(const Tensor& x, std::int64_t k, std::int64_t dim = -1, bool keepdim = false);
/// The lower median along dim (element (n - 1) / 2 of the sorted line) and its position; a
/// line holding NaN gives NaN (the position of a NaN), as PyTorch. median(x): over all
/// elements (NaN for an empty input).
[[nodiscard]] ValuesIndices median(const Tensor& x, std::int64_t dim, bool keepdim = false);
[[nodiscard]] Tensor median(const Tensor& x);
/// The most frequent value along dim (the smallest of equally frequent ones) and its i64
/// position: the last position of that value in the line, as PyTorch's CPU torch.mode. NaNs
/// count as one value, the largest; -0.0 equals 0.0. A stable sort and a run-length scan.
/// Error(value) for a dim of size 0. The values' gradient goes to that position; the
/// indices are not differentiable.
[[nodiscard]] ValuesIndices mode(const Tensor& x, std::int64_t dim = -1, bool keepdim = false);
/// What unique returns: the sorted distinct values, and when asked the (i64) slot of each
/// input element (input's shape) and the count of each value.
struct UniqueResult {
  Tensor values;
  Tensor inverse;
  Tensor counts;
};
/// The distinct elements of x (flattened), always sorted; NaNs are each distinct. The number
/// of values depends on the data: it is read back to the host (one counted sync on CUDA;
/// fails under SyncPolicy::error). Not differentiable.
[[nodiscard]] UniqueResult unique(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                  bool return_counts = false);
/// Counts (or sums `weights`, same shape) per value of a 1-D non-negative integer input, in
/// max(max(input) + 1, minlength) bins: i64 counts, or weights' dtype (f64 for integer
/// weights). Negative input: Error(value). The size is read back (one counted sync on CUDA).
[[nodiscard]] Tensor bincount(const Tensor& input, const Tensor& weights = {}, std::int64_t minlength = 0);
/// For each value, the index in the last dim of `sorted_sequence` (ascending; 1-D for all
/// values, or N-D with values' leading dims) where it would be inserted: the first element
/// >= value, or > value when `right`. i64 (i32 when out_int32), values' shape.
[[nodiscard]] Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32 = false,
                                  bool right = false);
/// 0/1 samples with probabilities p (p's dtype), or with one probability p in [0, 1] for
/// x's shape and dtype: u < p for u = rand() of the seeded generator, so a seed gives the
/// same samples on CPU and GPU. Error(value) for p outside [0, 1] or NaN: checked on the CPU
/// (on CUDA it would be a host sync; there such p acts as clamped, NaN as 0), and always for
/// a number p.
[[nodiscard]] Tensor bernoulli(const Tensor& p);
[[nodiscard]] Tensor bernoulli(const Tensor& x, double p);
/// mean + std * randn() broadcast (std >= 0: checked on the CPU, and for a number std).
/// Not differentiable (PyTorch gives zero gradients).
[[nodiscard]] Tensor normal(const Tensor& mean, const Tensor& std);
[[nodiscard]] Tensor normal(const Tensor& mean, double std);
[[nodiscard]] Tensor normal(double mean, const Tensor& std);
/// num_samples category indices (i64) per row of non-negative weights [k] or [rows, k]:
/// with replacement by inversion of the cumulative weights at rand() points; without by the
/// exponential race (top num_samples of w / E, E ~ Exp(1), Efraimidis & Spirakis 2006, as
/// PyTorch; a zero weight ranks below every positive one, even where E is 0). Each row is
/// first divided by its largest weight, so weights up to the float maximum keep their
/// proportions. Draws come from the seeded Philox stream: a seed gives the same samples on CPU
/// and GPU. Weights are checked (finite, >= 0, a positive one per row, enough for the
/// samples without replacement) on the CPU only: on CUDA that would be a host sync.
[[nodiscard]] Tensor multinomial(const Tensor& input, std::int64_t num_samples, bool replacement = false);
/// Poisson samples with the rates of `rates` (floating, >= 0), in its shape and dtype: each a
/// function of the seeded Philox stream at (seed, offset, element) alone, the same on CPU and
/// GPU (ops/random_transform.hpp: inversion for rates below 10, Hoermann's PTRS above; 32
/// words per element). A rate of +inf gives +inf. Negative or NaN rates: Error(value) on the
/// CPU; on CUDA the samples there are NaN and the deferred device error reports it at the
/// next sync. Not under CUDA graph capture (Error(stream)). Not differentiable.
[[nodiscard]] Tensor poisson(const Tensor& rates);

// ---------------------------------------------------------------------------------------
// Linear algebra
// ---------------------------------------------------------------------------------------

/// Matrix product with NumPy/PyTorch semantics: 1-D x 1-D -> [] (dot); [n, k] x [k, m] ->
/// [n, m]; 1-D operands get a dim prepended/appended and removed again; batched [..., n, k] x
/// [..., k, m] broadcasts the batch dims. f32/f64/bf16/f16. CUDA: cuBLASLt (cuBLAS's
/// strided-batched GEMM where Lt has no kernel), transposed views mapped to transpose flags
/// (no copy); CPU: OpenBLAS.
/// Throws Error(shape) e.g. "matmul: shapes [32, 784] and [128, 10] cannot be multiplied
/// (784 != 128)".
[[nodiscard]] Tensor matmul(const Tensor& a, const Tensor& b);
/// Allow TF32 tensor-core math for f32 matmul on CUDA (10-bit mantissa products, f32
/// accumulate; ~3e-4 relative error), and for the f32 fused attention
/// (scaled_dot_product_flash_attention; read when the forward runs, kept for its backward).
/// Off by default, like PyTorch's torch.backends.cuda.matmul.allow_tf32.
void set_allow_tf32(bool allow);
bool allow_tf32();

/// 2-D x 2-D (mm) and 3-D x 3-D with one batch size (bmm) products; Error(shape) otherwise.
[[nodiscard]] Tensor mm(const Tensor& a, const Tensor& mat2);
[[nodiscard]] Tensor bmm(const Tensor& a, const Tensor& mat2);
/// beta input + alpha mat1 @ mat2 (input broadcast; beta = 0 ignores input, NaN included).
/// With beta = alpha = 1 and input a row ([n] or [1, n]) of mat1's dtype, one GEMM with the
/// bias added in its epilogue (cuBLASLt's on CUDA), whose backward fuses the bias gradient
/// into the weight-gradient GEMM; otherwise mm, mul and add.
[[nodiscard]] Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, double beta = 1,
                           double alpha = 1);
[[nodiscard]] Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, double beta = 1,
                             double alpha = 1);
/// input + value t1 t2, input + value t1 / t2 (broadcast).
[[nodiscard]] Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value = 1);
[[nodiscard]] Tensor addcdiv(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, double value = 1);
/// [n] x [m] -> [n, m].
[[nodiscard]] Tensor outer(const Tensor& a, const Tensor& vec2);
/// input @ weight^T + bias: input [..., in], weight [out, in] (or [in]), bias [out] or undefined.
/// A 2-D weight with a 1-D bias of its dtype is one GEMM over input flattened to [rows, in],
/// the bias fused as in addmm; without a bias, matmul(input, weight^T).
[[nodiscard]] Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});
/// A transformer's MLP, linear(gelu(linear(input, fc_weight, fc_bias), approximate),
/// proj_weight, proj_bias), as one node with the activation in the GEMMs' epilogues
/// (FlashAttention's fused_mlp_func): input [..., in], fc_weight [hidden, in], fc_bias [hidden],
/// proj_weight [out, hidden], proj_bias [out] (biases may be undefined) -> [..., out]. With
/// approximate "tanh" (GELU's tanh form, Hendrycks & Gimpel 2016, as GPT-2 trains) the first
/// GEMM applies GELU as it stores and keeps the pre-activation for backward, whose
/// hidden-gradient GEMM applies GELU's derivative (backend GemmArgs::activation). On CUDA
/// cuBLASLt fuses the forward one for bf16 (its GELU_AUX epilogue), one pass over the
/// [rows, hidden] activations fewer; elsewhere, where Lt's epilogues measured slower or less
/// accurate, each is the GEMM and then one elementwise kernel, the composite's work.
/// Needs one device and one f32/f64/bf16/f16 dtype (under autocast, each tensor f32 or the
/// autocast dtype: bf16/f16 GEMMs, gradients in each input's dtype, as linear); otherwise, and
/// for approximate "none" (cuBLASLt has no exact-GELU epilogue), the composite of linear, gelu
/// and linear. Errors name fused_mlp: Error(shape) for mismatched weights or biases,
/// Error(dtype) for a non-floating tensor or tensors of more than one dtype (under autocast
/// f32/bf16/f16 count as the autocast dtype, f64 as f64; PyTorch's linear refuses mixed
/// dtypes too), Error(device) for more than one device, Error(value) for another
/// `approximate`. Note the default: "tanh", the fused form (as FlashAttention's), where
/// F::gelu's is "none".
[[nodiscard]] Tensor fused_mlp(const Tensor& input, const Tensor& fc_weight, const Tensor& fc_bias,
                               const Tensor& proj_weight, const Tensor& proj_bias,
                               const std::string& approximate = "tanh");
/// Contraction over dims_a of a with dims_b of b (sizes equal), or over a's last `dims` with
/// b's first: [free_a..., free_b...]. One matmul after permutes and reshapes.
[[nodiscard]] Tensor tensordot(const Tensor& a, const Tensor& b, const std::vector<std::int64_t>& dims_a,
                               const std::vector<std::int64_t>& dims_b);
[[nodiscard]] Tensor tensordot(const Tensor& a, const Tensor& b, std::int64_t dims = 2);
/// Einstein summation ("ij,jk->ik", "bij,bjk->bik", "ii->i", "ij->", implicit output when
/// no "->"): repeated letters in an operand take its diagonal, letters no later operand and
/// not the output needs are summed first, and each pair of operands (left to right) is one
/// batched matmul after permutes and reshapes. Letters, and at most one "..." per term for the
/// dims no letter names: right-aligned across operands and broadcast (size 1 or missing), as in
/// PyTorch; in the output where it has "...", first in an implicit output, else summed. The
/// sizes of a letter must agree (no broadcasting of size-1 lettered dims: Error(shape)); dims
/// that do not broadcast or a second ellipsis: Error(shape) / Error(value).
[[nodiscard]] Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
/// Product over a dim (or all elements): the last element of cumprod, so the gradient is
/// exact where x holds zeros. Integers give i64 (or `dtype`); an empty dim gives 1.
[[nodiscard]] Tensor prod(const Tensor& x, std::int64_t dim, bool keepdim = false,
                          std::optional<DType> dtype = std::nullopt);
[[nodiscard]] Tensor prod(const Tensor& x, std::optional<DType> dtype = std::nullopt);
/// vector_norm under PyTorch's older name (p-norm over dims, empty: all).
[[nodiscard]] Tensor norm(const Tensor& x, double p = 2, std::vector<std::int64_t> dims = {}, bool keepdim = false);
/// Matrix norms over two dims (default the last two): "fro"; "nuc" (the sum of the singular
/// values) and 2 / -2 (the largest / smallest), through linalg_svdvals (f32/f64 only; its
/// host sync on CUDA); 1 / -1 (max / min column sum of |x|), inf / -inf (rows). Another ord:
/// Error(value).
[[nodiscard]] Tensor matrix_norm(const Tensor& x, const std::string& ord = "fro", std::vector<std::int64_t> dims = {},
                                 bool keepdim = false);
[[nodiscard]] Tensor matrix_norm(const Tensor& x, double ord, std::vector<std::int64_t> dims = {}, bool keepdim = false);
/// What linalg_svd returns: A = U diag(S) Vh, S descending (PyTorch's names and layout: Vh,
/// not torch.svd's V).
struct SVDResult {
  Tensor U;   ///< [..., m, k] (full_matrices: [..., m, m]), orthonormal columns
  Tensor S;   ///< [..., k], k = min(m, n), real, descending, >= 0
  Tensor Vh;  ///< [..., k, n] (full_matrices: [..., n, n]), orthonormal rows
};
/// The singular value decomposition of A [..., m, n] (f32/f64; torch.linalg.svd). Computed
/// by LAPACK's divide-and-conquer gesdd (OpenBLAS's; PyTorch's CPU routine) on the host in A's
/// dtype; a CUDA A is read back (one
/// counted sync) and the factors copied to its device. Singular vectors are unique only up to
/// sign (and rotation within repeated values). Differentiable (J. Townsend, "Differentiating
/// the Singular Value Decomposition", 2016) for distinct, and for gradients of U / Vh of a
/// non-square A non-zero, singular values; with full_matrices the gradients of the columns
/// past k are ignored, as PyTorch. Error(shape) under 2 dims, Error(dtype) for other dtypes,
/// Error(value) for non-finite input, a matrix side over 2^28 (LAPACK's 32-bit sizes) or no
/// convergence.
[[nodiscard]] SVDResult linalg_svd(const Tensor& a, bool full_matrices = true);
/// The singular values of A [..., m, n] -> [..., min(m, n)], descending (torch.linalg.svdvals):
/// linalg_svd without the vectors when no gradient is needed; its errors and its sync.
[[nodiscard]] Tensor linalg_svdvals(const Tensor& a);
/// p-norm distances between the rows of x1 [..., P, M] and x2 [..., R, M] -> [..., P, R],
/// computed from the differences (memory P R M; no cancellation; gradient 0 at distance 0).
[[nodiscard]] Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2);

// ---------------------------------------------------------------------------------------
// Shape ops (ops/shape_more.cpp)
// ---------------------------------------------------------------------------------------

/// x tiled repeats[i] times along dim i (repeats at least x.dim() long; extra leading
/// entries add dims). A copy.
[[nodiscard]] Tensor repeat(const Tensor& x, const std::vector<std::int64_t>& repeats);
/// repeat with reps padded with leading 1s to x.dim() (NumPy's tile).
[[nodiscard]] Tensor tile(const Tensor& x, std::vector<std::int64_t> reps);
/// Each element repeated along dim (flattened when no dim): by one number, or by an i64/i32
/// tensor of counts per element (then the output length is read back: one counted sync).
[[nodiscard]] Tensor repeat_interleave(const Tensor& x, std::int64_t repeats, std::optional<std::int64_t> dim = std::nullopt);
[[nodiscard]] Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<std::int64_t> dim = std::nullopt);
/// Elements shifted cyclically by shifts[i] along dims[i] (no dims: over the flattened
/// tensor, one shift). A copy.
[[nodiscard]] Tensor roll(const Tensor& x, const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims = {});
/// The diagonal `offset` of the dims dim1, dim2, appended as the last dim. A strided view
/// when x is contiguous in those dims, a copy otherwise (PyTorch: always a view).
[[nodiscard]] Tensor diagonal(const Tensor& x, std::int64_t offset = 0, std::int64_t dim1 = 0, std::int64_t dim2 = 1);
/// 1-D -> the square matrix with x on diagonal `diagonal`; 2-D -> that diagonal.
[[nodiscard]] Tensor diag(const Tensor& x, std::int64_t diagonal = 0);
/// Sum of the main diagonal of a 2-D tensor.
[[nodiscard]] Tensor trace(const Tensor& x);
/// The views x.select(dim, i) for every i.
[[nodiscard]] std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim = 0);
/// The dim `source` moved to position `destination` (a view).
[[nodiscard]] Tensor movedim(const Tensor& x, std::int64_t source, std::int64_t destination);
/// dim split into `sizes` (one may be -1); Error(shape) when they do not multiply to it.
[[nodiscard]] Tensor unflatten(const Tensor& x, std::int64_t dim, const Shape& sizes);
/// `sections` views along dim, the first size % sections one element longer (NumPy's
/// array_split); or views split before each of `indices`.
[[nodiscard]] std::vector<Tensor> tensor_split(const Tensor& x, std::int64_t sections, std::int64_t dim = 0);
[[nodiscard]] std::vector<Tensor> tensor_split(const Tensor& x, const std::vector<std::int64_t>& indices,
                                               std::int64_t dim = 0);
/// Coordinate grids of 0-d/1-D tensors (expanded views): "ij" (matrix) or "xy" (Cartesian:
/// the first two dims swapped).
[[nodiscard]] std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing = "ij");
/// gather with x and indices broadcast in every dim but `dim` (PyTorch's take_along_dim).
[[nodiscard]] Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::int64_t dim);

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
/// `dtype` (floating): x converted to it first (PyTorch's dtype argument; e.g. f16 logits
/// normalised in f32).
[[nodiscard]] Tensor softmax(const Tensor& x, std::int64_t dim = -1, std::optional<DType> dtype = std::nullopt);
/// log_softmax along `dim`: x - max - log(sum(exp(x - max))), fused; -inf stays -inf.
[[nodiscard]] Tensor log_softmax(const Tensor& x, std::int64_t dim = -1, std::optional<DType> dtype = std::nullopt);

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
  /// A manual rescaling weight per class: floating [C] on the input's device (Error(shape),
  /// Error(dtype), Error(device) otherwise). Undefined: every class weighs 1. With class
  /// indices, mean divides by the summed weights of the non-ignored targets (PyTorch).
  Tensor weight = {};
};
/// Cross entropy of logits [N, C] (or [C] with a 0-d target, or [N, C, d...] with target
/// [N, d...]) and class indices (i64/i32): log_softmax over dim 1 then negative log
/// likelihood. mean over non-ignored targets; all ignored gives NaN for mean (gradient 0), 0
/// for sum. A floating target of the input's shape holds class probabilities instead:
/// -sum_c weight_c t_c log_softmax(x)_c per sample (t smoothed to (1 - e) t + e / C; no
/// ignore_index), mean over the samples. With a class `weight` the loss is log_softmax then
/// the weighted pick (not fused). Error(dtype) for other target dtypes, Error(shape) for a target shape mismatch,
/// Error(index) for a target outside [0, C) that is not ignore_index: at the call on the CPU,
/// at the next sync point on CUDA (a deferred device error; docs/semantics.md, "Softmax and
/// losses"). Fused: one kernel forward, one backward.
[[nodiscard]] Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options = {});
/// Negative log likelihood of log-probabilities [N, C] at class indices [N]; same options as
/// cross_entropy (label_smoothing must be 0), including the class `weight`: -w[t] log p[t],
/// mean divided by the summed weights of the non-ignored targets.
[[nodiscard]] Tensor nll_loss(const Tensor& log_probs, const Tensor& target, CrossEntropyOptions options = {});
/// mean/sum/none of (input - target)^2; shapes broadcast.
[[nodiscard]] Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// Binary cross entropy on logits, stable: max(x, 0) - x t + log(1 + exp(-|x|)); with
/// pos_weight p: the positive term weighted by p (PyTorch's formula).
[[nodiscard]] Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                                      Reduction reduction = Reduction::mean,
                                                      const Tensor& pos_weight = {});

/// |input - target|, broadcast; floating. Gradient sign(d) (0 at 0).
[[nodiscard]] Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
/// 0.5 d^2 / beta where |d| < beta, else |d| - beta / 2 (Girshick 2015, Fast R-CNN); beta 0
/// is l1_loss; beta < 0 is Error(value).
[[nodiscard]] Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                                    double beta = 1.0);
/// 0.5 d^2 where |d| < delta, else delta (|d| - delta / 2) (Huber 1964); delta must be > 0.
[[nodiscard]] Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                                double delta = 1.0);
/// Options of kl_div. reduction mean averages over every element (PyTorch's "mean");
/// batchmean = true with reduction sum divides the sum by the batch size (PyTorch's
/// "batchmean", the KL divergence); batchmean with another reduction is Error(value).
struct KlDivOptions {
  Reduction reduction = Reduction::mean;
  bool batchmean = false;
  /// target holds log-probabilities: e^t (t - input); else t (log t - input), 0 where t = 0.
  bool log_target = false;
};
/// Kullback-Leibler divergence with `input` holding log-probabilities (PyTorch's kl_div).
[[nodiscard]] Tensor kl_div(const Tensor& input, const Tensor& target, KlDivOptions options = {});
/// Binary cross entropy of probabilities `input` (in [0, 1]: checked on the CPU only, since on
/// CUDA it would need a host sync; Error(value)) and targets of its shape:
/// -weight (t log x + (1 - t) log(1 - x)), each log clamped at -100 (PyTorch). weight
/// (optional) broadcasts to the input. Gradient PyTorch's: w (x - t) / max(x (1 - x), 1e-12).
[[nodiscard]] Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                          Reduction reduction = Reduction::mean);
/// Options of poisson_nll_loss.
struct PoissonNllOptions {
  bool log_input = true;  ///< e^x - t x; else x - t log(x + eps)
  bool full = false;      ///< add Stirling's t log t - t + log(2 pi t) / 2 where t > 1
  double eps = 1e-8;
  Reduction reduction = Reduction::mean;
};
/// Negative log likelihood of a Poisson distribution with rate e^input (or input).
[[nodiscard]] Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, PoissonNllOptions options = {});
/// Options of gaussian_nll_loss.
struct GaussianNllOptions {
  bool full = false;  ///< add log(2 pi) / 2
  double eps = 1e-6;  ///< var is clamped to >= eps in the forward (the gradient flows unclamped, as PyTorch)
  Reduction reduction = Reduction::mean;
};
/// (log max(var, eps) + (input - target)^2 / max(var, eps)) / 2. var has the input's shape,
/// a last dim of 1, or one dim fewer (Error(shape) otherwise); negative entries are
/// Error(value) (checked on the CPU only: on CUDA a host sync).
[[nodiscard]] Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var,
                                       GaussianNllOptions options = {});
/// max(0, -target (input1 - input2) + margin), broadcast; target holds 1 or -1.
[[nodiscard]] Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                                         double margin = 0, Reduction reduction = Reduction::mean);
/// Cosine similarity along dim of broadcast x1, x2: sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps))
/// (PyTorch 2.x's order: each normalised first). The dim is removed.
[[nodiscard]] Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, std::int64_t dim = 1, double eps = 1e-8);
/// ||x1 - x2 + eps||_p over the last dim (PyTorch's pairwise_distance).
[[nodiscard]] Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2, double eps = 1e-6,
                                       bool keepdim = false);
/// input1, input2 [N, D] (or [D]) and target [N] of 1 / -1: 1 - cos where y = 1,
/// max(0, cos - margin) where y = -1, cos with PyTorch's 1e-12 added to each squared norm.
[[nodiscard]] Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target,
                                           double margin = 0, Reduction reduction = Reduction::mean);
/// Options of triplet_margin_loss.
struct TripletMarginOptions {
  double margin = 1.0;  ///< > 0 (Error(value))
  double p = 2;
  double eps = 1e-6;
  bool swap = false;  ///< the distance swap of Balntas et al. 2016: min(d(a, n), d(p, n))
  Reduction reduction = Reduction::mean;
};
/// max(d(a, p) - d(a, n) + margin, 0) with d = pairwise_distance (Schroff et al. 2015, FaceNet).
[[nodiscard]] Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                                         TripletMarginOptions options = {});

/// Layer normalisation (Ba et al. 2016) over the trailing `normalized_shape` dims:
/// (x - mean) / sqrt(var + eps) * weight + bias (biased variance); weight/bias optional, of
/// normalized_shape. One fused row kernel forward. eps finite and >= 0 (Error(value): a
/// negative or NaN eps only makes NaN rows; 0 is allowed, as in PyTorch).
[[nodiscard]] Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                                const Tensor& bias = {}, double eps = 1e-5);
/// A pre-norm transformer's residual step in one pass (FlashAttention's dropout_add_layer_norm
/// with prenorm, Dao et al.): with s = residual + dropout(x0, p, training) (x0's dropout alone
/// when residual is undefined), returns {layer_norm(s, {C}, weight, bias, eps) in x0's dtype,
/// s}, C = x0's last dim. s has the promoted dtype of x0 and residual (under bf16 autocast, an
/// f32 residual stream with a bf16 branch: s f32, the normalised output bf16, ready for the
/// next linear). x0 and residual of one shape and device; weight/bias [C] or undefined. Exactly
/// the composite's values (dropout draws the same mask from the same generator state); on CUDA
/// one kernel forward and one backward for rows of C % 4 == 0, C <= 1024 (512 for f64), the
/// composite otherwise. Not an autocast op: the dtypes are the inputs'. Error(shape) for
/// mismatched shapes, Error(dtype) for non-floating inputs, Error(value) for p outside [0, 1]
/// or eps as layer_norm refuses it.
[[nodiscard]] std::pair<Tensor, Tensor> dropout_add_layer_norm(const Tensor& x0, const Tensor& residual,
                                                               const Tensor& weight, const Tensor& bias, double p,
                                                               double eps = 1e-5, bool training = true);

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

// ---- scatter and index updates (ops/scatter.cpp), out of place, PyTorch's semantics -------
// index tensors of scatter/scatter_reduce are i64 with x's ndim, no larger than src in any
// dim nor than x in any dim but `dim` (Error(shape)); src has x's dtype (Error(dtype)). An
// index outside [0, x.size(dim)): Error(index) naming the op on the CPU; on CUDA the deferred
// device error at the next sync (as gather's). Gradients: PyTorch's (derivatives.yaml).

/// x with out[...][index[i][j]][...] = src[i][j] along dim (for dim 1; likewise any dim).
/// Where several sources meet one destination, the last in row-major order wins on the CPU,
/// any one of them on CUDA (PyTorch leaves it undefined). Gradient: x's where not
/// overwritten; src's gathered at index (zero beyond index's extent).
[[nodiscard]] Tensor scatter(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
/// x with `value` written at index along dim.
[[nodiscard]] Tensor scatter(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value);
/// x with src reduced into it at index along dim: reduce is "sum", "prod", "mean", "amax" or
/// "amin" (Error(value) otherwise); include_self: x's value takes part (else destinations
/// that index reaches start from the reduction's identity; others keep x's value). mean on
/// integers rounds down (floor division, as PyTorch). amax/amin propagate NaN; their gradient
/// is shared evenly by the elements equal to the result. bool: Error(dtype). CUDA combines
/// with atomics: prod's rounding order varies, sum/mean follow set_deterministic.
[[nodiscard]] Tensor scatter_reduce(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src,
                                    std::string_view reduce, bool include_self = true);
/// x with alpha * source added at the positions of the 1-D (or 0-d) `index` (i32/i64) along
/// dim: out.select(dim, index[i]) += alpha * source.select(dim, i); repeated indices add up.
/// source: x's dtype, x's shape except source.size(dim) == index.numel() (Error(shape)).
[[nodiscard]] Tensor index_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source,
                               Scalar alpha = 1);
/// x with out.select(dim, index[i]) = source.select(dim, i) (shapes as index_add's; repeated
/// indices: one of the sources wins, as in scatter).
[[nodiscard]] Tensor index_copy(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source);
/// Indices of the nonzero (true, NaN included) elements of x: i64 [count, x.dim()] in
/// row-major order (PyTorch's torch.nonzero). The count is read back to the host: on CUDA one
/// host sync, counted at the sync choke point (cuda::sync_count(); Error under
/// SyncPolicy::error). Not differentiable.
[[nodiscard]] Tensor nonzero(const Tensor& x);
/// The elements of x where the bool `mask` is true (both broadcast to one shape), as a 1-D
/// tensor in row-major order. Differentiable in x. One counted host sync on CUDA (the count).
[[nodiscard]] Tensor masked_select(const Tensor& x, const Tensor& mask);
/// x with its elements where `mask` (bool, broadcast to x's shape) is true replaced, in
/// row-major order, by source's first elements (source: x's dtype, any shape, at least as
/// many elements as true ones: Error(value) on the CPU; on CUDA checking would be a host sync,
/// so a short source is reported by index_select's deferred device error). Differentiable in
/// x and source. No host sync.
[[nodiscard]] Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source);
/// x with `value` in the slices at `index` (1-D or 0-d, i32/i64; negative indices count from
/// the end, as PyTorch's) along dim.
[[nodiscard]] Tensor index_fill(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value);
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
/// Options of scaled_dot_product_attention (PyTorch's keyword arguments).
struct SdpaOptions {
  /// Broadcastable to [..., L, S]: bool (true = attend, false = masked out) or floating
  /// (converted to the query's dtype, added to the scores). Undefined: no mask.
  Tensor attn_mask = {};
  /// Dropout probability on the attention weights, applied whenever > 0 (PyTorch's rule: pass
  /// 0 in evaluation). In [0, 1].
  double dropout_p = 0;
  /// Lower-triangular mask aligned top-left (key j attends query i when j <= i, PyTorch's
  /// tril(ones(L, S))); together with attn_mask is Error(value), as PyTorch.
  bool is_causal = false;
  /// Multiplies q k^T; unset: 1 / sqrt(E).
  std::optional<double> scale = std::nullopt;
};
/// Attention (Vaswani et al. 2017, eq. 1): softmax(q k^T * scale + mask) v with query
/// [..., L, E], key [..., S, E], value [..., S, Ev] (batch dims broadcast) -> [..., L, Ev],
/// PyTorch's semantics including its rows that mask out every key (output and gradients 0,
/// PyTorch's "safe softmax"). Floating dtypes, one for q, k, v. On CUDA, 4-D f32/bf16/f16
/// inputs of one [B, H] with E == Ev <= 128, no attn_mask and dropout_p < 1 run the fused
/// kernel (scaled_dot_product_flash_attention, its dropout the same mask as the composite's
/// from the same generator state); everything else, and every CPU call, is the composite of
/// matmul, softmax and dropout (the reference). E == 0 gives scores of 0 (uniform weights, the
/// mean of v), S == 0 rows of 0. Errors: Error(shape) for ranks < 2, mismatched E/S dims,
/// batch dims of q, k, v that do not broadcast, or a mask that does not broadcast to the
/// weights' shape [..., L, S] (a mask is never broadcast beyond it, as PyTorch adds it in
/// place), Error(dtype) for mixed or non-floating q/k/v and integer masks, Error(value) for
/// dropout_p outside [0, 1], a NaN or infinite scale, or a mask with is_causal.
[[nodiscard]] Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                  SdpaOptions options = {});
/// The fused attention of FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with
/// Better Parallelism and Work Partitioning", algorithms 1 and 2; Dao et al. 2022): q [B, H, L,
/// D], k and v [B, H, S, D] of one floating dtype, D <= 128, the last dim contiguous (other
/// strides free) -> [B, H, L, D] (memory laid out as [B, L, H, D], PyTorch's choice, so
/// transpose(1, 2).reshape({B, L, H * D}) copies nothing). Tiles of K and V in shared memory,
/// an online softmax, no L x S matrix in memory; the log-sum-exp of each row is kept for
/// backward, which recomputes the probabilities. CUDA: f32 arithmetic for every dtype; CPU:
/// the same kernel contract computed in double (a reference for the CUDA kernel). dropout_p in
/// [0, 1) (Error(value) otherwise) drops the probabilities inside the kernel with the mask the
/// composite's dropout(weights, p) would draw at the generator's state: keep (b, h, i, j) iff
/// the uniform rand() gives element ((b H + h) L + i) S + j of [B, H, L, S] is >= p (f32
/// uniforms; f64 for f64), O = (P o keep / (1 - p)) V; the generator advances as that rand
/// would, and backward regenerates the mask (docs/ops.md, Attention). An attn_mask is
/// Error(value), as is a NaN or infinite scale. An empty output (B, H or L of 0) still records
/// the node: k and v get zero gradients.
[[nodiscard]] Tensor scaled_dot_product_flash_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                                        SdpaOptions options = {});
/// CUDA scatter-adds (embedding backward, scatter_add, index_select backward) and the TF32
/// fused attention backward's dq (32 < D <= 64) in a fixed order instead of with atomics:
/// reproducible to the bit, slower. Off by default.
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

/// An ExpandingArray that may be left unset (a pool's stride defaults to its kernel size):
/// `{.stride = 1}`, `{.stride = {1, 2}}`, or nothing. std::optional<ExpandingArray<N>> would
/// refuse the braced pair, which LibTorch users write.
template <std::size_t N> struct OptionalExpandingArray {
  std::optional<ExpandingArray<N>> value_;
  OptionalExpandingArray() = default;
  OptionalExpandingArray(std::nullopt_t) {}
  OptionalExpandingArray(std::int64_t value) : value_(value) {}
  OptionalExpandingArray(std::array<std::int64_t, N> v) : value_(v) {}
  OptionalExpandingArray(std::initializer_list<std::int64_t> list) : value_(ExpandingArray<N>(list)) {}
  OptionalExpandingArray(ExpandingArray<N> v) : value_(v) {}
  bool has_value() const { return value_.has_value(); }
  explicit operator bool() const { return has_value(); }
  /// The sizes; std::bad_optional_access when unset.
  const ExpandingArray<N>& value() const { return value_.value(); }
  ExpandingArray<N> value_or(ExpandingArray<N> fallback) const { return value_.value_or(fallback); }
};

/// A convolution's padding: amounts added on both sides of each spatial dim (one number
/// for all, N numbers, or braces: `{.padding = 1}`, `{.padding = {1, 2}}`), or PyTorch's
/// strings "valid" (none) and "same" (the output keeps the input's size; stride must be 1;
/// the total d (k - 1) is split with the odd extra row/column at the bottom/right, as
/// PyTorch does). Another string is Error(value).
template <std::size_t N> struct ConvPadding {
  enum class Kind : std::uint8_t { amounts, same, valid };
  ExpandingArray<N> amounts = ExpandingArray<N>(std::int64_t{0});
  Kind kind = Kind::amounts;
  ConvPadding(std::int64_t value) : amounts(value) {}
  ConvPadding(std::array<std::int64_t, N> v) : amounts(v) {}
  ConvPadding(std::initializer_list<std::int64_t> list) : amounts(list) {}
  ConvPadding(ExpandingArray<N> v) : amounts(v) {}
  /// "same" or "valid" (a template, so that a literal 0 still means a number).
  template <class S>
    requires(std::is_convertible_v<const S&, std::string_view> && !std::is_arithmetic_v<S>)
  ConvPadding(const S& text) {
    const std::string_view t = text;
    if (t == "same") {
      kind = Kind::same;
    } else if (t == "valid") {
      kind = Kind::valid;
    } else {
      throw Error(ErrorKind::value, "conv: padding \"" + std::string(t) + "\" must be \"same\", \"valid\" or amounts");
    }
  }
  /// The amount on each side of dim i (only for Kind::amounts; "same" depends on the kernel).
  std::int64_t operator[](std::size_t i) const { return amounts[i]; }
  friend bool operator==(const ConvPadding& a, const ConvPadding& b) { return a.kind == b.kind && a.amounts == b.amounts; }
};

/// Options of conv2d (and nn::Conv2d: LibTorch's Conv2dOptions).
struct Conv2dOptions {
  ExpandingArray<2> stride{1, 1};
  ConvPadding<2> padding{0, 0};
  ExpandingArray<2> dilation{1, 1};
  std::int64_t groups = 1;
  /// What the padding holds: "zeros", or "reflect", "replicate", "circular" (the input padded
  /// by brrr::pad first, as PyTorch's nn.Conv2d does; PyTorch's F.conv2d has only zeros).
  std::string padding_mode = "zeros";
};
/// 2-D convolution (cross-correlation, as PyTorch): input [N, C, H, W] (or [C, H, W]), weight
/// [O, C/groups, kh, kw], bias [O] or undefined -> [N, O, out_h, out_w] with
/// out = floor((H + p_top + p_bottom - d (k - 1) - 1) / s) + 1. On the CPU a kernel of its own
/// (batched im2col + GEMM per chunk of samples with the bias fused, GEMM + col2im for the input
/// gradient, the weight gradient accumulated by GEMM into one buffer; docs/architecture.md);
/// on CUDA unfold + batched GEMM. Error(shape) for mismatched channels/ranks or an input smaller
/// than the dilated kernel, Error(dtype) unless input, weight and bias share a floating dtype,
/// Error(value) for non-positive kernel/stride/dilation, negative padding, "same" with a stride
/// other than 1, or an unknown padding_mode.
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
/// Options of conv1d (and nn::Conv1d); padding and padding_mode as Conv2dOptions'.
struct Conv1dOptions {
  std::int64_t stride = 1;
  ConvPadding<1> padding = 0;
  std::int64_t dilation = 1, groups = 1;
  std::string padding_mode = "zeros";
};
/// 1-D convolution: input [N, C, L] (or [C, L]), weight [O, C/groups, k], bias [O] ->
/// [N, O, L'], L' = floor((L + p_left + p_right - d (k - 1) - 1) / s) + 1; conv2d over a
/// height-1 image (its errors, named conv1d).
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
/// Options of interpolate (PyTorch's F.interpolate arguments; an empty list is "not given").
struct InterpolateOptions {
  /// Output spatial size: one value for every spatial dim or one per dim.
  std::vector<std::int64_t> size = {};
  /// Multiplier of each spatial size (one value or one per dim): out = floor(in * s).
  std::vector<double> scale_factor = {};
  /// "nearest" (PyTorch's floor rule: src = min(floor(dst * scale), in - 1)), "nearest-exact"
  /// (src = min(floor((dst + 0.5) * scale), in - 1)), "linear" (3-D input), "bilinear" and
  /// "bicubic" (4-D input; Keys' cubic convolution, A = -0.75, 4 x 4 taps clamped at the
  /// border), "trilinear" (5-D input) or "area" (adaptive average pooling to the output size,
  /// as PyTorch). The nearest modes and area take 3-D, 4-D and 5-D inputs.
  std::string mode = "nearest";
  /// Linear, bilinear, trilinear and bicubic only (set with the others: Error(value)); unset
  /// means false, as PyTorch. True: src = dst * (in - 1) / (out - 1); false: src =
  /// scale (dst + 0.5) - 0.5, clamped at 0 except for bicubic.
  std::optional<bool> align_corners = std::nullopt;
  /// With scale_factor: true computes the source positions from in / out instead of
  /// 1 / scale_factor (PyTorch's default, unset, uses 1 / scale_factor).
  std::optional<bool> recompute_scale_factor = std::nullopt;
};
/// Resampling of [N, C, W], [N, C, H, W] or [N, C, D, H, W] floating inputs (PyTorch's
/// F.interpolate): interpolate(x, {.size = {64, 64}, .mode = "bilinear", .align_corners = false})
/// or interpolate(x, {.scale_factor = {2}}). The source positions and weights follow PyTorch's
/// formulas (ops/interpolate_math.hpp), computed in f32 (f64 for f64 inputs). Backward sums the
/// gradient into the taps (CUDA: atomic adds, so its rounding order varies; bf16/f16
/// gradients are summed in f32). Errors: Error(value) for another mode, align_corners with
/// nearest, nearest-exact or area, both or neither of size and scale_factor, a non-positive
/// scale or output size, recompute_scale_factor with size; Error(shape) for other ranks, a mode
/// on the wrong rank (linear needs 3-D, bilinear and bicubic 4-D, trilinear 5-D), or a
/// size/scale list of the wrong length; Error(dtype) for non-floating inputs.
[[nodiscard]] Tensor interpolate(const Tensor& input, const InterpolateOptions& options);
/// [*, C r^2, H, W] -> [*, C, H r, W r]: each group of r^2 channels tiles an r x r block
/// (a view chain and one copy). Error(shape) unless the channels divide by r^2.
[[nodiscard]] Tensor pixel_shuffle(const Tensor& input, std::int64_t upscale_factor);
/// The inverse of pixel_shuffle: [*, C, H r, W r] -> [*, C r^2, H, W].
[[nodiscard]] Tensor pixel_unshuffle(const Tensor& input, std::int64_t downscale_factor);
/// Options of the 2-D pools.
struct Pool2dOptions {
  ExpandingArray<2> kernel_size{2, 2};
  /// Default (unset): the kernel size.
  OptionalExpandingArray<2> stride;
  /// Implicit -inf (max) or 0 (avg) on each side; at most half the kernel size.
  ExpandingArray<2> padding{0, 0};
  ExpandingArray<2> dilation{1, 1};  ///< max_pool2d only
  /// Output size rounds up, but the last window must start inside the input or the left
  /// padding (PyTorch's rule).
  bool ceil_mode = false;
  bool count_include_pad = true;  ///< avg_pool2d: padding counts in the divisor
  /// avg_pool2d: every window's sum is divided by this instead (nonzero; PyTorch's name).
  std::optional<std::int64_t> divisor_override;
};
/// Max over windows of [N, C, H, W] (or [C, H, W]) -> [N, C, out_h, out_w], out = floor((H +
/// 2p - d (k - 1) - 1) / s) + 1 (rounded up with ceil_mode); floating dtypes. Padding never
/// wins (it is -inf); a NaN in a window is its max. One kernel per backend that saves the
/// argmax; the gradient goes to it (summed where windows overlap). Error(shape) for another
/// rank or an input too small for the kernel, Error(value) for a non-positive kernel, stride
/// or dilation, or padding above half the kernel, Error(dtype) for integer inputs.
[[nodiscard]] Tensor max_pool2d(const Tensor& x, Pool2dOptions options);
/// max_pool2d(x, 2): a square kernel, stride = kernel (LibTorch's torch::max_pool2d(x, 2)).
[[nodiscard]] Tensor max_pool2d(const Tensor& x, std::int64_t kernel_size);
/// max_pool2d and the i64 index of each max, flat in its input plane (y * W + x; PyTorch's
/// return_indices): {values, indices} of one shape. A window with no input cell (possible
/// only with dilation) gives -inf and index -1.
[[nodiscard]] ValuesIndices max_pool2d_with_indices(const Tensor& x, Pool2dOptions options);
/// Options of max_unpool2d (the max_pool2d that made the indices).
struct MaxUnpool2dOptions {
  ExpandingArray<2> kernel_size{2, 2};
  /// Default (unset): the kernel size.
  OptionalExpandingArray<2> stride;
  ExpandingArray<2> padding{0, 0};
  /// [H', W'] or [N, C, H', W'] (the last two used); empty: (H - 1) s - 2 p + k per dim.
  /// Each must lie strictly between default - stride and default + stride (PyTorch's rule).
  std::vector<std::int64_t> output_size;
};
/// The partial inverse of max_pool2d: x [N, C, H, W] (or [C, H, W]) and indices (i64, x's
/// shape, flat in the output plane) -> zeros [N, C, H', W'] with out[n, c, indices] = x (where
/// indices repeat, the last in row-major order on the CPU, any one on CUDA). Gradient: the
/// output gradient gathered at indices. Error(shape) for a rank other than 3/4, indices of
/// another shape, a bad output_size length; Error(dtype) unless indices are i64; Error(value)
/// for output_size out of range; an index outside the output plane is Error(index) on the
/// CPU and the deferred device error on CUDA.
[[nodiscard]] Tensor max_unpool2d(const Tensor& x, const Tensor& indices, MaxUnpool2dOptions options);
/// Max over PyTorch's adaptive bins (row bin i spans [floor(i H / out), ceil((i+1) H / out)),
/// columns likewise) of [N, C, H, W] (or [C, H, W]) -> [N, C, out_h, out_w]; NaN and ties as
/// max_pool2d. Error(value) for a non-positive output size, Error(shape) for an empty input.
[[nodiscard]] Tensor adaptive_max_pool2d(const Tensor& x, ExpandingArray<2> output_size);
/// adaptive_max_pool2d with the flat indices of the maxima, as max_pool2d_with_indices.
[[nodiscard]] ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, ExpandingArray<2> output_size);
/// Average over windows: the sum divided by the window's cells inside the padded input
/// (count_include_pad), inside the input only, or by divisor_override. Error(value) for
/// dilation other than 1 or divisor_override 0; otherwise the errors of max_pool2d.
[[nodiscard]] Tensor avg_pool2d(const Tensor& x, Pool2dOptions options);
[[nodiscard]] Tensor avg_pool2d(const Tensor& x, std::int64_t kernel_size);
/// Average pooling to a fixed output size: bin i spans [floor(i H / out), ceil((i+1) H / out)).
[[nodiscard]] Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size);
/// Options of the 1-D pools (Pool2dOptions' meaning along the one dim).
struct Pool1dOptions {
  std::int64_t kernel_size = 2;
  /// Default (unset): the kernel size.
  std::optional<std::int64_t> stride;
  std::int64_t padding = 0;
  std::int64_t dilation = 1;  ///< max_pool1d only
  bool ceil_mode = false;
  bool count_include_pad = true;  ///< avg_pool1d
};
/// The 1-D pools over the last dim of [N, C, L] (or [C, L]): the 2-D ones over a height-1
/// image, with their errors (naming the 1-D op); indices are positions along L.
[[nodiscard]] Tensor max_pool1d(const Tensor& x, Pool1dOptions options);
[[nodiscard]] Tensor max_pool1d(const Tensor& x, std::int64_t kernel_size);
[[nodiscard]] ValuesIndices max_pool1d_with_indices(const Tensor& x, Pool1dOptions options);
[[nodiscard]] Tensor avg_pool1d(const Tensor& x, Pool1dOptions options);
[[nodiscard]] Tensor avg_pool1d(const Tensor& x, std::int64_t kernel_size);
[[nodiscard]] Tensor adaptive_avg_pool1d(const Tensor& x, std::int64_t output_size);
[[nodiscard]] Tensor adaptive_max_pool1d(const Tensor& x, std::int64_t output_size);
[[nodiscard]] ValuesIndices adaptive_max_pool1d_with_indices(const Tensor& x, std::int64_t output_size);
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
/// The scatter family in place (LibTorch's Tensor::scatter_, ...; ops/scatter.cpp): x becomes
/// the out-of-place op's result (its arguments, checks and gradients above), under the rules
/// of this section (src/source/values is the operand whose grad is recorded).
const Tensor& scatter_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
const Tensor& scatter_(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value);
const Tensor& scatter_add_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src);
const Tensor& scatter_reduce_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src,
                              std::string_view reduce, bool include_self = true);
const Tensor& index_add_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source,
                         Scalar alpha = 1);
const Tensor& index_copy_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source);
const Tensor& index_fill_(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value);
const Tensor& masked_fill_(const Tensor& x, const Tensor& mask, Scalar value);
const Tensor& masked_scatter_(const Tensor& x, const Tensor& mask, const Tensor& source);

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
/// Out-of-place index_put_: a copy of x with x[indices] = values (added when accumulate);
/// PyTorch's torch.index_put. Differentiable in x and values.
[[nodiscard]] Tensor index_put(const Tensor& x, const std::vector<indexing::TensorIndex>& indices,
                               const Tensor& values, bool accumulate = false);

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
/// The shape checks gather and the scatters share (ops/index.cpp): index of x's ndim (and
/// src's), no larger than x in any dim but `dim` and than src in any; Error(shape) naming op.
void check_index_shapes(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor* src);
/// x with src added at index along dim (the scatter_add op; ops/index.cpp), its kernel
/// reporting bad indices as `code`. x, index and src at least 1-d, checks done.
Tensor scatter_add_coded(backend::CheckedOp code, const Tensor& x, std::int64_t dim, const Tensor& index,
                         const Tensor& src);
/// t (a block at the origin of `shape`) placed into zeros of `shape`; differentiable.
Tensor pad_with_zeros(const Tensor& t, const Shape& shape);
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
/// The gradient of unary op `op` for the upstream g, with Tensor ops (second derivatives work;
/// gelu's, relu's: one kernel outside grad mode). `v` is the saved tensor: the output y for the
/// ops differentiated through their output (exp, sqrt, tanh, sigmoid, ...), else the input x.
/// p0/p1: clamp's bounds (ops/unary.cpp).
Tensor unary_rule(backend::UnaryOp op, const Tensor& g, const Tensor& v, double p0 = 0, double p1 = 0);
/// The gradient of an activation of BRRR_ACTIVATION_OPS at input x (ops/activation.cpp).
Tensor activation_rule(backend::UnaryOp op, const Tensor& g, const Tensor& x, double p0, double p1);
/// Inverted-dropout noise of `shape` for x: 1 / (1 - p) where rand >= p, else 0, in x's
/// dtype on x's device (0 < p < 1; ops/dropout.cpp).
Tensor dropout_noise(const Tensor& x, const Shape& shape, double p);
/// The same noise from uniforms `u` already drawn (the fused attention's saved words): 1 / (1 - p)
/// where u >= p, else 0, in `dtype` on u's device.
Tensor dropout_noise_from(const Tensor& u, double p, DType dtype);
/// The uniforms' dtype of a dropout of x's dtype: f64 for f64, else f32 (its 24-bit draws).
DType dropout_uniform_dtype(DType dtype);
/// The generator state of a dropout of `numel` elements of `dtype` on `dev` (the words the next
/// rand() of numel uniforms of dropout_uniform_dtype(dtype) would draw), which it consumes: the
/// device generator's, or under a CUDA graph capture the graph's next words (ops/dropout.cpp;
/// the fused dropout and the fused attention's).
backend::AttentionDropout draw_dropout(double p, DType dtype, Device dev, std::int64_t numel);

/// fold of [N, C*kh*kw, L] columns into [N, C, H, W] (the geometry's input shape), summing
/// overlaps; differentiable (its adjoint is unfold; ops/conv.cpp).
Tensor fold_cols(const Tensor& cols, const backend::Window2d& g);
/// unfold with a chosen value for cells outside the input (0 for conv, -inf for max pools).
Tensor unfold_with_pad(const Tensor& x, const backend::Window2d& g, double pad_value);

/// The convolution's products (ops/conv_gemm.cpp), unrecorded: `win` sweeps the whole input
/// [N, C, H, W] (c = C), `groups` splits C and the weight's O rows. The CPU path: chunked
/// im2col + GEMM (forward with the bias fused), GEMM + col2im (input gradient -> [N, C, H, W]),
/// GEMM accumulation into one buffer (weight gradient -> weight_shape).
Tensor conv2d_gemm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const backend::Window2d& win,
                           std::int64_t groups);
Tensor conv2d_gemm_input_grad(const Tensor& grad_out, const Tensor& weight, const backend::Window2d& win,
                              std::int64_t groups);
Tensor conv2d_gemm_weight_grad(const Tensor& grad_out, const Tensor& x, const backend::Window2d& win,
                               std::int64_t groups, const Shape& weight_shape);
/// The same two gradients as recorded ops (unfold/fold + matmul), for create_graph.
Tensor conv2d_composite_input_grad(const Tensor& grad_out, const Tensor& weight, const backend::Window2d& win,
                                   std::int64_t groups);
Tensor conv2d_composite_weight_grad(const Tensor& grad_out, const Tensor& x, const backend::Window2d& win,
                                    std::int64_t groups, const Shape& weight_shape);
/// The bias gradient of a convolution: grad_out [N, O, ...] summed to [O].
Tensor conv_bias_grad(const Tensor& grad_out);

/// A GEMM's activation epilogue for gemm_2d (backend::GemmArgs::activation): gelu_tanh
/// allocates *aux ([m, n], C's dtype) and writes the pre-activation there; gelu_tanh_backward
/// reads *aux.
struct ActivationEpilogue {
  backend::GemmActivation kind = backend::GemmActivation::none;
  Tensor* aux = nullptr;
};
/// a [m, k] @ b [k, n] (+ bias [n]) by one unrecorded GEMM (ops/matmul.cpp), a and b row- or
/// column-major views (copied otherwise). With bias_grad, also the sum over k of operand `of`
/// (a: [m], b: [n]) into *bias_grad (no bias then). With f32_out (bf16/f16 a and b): the
/// product and the bias gradient in f32, unrounded. `act`: the activation epilogue. `side`
/// (CUDA): the GEMM runs as backend::SideWork, overlapping the current stream's later work;
/// its results are allocated on the current stream, and any stream touching them waits for it.
Tensor gemm_2d(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor* bias_grad, backend::GemmOperand of,
               const char* op, bool f32_out = false, const ActivationEpilogue& act = {}, bool side = false);
/// The dtypes linear's gradients of x, w and bias are given back in.
struct GradDtypes {
  DType x, w, bias;
};
/// The gradients of x [M, K] @ w [K, N] + bias (linear_2d, linear_autocast, fused_mlp) for the
/// upstream g [M, N], those marked in `needs` (x, w, bias): dx = g w^T, dw = x^T g, dbias = g
/// summed over rows, in `to`'s dtypes. Without grad mode (no create_graph) each comes from one
/// GEMM (dbias by the bias-gradient epilogue of dw's), an f32 one straight from bf16/f16
/// operands (f32_out); in grad mode from recorded matmul, sum and casts. On CUDA, without grad
/// mode, dw and dbias run on the side stream (backend::SideWork, unless BRRR_WGRAD_STREAM=0):
/// nothing waits for them until a stream touches them or the backward pass ends.
std::vector<Tensor> linear_grads(const Tensor& g, const Tensor& x, const Tensor& w, const std::array<bool, 3>& needs,
                                 const GradDtypes& to);
/// x [M, K] @ w [K, N] + bias [N] (ops/matmul.cpp): one GEMM with the bias in its epilogue,
/// recorded as one node whose rule is dx = g w^T, dw = x^T g with the bias gradient fused into
/// that GEMM (recorded matmul and sum under create_graph). x and w 2-D, bias 1-D or undefined,
/// one floating dtype on one device, shapes agreeing: the caller (addmm, linear) checks.
Tensor linear_2d(const Tensor& x, const Tensor& w, const Tensor& bias);
/// linear under autocast to `low` (bf16/f16) as one node: x [M, K] @ weight [N, K]^T + bias [N]
/// with x, weight, bias (or undefined) each of f32 or `low` on one device, cast to `low` for
/// one GEMM (a `low` result, as autocast's linear); backward gives each input's gradient in its
/// own dtype straight from the GEMMs (f32 results where the input is f32: no bf16 gradient and
/// cast, GemmArgs::f32_out). The caller (linear) checks the shapes.
Tensor linear_autocast(const Tensor& x, const Tensor& weight, const Tensor& bias, DType low);

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
  static Tensor index_put(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values,
                          bool accumulate) {
    return brrr::index_put(x, indices, values, accumulate);
  }
};
}  // namespace brrr
