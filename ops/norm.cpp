// The normalisations beyond layer_norm and batch_norm, as PyTorch's F.group_norm,
// F.instance_norm, F.rms_norm and F.normalize. group_norm and instance_norm are layer_norm's
// fused row kernel over [N*G, C/G*M] (or [N*C, M]) rows followed by the per-channel affine,
// so their backward is layer_norm's; instance_norm without input statistics is batch_norm in
// evaluation mode. rms_norm and normalize are short compositions of reductions and
// elementwise ops (their gradients are those ops').
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }
DType stat_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// [N, C, *] checks shared by group_norm and instance_norm; returns M (the trailing numel).
std::int64_t check_nc(const char* op, const Tensor& input, std::int64_t min_dim) {
  require_defined(op, input);
  require_floating(op, input);
  if (input.dim() < min_dim)
    throw Error(ErrorKind::shape, std::string(op) + ": expected an input of at least " + std::to_string(min_dim) +
                                      " dims [N, C, *], got " + describe(input));
  std::int64_t m = 1;
  for (std::int64_t d = 2; d < input.dim(); ++d) m *= input.size(d);
  return m;
}

void check_channels(const char* op, const Tensor& t, const char* name, std::int64_t c, const Tensor& input) {
  if (!t.defined()) return;
  require_floating(op, t, name);
  if (t.dim() != 1 || t.size(0) != c)
    throw Error(ErrorKind::shape, std::string(op) + ": " + name + " must be [" + std::to_string(c) +
                                      "] (the channels of input " + describe(input) + "), got " + describe(t));
}

// y * weight[c] + bias[c] over [N, C, *].
Tensor channel_affine(const Tensor& y, const Tensor& weight, const Tensor& bias) {
  Shape s(static_cast<std::size_t>(y.dim()), 1);
  s[1] = y.size(1);
  Tensor r = weight.defined() ? mul(y, as_dtype(weight, y.dtype()).reshape(s)) : y;
  return bias.defined() ? add(r, as_dtype(bias, y.dtype()).reshape(s)) : r;
}

}  // namespace

Tensor group_norm(const Tensor& input, std::int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  BRRR_AUTOCAST(fp32, group_norm, input, num_groups, weight, bias, eps);
  constexpr const char* op = "group_norm";
  NvtxRange range(op);
  const std::int64_t m = check_nc(op, input, 2);
  common_device(op, {input, weight, bias});
  const std::int64_t n = input.size(0), c = input.size(1);
  if (num_groups <= 0 || c % num_groups != 0)
    throw Error(ErrorKind::value, std::string(op) + ": the " + std::to_string(c) + " channels of input " +
                                      describe(input) + " must divide into num_groups = " +
                                      std::to_string(num_groups) + " groups");
  check_channels(op, weight, "weight", c, input);
  check_channels(op, bias, "bias", c, input);
  const std::int64_t cols = c / num_groups * m;
  if (n * num_groups == 0 || cols == 0) return channel_affine(input.reshape(input.shape()), weight, bias);
  Tensor y = layer_norm(input.reshape({n * num_groups, cols}), {cols}, {}, {}, eps).reshape(input.shape());
  return channel_affine(y, weight, bias);
}

Tensor instance_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  constexpr const char* op = "instance_norm";
  NvtxRange range(op);
  const std::int64_t m = check_nc(op, input, 3);
  common_device(op, {input, running_mean, running_var, weight, bias});
  const std::int64_t n = input.size(0), c = input.size(1);
  check_channels(op, running_mean, "running_mean", c, input);
  check_channels(op, running_var, "running_var", c, input);
  check_channels(op, weight, "weight", c, input);
  check_channels(op, bias, "bias", c, input);
  if (!use_input_stats) {
    if (!running_mean.defined() || !running_var.defined())
      throw Error(ErrorKind::value, std::string(op) + ": use_input_stats = false needs running_mean and running_var");
    return batch_norm(input, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  if (m <= 1)
    throw Error(ErrorKind::value, std::string(op) + ": expected more than 1 spatial element per channel, got input " +
                                      describe(input));
  if (running_mean.defined() || running_var.defined()) {
    // The running statistics follow the batch means of the per-instance statistics
    // (PyTorch's: batch_norm over [1, N*C, *] with repeated buffers, averaged back over N).
    NoGradGuard no_grad;
    const DType st = stat_dtype(input.dtype());
    Tensor x = as_dtype(input, st).reshape({n, c, m});
    if (running_mean.defined()) {
      mul_(running_mean, 1.0 - momentum);
      add_(running_mean, mean(mean(x, {2}), {0}), momentum);
    }
    if (running_var.defined()) {
      mul_(running_var, 1.0 - momentum);
      add_(running_var, mean(var(x, {2}, 1.0), {0}), momentum);
    }
  }
  if (n * c == 0) return channel_affine(input.reshape(input.shape()), weight, bias);
  Tensor y = layer_norm(input.reshape({n * c, m}), {m}, {}, {}, eps).reshape(input.shape());
  return channel_affine(y, weight, bias);
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  BRRR_AUTOCAST(fp32, rms_norm, input, normalized_shape, weight, eps);
  constexpr const char* op = "rms_norm";
  NvtxRange range(op);
  require_defined(op, input);
  require_floating(op, input);
  common_device(op, {input, weight});
  const std::size_t k = normalized_shape.size();
  bool matches = k > 0 && input.shape().size() >= k;
  for (std::size_t i = 0; matches && i < k; ++i)
    matches = input.shape()[input.shape().size() - k + i] == normalized_shape[i];
  if (!matches)
    throw Error(ErrorKind::shape, std::string(op) + ": input shape " + to_string(input.shape()) +
                                      " does not end with normalized_shape " + to_string(normalized_shape));
  if (weight.defined()) {
    require_floating(op, weight, "weight");
    if (weight.shape() != normalized_shape)
      throw Error(ErrorKind::shape, std::string(op) + ": weight shape " + to_string(weight.shape()) +
                                        " does not match normalized_shape " + to_string(normalized_shape));
  }
  double e = 0;
  if (eps) {
    e = *eps;
  } else {  // torch.finfo(input.dtype).eps
    switch (input.dtype()) {
      case DType::f64: e = std::numeric_limits<double>::epsilon(); break;
      case DType::bf16: e = 0.0078125; break;
      case DType::f16: e = 0.0009765625; break;
      default: e = std::numeric_limits<float>::epsilon(); break;
    }
  }
  std::vector<std::int64_t> dims;
  for (std::size_t i = 0; i < k; ++i) dims.push_back(-1 - static_cast<std::int64_t>(i));
  // bf16/f16 compute in f32 and round once.
  const DType st = stat_dtype(input.dtype());
  Tensor x = as_dtype(input, st);
  Tensor y = mul(x, rsqrt(add(mean(mul(x, x), dims, true), e)));
  if (weight.defined()) y = mul(y, as_dtype(weight, st));
  return as_dtype(y, input.dtype());
}

Tensor normalize(const Tensor& input, double p, std::int64_t dim, double eps) {
  constexpr const char* op = "normalize";
  NvtxRange range(op);
  require_defined(op, input);
  require_floating(op, input);
  if (!(p > 0)) throw Error::bad_value(op, "p", p, "> 0");
  if (input.dim() == 0) throw Error(ErrorKind::shape, std::string(op) + ": does not support 0-d tensors");
  const std::int64_t d = wrap_dim(op, dim, input.dim(), input.shape());
  // max(||x||_p, eps) as a function of the p-th power sum clamped at eps^p: at a zero
  // vector the clamp's gradient is 0 and the root's finite, so the gradient is 0, not NaN.
  Tensor denom;
  if (std::isinf(p)) {
    denom = clamp_min(amax(abs(input), {d}, true), eps);
  } else if (p == 2) {
    denom = sqrt(clamp_min(sum(mul(input, input), {d}, true), eps * eps));
  } else if (p == 1) {
    denom = clamp_min(sum(abs(input), {d}, true), eps);
  } else {
    denom = pow(clamp_min(sum(pow(abs(input), p), {d}, true), std::pow(eps, p)), 1.0 / p);
  }
  return div(input, denom);
}

}  // namespace brrr
