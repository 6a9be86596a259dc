// Reductions: sum, mean, max/min (all elements, along a dim with indices, amax/amin over
// dims), argmax/argmin, var, std, logsumexp. (sum_to_size, expand's adjoint, is in tensor/views.cpp.)
// Forward: one backend reduce over a dims bitmask into a keepdim-shaped output (the
// reduced dims dropped afterwards by a view). Backward: Tensor ops (so create_graph works):
// sum expands the gradient back; mean divides it by N; max/min along a dim send it to the
// returned index; full max/min and amax/amin share it evenly among ties; where the result is
// NaN, full max/min share it among the NaNs and amax/amin give the whole reduced row NaN
// (PyTorch's amax_backward: no element equals NaN, so it divides by a count of 0); var has its own node (PyTorch's var_backward, also at N <= correction).
// std and logsumexp are compositions of the above with the elementwise ops, so their
// backward rules come for free.
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;
using backend::ReduceOp;

namespace {

std::vector<std::int64_t> dims_of(std::uint32_t mask, std::int64_t ndim) {
  std::vector<std::int64_t> dims;
  for (std::int64_t d = 0; d < ndim; ++d)
    if (mask & (1u << d)) dims.push_back(d);
  return dims;
}

// Number of elements reduced into each output element.
std::int64_t reduced_count(const Shape& shape, std::uint32_t mask) {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (mask & (1u << d)) n *= shape[d];
  return n;
}

// The keepdim-shaped result of reducing `x` over `mask`, never recorded. `out_dtype` is the
// output's dtype (for sum of bf16/f16 also f32: the accumulator, used by mean).
Tensor reduce_forward(const char* name, ReduceOp op, const Tensor& x, std::uint32_t mask, DType out_dtype,
                      Tensor* indices = nullptr) {
  NoGradGuard no_grad;
  Shape kshape = reduced_shape(x.shape(), mask, true);
  Tensor out = empty(kshape, {.dtype = out_dtype, .device = x.device()});
  if (indices) *indices = empty(kshape, {.dtype = DType::i64, .device = x.device()});
  if (out.numel() == 0) return out;
  backend::Operand idx;
  if (indices) idx = backend::output(*indices, name);
  backend::backend_for(x.device()).reduce(op, backend::output(out, name), backend::input(x, name), mask,
                                          indices ? &idx : nullptr);
  return out;
}

// Drops the reduced dims of a keepdim-shaped result (a view), unless keepdim.
Tensor finish(const Tensor& kept, const Shape& in_shape, std::uint32_t mask, bool keepdim) {
  if (keepdim) return kept;
  NoGradGuard no_grad;
  return kept.view(reduced_shape(in_shape, mask, false));
}

DType sum_dtype(DType in) { return is_floating_point(in) ? in : DType::i64; }

// "maxBackward", ...: the node names of the public ops.
const char* backward_name(const char* op) {
  const std::string_view n = op;
  if (n == "max") return "maxBackward";
  if (n == "min") return "minBackward";
  if (n == "amax") return "amaxBackward";
  if (n == "amin") return "aminBackward";
  return "extremeBackward";  // argmax/argmin record nothing
}

// Max/min need at least one element in every reduction.
void require_nonempty(const char* name, const Tensor& x, std::uint32_t mask) {
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if ((mask & (1u << d)) && x.shape()[static_cast<std::size_t>(d)] == 0)
      throw Error(ErrorKind::value, std::string(name) + ": cannot reduce over dim " + std::to_string(d) +
                                        " of size 0 (shape " + to_string(x.shape()) +
                                        "): the extreme of zero elements is undefined");
}

// --- backward rules ------------------------------------------------------------------------

using autograd::Backward;
using autograd::Grads;

// sum (mean: scaled by 1 / N): the gradient, unsqueezed back to the input's rank, expanded
// to its shape.
void record_sum(const char* name, const Tensor& x, const Tensor& out, std::uint32_t mask, bool keepdim, double n) {
  autograd::record(name, {x}, {out}, [shape = x.shape(), mask, keepdim, n](const Backward& b) {
    Tensor gk = n != 1 ? div(b.grad(), n) : b.grad();
    return Grads{unsqueeze_reduced(gk, mask, static_cast<std::int64_t>(shape.size()), keepdim).expand(shape)};
  });
}

// max()/min()/amax/amin: the gradient is shared evenly by the elements equal to the result.
// A NaN result: max()/min() (nan_to_nans) share it among the NaNs; amax/amin find no equal
// element, and 0 * (g / 0) makes the whole reduced row NaN, as PyTorch.
void record_extreme(const char* name, const Tensor& x, const Tensor& kept, const Tensor& out, std::uint32_t mask,
                    bool keepdim, bool nan_to_nans) {
  autograd::record(name, {x}, {out}, {x, kept}, [mask, keepdim, nan_to_nans](const Backward& b) {
    Tensor x = b.saved(0), r = b.saved(1);
    const std::int64_t nd = x.dim();
    Tensor gk = unsqueeze_reduced(b.grad(), mask, nd, keepdim);
    Tensor hit = nan_to_nans ? where(ne(r, r), ne(x, x), eq(x, r)) : eq(x, r);  // r NaN ? x NaN : x == r
    Tensor count = sum(hit, dims_of(mask, nd), true).to(gk.dtype());
    return Grads{mul(hit.to(gk.dtype()), div(gk, count))};
  });
}

// max/min along a dim: the gradient goes to the returned index only.
void record_indexed_extreme(const char* name, const Tensor& x, const Tensor& indices_kept, const Tensor& values,
                            std::int64_t dim, bool keepdim) {
  autograd::record(name, {x}, {values}, {indices_kept}, [shape = x.shape(), dim, keepdim](const Backward& b) {
    if (shape.empty()) return Grads{b.grad()};  // a 0-d input is its own max
    Tensor idx = b.saved(0);
    Tensor gk = keepdim ? b.grad() : b.grad().unsqueeze(dim);
    Shape line(shape.size(), 1);
    line[static_cast<std::size_t>(dim)] = shape[static_cast<std::size_t>(dim)];
    Tensor positions = arange(line[static_cast<std::size_t>(dim)], {.dtype = DType::i64, .device = gk.device()});
    Tensor chosen = eq(positions.view(line), idx);  // broadcasts to the input's shape
    return Grads{where(chosen, gk, 0.0).expand(shape)};
  });
}

// var: PyTorch's var_backward. dof = N - correction. dof > 0: 2 / dof * g * (x - mean).
// dof <= 0 over all dims: g * (x == mean ? NaN : inf). dof <= 0 over given dims: the same
// formula with 2 / dof (inf for dof = 0, negative for dof < 0), as PyTorch computes it.
void record_var(const Tensor& x, const Tensor& out, std::uint32_t mask, bool keepdim, double dof, bool all_dims) {
  autograd::record("VarBackward", {x}, {out}, {x}, [mask, keepdim, dof, all_dims](const Backward& b) {
    Tensor x = b.saved(0);
    const std::int64_t nd = x.dim();
    Tensor gk = unsqueeze_reduced(b.grad(), mask, nd, keepdim);
    Tensor m = mean(x, dims_of(mask, nd), true);
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (all_dims && dof <= 0)
      return Grads{mul(gk, where(eq(x, m), full_like(x, std::numeric_limits<double>::quiet_NaN()), inf))};
    const double factor = dof == 0 ? inf : 2.0 / dof;
    return Grads{mul(mul(gk, sub(x, m)), factor)};
  });
}

// --- ops -------------------------------------------------------------------------------------

Tensor sum_mask(const char* name, const Tensor& x, std::uint32_t mask, bool keepdim) {
  Tensor kept = reduce_forward(name, ReduceOp::sum, x, mask, sum_dtype(x.dtype()));
  Tensor out = finish(kept, x.shape(), mask, keepdim);
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype())) record_sum("SumBackward", x, out, mask, keepdim, 1.0);
  return out;
}

// amax/amin/max()/min(): values only, ties share the gradient.
Tensor extreme(const char* name, ReduceOp op, const Tensor& x, std::uint32_t mask, bool keepdim) {
  require_nonempty(name, x, mask);
  Tensor kept = reduce_forward(name, op, x, mask, x.dtype());
  Tensor out = finish(kept, x.shape(), mask, keepdim);
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype()))
    record_extreme(backward_name(name), x, kept, out, mask, keepdim,
                   std::string_view(name) == "max" || std::string_view(name) == "min");
  return out;
}

ValuesIndices extreme_dim(const char* name, ReduceOp op, const Tensor& x, std::int64_t dim, bool keepdim) {
  require_defined(name, x);
  std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  // A 0-d input is treated as [1] (its one element, index 0); the result is 0-d again.
  Tensor xx = x;
  if (x.dim() == 0) {
    NoGradGuard no_grad;
    xx = x.reshape({1});
  }
  std::uint32_t mask = 1u << d;
  require_nonempty(name, xx, mask);
  Tensor idx;
  Tensor kept = reduce_forward(name, op, xx, mask, x.dtype(), &idx);
  ValuesIndices r;
  if (x.dim() == 0) {
    NoGradGuard no_grad;
    r = {kept.view({}), idx.view({})};
  } else {
    r = {finish(kept, x.shape(), mask, keepdim), finish(idx, x.shape(), mask, keepdim)};
  }
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype()))
    record_indexed_extreme(backward_name(name), x, idx, r.values, d, keepdim);
  return r;
}

Tensor arg_all(const char* name, ReduceOp op, const Tensor& x) {
  require_defined(name, x);
  if (x.numel() == 0)
    throw Error(ErrorKind::value, std::string(name) + ": cannot reduce the empty tensor " + describe(x) +
                                      ": the extreme of zero elements is undefined");
  NoGradGuard no_grad;
  Tensor flat = x.reshape({-1});
  Tensor idx;
  (void)reduce_forward(name, op, flat, 1u, x.dtype(), &idx);
  return idx.view({});
}

}  // namespace

Tensor sum(const Tensor& x, DimList dims, bool keepdim, std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, sum, x, dims, keepdim, dtype);
  NvtxRange range("sum");
  require_defined("sum", x);
  if (dtype) {  // integers sum in i64 and are then narrowed to dtype (PyTorch: the sum wraps likewise)
    Tensor r = sum(x.dtype() == *dtype ? x : x.to(*dtype), std::move(dims), keepdim);
    return r.dtype() == *dtype ? r : r.to(*dtype);
  }
  return sum_mask("sum", x, dims_mask("sum", dims, x.shape()), keepdim);
}

Tensor mean(const Tensor& x, DimList dims, bool keepdim, std::optional<DType> dtype) {
  NvtxRange range("mean");
  require_defined("mean", x);
  if (dtype && *dtype != x.dtype()) {
    if (!is_floating_point(*dtype)) throw Error(ErrorKind::dtype, std::string("mean: dtype must be floating, got ") + to_string(*dtype));
    return mean(x.to(*dtype), std::move(dims), keepdim);
  }
  if (!is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("mean", "expected a floating-point input", x, "convert first, e.g. x.to(DType::f32)");
  std::uint32_t mask = dims_mask("mean", dims, x.shape());
  double n = static_cast<double>(reduced_count(x.shape(), mask));
  Tensor out;
  {
    NoGradGuard no_grad;
    // bf16/f16: accumulate and divide in f32, round once.
    bool half_like = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
    Tensor s = reduce_forward("mean", ReduceOp::sum, x, mask, half_like ? DType::f32 : x.dtype());
    Tensor m = div(s, n);  // n == 0: 0 / 0 = NaN (PyTorch)
    if (half_like) m = m.to(x.dtype());
    out = finish(m, x.shape(), mask, keepdim);
  }
  if (autograd::any_requires_grad({x})) record_sum("MeanBackward", x, out, mask, keepdim, n);
  return out;
}

Tensor max(const Tensor& x) {
  NvtxRange range("max");
  require_defined("max", x);
  return extreme("max", ReduceOp::max, x, dims_mask("max", {}, x.shape()), false);
}

Tensor min(const Tensor& x) {
  NvtxRange range("min");
  require_defined("min", x);
  return extreme("min", ReduceOp::min, x, dims_mask("min", {}, x.shape()), false);
}

Tensor amax(const Tensor& x, DimList dims, bool keepdim) {
  NvtxRange range("amax");
  require_defined("amax", x);
  return extreme("amax", ReduceOp::max, x, dims_mask("amax", dims, x.shape()), keepdim);
}

Tensor amin(const Tensor& x, DimList dims, bool keepdim) {
  NvtxRange range("amin");
  require_defined("amin", x);
  return extreme("amin", ReduceOp::min, x, dims_mask("amin", dims, x.shape()), keepdim);
}

ValuesIndices max(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("max");
  return extreme_dim("max", ReduceOp::max, x, dim, keepdim);
}

ValuesIndices min(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("min");
  return extreme_dim("min", ReduceOp::min, x, dim, keepdim);
}

Tensor argmax(const Tensor& x) {
  NvtxRange range("argmax"); return arg_all("argmax", ReduceOp::max, x); }
Tensor argmin(const Tensor& x) {
  NvtxRange range("argmin"); return arg_all("argmin", ReduceOp::min, x); }

Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("argmax");
  NoGradGuard no_grad;
  return extreme_dim("argmax", ReduceOp::max, x, dim, keepdim).indices;
}

Tensor argmin(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("argmin");
  NoGradGuard no_grad;
  return extreme_dim("argmin", ReduceOp::min, x, dim, keepdim).indices;
}

Tensor var(const Tensor& x, DimList dims, double correction, bool keepdim) {
  NvtxRange range("var");
  require_defined("var", x);
  require_floating("var", x);
  if (!std::isfinite(correction)) throw Error::bad_value("var", "correction", correction, "finite");
  std::uint32_t mask = dims_mask("var", dims, x.shape());
  if (x.dtype() == DType::bf16 || x.dtype() == DType::f16)  // in f32, rounded once (to() is differentiable)
    return var(x.to(DType::f32), std::move(dims), correction, keepdim).to(x.dtype());
  std::vector<std::int64_t> rdims = dims_of(mask, x.dim());
  const double dof = static_cast<double>(reduced_count(x.shape(), mask)) - correction;
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor centered = sub(x, mean(x, rdims, true));
    // PyTorch divides by max(0, dof): a zero divisor gives NaN for a zero sum of squares
    // (one element, or all equal) and inf otherwise.
    out = div(sum(mul(centered, centered), rdims, keepdim), dof > 0 ? dof : 0.0);
  }
  if (autograd::any_requires_grad({x})) record_var(x, out, mask, keepdim, dof, dims.empty() || x.dim() == 0);
  return out;
}

Tensor std(const Tensor& x, DimList dims, double correction, bool keepdim) {
  NvtxRange range("std");
  require_defined("std", x);
  require_floating("std", x);
  // Where the variance is 0 the gradient is 0 (PyTorch's std_backward), not 0 * 1/(2*0) = NaN:
  // the sqrt sees 1 there (mask the input) and the result is put back to 0.
  Tensor v = var(x, std::move(dims), correction, keepdim);
  Tensor zero = eq(v, 0.0);
  return where(zero, zeros_like(v), sqrt(where(zero, ones_like(v), v)));
}

namespace {
// all/any: min/max of x != 0 as bool (one reduce kernel, plus the comparison unless x is
// bool). Reducing zero elements gives the identity: true for all, false for any.
Tensor all_any(const char* name, ReduceOp op, const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  require_defined(name, x);
  std::uint32_t mask = dims_mask(name, dims, x.shape());
  NoGradGuard no_grad;
  if (reduced_count(x.shape(), mask) == 0 || x.numel() == 0)
    return full(reduced_shape(x.shape(), mask, keepdim), op == ReduceOp::min ? 1.0 : 0.0,
                {.dtype = DType::boolean, .device = x.device()});
  Tensor b = x.dtype() == DType::boolean ? x : ne(x, 0);
  return finish(reduce_forward(name, op, b, mask, DType::boolean), x.shape(), mask, keepdim);
}
}  // namespace

Tensor all(const Tensor& x) {
  NvtxRange range("all");
  return all_any("all", ReduceOp::min, x, {}, false);
}
Tensor all(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  NvtxRange range("all");
  return all_any("all", ReduceOp::min, x, dims, keepdim);
}
Tensor any(const Tensor& x) {
  NvtxRange range("any");
  return all_any("any", ReduceOp::max, x, {}, false);
}
Tensor any(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim) {
  NvtxRange range("any");
  return all_any("any", ReduceOp::max, x, dims, keepdim);
}

Tensor vector_norm(const Tensor& x, double ord, std::vector<std::int64_t> dims, bool keepdim,
                   std::optional<DType> dtype) {
  BRRR_AUTOCAST_IF(!dtype, fp32, vector_norm, x, ord, dims, keepdim, dtype);
  constexpr const char* name = "vector_norm";
  NvtxRange range(name);
  require_defined(name, x);
  if (dtype) {
    if (!is_floating_point(*dtype)) throw Error(ErrorKind::dtype, std::string("vector_norm: dtype must be floating, got ") + to_string(*dtype));
    return vector_norm(x.to(*dtype), ord, std::move(dims), keepdim);
  }
  require_floating(name, x);
  if (std::isnan(ord)) throw Error::bad_value(name, "ord", ord, "a number or +-inf");
  std::uint32_t mask = dims_mask(name, dims, x.shape());
  std::vector<std::int64_t> rdims = dims_of(mask, x.dim());
  constexpr double inf = std::numeric_limits<double>::infinity();
  if (ord == inf || ord == -inf) {
    if (reduced_count(x.shape(), mask) == 0 && ord == inf)  // PyTorch: 0 for an empty inf-norm
      return zeros(reduced_shape(x.shape(), mask, keepdim), {.dtype = x.dtype(), .device = x.device()});
    return ord == inf ? amax(abs(x), rdims, keepdim) : amin(abs(x), rdims, keepdim);
  }
  if (ord == 0) {  // the count of non-zeros, not differentiable (gradient 0)
    Tensor n;
    {
      NoGradGuard no_grad;
      n = sum(ne(x, 0.0), rdims, keepdim).to(x.dtype());
    }
    return autograd::any_requires_grad({x}) ? add(n, mul(sum(x, rdims, keepdim), 0.0)) : n;
  }
  if (ord == 1) return sum(abs(x), rdims, keepdim);
  // (sum |x|^p)^(1/p), in f32 for bf16/f16. Gradient g x |x|^(p-2) / norm^(p-1), 0 where the
  // norm is 0 (PyTorch's norm_backward), instead of 0/0.
  if (x.dtype() == DType::bf16 || x.dtype() == DType::f16)
    return vector_norm(x.to(DType::f32), ord, std::move(dims), keepdim).to(x.dtype());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = ord == 2 ? sqrt(sum(mul(x, x), rdims, keepdim)) : pow(sum(pow(abs(x), ord), rdims, keepdim), 1.0 / ord);
  }
  if (autograd::any_requires_grad({x}))
    autograd::record("NormBackward", {x}, {out}, {x, out}, [mask, keepdim, ord](const Backward& b) {
      const Tensor &x = b.saved(0), &n = b.saved(1);
      const std::int64_t nd = x.dim();
      Tensor gk = unsqueeze_reduced(b.grad(), mask, nd, keepdim), nk = unsqueeze_reduced(n, mask, nd, keepdim);
      Tensor scaled = ord == 2 ? x : mul(x, pow(abs(x), ord - 2));
      Tensor d = div(mul(scaled, gk), ord == 2 ? nk : pow(nk, ord - 1));
      return Grads{where(eq(nk, 0.0), zeros_like(d), d)};
    });
  return out;
}

std::pair<Tensor, Tensor> var_mean(const Tensor& x, std::vector<std::int64_t> dims, double correction, bool keepdim) {
  NvtxRange range("var_mean");
  Tensor v = var(x, dims, correction, keepdim);
  return {v, mean(x, std::move(dims), keepdim)};
}

std::pair<Tensor, Tensor> std_mean(const Tensor& x, std::vector<std::int64_t> dims, double correction, bool keepdim) {
  NvtxRange range("std_mean");
  Tensor sd = std(x, dims, correction, keepdim);
  return {sd, mean(x, std::move(dims), keepdim)};
}

Tensor logsumexp(const Tensor& x, DimList dims, bool keepdim) {
  BRRR_AUTOCAST(fp32, logsumexp, x, dims, keepdim);
  NvtxRange range("logsumexp");
  require_defined("logsumexp", x);
  std::uint32_t mask = dims_mask("logsumexp", dims, x.shape());
  if (!is_floating_point(x.dtype())) {  // integers and bool: in f32 (PyTorch), not differentiable
    NoGradGuard no_grad;
    return logsumexp(x.to(DType::f32), std::move(dims), keepdim);
  }
  std::vector<std::int64_t> rdims = dims_of(mask, x.dim());
  // The shift: the max over the reduced dims, a constant for autograd; +-inf shifts by 0 so
  // that all -inf gives -inf (and +inf gives +inf) instead of NaN. Zero elements: -inf.
  Tensor shift;
  {
    NoGradGuard no_grad;
    if (reduced_count(x.shape(), mask) == 0) {
      shift = zeros(reduced_shape(x.shape(), mask, true), {.dtype = x.dtype(), .device = x.device()});
    } else {
      Tensor m = amax(x, rdims, true);
      shift = where(ne(abs(m), std::numeric_limits<double>::infinity()), m, 0.0);
    }
  }
  Tensor s = sum(exp(sub(x, shift)), rdims, keepdim);
  Tensor shift_out;
  {
    NoGradGuard no_grad;
    shift_out = finish(shift, x.shape(), mask, keepdim);
  }
  return add(log(s), shift_out);
}

}  // namespace brrr
