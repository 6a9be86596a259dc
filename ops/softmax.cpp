// softmax and log_softmax along any dim. The dim is moved last (a transpose, copied to
// contiguous only when it is not already), one fused row kernel runs over [rows, cols], and
// the result is moved back (a transposed view when dim was not last). Backward rules are
// Tensor ops on the saved output, so create_graph gives higher-order gradients.
module;
#include <cstdint>
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

const char* op_name(bool log) { return log ? "log_softmax" : "softmax"; }

// The forward pass, never recorded. `dim` is already wrapped.
Tensor rows_forward(const Tensor& x, std::int64_t dim, bool log) {
  const char* name = op_name(log);
  if (x.dim() == 0) return rows_forward(x.reshape({1}), 0, log).reshape({});
  const std::int64_t last = x.dim() - 1;
  Tensor moved = dim == last ? x : x.transpose(dim, last);
  Tensor xc = moved.contiguous();
  Tensor out = empty(xc.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    const std::int64_t cols = xc.size(-1), rows = xc.numel() / cols;
    backend::backend_for(x.device())
        .softmax(backend::output(out.view({rows, cols}), name), backend::input(xc.view({rows, cols}), name), log);
  }
  return dim == last ? out : out.transpose(dim, last);
}

// softmax:     dx = y * (g - sum(g * y, dim))
// log_softmax: dx = g - exp(y) * sum(g, dim)
// (the Jacobians of y = e^x / sum e^x and y = x - log sum e^x).
Tensor softmax_rule(const Tensor& g, const Tensor& y, std::int64_t dim, bool log) {
  std::vector<std::int64_t> dims;
  if (y.dim() > 0) dims.push_back(dim);
  if (log) return sub(g, mul(exp(y), sum(g, dims, true)));
  return mul(y, sub(g, sum(mul(g, y), dims, true)));
}

Tensor softmax_op(const Tensor& x, std::int64_t dim, bool log) {
  const char* name = op_name(log);
  NvtxRange range(name);
  require_defined(name, x);
  require_floating(name, x, "tensor");
  const std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = rows_forward(x, d, log);
  }
  if (autograd::any_requires_grad({x}))
    autograd::record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, {out}, {out},
                     [d, log](const autograd::Backward& c) {
                       return autograd::Grads{softmax_rule(c.grad(), c.saved(0), d, log)};
                     });
  return out;
}

}  // namespace

namespace {
Tensor in_dtype(const char* op, const Tensor& x, std::optional<DType> dtype) {
  if (!dtype) return x;
  if (!is_floating_point(*dtype)) throw Error(ErrorKind::dtype, std::string(op) + ": dtype must be floating, got " + to_string(*dtype));
  require_defined(op, x);
  return x.dtype() == *dtype ? x : x.to(*dtype);
}
}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, softmax, x, dim, dtype);
  return softmax_op(in_dtype("softmax", x, dtype), dim, false);
}
Tensor log_softmax(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, log_softmax, x, dim, dtype);
  return softmax_op(in_dtype("log_softmax", x, dtype), dim, true);
}

}  // namespace brrr
