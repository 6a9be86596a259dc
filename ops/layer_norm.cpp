// layer_norm (Ba, Kiros & Hinton 2016, "Layer Normalization") over the trailing
// normalized_shape dims. Forward: the input is flattened to contiguous [rows, cols] and one
// fused row kernel writes the output and each row's mean and rstd = 1 / sqrt(var + eps)
// (biased variance). Backward: one fused backend kernel (layer_norm_backward: dx per row,
// dweight/dbias as deterministic column sums) on the saved mean/rstd, in f32 for bf16/f16
// (f64 for f64). Under create_graph the rule is Tensor ops instead, with the statistics
// recomputed from x, so that second derivatives see their dependence on x.
module;
#include <cmath>
#include <cstdint>
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

constexpr const char* op = "layer_norm";

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// Statistics and backward arithmetic: f64 for f64 inputs, f32 for f32/bf16/f16.
DType compute_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// With x_hat = (x - mean) * rstd and gw = g * w (g when there is no weight), per row:
//   dx = rstd * (gw - mean(gw) - x_hat * mean(gw * x_hat))
//   dw = sum over rows of g * x_hat,  db = sum over rows of g.
struct LayerNormInputs {
  Shape normalized_shape, x_shape;
  DType x_dtype, w_dtype, b_dtype;
  std::int64_t rows, cols;
  double eps;
};

// The kernel path (grad mode off: no second derivatives wanted): one fused backend kernel
// reads dy, x, the saved statistics and the weight once. dweight/dbias come back in the
// accumulation dtype and are converted to the parameters' dtypes as the Tensor-op rule does.
autograd::Grads layer_norm_kernel_rule(const autograd::Backward& c, const LayerNormInputs& in, const Tensor& x_in,
                                       const Tensor& w, const Tensor& saved_mean, const Tensor& saved_rstd) {
  const DType dt = compute_dtype(in.x_dtype);
  const Device dev = x_in.device();
  Tensor dx, dw, db;
  if (c.needs(0)) dx = empty(in.x_shape, {.dtype = in.x_dtype, .device = dev});
  if (c.needs(1)) dw = empty({in.cols}, {.dtype = dt, .device = dev});
  if (c.needs(2)) db = empty({in.cols}, {.dtype = dt, .device = dev});
  if (in.rows == 0) {  // no rows: nothing to sum
    if (dw.defined()) dw.fill_(0.0);
    if (db.defined()) db.fill_(0.0);
  } else if (in.cols > 0) {
    Tensor g = as_dtype(c.grad(), in.x_dtype).reshape({in.rows, in.cols}).contiguous();
    Tensor x = x_in.reshape({in.rows, in.cols}).contiguous();
    Tensor wc = w.defined() ? as_dtype(w, dt).reshape({in.cols}).contiguous() : Tensor();
    backend::Operand dxo, dwo, dbo, wo;
    if (dx.defined()) dxo = backend::output(dx.view({in.rows, in.cols}), op);
    if (dw.defined()) dwo = backend::output(dw, op);
    if (db.defined()) dbo = backend::output(db, op);
    if (wc.defined()) wo = backend::input(wc, op);
    backend::backend_for(dev).layer_norm_backward(
        dx.defined() ? &dxo : nullptr, dw.defined() ? &dwo : nullptr, db.defined() ? &dbo : nullptr,
        backend::input(g, op), backend::input(x, op), backend::input(saved_mean, op), backend::input(saved_rstd, op),
        wc.defined() ? &wo : nullptr);
  }
  if (dw.defined()) dw = as_dtype(dw.view(in.normalized_shape), in.w_dtype);
  if (db.defined()) db = as_dtype(db.view(in.normalized_shape), in.b_dtype);
  return {dx, dw, db};
}

// The same gradients with Tensor ops, for create_graph (second derivatives).
autograd::Grads layer_norm_graph_rule(const autograd::Backward& c, const LayerNormInputs& in, const Tensor& x_in,
                                      const Tensor& w) {
  const DType dt = compute_dtype(in.x_dtype);
  Tensor g = as_dtype(c.grad().reshape({in.rows, in.cols}), dt);
  Tensor x = as_dtype(x_in.reshape({in.rows, in.cols}), dt);
  // Statistics as functions of x, so the graph of dx is complete.
  Tensor mu = mean(x, {1}, true);
  Tensor d = sub(x, mu);
  Tensor rs = rsqrt(add(mean(mul(d, d), {1}, true), in.eps));
  Tensor xhat = mul(sub(x, mu), rs);
  Tensor dx, dw, db;
  if (c.needs(0)) {
    Tensor gw = w.defined() ? mul(g, as_dtype(w, dt).reshape({1, in.cols})) : g;
    Tensor inner = sub(sub(gw, mean(gw, {1}, true)), mul(xhat, mean(mul(gw, xhat), {1}, true)));
    dx = as_dtype(mul(rs, inner).reshape(in.x_shape), in.x_dtype);
  }
  if (c.needs(1)) dw = as_dtype(sum(mul(g, xhat), {0}).reshape(in.normalized_shape), in.w_dtype);
  if (c.needs(2)) db = as_dtype(sum(g, {0}).reshape(in.normalized_shape), in.b_dtype);
  return {dx, dw, db};
}

void check_param(const Tensor& p, const char* name, const Shape& normalized_shape) {
  if (!p.defined()) return;
  require_floating(op, p, name);
  if (p.shape() != normalized_shape)
    throw Error(ErrorKind::shape, std::string(op) + ": " + name + " shape " + to_string(p.shape()) +
                                      " does not match normalized_shape " + to_string(normalized_shape));
}

// eps keeps 1 / sqrt(var + eps) finite. A NaN eps gives NaN everywhere, a negative one NaN in
// every row whose variance is below -eps (PyTorch takes both and returns those NaNs), an infinite
// one zeroes every row: refused. 0 is allowed, as in PyTorch (a constant row then gives
// 0 * inf = NaN, as there).
void check_eps(const char* name, double eps) {
  if (!(eps >= 0 && std::isfinite(eps))) throw Error::bad_value(name, "eps", eps, "finite and >= 0");
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  BRRR_AUTOCAST(fp32, layer_norm, x, normalized_shape, weight, bias, eps);
  NvtxRange range(op);
  require_defined(op, x);
  Device dev = common_device(op, {x, weight, bias});
  require_floating(op, x);
  const std::size_t k = normalized_shape.size();
  if (k == 0)
    throw Error(ErrorKind::shape, std::string(op) + ": normalized_shape must have at least one dim, got [] for input " +
                                      describe(x));
  bool matches = x.shape().size() >= k;
  for (std::size_t i = 0; matches && i < k; ++i) matches = x.shape()[x.shape().size() - k + i] == normalized_shape[i];
  if (!matches)
    throw Error(ErrorKind::shape, std::string(op) + ": input shape " + to_string(x.shape()) +
                                      " does not end with normalized_shape " + to_string(normalized_shape) +
                                      " (expected input of shape [*, " + to_string(normalized_shape).substr(1) + ")");
  check_param(weight, "weight", normalized_shape);
  check_param(bias, "bias", normalized_shape);
  check_eps(op, eps);

  std::int64_t cols = 1;
  for (auto s : normalized_shape) cols *= s;
  std::int64_t rows = 1;
  for (std::size_t i = 0; i + k < x.shape().size(); ++i) rows *= x.shape()[i];

  const DType stat = compute_dtype(x.dtype());
  Tensor out, mu, rs;
  {
    NoGradGuard no_grad;
    Tensor xc = x.contiguous();
    // The kernel reads weight/bias in x's dtype (a bf16 input with f32 weights uses them
    // rounded to bf16); their gradients come back in their own dtypes.
    Tensor wc = weight.defined() ? as_dtype(weight, x.dtype()).contiguous() : Tensor();
    Tensor bc = bias.defined() ? as_dtype(bias, x.dtype()).contiguous() : Tensor();
    out = empty(x.shape(), {.dtype = x.dtype(), .device = dev});
    mu = empty({rows}, {.dtype = stat, .device = dev});
    rs = empty({rows}, {.dtype = stat, .device = dev});
    if (out.numel() > 0) {
      backend::Operand wo, bo;
      if (wc.defined()) wo = backend::input(wc.view({cols}), op);
      if (bc.defined()) bo = backend::input(bc.view({cols}), op);
      backend::backend_for(dev).layer_norm(backend::output(out.view({rows, cols}), op), backend::output(mu, op),
                                           backend::output(rs, op), backend::input(xc.view({rows, cols}), op),
                                           wc.defined() ? &wo : nullptr, bc.defined() ? &bo : nullptr, eps);
    } else if (rows > 0) {
      // cols == 0: the output is empty and nothing reads the statistics; zero them rather
      // than leave uninitialised memory behind.
      mu.fill_(0.0);
      rs.fill_(0.0);
    }
  }
  if (autograd::any_requires_grad({x, weight, bias})) {
    LayerNormInputs in{normalized_shape, x.shape(), x.dtype(), weight.defined() ? weight.dtype() : x.dtype(),
                       bias.defined() ? bias.dtype() : x.dtype(), rows, cols, eps};
    autograd::record("LayerNormBackward", {x, weight, bias}, {out}, {x, weight, mu, rs},
                     [in = std::move(in)](const autograd::Backward& c) {
                       // Grad mode is on in backward only under create_graph.
                       if (!autograd::is_grad_enabled())
                         return layer_norm_kernel_rule(c, in, c.saved(0), c.saved(1), c.saved(2), c.saved(3));
                       return layer_norm_graph_rule(c, in, c.saved(0), c.saved(1));
                     });
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// dropout_add_layer_norm
// ---------------------------------------------------------------------------------------

namespace {

constexpr const char* fused_op = "dropout_add_layer_norm";

// The composite (any device, shape or dtype; and create_graph's backward): the same values.
std::pair<Tensor, Tensor> dropout_add_layer_norm_composite(const Tensor& x0, const Tensor& residual,
                                                           const Tensor& weight, const Tensor& bias, double p,
                                                           double eps, bool training) {
  Tensor t = dropout(x0, p, training);
  Tensor s = residual.defined() ? add(residual, t) : t;
  Tensor out = layer_norm(s, {s.size(-1)}, weight, bias, eps);
  return {as_dtype(out, x0.dtype()), s};
}

// Whether the backend's fused kernels take these operands (else the composite): the contract's
// dtypes, and on CUDA its rows (the CPU takes any).
bool fused_supported(Device dev, const Tensor& x0, DType sum_dtype, std::int64_t cols) {
  const bool dtypes = sum_dtype == x0.dtype() ||
                      (sum_dtype == DType::f32 && (x0.dtype() == DType::bf16 || x0.dtype() == DType::f16));
  return dtypes && (!dev.is_cuda() || (cols % 4 == 0 && cols <= (x0.dtype() == DType::f64 ? 512 : 1024)));
}

}  // namespace

std::pair<Tensor, Tensor> dropout_add_layer_norm(const Tensor& x0, const Tensor& residual, const Tensor& weight,
                                                 const Tensor& bias, double p, double eps, bool training) {
  NvtxRange range(fused_op);
  require_defined(fused_op, x0);
  const Device dev = common_device(fused_op, {x0, residual, weight, bias});
  require_floating(fused_op, x0);
  if (residual.defined()) {
    require_floating(fused_op, residual, "residual");
    if (residual.shape() != x0.shape())
      throw Error(ErrorKind::shape, std::string(fused_op) + ": residual shape " + to_string(residual.shape()) +
                                        " does not match x0 shape " + to_string(x0.shape()));
  }
  if (x0.dim() == 0)
    throw Error(ErrorKind::shape, std::string(fused_op) + ": expected x0 with at least one dim, got " + describe(x0));
  if (!(p >= 0.0 && p <= 1.0)) throw Error::bad_value(fused_op, "probability p", p, "in [0, 1]");
  check_eps(fused_op, eps);
  const std::int64_t cols = x0.size(-1);
  const Shape normalized{cols};
  if (weight.defined() && weight.shape() != normalized)
    throw Error(ErrorKind::shape, std::string(fused_op) + ": weight shape " + to_string(weight.shape()) +
                                      " does not match [" + std::to_string(cols) + "]");
  if (bias.defined() && bias.shape() != normalized)
    throw Error(ErrorKind::shape, std::string(fused_op) + ": bias shape " + to_string(bias.shape()) +
                                      " does not match [" + std::to_string(cols) + "]");
  if (weight.defined()) require_floating(fused_op, weight, "weight");
  if (bias.defined()) require_floating(fused_op, bias, "bias");

  const DType sum_dtype = residual.defined() ? promote_types(x0.dtype(), residual.dtype()) : x0.dtype();
  const bool drop = training && p > 0.0;
  if (p == 1.0 || x0.numel() == 0 || !fused_supported(dev, x0, sum_dtype, cols))
    return dropout_add_layer_norm_composite(x0, residual, weight, bias, p, eps, training);

  const std::int64_t rows = x0.numel() / cols;
  const DType stat = compute_dtype(sum_dtype);
  Tensor out, s, mask, mu, rs;
  backend::AttentionDropout d;
  {
    NoGradGuard no_grad;
    Tensor xc = x0.contiguous();
    Tensor rc = residual.defined() ? as_dtype(residual, sum_dtype).contiguous() : Tensor();
    Tensor wc = weight.defined() ? as_dtype(weight, sum_dtype).contiguous() : Tensor();
    Tensor bc = bias.defined() ? as_dtype(bias, sum_dtype).contiguous() : Tensor();
    out = empty(x0.shape(), {.dtype = x0.dtype(), .device = dev});
    s = empty(x0.shape(), {.dtype = sum_dtype, .device = dev});
    mu = empty({rows}, {.dtype = stat, .device = dev});
    rs = empty({rows}, {.dtype = stat, .device = dev});
    if (drop) {
      mask = empty(x0.shape(), {.dtype = DType::boolean, .device = dev});
      d = draw_dropout(p, x0.dtype(), dev, x0.numel());
    }
    backend::Operand ro, wo, bo, mo;
    if (rc.defined()) ro = backend::input(rc.view({rows, cols}), fused_op);
    if (wc.defined()) wo = backend::input(wc, fused_op);
    if (bc.defined()) bo = backend::input(bc, fused_op);
    if (drop) mo = backend::output(mask.view({rows, cols}), fused_op);
    backend::backend_for(dev).dropout_add_layer_norm(
        backend::output(out.view({rows, cols}), fused_op), backend::output(s.view({rows, cols}), fused_op),
        drop ? &mo : nullptr, backend::output(mu, fused_op), backend::output(rs, fused_op),
        backend::input(xc.view({rows, cols}), fused_op), rc.defined() ? &ro : nullptr, wc.defined() ? &wo : nullptr,
        bc.defined() ? &bo : nullptr, eps, d);
  }
  if (autograd::any_requires_grad({x0, residual, weight, bias})) {
    struct Meta {
      DType x0_dtype, res_dtype, w_dtype, b_dtype;
      std::int64_t rows, cols;
      double p;
      double eps;
    };
    Meta m{x0.dtype(), residual.defined() ? residual.dtype() : sum_dtype, weight.defined() ? weight.dtype() : sum_dtype,
           bias.defined() ? bias.dtype() : sum_dtype, rows, cols, drop ? p : 0.0, eps};
    autograd::record(
        "DropoutAddLayerNormBackward", {x0, residual, weight, bias}, {out, s}, {s, weight, mu, rs, mask},
        [m](const autograd::Backward& c) {
          const Tensor sv = c.saved(0), w = c.saved(1), mu_saved = c.saved(2), rs_saved = c.saved(3), mk = c.saved(4);
          const Device dev = sv.device();
          const DType dt = compute_dtype(sv.dtype());
          Tensor g_out = c.grad(0), g_sum = c.grad(1);
          if (autograd::is_grad_enabled()) {
            // create_graph: the same gradients as recorded ops (of the saved sum, the grads and w).
            const Shape rc{m.rows, m.cols};
            Tensor x = as_dtype(sv.reshape(rc), dt);
            Tensor dev_x = sub(x, mean(x, {1}, true));  // statistics recomputed, as layer_norm's graph rule
            Tensor rsr = rsqrt(add(mean(mul(dev_x, dev_x), {1}, true), m.eps));
            Tensor xhat = mul(dev_x, rsr);
            Tensor g = g_out.defined() ? as_dtype(g_out.reshape(rc), dt) : zeros(rc, {.dtype = dt, .device = dev});
            Tensor gw = w.defined() ? mul(g, as_dtype(w, dt).reshape({1, m.cols})) : g;
            Tensor ds = mul(rsr,
                            sub(sub(gw, mean(gw, {1}, true)), mul(xhat, mean(mul(gw, xhat), {1}, true))));
            ds = as_dtype(ds, sv.dtype());
            if (g_sum.defined()) ds = add(ds, as_dtype(g_sum.reshape(rc), sv.dtype()));
            Tensor dx0 = as_dtype(ds, m.x0_dtype);
            if (mk.defined()) dx0 = mul(dx0, mul(as_dtype(mk.reshape(rc), m.x0_dtype), 1.0 / (1.0 - m.p)));
            return autograd::Grads{c.needs(0) ? dx0.reshape(sv.shape()) : Tensor(),
                                   c.needs(1) ? as_dtype(ds, m.res_dtype).reshape(sv.shape()) : Tensor(),
                                   c.needs(2) ? as_dtype(sum(mul(g, xhat), {0}), m.w_dtype) : Tensor(),
                                   c.needs(3) ? as_dtype(sum(g, {0}), m.b_dtype) : Tensor()};
          }
          Tensor dx0, dres, dw, db;
          if (c.needs(0)) dx0 = empty(sv.shape(), {.dtype = m.x0_dtype, .device = dev});
          if (c.needs(1)) dres = empty(sv.shape(), {.dtype = sv.dtype(), .device = dev});
          if (c.needs(2)) dw = empty({m.cols}, {.dtype = dt, .device = dev});
          if (c.needs(3)) db = empty({m.cols}, {.dtype = dt, .device = dev});
          if (!g_out.defined()) {
            // Only the sum's gradient: the layer norm contributes nothing.
            NoGradGuard no_grad;
            g_out = zeros(sv.shape(), {.dtype = m.x0_dtype, .device = dev});
          }
          Tensor go = as_dtype(g_out, m.x0_dtype).contiguous();
          Tensor gs = g_sum.defined() ? as_dtype(g_sum, sv.dtype()).contiguous() : Tensor();
          Tensor wc = w.defined() ? as_dtype(w, dt).contiguous() : Tensor();
          const std::int64_t rows = m.rows, cols = m.cols;
          backend::Operand o0, orr, ow, ob, gso, wo, mo;
          if (dx0.defined()) o0 = backend::output(dx0.view({rows, cols}), fused_op);
          if (dres.defined()) orr = backend::output(dres.view({rows, cols}), fused_op);
          if (dw.defined()) ow = backend::output(dw, fused_op);
          if (db.defined()) ob = backend::output(db, fused_op);
          if (gs.defined()) gso = backend::input(gs.view({rows, cols}), fused_op);
          if (wc.defined()) wo = backend::input(wc, fused_op);
          if (mk.defined()) mo = backend::input(mk.view({rows, cols}), fused_op);
          backend::backend_for(dev).dropout_add_layer_norm_backward(
              dx0.defined() ? &o0 : nullptr, dres.defined() ? &orr : nullptr, dw.defined() ? &ow : nullptr,
              db.defined() ? &ob : nullptr, backend::input(go.view({rows, cols}), fused_op),
              gs.defined() ? &gso : nullptr, backend::input(sv.view({rows, cols}), fused_op),
              backend::input(mu_saved, fused_op), backend::input(rs_saved, fused_op), wc.defined() ? &wo : nullptr,
              mk.defined() ? &mo : nullptr, m.p);
          if (dres.defined()) dres = as_dtype(dres, m.res_dtype);
          if (dw.defined()) dw = as_dtype(dw, m.w_dtype);
          if (db.defined()) db = as_dtype(db, m.b_dtype);
          return autograd::Grads{dx0, dres, dw, db};
        });
  }
  return {out, s};
}

}  // namespace brrr
