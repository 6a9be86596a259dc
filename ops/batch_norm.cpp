// batch_norm (Ioffe & Szegedy 2015, "Batch Normalization: Accelerating Deep Network Training
// by Reducing Internal Covariate Shift") over [N, C, *], PyTorch's F.batch_norm. The input is
// made contiguous and seen as [N, C, M] (M the product of the trailing dims). Training: the
// backend's statistics kernel computes each channel's mean and invstd = 1/sqrt(var + eps)
// (biased variance) and updates the running statistics in place (unbiased variance,
// momentum), one kernel normalises. Evaluation: the running statistics normalise (one kernel, plus the
// [C]-sized invstd). Backward (training): one reduction kernel (sum_dy, sum_dy_xmu per
// channel) and one elementwise kernel for the input gradient; under create_graph the same
// formula in Tensor ops on statistics recomputed from x, so second derivatives see their
// dependence on x.
module;
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

constexpr const char* op = "batch_norm";

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }
DType stat_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

struct BatchNormInputs {
  Shape x_shape;
  DType x_dtype, w_dtype, b_dtype;
  std::int64_t n, c, m;
  double eps;
  bool training;
};

backend::Operand operand_or_empty(const Tensor& t) { return t.defined() ? backend::input(t, op) : backend::Operand{}; }

// [C] -> [1, C, 1], to broadcast against [N, C, M].
Tensor per_channel(const Tensor& t, std::int64_t c) { return t.reshape({1, c, 1}); }

autograd::Grads batch_norm_rule(const autograd::Backward& b, const BatchNormInputs& in, const Tensor& x_in,
                                const Tensor& w, const Tensor& saved_mean, const Tensor& saved_invstd) {
  const DType xt = in.x_dtype;
  Tensor dx, dw, db;
  if (in.training && !autograd::is_grad_enabled()) {
    // The kernels: one reduction, one elementwise pass.
    Tensor g = as_dtype(b.grad(), xt).contiguous().view({in.n, in.c, in.m});
    Tensor x = x_in.contiguous().view({in.n, in.c, in.m});
    Tensor wc = w.defined() ? as_dtype(w, xt).contiguous() : Tensor();
    const Device dev = x.device();
    const DType st = saved_mean.dtype();
    Tensor sum_dy = empty({in.c}, {.dtype = st, .device = dev});
    Tensor sum_dy_xmu = empty({in.c}, {.dtype = st, .device = dev});
    backend::Backend& be = backend::backend_for(dev);
    be.batch_norm_backward_reduce(backend::output(sum_dy, op), backend::output(sum_dy_xmu, op), backend::input(g, op),
                                  backend::input(x, op), backend::input(saved_mean, op));
    if (b.needs(0)) {
      Tensor out = empty({in.n, in.c, in.m}, {.dtype = xt, .device = dev});
      backend::Operand wo = operand_or_empty(wc);
      be.batch_norm_backward_elemt(backend::output(out, op), backend::input(g, op), backend::input(x, op),
                                   backend::input(saved_mean, op), backend::input(saved_invstd, op),
                                   wc.defined() ? &wo : nullptr, backend::input(sum_dy, op),
                                   backend::input(sum_dy_xmu, op));
      dx = out.view(in.x_shape);
    }
    if (b.needs(1)) dw = as_dtype(mul(sum_dy_xmu, saved_invstd), in.w_dtype);
    if (b.needs(2)) db = as_dtype(sum_dy, in.b_dtype);
    return {dx, dw, db};
  }
  // Tensor ops: evaluation mode (the statistics are constants), or create_graph.
  const DType st = stat_dtype(xt);
  Tensor g = as_dtype(b.grad(), st).reshape({in.n, in.c, in.m});
  Tensor x = as_dtype(x_in, st).reshape({in.n, in.c, in.m});
  Tensor mu, rs;
  if (in.training) {
    mu = mean(x, {0, 2}, true);
    Tensor d = sub(x, mu);
    rs = rsqrt(add(mean(mul(d, d), {0, 2}, true), in.eps));
  } else {
    mu = per_channel(as_dtype(saved_mean, st), in.c);
    rs = per_channel(as_dtype(saved_invstd, st), in.c);
  }
  Tensor xhat = mul(sub(x, mu), rs);
  if (b.needs(0)) {
    Tensor gw = w.defined() ? mul(g, per_channel(as_dtype(w, st), in.c)) : g;
    Tensor r = in.training ? sub(sub(gw, mean(gw, {0, 2}, true)), mul(xhat, mean(mul(gw, xhat), {0, 2}, true))) : gw;
    dx = as_dtype(mul(r, rs).reshape(in.x_shape), xt);
  }
  if (b.needs(1)) dw = as_dtype(sum(mul(g, xhat), {0, 2}), in.w_dtype);
  if (b.needs(2)) db = as_dtype(sum(g, {0, 2}), in.b_dtype);
  return {dx, dw, db};
}

void check_channel_tensor(const Tensor& t, const char* name, std::int64_t c, const Tensor& input) {
  if (!t.defined()) return;
  require_floating(op, t, name);
  if (t.dim() != 1 || t.size(0) != c)
    throw Error(ErrorKind::shape, std::string(op) + ": " + name + " must be [" + std::to_string(c) +
                                      "] (the channels of input " + describe(input) + "), got " + describe(t));
}

// The running statistics the kernel can update in place: contiguous, of the statistics' dtype.
bool kernel_updatable(const Tensor& r, DType st) { return r.defined() && r.dtype() == st && r.is_contiguous(); }

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  NvtxRange range(op);
  require_defined(op, input);
  const Device dev = common_device(op, {input, running_mean, running_var, weight, bias});
  require_floating(op, input);
  if (input.dim() < 2)
    throw Error(ErrorKind::shape, std::string(op) + ": expected an input of at least 2 dims [N, C, *], got " +
                                      describe(input));
  const std::int64_t n = input.size(0), c = input.size(1);
  std::int64_t m = 1;
  for (std::int64_t d = 2; d < input.dim(); ++d) m *= input.size(d);
  check_channel_tensor(running_mean, "running_mean", c, input);
  check_channel_tensor(running_var, "running_var", c, input);
  check_channel_tensor(weight, "weight", c, input);
  check_channel_tensor(bias, "bias", c, input);
  if (!training && (!running_mean.defined() || !running_var.defined()))
    throw Error(ErrorKind::value, std::string(op) +
                                      ": running_mean and running_var must be given in evaluation mode (training = "
                                      "false), got " + (running_mean.defined() ? "no running_var" : "no running_mean"));
  if (training && n * m <= 1)
    throw Error(ErrorKind::value, std::string(op) + ": expected more than 1 value per channel when training, got input " +
                                      describe(input));

  const DType st = stat_dtype(input.dtype());
  Tensor out, mu, invstd;
  {
    NoGradGuard no_grad;
    Tensor x = input.contiguous().view({n, c, m});
    // The kernel reads weight/bias in the input's dtype (as layer_norm); their gradients come
    // back in their own dtypes.
    Tensor wc = weight.defined() ? as_dtype(weight, input.dtype()).contiguous() : Tensor();
    Tensor bc = bias.defined() ? as_dtype(bias, input.dtype()).contiguous() : Tensor();
    out = empty({n, c, m}, {.dtype = input.dtype(), .device = dev});
    backend::Backend& be = backend::backend_for(dev);
    if (training) {
      mu = empty({c}, {.dtype = st, .device = dev});
      invstd = empty({c}, {.dtype = st, .device = dev});
      const bool fused_mean = kernel_updatable(running_mean, st), fused_var = kernel_updatable(running_var, st);
      backend::Operand rmo, rvo;
      if (fused_mean) rmo = backend::output(running_mean, op);
      if (fused_var) rvo = backend::output(running_var, op);
      if (c > 0)
        be.batch_norm_stats(backend::output(mu, op), backend::output(invstd, op), backend::input(x, op), eps,
                            fused_mean ? &rmo : nullptr, fused_var ? &rvo : nullptr, momentum);
      if (running_mean.defined()) {
        if (!fused_mean) {
          mul_(running_mean, 1.0 - momentum);
          add_(running_mean, mu, momentum);
        }
        running_mean.storage().bump_version();
      }
      if (running_var.defined()) {
        if (!fused_var) {  // another dtype or layout: the unbiased variance with Tensor ops
          mul_(running_var, 1.0 - momentum);
          add_(running_var, var(as_dtype(x, st), {0, 2}, 1.0), momentum);
        }
        running_var.storage().bump_version();
      }
    } else {
      // Copies: the backward must not see later in-place updates of the running statistics.
      mu = as_dtype(running_mean, st).contiguous().clone();
      invstd = rsqrt(add(as_dtype(running_var, st), eps)).contiguous();
    }
    if (out.numel() > 0) {
      backend::Operand wo = operand_or_empty(wc), bo = operand_or_empty(bc);
      be.batch_norm_elemt(backend::output(out, op), backend::input(x, op), backend::input(mu, op),
                          backend::input(invstd, op), wc.defined() ? &wo : nullptr, bc.defined() ? &bo : nullptr);
    }
    out = out.view(input.shape());
  }
  if (autograd::any_requires_grad({input, weight, bias})) {
    BatchNormInputs in{input.shape(), input.dtype(), weight.defined() ? weight.dtype() : input.dtype(),
                       bias.defined() ? bias.dtype() : input.dtype(), n, c, m, eps, training};
    autograd::record("BatchNormBackward", {input, weight, bias}, {out}, {input, weight, mu, invstd},
                     [in = std::move(in)](const autograd::Backward& b) {
                       return batch_norm_rule(b, in, b.saved(0), b.saved(1), b.saved(2), b.saved(3));
                     });
  }
  return out;
}

}  // namespace brrr
