// Sampling from tensors of parameters: bernoulli, normal, multinomial, poisson. Every draw is
// a rand()/randn() of the seeded Philox stream (tensor/random.cpp) followed by deterministic
// ops, or (poisson) one kernel computing each sample from its own words of that stream
// (ops/random_transform.hpp), so a seed gives the same samples on the CPU and on the GPU.
// Samples are not differentiable (the outputs do not require grad).
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ops/random_transform.hpp"  // words_poisson
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {
// Uniforms in [0, 1) in f64 for f64 parameters, f32 otherwise (53 or 24 random bits).
Tensor uniforms(const Shape& shape, DType like, Device dev) {
  return rand(shape, {.dtype = like == DType::f64 ? DType::f64 : DType::f32, .device = dev});
}
}  // namespace

Tensor bernoulli(const Tensor& p) {
  NvtxRange range("bernoulli");
  require_defined("bernoulli", p);
  require_floating("bernoulli", p);
  NoGradGuard no_grad;
  if (p.device().is_cpu() && !all(logical_and(ge(p, 0.0), le(p, 1.0))).item<bool>())  // PyTorch's CPU check
    throw Error(ErrorKind::value, "bernoulli: probabilities must be in [0, 1] (NaN is not), got " + describe(p));
  // P(u < p) = p for u uniform in [0, 1). On CUDA p is not checked (that would be a host sync):
  // p outside [0, 1] acts as clamped there, NaN as 0.
  return lt(uniforms(p.shape(), p.dtype(), p.device()), p).to(p.dtype());
}

Tensor bernoulli(const Tensor& x, double p) {
  NvtxRange range("bernoulli");
  require_defined("bernoulli", x);
  if (!(p >= 0 && p <= 1)) throw Error::bad_value("bernoulli", "p", p, "in [0, 1]");
  NoGradGuard no_grad;
  return lt(uniforms(x.shape(), x.dtype(), x.device()), p).to(x.dtype());
}

Tensor normal(const Tensor& mean, const Tensor& std) {
  NvtxRange range("normal");
  require_defined("normal", mean, "mean");
  require_defined("normal", std, "std");
  const Device dev = common_device("normal", {mean, std});
  require_floating("normal", mean, "mean");
  require_floating("normal", std, "std");
  if (std.device().is_cpu() && !all(ge(std, 0.0)).item<bool>())
    throw Error(ErrorKind::value, "normal: std must be >= 0, got " + describe(std));
  NoGradGuard no_grad;
  const Shape shape = broadcast_shapes(mean.shape(), std.shape(), "normal");
  const DType dt = promote_types(mean.dtype(), std.dtype());
  return add(mul(randn(shape, {.dtype = dt, .device = dev}), std), mean);
}

Tensor normal(const Tensor& mean, double std) {
  require_defined("normal", mean, "mean");
  if (!(std >= 0)) throw Error::bad_value("normal", "std", std, ">= 0");
  return normal(mean, full({}, std, {.dtype = mean.dtype(), .device = mean.device()}));
}

Tensor normal(double mean, const Tensor& std) {
  require_defined("normal", std, "std");
  return normal(full({}, mean, {.dtype = std.dtype(), .device = std.device()}), std);
}

Tensor multinomial(const Tensor& input, std::int64_t num_samples, bool replacement) {
  constexpr const char* name = "multinomial";
  NvtxRange range(name);
  require_defined(name, input);
  require_floating(name, input);
  if (input.dim() != 1 && input.dim() != 2)
    throw Error(ErrorKind::shape, "multinomial: input must be 1-D or 2-D (rows of category weights), got " + describe(input));
  const std::int64_t k = input.size(-1);
  if (k == 0) throw Error(ErrorKind::shape, "multinomial: input has no categories: " + describe(input));
  if (num_samples <= 0) throw Error::bad_value(name, "num_samples", static_cast<double>(num_samples), "positive");
  if (!replacement && num_samples > k)
    throw Error(ErrorKind::value, "multinomial: cannot draw " + std::to_string(num_samples) + " samples without "
                                  "replacement from " + std::to_string(k) + " categories");
  NoGradGuard no_grad;
  const Device dev = input.device();
  Tensor w = input.dim() == 1 ? input.unsqueeze(0) : input;
  const DType acc = w.dtype() == DType::f64 ? DType::f64 : DType::f32;
  w = w.to(acc);
  if (dev.is_cpu()) {  // PyTorch's checks; on CUDA they would be host syncs
    if (!all(logical_and(ge(w, 0.0), isfinite(w))).item<bool>())
      throw Error(ErrorKind::value, "multinomial: weights must be finite and non-negative, got " + describe(input));
    Tensor positive = sum(gt(w, 0.0), {1});
    if (!all(gt(positive, 0)).item<bool>()) throw Error(ErrorKind::value, "multinomial: a row has no positive weight");
    if (!replacement && !all(ge(positive, num_samples)).item<bool>())
      throw Error(ErrorKind::value, "multinomial: fewer categories with positive weight than samples without replacement");
  }
  const std::int64_t rows = w.size(0);
  // Each row over its largest weight (in (0, 1] then): the distribution is the same, and sums
  // and quotients of large weights cannot overflow (f32 weights of 3e38 summed to inf, and
  // every draw then took the last category, whatever its weight).
  // Zero weights, for the race below: taken before the division, which may flush tiny ones to 0.
  const Tensor zero_weight = replacement ? Tensor() : le(w, 0.0);
  {
    Tensor peak = amax(w, {1}, true);
    w = div(w, masked_fill(peak, le(peak, 0.0), 1.0));  // an all-zero row (unchecked on CUDA) stays 0
  }
  Tensor samples;
  if (replacement) {
    // Inversion: the first category whose cumulative weight exceeds u * total.
    Tensor cdf = cumsum(w, 1);
    Tensor total = cdf.narrow(1, k - 1, 1);
    Tensor u = mul(uniforms({rows, num_samples}, acc, dev), total);
    samples = clamp_max(searchsorted(cdf, u, false, true), static_cast<double>(k - 1));
  } else {
    // Exponential race (Efraimidis & Spirakis 2006, as PyTorch): the k largest w / E, E ~ Exp(1).
    // E is 0 when the uniform is exactly 0 (one draw in 2^24 in f32): w / E is then +inf for a
    // positive weight (fine: it wins) but NaN for a zero weight, which topk ranks above every
    // number. So a zero weight takes -1 instead, below every positive weight's key.
    Tensor e = neg(log1p(neg(uniforms({rows, k}, acc, dev))));
    Tensor key = masked_fill(div(w, e), zero_weight, -1.0);
    samples = topk(key, num_samples, 1, true, true).indices;
  }
  return input.dim() == 1 ? samples.squeeze(0) : samples;
}

Tensor poisson(const Tensor& rates) {
  constexpr const char* name = "poisson";
  NvtxRange range(name);
  require_defined(name, rates, "rates");
  require_floating(name, rates, "rates");
  const Device dev = rates.device();
  if (dev.is_cuda() && backend::capture_underway(dev.index()))
    throw Error(ErrorKind::stream, "poisson: not supported under CUDA graph capture (its draw reads the generator "
                                   "state at launch); draw the samples outside the captured region");
  NoGradGuard no_grad;
  Tensor r = rates.contiguous();
  Tensor out = empty(rates.shape(), {.dtype = rates.dtype(), .device = dev});
  if (out.numel() == 0) return out;
  backend::GeneratorState& gen = backend::generator(dev);
  backend::backend_for(dev).poisson(backend::output(out, name), backend::input(r, name), gen.seed, gen.offset);
  gen.offset += static_cast<std::uint64_t>(out.numel()) * random_transform::words_poisson;
  return out;
}

}  // namespace brrr
