// layer_norm (Ba, Kiros & Hinton 2016, "Layer Normalization") over the trailing
// normalized_shape dims. Forward: the input is flattened to contiguous [rows, cols] and one
// fused row kernel writes the output and each row's mean and rstd = 1 / sqrt(var + eps)
// (biased variance). Backward: Tensor ops on the saved mean/rstd, in f32 for bf16/f16
// (f64 for f64). Under create_graph the statistics are recomputed from x with Tensor ops
// instead, so that second derivatives see their dependence on x.
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

constexpr const char* op = "layer_norm";

Tensor as_dtype(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : t.to(dtype); }

// Statistics and backward arithmetic: f64 for f64 inputs, f32 for f32/bf16/f16.
DType compute_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// With x_hat = (x - mean) * rstd and gw = g * w (g when there is no weight), per row:
//   dx = rstd * (gw - mean(gw) - x_hat * mean(gw * x_hat))
//   dw = sum over rows of g * x_hat,  db = sum over rows of g.
class LayerNormBackward final : public autograd::Node {
public:
  LayerNormBackward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& mean, const Tensor& rstd,
                    Shape normalized_shape, std::int64_t rows, std::int64_t cols, double eps)
      : x_(x), weight_(weight), mean_(mean), rstd_(rstd), normalized_shape_(std::move(normalized_shape)),
        x_shape_(x.shape()), x_dtype_(x.dtype()), w_dtype_(weight.defined() ? weight.dtype() : x.dtype()),
        b_dtype_(bias.defined() ? bias.dtype() : x.dtype()), rows_(rows), cols_(cols), eps_(eps) {}

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    const DType c = compute_dtype(x_dtype_);
    Tensor g = as_dtype(grads[0].reshape({rows_, cols_}), c);
    Tensor x = as_dtype(x_.unpack(*this).reshape({rows_, cols_}), c);
    Tensor w = weight_.unpack(*this);
    Tensor mu, rs;
    if (autograd::is_grad_enabled()) {
      // create_graph: statistics as functions of x, so the graph of dx is complete.
      mu = mean(x, {1}, true);
      Tensor d = sub(x, mu);
      rs = rsqrt(add(mean(mul(d, d), {1}, true), eps_));
    } else {
      mu = as_dtype(mean_.unpack(*this), c).view({rows_, 1});
      rs = as_dtype(rstd_.unpack(*this), c).view({rows_, 1});
    }
    Tensor xhat = mul(sub(x, mu), rs);
    Tensor dx, dw, db;
    if (next_edges[0].defined()) {
      Tensor gw = w.defined() ? mul(g, as_dtype(w, c).reshape({1, cols_})) : g;
      Tensor inner = sub(sub(gw, mean(gw, {1}, true)), mul(xhat, mean(mul(gw, xhat), {1}, true)));
      dx = as_dtype(mul(rs, inner).reshape(x_shape_), x_dtype_);
    }
    if (next_edges.size() > 1 && next_edges[1].defined())
      dw = as_dtype(sum(mul(g, xhat), {0}).reshape(normalized_shape_), w_dtype_);
    if (next_edges.size() > 2 && next_edges[2].defined())
      db = as_dtype(sum(g, {0}).reshape(normalized_shape_), b_dtype_);
    return {dx, dw, db};
  }
  std::string name() const override { return "LayerNormBackward"; }
  void release_saved() override { x_.reset(), weight_.reset(), mean_.reset(), rstd_.reset(); }

private:
  autograd::SavedTensor x_, weight_, mean_, rstd_;
  Shape normalized_shape_, x_shape_;
  DType x_dtype_, w_dtype_, b_dtype_;
  std::int64_t rows_, cols_;
  double eps_;
};

void check_param(const Tensor& p, const char* name, const Shape& normalized_shape) {
  if (!p.defined()) return;
  if (!is_floating_point(p.dtype()))
    throw Error(ErrorKind::dtype, std::string(op) + ": " + name + " must be floating-point, got " + describe(p));
  if (p.shape() != normalized_shape)
    throw Error(ErrorKind::shape, std::string(op) + ": " + name + " shape " + to_string(p.shape()) +
                                      " does not match normalized_shape " + to_string(normalized_shape));
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  NvtxRange range(op);
  require_defined(op, x);
  Device dev = common_device(op, {x, weight, bias});
  if (!is_floating_point(x.dtype()))
    throw Error(ErrorKind::dtype,
                std::string(op) + ": expected a floating-point input (f32, f64, bf16, f16), got " + describe(x));
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
      if (wc.defined()) wo = backend::operand(wc.view({cols}), op);
      if (bc.defined()) bo = backend::operand(bc.view({cols}), op);
      backend::backend_for(dev).layer_norm(backend::operand(out.view({rows, cols}), op), backend::operand(mu, op),
                                           backend::operand(rs, op), backend::operand(xc.view({rows, cols}), op),
                                           wc.defined() ? &wo : nullptr, bc.defined() ? &bo : nullptr, eps);
    } else if (rows > 0) {
      // cols == 0: the output is empty and nothing reads the statistics; zero them rather
      // than leave uninitialised memory behind.
      mu.fill_(0.0);
      rs.fill_(0.0);
    }
  }
  if (!autograd::any_requires_grad({x, weight, bias})) return out;
  auto node = std::make_shared<LayerNormBackward>(x, weight, bias, mu, rs, normalized_shape, rows, cols, eps);
  autograd::connect(node, {x, weight, bias}, {out});
  return out;
}

}  // namespace brrr
