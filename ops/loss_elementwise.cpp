// The losses made of elementwise ops and small reductions, with PyTorch's formulas and
// argument names (torch.nn.functional, 2.x): l1, smooth_l1, huber, kl_div,
// binary_cross_entropy (on probabilities), poisson_nll, gaussian_nll, margin_ranking,
// cosine_embedding, triplet_margin, and the distances they use (cosine_similarity,
// pairwise_distance). Compositions of recorded ops (their gradients come from the ops'),
// except binary_cross_entropy, whose node applies PyTorch's gradient formula (finite at
// x = 0 or 1, where the clamped logs are flat).
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::mean: return mean(loss);
    case Reduction::sum: return sum(loss);
  }
  return loss;
}

// Two floating operands on one device whose shapes broadcast (PyTorch broadcasts losses'
// input and target, with a warning we do not print).
void check_pair(const char* op, const Tensor& input, const Tensor& target, const char* second = "target") {
  require_defined(op, input, "input");
  require_defined(op, target, second);
  common_device(op, {input, target});
  require_floating(op, input, "input");
  require_floating(op, target, second);
  broadcast_shapes(input.shape(), target.shape(), op);
}

// The CPU check that every element of a (CPU) tensor satisfies `ok`; on CUDA it would be a
// host sync, so it is skipped there (docs/semantics.md).
template <class F> bool all_on_cpu(const Tensor& t, F ok) {
  if (!t.device().is_cpu()) return true;
  for (double v : t.to(DType::f64).contiguous().to_host<double>())
    if (!ok(v)) return false;
  return true;
}

}  // namespace

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  BRRR_AUTOCAST(fp32, l1_loss, input, target, reduction);
  NvtxRange range("l1_loss");
  check_pair("l1_loss", input, target);
  return reduce(abs(sub(input, target)), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  BRRR_AUTOCAST(fp32, smooth_l1_loss, input, target, reduction, beta);
  NvtxRange range("smooth_l1_loss");
  check_pair("smooth_l1_loss", input, target);
  if (!(beta >= 0)) throw Error::bad_value("smooth_l1_loss", "beta", beta, "non-negative");
  Tensor d = abs(sub(input, target));
  if (beta == 0) return reduce(d, reduction);  // l1 (PyTorch)
  return reduce(where(lt(d, beta), div(mul(mul(d, d), 0.5), beta), sub(d, 0.5 * beta)), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  BRRR_AUTOCAST(fp32, huber_loss, input, target, reduction, delta);
  NvtxRange range("huber_loss");
  check_pair("huber_loss", input, target);
  if (!(delta > 0)) throw Error::bad_value("huber_loss", "delta", delta, "positive");
  Tensor d = abs(sub(input, target));
  return reduce(where(lt(d, delta), mul(mul(d, d), 0.5), mul(sub(d, 0.5 * delta), delta)), reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, KlDivOptions options) {
  BRRR_AUTOCAST(fp32, kl_div, input, target, options);
  NvtxRange range("kl_div");
  check_pair("kl_div", input, target);
  // target (log target - input), with 0 log 0 = 0 (xlogy); log_target: e^t (t - input).
  Tensor loss = options.log_target ? mul(exp(target), sub(target, input)) : sub(xlogy(target, target), mul(target, input));
  if (options.batchmean) {
    if (options.reduction != Reduction::sum)
      throw Error(ErrorKind::value, "kl_div: batchmean divides the sum: use it with reduction sum (the default mean "
                                    "is PyTorch's 'mean', over every element)");
    const std::int64_t batch = input.dim() == 0 ? 1 : input.size(0);
    return div(sum(loss), static_cast<double>(batch));
  }
  return reduce(loss, options.reduction);
}

namespace {

// binary_cross_entropy: -w (t log x + (1 - t) log(1 - x)), each log clamped at -100; the
// gradient PyTorch's: g w (x - t) / max(x (1 - x), 1e-12).
struct BceShapes {
  Shape x;
  DType xd, td;
  Reduction reduction;
};

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  // PyTorch refuses it under autocast: probabilities rounded to bf16 make log(1 - p) unsafe.
  if (autocast::is_enabled())
    throw Error(ErrorKind::dtype, "binary_cross_entropy: unsafe to autocast (probabilities in bf16/f16 lose the "
                                  "precision its logs need); use binary_cross_entropy_with_logits, which is safe, or "
                                  "disable autocast for it (AutocastGuard off(autocast::dtype(), false))");
  constexpr const char* name = "binary_cross_entropy";
  NvtxRange range(name);
  check_pair(name, input, target);
  if (input.shape() != target.shape())
    throw Error::shape_mismatch(name, input.shape(), target.shape(), "must be equal (input and target)");
  if (weight.defined()) {
    common_device(name, {input, weight});
    require_floating(name, weight, "weight");
    broadcast_shapes(weight.shape(), input.shape(), name);
  }
  if (!all_on_cpu(input, [](double v) { return v >= 0 && v <= 1; }))
    throw Error(ErrorKind::value, std::string(name) + ": all elements of input should be in [0, 1] (probabilities; "
                                  "use binary_cross_entropy_with_logits for logits), got " + describe(input));
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor lx = clamp_min(log(input), -100.0), l1x = clamp_min(log1p(neg(input)), -100.0);
    Tensor loss = neg(add(mul(target, lx), mul(sub(1.0, target), l1x)));
    if (weight.defined()) loss = mul(loss, weight);
    out = reduce(loss, reduction);
  }
  if (!autograd::any_requires_grad({input, target})) return out;
  BceShapes in{input.shape(), input.dtype(), target.dtype(), reduction};
  // weight is a constant (PyTorch: not differentiable): no edge.
  autograd::record("BinaryCrossEntropyBackward", {input, target}, {out}, {input, target, weight},
                   [in = std::move(in)](const autograd::Backward& c) {
                     const Tensor &x = c.saved(0), &t = c.saved(1), &w = c.saved(2);
                     Tensor g = c.grad();
                     std::int64_t n = 1;
                     for (auto s : in.x) n *= s;
                     if (in.reduction == Reduction::mean) g = div(g, static_cast<double>(n));
                     if (in.reduction != Reduction::none) g = g.expand(in.x);
                     if (w.defined()) g = mul(g, w);
                     autograd::Grads r(2);
                     if (c.needs(0)) r[0] = div(mul(g, sub(x, t)), clamp_min(mul(x, sub(1.0, x)), 1e-12)).to(in.xd);
                     // d/dt = log(1 - x) - log x, unclamped (PyTorch: +-inf at x = 0 or 1).
                     if (c.needs(1)) r[1] = mul(g, sub(log1p(neg(x)), log(x))).to(in.td);
                     return r;
                   });
  return out;
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, PoissonNllOptions options) {
  BRRR_AUTOCAST(fp32, poisson_nll_loss, input, target, options);
  NvtxRange range("poisson_nll_loss");
  check_pair("poisson_nll_loss", input, target);
  Tensor loss = options.log_input ? sub(exp(input), mul(target, input))
                                  : sub(input, mul(target, log(add(input, options.eps))));
  if (options.full) {
    // Stirling's approximation of log(t!): t log t - t + log(2 pi t) / 2, where t > 1.
    Tensor stirling = add(sub(mul(target, log(target)), target), mul(log(mul(target, 2.0 * M_PI)), 0.5));
    loss = add(loss, where(gt(target, 1.0), stirling, zeros_like(stirling)));
  }
  return reduce(loss, options.reduction);
}

Tensor gaussian_nll_loss(const Tensor& input, const Tensor& target, const Tensor& var, GaussianNllOptions options) {
  constexpr const char* name = "gaussian_nll_loss";
  NvtxRange range(name);
  check_pair(name, input, target);
  require_defined(name, var, "var");
  common_device(name, {input, var});
  require_floating(name, var, "var");
  // var: input's shape, or one dim fewer, or a last dim of 1 (homoscedastic), as PyTorch.
  Tensor v = var;
  if (var.shape() != input.shape()) {
    Shape last1 = input.shape();
    if (!last1.empty()) last1.back() = 1;
    Shape fewer = input.shape();
    if (!fewer.empty()) fewer.pop_back();
    if (!input.shape().empty() && var.shape() == fewer) v = var.unsqueeze(-1);
    else if (var.shape() != last1)
      throw Error::shape_mismatch(name, input.shape(), var.shape(), "(input, var): var must have the input's shape, "
                                                                    "a last dim of 1, or one dim fewer");
  }
  if (!(options.eps >= 0)) throw Error::bad_value(name, "eps", options.eps, "non-negative");
  if (!all_on_cpu(var, [](double x) { return x >= 0; }))
    throw Error(ErrorKind::value, std::string(name) + ": var has negative entries, got " + describe(var));
  // max(var, eps) in the forward; the gradient flows to var unclamped (PyTorch clamps in
  // place under no_grad).
  Tensor vc;
  {
    NoGradGuard no_grad;
    vc = sub(clamp_min(v, options.eps), v);
  }
  vc = add(v, vc);
  Tensor d = sub(input, target);
  Tensor loss = mul(add(log(vc), div(mul(d, d), vc)), 0.5);
  if (options.full) loss = add(loss, 0.5 * std::log(2 * M_PI));
  return reduce(loss, options.reduction);
}

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                           Reduction reduction) {
  BRRR_AUTOCAST(fp32, margin_ranking_loss, input1, input2, target, margin, reduction);
  NvtxRange range("margin_ranking_loss");
  check_pair("margin_ranking_loss", input1, input2, "input2");
  require_defined("margin_ranking_loss", target, "target");
  common_device("margin_ranking_loss", {input1, target});
  // max(0, -y (x1 - x2) + margin)
  return reduce(relu(add(neg(mul(target, sub(input1, input2))), margin)), reduction);
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, std::int64_t dim, double eps) {
  BRRR_AUTOCAST(fp32, cosine_similarity, x1, x2, dim, eps);
  NvtxRange range("cosine_similarity");
  check_pair("cosine_similarity", x1, x2, "x2");
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), "cosine_similarity");
  const std::int64_t d = wrap_dim("cosine_similarity", dim, static_cast<std::int64_t>(shape.size()), shape);
  // PyTorch 2.x: each operand divided by max(||x||, eps) first, then the dot product.
  Tensor a = x1.expand(shape), b = x2.expand(shape);
  Tensor na = clamp_min(sqrt(sum(mul(a, a), {d}, true)), eps), nb = clamp_min(sqrt(sum(mul(b, b), {d}, true)), eps);
  return sum(mul(div(a, na), div(b, nb)), {d});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  NvtxRange range("pairwise_distance");
  check_pair("pairwise_distance", x1, x2, "x2");
  if (!(p >= 0)) throw Error::bad_value("pairwise_distance", "p", p, "non-negative");
  // ||x1 - x2 + eps||_p over the last dim (PyTorch adds eps to the difference).
  Tensor diff = add(sub(x1, x2), eps);
  const std::int64_t last = std::max<std::int64_t>(diff.dim() - 1, 0);
  return vector_norm(diff, p, {last}, keepdim);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                             Reduction reduction) {
  BRRR_AUTOCAST(fp32, cosine_embedding_loss, input1, input2, target, margin, reduction);
  constexpr const char* name = "cosine_embedding_loss";
  NvtxRange range(name);
  check_pair(name, input1, input2, "input2");
  require_defined(name, target, "target");
  common_device(name, {input1, target});
  if (input1.dim() != 1 && input1.dim() != 2)
    throw Error(ErrorKind::shape, std::string(name) + ": input1 must be [N, D] or [D], got " + to_string(input1.shape()));
  // PyTorch's: cos = sum(x1 x2) / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)) over the last dim;
  // y = 1: 1 - cos; y = -1: max(0, cos - margin).
  const std::int64_t d = input1.dim() - 1;
  constexpr double tiny = 1e-12;
  Tensor dot = sum(mul(input1, input2), {d});
  Tensor m1 = add(sum(mul(input1, input1), {d}), tiny), m2 = add(sum(mul(input2, input2), {d}), tiny);
  Tensor cos = div(dot, sqrt(mul(m1, m2)));
  Tensor zero = zeros_like(cos);
  Tensor pos = where(eq(target, 1), sub(1.0, cos), zero);
  Tensor neg_part = where(eq(target, -1), relu(sub(cos, margin)), zero);
  return reduce(add(pos, neg_part), reduction);
}

Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           TripletMarginOptions options) {
  BRRR_AUTOCAST(fp32, triplet_margin_loss, anchor, positive, negative, options);
  constexpr const char* name = "triplet_margin_loss";
  NvtxRange range(name);
  check_pair(name, anchor, positive, "positive");
  check_pair(name, anchor, negative, "negative");
  if (!(options.margin > 0)) throw Error::bad_value(name, "margin", options.margin, "positive");
  Tensor d_pos = pairwise_distance(anchor, positive, options.p, options.eps);
  Tensor d_neg = pairwise_distance(anchor, negative, options.p, options.eps);
  if (options.swap) d_neg = minimum(d_neg, pairwise_distance(positive, negative, options.p, options.eps));
  return reduce(relu(add(sub(d_pos, d_neg), options.margin)), options.reduction);
}

}  // namespace brrr
