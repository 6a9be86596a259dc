// Losses: cross_entropy, nll_loss, mse_loss, binary_cross_entropy_with_logits, with
// PyTorch's semantics (torch.nn.functional, 2.x). cross_entropy is fused: one backend kernel
// computes each row's log-sum-exp, loss and weight, one more its gradient (ops/cpu/rows.cpp,
// ops/cuda/cross_entropy.cu). nll_loss picks log p[i, target_i] with a one-hot mask built on the device
// (eq(class ids, target)) and where(); the pick is differentiable Tensor ops, needs no
// gather, and an ignored or (on CUDA) out-of-range target simply matches no class.
// binary_cross_entropy_with_logits has its own backward node: its gradient
// sigmoid(x) - t is exact at x = 0, where the stable formula's max/abs kinks are not.
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// f32 for bf16/f16 (means and counts would round), the dtype itself otherwise.
DType accumulate_dtype(DType d) { return d == DType::bf16 || d == DType::f16 ? DType::f32 : d; }

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::mean: return mean(loss);
    case Reduction::sum: return sum(loss);
  }
  return loss;
}

// --- nll_loss / cross_entropy ------------------------------------------------------------

// A class weight is a floating [C] tensor on the input's device.
void check_weight(const char* name, const Tensor& input, const Tensor& weight, std::int64_t classes) {
  if (!weight.defined()) return;
  common_device(name, {input, weight});
  require_floating(name, weight, "weight");
  if (weight.shape() != Shape{classes})
    throw Error(ErrorKind::shape, std::string(name) + ": weight must be [C] = [" + std::to_string(classes) +
                                      "] for input " + to_string(input.shape()) + ", got " + to_string(weight.shape()));
}

// Checks the class-index target against log-probabilities [N, C, d1...] (or [C]) and, on
// the CPU, that every target is in [0, C) or ignore_index.
void check_targets(const char* name, const Tensor& input, const Tensor& target, const CrossEntropyOptions& o) {
  require_defined(name, input, "input");
  require_defined(name, target, "target");
  common_device(name, {input, target});
  require_floating(name, input);
  if (target.dtype() != DType::i64 && target.dtype() != DType::i32)
    throw Error(ErrorKind::dtype, std::string(name) + ": target must hold class indices (i64 or i32), got " +
                                      describe(target) +
                                      (std::string(name) == "nll_loss" ? "" : " (probability targets have the input's shape)"));
  if (input.dim() == 0)
    throw Error(ErrorKind::shape, std::string(name) + ": input must be [C] or [N, C, ...], got a 0-d tensor");
  // Expected target shape: [] for [C]; [N, d1...] for [N, C, d1...].
  Shape want;
  if (input.dim() >= 2) {
    want.push_back(input.shape()[0]);
    for (std::size_t i = 2; i < input.shape().size(); ++i) want.push_back(input.shape()[i]);
  }
  if (target.shape() != want)
    throw Error(ErrorKind::shape, std::string(name) + ": target shape " + to_string(target.shape()) +
                                      " does not match input shape " + to_string(input.shape()) + " (expected " +
                                      to_string(want) + ")");
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    throw Error(ErrorKind::value, std::string(name) + ": label_smoothing must be in [0, 1], got " +
                                      number_text(o.label_smoothing));
  const std::int64_t classes = input.dim() == 1 ? input.shape()[0] : input.shape()[1];
  check_weight(name, input, o.weight, classes);
  if (target.device().is_cpu()) {
    // CPU tensors are host memory: reading them costs no sync.
    auto check = [&](std::int64_t t) {
      if (t != o.ignore_index && (t < 0 || t >= classes))
        throw Error(ErrorKind::index, std::string(name) + ": target " + std::to_string(t) + " is out of bounds for " +
                                          std::to_string(classes) + " classes (expected [0, " +
                                          std::to_string(classes) + ") or ignore_index " +
                                          std::to_string(o.ignore_index) + ")");
    };
    if (target.dtype() == DType::i64)
      for (std::int64_t t : target.to_host<std::int64_t>()) check(t);
    else
      for (std::int32_t t : target.to_host<std::int32_t>()) check(t);
  }
  // On CUDA the targets are checked by the kernels instead (reading them here would make the
  // host wait): cross_entropy's kernel reports one outside [0, C) through the deferred device
  // error flag (CheckedOp::nll_target), raised at the next sync point. nll_loss's
  // one-hot pick is not checked there: such a sample matches no class and adds 0.
}

// The loss of checked log-probabilities [N, C, d1...] (or [C]) and targets: each sample's
// -w[t] log p[t] (w = 1 without a class weight, 0 for ignored targets); with label
// smoothing e, (1 - e) of it plus e / C of -sum_c w_c log p_c (PyTorch's
// cross_entropy_loss_label_smoothing). mean divides both sums by sum of w[t].
Tensor nll_forward(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o) {
  const bool single = log_probs.dim() == 1;  // [C] with a 0-d target
  Tensor lp = single ? log_probs.unsqueeze(0) : log_probs;
  Tensor tg = single ? target.reshape({1}) : target;
  const std::int64_t classes = lp.shape()[1];
  const Device dev = lp.device();

  // Class ids [1, C, 1, ...] against targets [N, 1, d1...]: the one-hot mask [N, C, d1...].
  Shape id_shape(lp.shape().size(), 1);
  id_shape[1] = classes;
  Tensor ids = arange(classes, {.dtype = tg.dtype(), .device = dev}).view(id_shape);
  Tensor mask = eq(ids, tg.unsqueeze(1));
  Tensor valid = ne(tg, Scalar(o.ignore_index));
  Tensor w = o.weight.defined() ? as_dtype(o.weight.detach(), lp.dtype()).view(id_shape) : Tensor();  // a constant, as in PyTorch
  // where(), not a product: log p = -inf off the target must not make 0 * -inf = NaN.
  Tensor picked = sum(where(mask, w.defined() ? mul(lp, w) : lp, 0.0), {1});
  Tensor loss = where(valid, neg(picked), 0.0);
  if (o.label_smoothing > 0) {
    Tensor smooth = where(valid, div(neg(sum(w.defined() ? mul(lp, w) : lp, {1})), static_cast<double>(classes)), 0.0);
    loss = add(mul(loss, 1.0 - o.label_smoothing), mul(smooth, o.label_smoothing));
  }
  switch (o.reduction) {
    case Reduction::none: return single ? loss.reshape({}) : loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: {
      // Divided by the weight of the non-ignored targets (their count without a weight).
      // None: NaN (PyTorch), through where()s so that the gradient is 0, not 0 * inf = NaN.
      const DType acc = accumulate_dtype(loss.dtype());
      Tensor count;
      {
        NoGradGuard no_grad;
        count = w.defined() ? sum(where(valid, sum(where(mask, w, 0.0), {1}), 0.0)) : sum(valid);
        count = as_dtype(count, acc);
      }
      Tensor nonzero = ne(count, 0.0);
      Tensor total = div(as_dtype(sum(loss), acc), where(nonzero, count, 1.0));
      return as_dtype(where(nonzero, total, nan_v), loss.dtype());
    }
  }
  return loss;
}

// cross_entropy with class probabilities `target` (the input's shape): -sum_c w_c t_c
// log_softmax(x)_c per sample, t smoothed to (1 - e) t + e / C; mean over the samples
// (numel / C), not over the weights (PyTorch's cross_entropy with probability targets).
Tensor cross_entropy_probabilities(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  constexpr const char* name = "cross_entropy";
  common_device(name, {logits, target});
  require_floating(name, logits);
  if (target.shape() != logits.shape())  // neither class indices nor probabilities
    throw Error(ErrorKind::dtype, std::string(name) + ": target must hold class indices (i64 or i32), or class "
                                  "probabilities of the input's shape " + to_string(logits.shape()) + ", got " +
                                  describe(target));
  if (logits.dim() == 0) throw Error(ErrorKind::shape, "cross_entropy: input must be [C] or [N, C, ...], got a 0-d tensor");
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
    throw Error(ErrorKind::value, "cross_entropy: label_smoothing must be in [0, 1], got " + number_text(o.label_smoothing));
  const std::int64_t cdim = logits.dim() == 1 ? 0 : 1, classes = logits.size(cdim);
  check_weight(name, logits, o.weight, classes);
  Tensor lsm = log_softmax(logits, cdim);
  Tensor t = o.label_smoothing > 0 ? add(mul(target, 1.0 - o.label_smoothing), o.label_smoothing / static_cast<double>(classes))
                                   : target;
  Tensor prod = mul(lsm, t);
  if (o.weight.defined()) {
    Shape ws(logits.shape().size(), 1);
    ws[static_cast<std::size_t>(cdim)] = classes;
    prod = mul(prod, o.weight.detach().view(ws));
  }
  Tensor loss = neg(sum(prod, {cdim}));
  switch (o.reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}

// --- binary_cross_entropy_with_logits ----------------------------------------------------

// Whether `from` broadcasts to exactly `to` (NumPy rules, `to` unchanged).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (std::size_t i = 0; i < from.size(); ++i) {
    std::int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) return false;
  }
  return true;
}

// softplus(-x) = log(1 + exp(-x)) = -log sigmoid(x), stable for any x.
Tensor softplus_neg(const Tensor& x) { return add(log1p(exp(neg(abs(x)))), relu(neg(x))); }

// loss = (1 - t) x + L softplus(-x), L = 1 + (p - 1) t (L = 1 without pos_weight). So
//   dl/dx = L sigmoid(x) - p t   (sigmoid(x) - t without pos_weight)
//   dl/dt = -x + (p - 1) softplus(-x)
//   dl/dp = t softplus(-x)
// Shapes and dtypes of the inputs (the gradients are returned in them).
struct BceInputs {
  Shape shape, p_shape;
  DType x_dtype, t_dtype, p_dtype;
  Reduction reduction;
};

autograd::Grads bce_with_logits_rule(const autograd::Backward& c, const BceInputs& in, Tensor x, Tensor t, Tensor p) {
  const DType dt = promote_types(x.dtype(), p.defined() ? promote_types(t.dtype(), p.dtype()) : t.dtype());
  x = as_dtype(x, dt);
  t = as_dtype(t, dt);
  if (p.defined()) p = as_dtype(p, dt);
  Tensor g = as_dtype(c.grad(), dt);
  std::int64_t n = 1;
  for (auto s : in.shape) n *= s;
  switch (in.reduction) {
    case Reduction::none: break;
    case Reduction::sum: g = g.expand(in.shape); break;
    case Reduction::mean: g = div(g, static_cast<double>(n)).expand(in.shape); break;
  }
  Tensor dx, dtg, dp;
  if (c.needs(0)) {
    Tensor s = sigmoid(x);
    Tensor d = p.defined() ? sub(mul(add(mul(sub(p, 1.0), t), 1.0), s), mul(p, t)) : sub(s, t);
    dx = as_dtype(mul(g, d), in.x_dtype);
  }
  if (c.needs(1) || c.needs(2)) {
    Tensor sp = softplus_neg(x);
    if (c.needs(1)) dtg = as_dtype(mul(g, p.defined() ? add(neg(x), mul(sub(p, 1.0), sp)) : neg(x)), in.t_dtype);
    if (c.needs(2)) dp = as_dtype(sum_to_size(mul(g, mul(t, sp)), in.p_shape), in.p_dtype);
  }
  return {dx, dtg, dp};
}

// --- cross_entropy (fused) --------------------------------------------------------------

// The gradient of the fused cross entropy w.r.t. its [rows, C] logits: the fused gradient
// kernel, or under create_graph built from recorded ops (softmax, where) so that it can be
// differentiated again.
Tensor cross_entropy_rule(const Tensor& grad, const Tensor& x, const Tensor& t, const Tensor& lse, const Tensor& count,
                          const CrossEntropyOptions& o) {
  const bool per_row = o.reduction == Reduction::none;
  const std::int64_t rows = x.size(0), classes = x.size(1);
  Tensor g = per_row ? grad.reshape({rows}) : grad;
  if (autograd::is_grad_enabled()) {
    const double e = o.label_smoothing;
    Tensor onehot = eq(arange(classes, {.dtype = t.dtype(), .device = x.device()}).view({1, classes}), t.view({rows, 1}));
    Tensor d = sub(sub(softmax(x, 1), mul(onehot.to(x.dtype()), 1.0 - e)), e / static_cast<double>(classes));
    // count clamped to 1: with every target ignored, g / 0 = inf would turn the masked rows'
    // second derivative into 0 * inf = NaN (mask the input, not the output).
    Tensor scale = per_row ? g.view({rows, 1}) : (count.defined() ? div(g, clamp_min(count, 1.0)) : g);
    Tensor gx = where(ne(t, Scalar(o.ignore_index)).view({rows, 1}), mul(d, scale), 0.0);
    return as_dtype(gx, x.dtype());  // count is f32: keep bf16/f16 gradients in their dtype
  }
  constexpr const char* op = "cross_entropy";
  Tensor ga = as_dtype(g, lse.dtype()).contiguous();
  Tensor gx = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  std::optional<backend::Operand> count_op;
  if (count.defined()) count_op = backend::input(count, op);
  backend::backend_for(x.device())
      .cross_entropy_backward(backend::output(gx, op), backend::input(x, op), backend::input(lse, op),
                              backend::input(t, op), backend::input(ga, op), per_row,
                              count_op ? &*count_op : nullptr, o.ignore_index, o.label_smoothing);
  return gx;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, CrossEntropyOptions options) {
  BRRR_AUTOCAST(fp32, nll_loss, log_probs, target, options);
  NvtxRange range("nll_loss");
  if (options.label_smoothing != 0)
    throw Error(ErrorKind::value, "nll_loss: label_smoothing must be 0 (it is an option of cross_entropy), got " +
                                      number_text(options.label_smoothing));
  check_targets("nll_loss", log_probs, target, options);
  return nll_forward(log_probs, target, options);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions options) {
  BRRR_AUTOCAST(fp32, cross_entropy, logits, target, options);
  NvtxRange range("cross_entropy");
  require_defined("cross_entropy", logits, "input");
  require_defined("cross_entropy", target, "target");
  if (is_floating_point(target.dtype())) return cross_entropy_probabilities(logits, target, options);
  check_targets("cross_entropy", logits, target, options);
  // A class weight takes the composed path: log_softmax, then the weighted pick.
  if (options.weight.defined()) return nll_forward(log_softmax(logits, logits.dim() == 1 ? 0 : 1), target, options);
  // Logits as [rows, C]: the class dim moved last and made contiguous. These are recorded
  // ops, so the fused node below connects to `x` and their backward reaches `logits`.
  Tensor x = logits.dim() == 1 ? logits.unsqueeze(0) : logits;
  if (x.dim() > 2) {
    Shape perm{0};
    for (std::int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
    perm.push_back(1);
    x = x.permute(perm);
  }
  const std::int64_t classes = x.size(-1), rows = target.numel();
  x = x.contiguous().reshape({rows, classes});
  const Tensor t = target.contiguous().reshape({rows});
  const DType acc = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Device dev = logits.device();

  const bool record = autograd::any_requires_grad({x});
  NoGradGuard no_grad;
  // Row 0: each row's loss; row 1: its weight (0 for ignored targets).
  Tensor losses = empty({2, rows}, {.dtype = acc, .device = dev});
  Tensor lse = empty({rows}, {.dtype = acc, .device = dev});
  backend::backend_for(dev).cross_entropy_forward(
      backend::output(losses, "cross_entropy"), backend::output(lse, "cross_entropy"),
      backend::input(x, "cross_entropy"), backend::input(t, "cross_entropy"), options.ignore_index,
      options.label_smoothing);
  Tensor out, count;
  switch (options.reduction) {
    case Reduction::none: out = losses.select(0, 0).reshape(target.shape()); break;
    case Reduction::sum: out = sum(losses.select(0, 0)); break;
    case Reduction::mean: {
      // Sum of losses over sum of weights; every target ignored gives 0 / 0 = NaN (PyTorch).
      Tensor totals = sum(losses, {1});
      count = totals.select(0, 1);
      out = div(totals.select(0, 0), count);
      break;
    }
  }
  out = as_dtype(out, logits.dtype());
  if (record)
    autograd::record("CrossEntropyBackward", {x}, {out}, {x, t, lse, count}, [options](const autograd::Backward& c) {
      return autograd::Grads{cross_entropy_rule(c.grad(), c.saved(0), c.saved(1), c.saved(2), c.saved(3), options)};
    });
  return out;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  BRRR_AUTOCAST(fp32, mse_loss, input, target, reduction);
  NvtxRange range("mse_loss");
  require_defined("mse_loss", input, "input");
  require_defined("mse_loss", target, "target");
  common_device("mse_loss", {input, target});
  if (!is_floating_point(promote_types(input.dtype(), target.dtype())))
    throw Error(ErrorKind::dtype, "mse_loss: expected floating-point tensors, got " + describe(input) + " and " +
                                      describe(target));
  // PyTorch warns when the shapes differ and broadcasts; so do we (without the warning).
  broadcast_shapes(input.shape(), target.shape(), "mse_loss");
  Tensor d = sub(input, target);
  return reduce_loss(mul(d, d), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction,
                                        const Tensor& pos_weight) {
  BRRR_AUTOCAST(fp32, binary_cross_entropy_with_logits, logits, target, reduction, pos_weight);
  constexpr const char* name = "binary_cross_entropy_with_logits";
  NvtxRange range(name);
  require_defined(name, logits, "input");
  require_defined(name, target, "target");
  common_device(name, {logits, target, pos_weight});
  for (const Tensor* t : {&logits, &target, &pos_weight})
    if (t->defined() && !is_floating_point(t->dtype()))
      throw Error(ErrorKind::dtype, std::string(name) + ": expected floating-point input, target and pos_weight, got " +
                                        describe(*t));
  if (logits.shape() != target.shape())
    throw Error(ErrorKind::shape, std::string(name) + ": target shape " + to_string(target.shape()) +
                                      " must equal input shape " + to_string(logits.shape()));
  if (pos_weight.defined() && !broadcasts_to(pos_weight.shape(), logits.shape()))
    throw Error(ErrorKind::shape, std::string(name) + ": pos_weight shape " + to_string(pos_weight.shape()) +
                                      " does not broadcast to input shape " + to_string(logits.shape()));
  const DType c = promote_types(logits.dtype(), pos_weight.defined() ? promote_types(target.dtype(), pos_weight.dtype())
                                                                     : target.dtype());
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor x = as_dtype(logits, c), t = as_dtype(target, c);
    Tensor loss;
    if (pos_weight.defined()) {
      // (1 - t) x + (1 + (p - 1) t) (log1p(exp(-|x|)) + max(-x, 0))   (PyTorch's formula)
      Tensor p = as_dtype(pos_weight, c);
      loss = add(mul(sub(1.0, t), x), mul(add(mul(sub(p, 1.0), t), 1.0), softplus_neg(x)));
    } else {
      // max(x, 0) - x t + log1p(exp(-|x|))
      loss = add(sub(relu(x), mul(x, t)), log1p(exp(neg(abs(x)))));
    }
    out = reduce_loss(loss, reduction);
  }
  if (autograd::any_requires_grad({logits, target, pos_weight})) {
    BceInputs in{logits.shape(), pos_weight.defined() ? pos_weight.shape() : Shape{}, logits.dtype(), target.dtype(),
                 pos_weight.defined() ? pos_weight.dtype() : logits.dtype(), reduction};
    autograd::record("BinaryCrossEntropyWithLogitsBackward", {logits, target, pos_weight}, {out},
                     {logits, target, pos_weight}, [in = std::move(in)](const autograd::Backward& c) {
                       return bce_with_logits_rule(c, in, c.saved(0), c.saved(1), c.saved(2));
                     });
  }
  return out;
}

}  // namespace brrr
