// Scans along one dim: cumsum, cumprod, cummax, cummin, logcumsumexp. Forward: the dim moved
// last (a transposed copy only when it is not already contiguous there), one backend scan over
// [rows, n], the result transposed back (a view). Backward rules are Tensor ops (so
// create_graph works); each cites its formula. Also flip (the reversal the backward rules use).
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/contract.hpp"
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;
using backend::ScanOp;
using autograd::Backward;
using autograd::Grads;

namespace {

// The scan of x (already of the output dtype) along d, never recorded; indices (i64, x's
// shape) for cummax/cummin.
Tensor scan_forward(ScanOp op, const Tensor& x, std::int64_t d, Tensor* indices) {
  const char* name = backend::name_of(op);
  NoGradGuard no_grad;
  if (x.dim() == 0) {
    Tensor r = scan_forward(op, x.reshape({1}), 0, indices);
    if (indices) *indices = indices->view({});
    return r.view({});
  }
  const std::int64_t last = x.dim() - 1;
  Tensor moved = (d == last ? x : x.transpose(d, last)).contiguous();
  Tensor out = empty(moved.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor idx;
  if (indices) idx = empty(moved.shape(), {.dtype = DType::i64, .device = x.device()});
  if (out.numel() > 0) {
    backend::Operand io;
    if (indices) io = backend::output(idx, name);
    backend::backend_for(x.device()).scan(op, backend::output(out, name), backend::input(moved, name),
                                          indices ? &io : nullptr);
  }
  if (indices) *indices = d == last ? idx : idx.transpose(d, last);
  return d == last ? out : out.transpose(d, last);
}

// sum_{j >= i} g_j along d.
Tensor reverse_cumsum(const Tensor& g, std::int64_t d) { return flip(cumsum(flip(g, {d}), d), {d}); }

// log sum_{j >= i} e^{x_j} along d.
Tensor reverse_logcumsumexp(const Tensor& x, std::int64_t d) { return flip(logcumsumexp(flip(x, {d}), d), {d}); }

}  // namespace

Tensor flip(const Tensor& x, std::vector<std::int64_t> dims) {
  NvtxRange range("flip");
  require_defined("flip", x);
  const std::uint32_t mask = dims_mask("flip", dims.empty() ? std::vector<std::int64_t>{} : dims, x.shape());
  if (dims.empty()) return x.clone();  // PyTorch: flip(x, []) is a copy
  Tensor r = x;
  for (std::int64_t d = 0; d < x.dim(); ++d) {
    if (!(mask & (1u << d)) || x.size(d) <= 1) continue;
    const std::int64_t n = x.size(d);
    r = index_select(r, d, arange(static_cast<double>(n - 1), -1.0, -1.0, {.dtype = DType::i64, .device = x.device()}));
  }
  return r.is_same(x) ? x.clone() : r;
}

Tensor cumsum(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, cumsum, x, dim, dtype);
  NvtxRange range("cumsum");
  require_defined("cumsum", x);
  const std::int64_t d = wrap_dim("cumsum", dim, x.dim(), x.shape());
  const DType out_dtype = dtype ? *dtype : is_floating_point(x.dtype()) ? x.dtype() : DType::i64;  // PyTorch: ints -> i64
  Tensor cx = x.dtype() == out_dtype ? x : x.to(out_dtype);  // differentiable conversion
  Tensor out = scan_forward(ScanOp::cumsum, cx, d, nullptr);
  if (autograd::any_requires_grad({cx}) && is_floating_point(out_dtype))
    autograd::record("CumsumBackward", {cx}, {out}, [d](const Backward& b) {
      return Grads{reverse_cumsum(b.grad(), b.grad().dim() == 0 ? 0 : d)};
    });
  return out;
}

Tensor cumprod(const Tensor& x, std::int64_t dim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, cumprod, x, dim, dtype);
  NvtxRange range("cumprod");
  require_defined("cumprod", x);
  const std::int64_t d = wrap_dim("cumprod", dim, x.dim(), x.shape());
  const DType out_dtype = dtype ? *dtype : is_floating_point(x.dtype()) ? x.dtype() : DType::i64;
  Tensor cx = x.dtype() == out_dtype ? x : x.to(out_dtype);
  Tensor out = scan_forward(ScanOp::cumprod, cx, d, nullptr);
  if (autograd::any_requires_grad({cx}) && is_floating_point(out_dtype))
    // y_j = prod_{k <= j} x_k, exact with zeros (z = the first zero of the line):
    //   i < z: sum_{j >= i} g_j y_j / x_i;  i = z: sum_{j >= z} g_j y'_j with y' the cumprod
    //   of x with x_z replaced by 1;  i > z: 0. Differentiating this again is exact where x
    //   holds no zero (at a zero the cross terms of the entries after it are missing).
    autograd::record("CumprodBackward", {cx}, {out}, {cx, out}, [d](const Backward& b) {
      const Tensor &x = b.saved(0), &y = b.saved(1), &g = b.grad();
      const std::int64_t dd = x.dim() == 0 ? 0 : d;
      Tensor is_zero = eq(x, 0.0);
      Tensor zeros_so_far = cumsum(is_zero, dd);
      Tensor before = eq(zeros_so_far, 0);
      Tensor first_zero = logical_and(is_zero, eq(zeros_so_far, 1));
      Tensor zero = zeros_like(g);
      Tensor grad_before = div(reverse_cumsum(mul(g, y), dd), where(before, x, ones_like(x)));
      Tensor y_skip = cumprod(where(first_zero, ones_like(x), x), dd);
      Tensor grad_at_zero = reverse_cumsum(where(before, zero, mul(g, y_skip)), dd);
      return Grads{where(before, grad_before, where(first_zero, grad_at_zero, zero))};
    });
  return out;
}

namespace {
ValuesIndices running_extreme(ScanOp op, const Tensor& x, std::int64_t dim) {
  const char* name = backend::name_of(op);
  require_defined(name, x);
  const std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  Tensor idx;
  Tensor out = scan_forward(op, x, d, &idx);
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype()))
    // The gradient goes to the element each output copied (its index).
    autograd::record(op == ScanOp::cummax ? "CummaxBackward" : "CumminBackward", {x}, {out}, {idx},
                     [d, shape = x.shape()](const Backward& b) {
                       if (shape.empty()) return Grads{b.grad()};
                       return Grads{scatter_add(zeros_like(b.grad()), d, b.saved(0), b.grad())};
                     });
  return {out, idx};
}
}  // namespace

ValuesIndices cummax(const Tensor& x, std::int64_t dim) {
  NvtxRange range("cummax");
  return running_extreme(ScanOp::cummax, x, dim);
}
ValuesIndices cummin(const Tensor& x, std::int64_t dim) {
  NvtxRange range("cummin");
  return running_extreme(ScanOp::cummin, x, dim);
}

Tensor logcumsumexp(const Tensor& x, std::int64_t dim) {
  NvtxRange range("logcumsumexp");
  require_defined("logcumsumexp", x);
  require_floating("logcumsumexp", x);
  const std::int64_t d = wrap_dim("logcumsumexp", dim, x.dim(), x.shape());
  Tensor out = scan_forward(ScanOp::logcumsumexp, x, d, nullptr);
  if (autograd::any_requires_grad({x}))
    // dx_i = sum_{j >= i} g_j e^{x_i - y_j}, computed in log space for the positive and the
    // negative parts of g separately (so nothing overflows; TensorFlow's and PyTorch's form).
    autograd::record("LogcumsumexpBackward", {x}, {out}, {x, out}, [d](const Backward& b) {
      const Tensor &x = b.saved(0), &y = b.saved(1), &g = b.grad();
      const std::int64_t dd = x.dim() == 0 ? 0 : d;
      const double ninf = -std::numeric_limits<double>::infinity();
      Tensor lpos = where(gt(g, 0.0), log(abs(g)), full_like(g, ninf));
      Tensor lneg = where(lt(g, 0.0), log(abs(g)), full_like(g, ninf));
      Tensor pos = exp(add(reverse_logcumsumexp(sub(lpos, y), dd), x));
      Tensor neg_part = exp(add(reverse_logcumsumexp(sub(lneg, y), dd), x));
      return Grads{sub(pos, neg_part)};
    });
  return out;
}

}  // namespace brrr
