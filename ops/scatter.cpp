// Scatters and index updates: scatter (src or a value), scatter_reduce (sum, prod, mean,
// amax, amin; include_self), index_add, index_copy, index_fill. Kernels: scatter_add's for
// sum and mean, scatter_reduce's (BRRR_SCATTER_OPS: assign, prod, amax, amin) for the rest.
// The index_* ops are scatters with the 1-D index expanded (stride 0) to source's shape, so
// their gradients are the scatters'. Backward rules are PyTorch's (derivatives.yaml,
// scatter_reduce_backward), written with recorded ops so create_graph works for all but prod
// and amax/amin, whose rules use the forward result as a constant.
module;
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/contract.hpp"
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;
using autograd::Backward;
using autograd::Grads;
using backend::CheckedOp;
using backend::ScatterOp;

namespace {

Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

// src restricted to index's extent (views): the elements a scatter reads.
Tensor narrowed(const Tensor& src, const Tensor& index) {
  Tensor s = src;
  for (std::int64_t d = 0; d < index.dim(); ++d)
    if (s.size(d) != index.size(d)) s = s.slice(d, 0, index.size(d));
  return s;
}

// `out` (fresh, this op's) combined in place with src at index: never recorded.
void scatter_kernel(ScatterOp op, CheckedOp code, const Tensor& out, std::int64_t dim, const Tensor& index,
                    const Tensor& src) {
  if (index.numel() == 0) return;
  NoGradGuard no_grad;
  const char* name = backend::name_of(code);
  backend::backend_for(out.device())
      .scatter_reduce(op, backend::output(out, name), static_cast<int>(dim), backend::input(index, name),
                      backend::input(narrowed(src, index), name), code);
}

// The checks of scatter/scatter_reduce: devices, i64 index, src of x's dtype, the shapes.
std::int64_t check_scatter(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor* src) {
  require_defined(op, x);
  require_defined(op, index, "index");
  if (src) {
    require_defined(op, *src, "src");
    common_device(op, {x, index, *src});
    if (src->dtype() != x.dtype())
      throw Error(ErrorKind::dtype, std::string(op) + ": src " + describe(*src) + " must have the dtype of input " +
                                        describe(x));
  } else {
    common_device(op, {x, index});
  }
  if (index.dtype() != DType::i64) throw Error::dtype_not_supported(op, "index must be i64", index);
  const std::int64_t d = wrap_dim(op, dim, x.dim(), x.shape());
  check_index_shapes(op, x, d, index, src);
  return d;
}

// x (at least 1-d) with src assigned at index along d, recorded: x's gradient where not
// overwritten, src's gathered at index (PyTorch's scatter backward).
Tensor scatter_assign(CheckedOp code, const Tensor& x1, std::int64_t d, const Tensor& i1, const Tensor& s1) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x1.clone();
  }
  scatter_kernel(ScatterOp::assign, code, out, d, i1, s1);
  if (autograd::any_requires_grad({x1, s1}) && is_floating_point(x1.dtype()))
    autograd::record("ScatterBackward", {x1, s1}, {out}, {i1}, [d, shape = s1.shape()](const Backward& b) {
      Tensor gx, gs;
      if (b.needs(0)) gx = scatter(b.grad(), d, b.saved(0), Scalar(0.0));
      if (b.needs(1)) gs = pad_with_zeros(gather(b.grad(), d, b.saved(0)), shape);
      return Grads{gx, gs};
    });
  return out;
}

enum class Reduce { sum, prod, mean, amax, amin };

Reduce parse_reduce(std::string_view r) {
  if (r == "sum") return Reduce::sum;
  if (r == "prod") return Reduce::prod;
  if (r == "mean") return Reduce::mean;
  if (r == "amax") return Reduce::amax;
  if (r == "amin") return Reduce::amin;
  throw Error(ErrorKind::value, "scatter_reduce: reduce must be one of \"sum\", \"prod\", \"mean\", \"amax\", "
                                "\"amin\", got \"" + std::string(r) + "\"");
}

// The reduction's identity in x's dtype: what a destination starts from without x's value.
Tensor identity_of(Reduce r, const Tensor& x) {
  const bool fp = is_floating_point(x.dtype());
  double v = 0;
  if (r == Reduce::prod) v = 1;
  if (r == Reduce::amax)
    v = fp ? -std::numeric_limits<double>::infinity()
           : (x.dtype() == DType::i32 ? double(std::numeric_limits<std::int32_t>::lowest())
                                      : double(std::numeric_limits<std::int64_t>::lowest()));
  if (r == Reduce::amin)
    v = fp ? std::numeric_limits<double>::infinity()
           : (x.dtype() == DType::i32 ? double(std::numeric_limits<std::int32_t>::max())
                                      : double(std::numeric_limits<std::int64_t>::max()));
  return full({}, v, {.dtype = x.dtype(), .device = x.device()});
}

// Destinations of x's shape that index reaches, and how many sources each receives (i64).
Tensor source_counts(const Tensor& x1, std::int64_t d, const Tensor& i1) {
  NoGradGuard no_grad;
  Tensor ones_ = full({}, 1.0, {.dtype = DType::i64, .device = x1.device()}).expand(i1.shape());
  return scatter_add_coded(CheckedOp::scatter_reduce, zeros(x1.shape(), {.dtype = DType::i64, .device = x1.device()}),
                           d, i1, ones_);
}

// The forward of scatter_reduce, never recorded (also used by prod's backward rule).
Tensor reduce_forward(Reduce r, const Tensor& x1, std::int64_t d, const Tensor& i1, const Tensor& s1,
                      bool include_self, Tensor* counts_out) {
  NoGradGuard no_grad;
  Tensor counts = source_counts(x1, d, i1);
  Tensor out = include_self ? x1.clone() : where(gt(counts, 0), identity_of(r, x1), x1);
  if (r == Reduce::sum || r == Reduce::mean) {
    out = scatter_add_coded(CheckedOp::scatter_reduce, out, d, i1, s1);
  } else {
    const ScatterOp op = r == Reduce::prod ? ScatterOp::prod : r == Reduce::amax ? ScatterOp::amax : ScatterOp::amin;
    scatter_kernel(op, CheckedOp::scatter_reduce, out, d, i1, s1);
  }
  if (r == Reduce::mean) {
    Tensor n = include_self ? add(counts, 1) : counts;
    n = where(eq(n, 0), ones_like(n), n);  // untouched destinations keep x's value
    out = is_floating_point(x1.dtype()) ? div(out, n.to(x1.dtype())) : floor_divide(out, n.to(x1.dtype()));
  }
  if (counts_out) *counts_out = counts;
  return out;
}

// PyTorch's scatter_reduce_backward for (x, src); `result` is the forward's output. With
// include_self false, x gets no gradient where index reaches it.
Grads reduce_rule(const Backward& b, Reduce r, std::int64_t d, bool include_self, const Shape& src_shape) {
  const Tensor& g = b.grad();
  Tensor x = b.saved(0), i = b.saved(1), s = b.saved(2), result = b.saved(3), counts = b.saved(4);
  const DType dt = g.dtype();
  Tensor gx, gs;
  switch (r) {
    case Reduce::sum:
      gx = g;
      gs = gather(g, d, i);
      break;
    case Reduce::mean: {
      Tensor n = (include_self ? add(counts, 1) : counts).to(dt);
      n = where(eq(n, 0.0), ones_like(n), n);
      gx = div(g, n);
      gs = gather(gx, d, i);
      break;
    }
    case Reduce::prod: {
      // Products of the others, exact where there are zeros: x's zeros are replaced by 1 in a
      // second forward, src's single zeros likewise; two or more zeros give 0.
      Tensor x_nz = where(eq(x, 0.0), ones_like(x), x);
      Tensor x_others = reduce_forward(r, x_nz, d, i, s, include_self, nullptr);
      gx = div(mul(g, x_others), x_nz);
      Tensor s_zero = eq(s, 0.0);
      Tensor zeros_at = gather(scatter_add(zeros_like(x), d, i, s_zero.to(dt)), d, i);
      Tensor single = logical_and(s_zero, eq(zeros_at, 1.0));
      Tensor s_others = reduce_forward(r, x, d, i, where(single, ones_like(s), s), include_self, nullptr);
      gs = where(single, gather(mul(g, s_others), d, i), div(gather(mul(g, result), d, i), where(s_zero, ones_like(s), s)));
      break;
    }
    case Reduce::amax:
    case Reduce::amin: {
      // Shared evenly by the elements equal to the result (x's only where it took part).
      Tensor value = gather(result, d, i);
      Tensor x_is = eq(x, result);
      if (!include_self) x_is = logical_and(x_is, eq(counts, 0));
      Tensor s_is = eq(s, value);
      Tensor n = scatter_add(x_is.to(dt), d, i, s_is.to(dt));
      Tensor share = div(g, where(eq(n, 0.0), ones_like(n), n));
      gx = where(x_is, share, zeros_like(share));
      gs = where(s_is, gather(share, d, i), zeros({}, {.dtype = dt, .device = g.device()}));
      break;
    }
  }
  if (!include_self) gx = where(gt(counts, 0), zeros({}, {.dtype = dt, .device = g.device()}), gx);
  return {b.needs(0) ? gx : Tensor(), b.needs(1) ? pad_with_zeros(gs, src_shape) : Tensor()};
}

// index (1-D or 0-d, i32/i64) of an index_* op, checked, as i64 [k].
Tensor index_vector(const char* op, const Tensor& x, const Tensor& index) {
  require_defined(op, index, "index");
  common_device(op, {x, index});
  require_index_dtype(op, index);
  if (index.dim() > 1) throw Error(ErrorKind::shape, std::string(op) + ": index must be 1-D (or 0-d), got " + describe(index));
  return index.reshape({-1}).to(DType::i64);
}

// source's shape rule for index_add/index_copy: x's shape with size(dim) = index.numel().
void check_source(const char* op, const Tensor& x, std::int64_t d, const Tensor& idx, const Tensor& source) {
  require_defined(op, source, "source");
  common_device(op, {x, source});
  if (source.dtype() != x.dtype())
    throw Error(ErrorKind::dtype, std::string(op) + ": source " + describe(source) + " must have the dtype of input " +
                                      describe(x));
  Shape want = at_least_1d(x).shape();
  want[static_cast<std::size_t>(d)] = idx.numel();
  if (at_least_1d(source).shape() != want)
    throw Error::shape_mismatch(op, x.shape(), source.shape(),
                                "(input, source): source must have input's shape except size " +
                                    std::to_string(idx.numel()) + " (the index's length) along dim " +
                                    std::to_string(d));
}

// Error(index) when there are indices but dim d of x is empty (every index is out of range).
void require_reachable(const char* op, const Tensor& x, std::int64_t d, const Tensor& idx) {
  if (idx.numel() > 0 && at_least_1d(x).size(d) == 0)
    throw Error(ErrorKind::index, std::string(op) + ": dim " + std::to_string(d) + " of input " + describe(x) +
                                      " is empty, so every index is out of range");
}

// The 1-D index [k] as a scatter index of `shape` (size k along d, stride 0 elsewhere).
Tensor expanded(const Tensor& idx, std::int64_t d, Shape shape) {
  shape[static_cast<std::size_t>(d)] = idx.numel();
  Shape along(shape.size(), 1);
  along[static_cast<std::size_t>(d)] = idx.numel();
  return idx.reshape(along).expand(shape);
}

}  // namespace

Tensor scatter(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  NvtxRange range("scatter");
  const std::int64_t d = check_scatter("scatter", x, dim, index, &src);
  Tensor out = scatter_assign(CheckedOp::scatter, at_least_1d(x), d, at_least_1d(index), at_least_1d(src));
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor scatter(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value) {
  NvtxRange range("scatter");
  const std::int64_t d = check_scatter("scatter", x, dim, index, nullptr);
  Tensor i1 = at_least_1d(index);
  Tensor v = full({}, value.value, {.dtype = x.dtype(), .device = x.device()}).expand(i1.shape());
  Tensor out = scatter_assign(CheckedOp::scatter, at_least_1d(x), d, i1, v);
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor scatter_reduce(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src,
                      std::string_view reduce, bool include_self) {
  constexpr const char* name = "scatter_reduce";
  NvtxRange range(name);
  const Reduce r = parse_reduce(reduce);
  const std::int64_t d = check_scatter(name, x, dim, index, &src);
  if (x.dtype() == DType::boolean) throw Error::dtype_not_supported(name, "bool tensors are not supported", x);
  Tensor x1 = at_least_1d(x), i1 = at_least_1d(index), s1 = at_least_1d(src);
  Tensor counts;
  Tensor out = reduce_forward(r, x1, d, i1, s1, include_self, &counts);
  if (autograd::any_requires_grad({x1, s1}) && is_floating_point(x.dtype())) {
    Tensor sn;
    {
      NoGradGuard no_grad;
      sn = narrowed(s1, i1).contiguous();
    }
    autograd::record("ScatterReduceBackward", {x1, s1}, {out}, {x1, i1, sn, out, counts},
                     [r, d, include_self, shape = s1.shape()](const Backward& b) {
                       return reduce_rule(b, r, d, include_self, shape);
                     });
  }
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor index_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  constexpr const char* name = "index_add";
  NvtxRange range(name);
  require_defined(name, x);
  const std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  Tensor idx = index_vector(name, x, index);
  check_source(name, x, d, idx, source);
  if (x.dtype() == DType::boolean) throw Error::dtype_not_supported(name, "bool tensors are not supported", x);
  Tensor x1 = at_least_1d(x), s1 = at_least_1d(source);
  require_reachable(name, x, d, idx);
  Tensor src = alpha.value == 1.0 ? s1 : mul(s1, alpha);
  Tensor out = scatter_add_coded(CheckedOp::index_add, x1, d, expanded(idx, d, x1.shape()), src);
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor index_copy(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source) {
  constexpr const char* name = "index_copy";
  NvtxRange range(name);
  require_defined(name, x);
  const std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  Tensor idx = index_vector(name, x, index);
  check_source(name, x, d, idx, source);
  Tensor x1 = at_least_1d(x);
  require_reachable(name, x, d, idx);
  Tensor out = scatter_assign(CheckedOp::index_copy, x1, d, expanded(idx, d, x1.shape()), at_least_1d(source));
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor index_fill(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value) {
  constexpr const char* name = "index_fill";
  NvtxRange range(name);
  require_defined(name, x);
  const std::int64_t d = wrap_dim(name, dim, x.dim(), x.shape());
  Tensor idx = index_vector(name, x, index);
  Tensor x1 = at_least_1d(x);
  require_reachable(name, x, d, idx);
  if (x1.size(d) > 0) {  // negative indices count from the end (PyTorch's index_fill)
    NoGradGuard no_grad;
    idx = where(lt(idx, 0), add(idx, x1.size(d)), idx);
  }
  Tensor i1 = expanded(idx, d, x1.shape());
  Tensor v = full({}, value.value, {.dtype = x.dtype(), .device = x.device()}).expand(i1.shape());
  Tensor out = scatter_assign(CheckedOp::index_fill, x1, d, i1, v);
  return x.dim() == 0 ? out.view({}) : out;
}

// ---- in place (LibTorch's Tensor::scatter_, ...): the rules of ops/inplace.cpp's update() --

const Tensor& scatter_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  NvtxRange range("scatter_");
  return update("scatter_", x, src, [&](const Tensor& v) { return scatter(v, dim, index, src); }, {});
}
const Tensor& scatter_(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value) {
  NvtxRange range("scatter_");
  return update("scatter_", x, {}, [&](const Tensor& v) { return scatter(v, dim, index, value); }, {});
}
const Tensor& scatter_add_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  NvtxRange range("scatter_add_");
  return update("scatter_add_", x, src, [&](const Tensor& v) { return scatter_add(v, dim, index, src); }, {});
}
const Tensor& scatter_reduce_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src,
                              std::string_view reduce, bool include_self) {
  NvtxRange range("scatter_reduce_");
  return update("scatter_reduce_", x, src,
                [&](const Tensor& v) { return scatter_reduce(v, dim, index, src, reduce, include_self); }, {});
}
const Tensor& index_add_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  NvtxRange range("index_add_");
  return update("index_add_", x, source, [&](const Tensor& v) { return index_add(v, dim, index, source, alpha); }, {});
}
const Tensor& index_copy_(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source) {
  NvtxRange range("index_copy_");
  return update("index_copy_", x, source, [&](const Tensor& v) { return index_copy(v, dim, index, source); }, {});
}
const Tensor& index_fill_(const Tensor& x, std::int64_t dim, const Tensor& index, Scalar value) {
  NvtxRange range("index_fill_");
  return update("index_fill_", x, {}, [&](const Tensor& v) { return index_fill(v, dim, index, value); }, {});
}

}  // namespace brrr
