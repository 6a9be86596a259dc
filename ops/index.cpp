// Indexing ops: gather, scatter_add, index_select, embedding, one_hot, masked_fill, and the
// deterministic switch of the CUDA scatter-adds. Two backend kernels carry them all:
// gather (out[p] = in[p with dim -> index[p]]) and scatter_add (its adjoint); index_select
// and embedding pass an index expanded with stride 0 (no copy), one_hot scatters ones.
// Backward rules (PyTorch's derivatives.yaml): gather -> scatter_add into zeros; scatter_add
// -> identity for the input, gather for src; embedding -> scatter_add of the output gradient
// rows with the padding_idx rows zeroed. They are written with these same recorded ops, so
// create_graph differentiates them again.
//
// Index validation: the CPU kernels throw Error(index) at the call; the CUDA kernels clamp
// bad indices and set the device's deferred error flag, which the host reads at its next
// sync point (no sync here). Either way the message names the public op, which each op passes
// to its kernels (backend::CheckedOp).
module;
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

std::atomic<bool> deterministic_on{false};

using backend::CheckedOp;

// A 0-d tensor as a 1-element 1-d view (PyTorch treats 0-d operands of gather/scatter as 1-d).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

[[noreturn]] void empty_dim(const char* op, const Tensor& x, std::int64_t dim) {
  throw Error(ErrorKind::index, std::string(op) + ": dim " + std::to_string(dim) + " of input " + describe(x) +
                                    " is empty, so every index is out of range");
}

// --- kernels (never recorded). x and index at least 1-d, of one ndim; checks done. ---------

Tensor gather_kernel(CheckedOp code, const char* name, const Tensor& x, std::int64_t dim, const Tensor& index) {
  NoGradGuard no_grad;
  Tensor out = empty(index.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() > 0) {
    backend::backend_for(x.device())
        .gather(backend::output(out, name), backend::input(x, name), static_cast<int>(dim),
                backend::input(index, name), code);
  }
  return out;
}

// Adds src (index's shape) into `out` (a fresh tensor this op owns) in place.
void scatter_kernel(CheckedOp code, const char* name, const Tensor& out, std::int64_t dim, const Tensor& index,
                    const Tensor& src) {
  if (index.numel() == 0) return;
  NoGradGuard no_grad;
  backend::backend_for(out.device())
      .scatter_add(backend::output(out, name), static_cast<int>(dim), backend::input(index, name),
                   backend::input(src, name), deterministic_on.load(std::memory_order_relaxed), code);
}

// src restricted to index's extent (views): the elements the scatter reads.
Tensor narrow_to_index(const Tensor& src, const Tensor& index) {
  NoGradGuard no_grad;
  Tensor s = src;
  for (std::int64_t d = 0; d < index.dim(); ++d)
    if (s.size(d) != index.size(d)) s = s.slice(d, 0, index.size(d));
  return s;
}

// --- recorded building blocks --------------------------------------------------------------

Tensor gather_recorded(CheckedOp code, const char* name, const char* backward_name, const Tensor& x, std::int64_t dim,
                       const Tensor& index);
Tensor scatter_into_zeros(CheckedOp code, const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src);

}  // namespace

// t (a block at the origin of `shape`) placed into zeros of `shape`: the gradient of src
// elements that index does not reach is 0. A scatter along dim 0 at each element's own row.
Tensor ops_detail::pad_with_zeros(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape row(t.dim(), 1);
  row[0] = t.size(0);
  Tensor rows = arange(t.size(0), {.dtype = DType::i64, .device = t.device()}).view(row).expand(t.shape());
  return scatter_into_zeros(CheckedOp::scatter_add, shape, 0, rows, t);
}

namespace {

// scatter_add's gradient: the output gradient for x, and for src the output gradient
// gathered at the index (zero where src reaches beyond the index).
autograd::Grads scatter_add_rule(const autograd::Backward& c, CheckedOp code, std::int64_t dim, const Tensor& index,
                                 const Shape& src_shape) {
  Tensor gsrc;
  if (c.needs(1)) gsrc = pad_with_zeros(gather_recorded(code, "gather", "GatherBackward", c.grad(), dim, index), src_shape);
  return {c.needs(0) ? c.grad() : Tensor(), gsrc};
}

Tensor gather_recorded(CheckedOp code, const char* name, const char* backward_name, const Tensor& x, std::int64_t dim,
                       const Tensor& index) {
  Tensor out = gather_kernel(code, name, x, dim, index);
  // gather's gradient: scattered back into zeros of x's shape.
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype()))
    autograd::record(backward_name, {x}, {out}, {index}, [code, shape = x.shape(), dim](const autograd::Backward& c) {
      return autograd::Grads{scatter_into_zeros(code, shape, dim, c.saved(0), c.grad())};
    });
  return out;
}

// zeros(shape) with src (index's shape) scattered in; differentiable in src.
Tensor scatter_into_zeros(CheckedOp code, const Shape& shape, std::int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = zeros(shape, {.dtype = src.dtype(), .device = src.device()});
  scatter_kernel(code, "scatter_add", out, dim, index, src);
  if (autograd::any_requires_grad({src}) && is_floating_point(src.dtype()))
    autograd::record("ScatterAddBackward", {Tensor(), src}, {out}, {index},
                     [code, dim, shape = src.shape()](const autograd::Backward& c) {
                       return scatter_add_rule(c, code, dim, c.saved(0), shape);
                     });
  return out;
}

}  // namespace

// The checks shared by gather and the scatters: one ndim, index sizes within x's (and src's).
void ops_detail::check_index_shapes(const char* op, const Tensor& x, std::int64_t dim, const Tensor& index,
                                    const Tensor* src) {
  if (index.dim() != x.dim() && !(index.dim() <= 1 && x.dim() <= 1))
    throw Error(ErrorKind::shape, std::string(op) + ": index " + describe(index) + " and input " + describe(x) +
                                      " must have the same number of dims");
  if (src && src->dim() != index.dim() && !(index.dim() <= 1 && src->dim() <= 1))
    throw Error(ErrorKind::shape, std::string(op) + ": index " + describe(index) + " and src " + describe(*src) +
                                      " must have the same number of dims");
  Tensor x1 = at_least_1d(x), i1 = at_least_1d(index);
  for (std::int64_t d = 0; d < i1.dim(); ++d) {
    if (d != dim && i1.size(d) > x1.size(d))
      throw Error(ErrorKind::shape, std::string(op) + ": index " + describe(index) + " is larger than input " +
                                        describe(x) + " in dim " + std::to_string(d) + " (only dim " +
                                        std::to_string(dim) + " may differ)");
    if (src && i1.size(d) > at_least_1d(*src).size(d))
      throw Error(ErrorKind::shape, std::string(op) + ": index " + describe(index) + " is larger than src " +
                                        describe(*src) + " in dim " + std::to_string(d));
  }
  if (i1.numel() > 0 && x1.size(dim) == 0) empty_dim(op, x, dim);
}

Tensor ops_detail::scatter_add_coded(CheckedOp code, const Tensor& x1, std::int64_t d, const Tensor& i1,
                                     const Tensor& s1) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x1.clone();
  }
  scatter_kernel(code, name_of(code), out, d, i1, narrow_to_index(s1, i1));
  if (autograd::any_requires_grad({x1, s1}) && is_floating_point(x1.dtype()))
    autograd::record("ScatterAddBackward", {x1, s1}, {out}, {i1}, [code, d, shape = s1.shape()](const autograd::Backward& c) {
      return scatter_add_rule(c, code, d, c.saved(0), shape);
    });
  return out;
}

Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index) {
  NvtxRange range("gather");
  require_defined("gather", x);
  require_defined("gather", index, "index");
  common_device("gather", {x, index});
  if (index.dtype() != DType::i64)
    throw Error::dtype_not_supported("gather", "index must be i64", index);
  std::int64_t d = wrap_dim("gather", dim, x.dim(), x.shape());
  check_index_shapes("gather", x, d, index, nullptr);
  Tensor out = gather_recorded(CheckedOp::gather, "gather", "GatherBackward", at_least_1d(x), d, at_least_1d(index));
  return index.dim() == 0 ? out.view({}) : out;
}

Tensor scatter_add(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& src) {
  NvtxRange range("scatter_add");
  require_defined("scatter_add", x);
  require_defined("scatter_add", index, "index");
  require_defined("scatter_add", src, "src");
  common_device("scatter_add", {x, index, src});
  if (index.dtype() != DType::i64)
    throw Error::dtype_not_supported("scatter_add", "index must be i64", index);
  if (src.dtype() != x.dtype())
    throw Error(ErrorKind::dtype, "scatter_add: src " + describe(src) + " must have the dtype of input " + describe(x));
  if (x.dtype() == DType::boolean)
    throw Error::dtype_not_supported("scatter_add", "bool tensors are not supported", x);
  std::int64_t d = wrap_dim("scatter_add", dim, x.dim(), x.shape());
  check_index_shapes("scatter_add", x, d, index, &src);
  Tensor out = scatter_add_coded(CheckedOp::scatter_add, at_least_1d(x), d, at_least_1d(index), at_least_1d(src));
  return x.dim() == 0 ? out.view({}) : out;
}

Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index) {
  NvtxRange range("index_select");
  require_defined("index_select", x);
  require_defined("index_select", index, "index");
  common_device("index_select", {x, index});
  require_index_dtype("index_select", index);
  if (index.dim() > 1)
    throw Error(ErrorKind::shape, "index_select: index must be 1-D (or 0-d), got " + describe(index));
  std::int64_t d = wrap_dim("index_select", dim, x.dim(), x.shape());
  std::int64_t k = index.numel();
  if (x.dim() == 0) {
    if (k != 1)
      throw Error(ErrorKind::index, "index_select: a 0-d input takes exactly one index, got " + describe(index));
    Tensor out = gather_recorded(CheckedOp::index_select, "index_select", "IndexSelectBackward", x.view({1}), 0,
                                 index.reshape({1}));
    return out.view({});
  }
  if (k > 0 && x.size(d) == 0) empty_dim("index_select", x, d);
  Shape out_shape = x.shape();
  out_shape[static_cast<std::size_t>(d)] = k;
  Shape along(static_cast<std::size_t>(x.dim()), 1);
  along[static_cast<std::size_t>(d)] = k;
  Tensor expanded = index.reshape(along).expand(out_shape);
  return gather_recorded(CheckedOp::index_select, "index_select", "IndexSelectBackward", x, d, expanded);
}

Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<std::int64_t> padding_idx) {
  NvtxRange range("embedding");
  require_defined("embedding", weight, "weight");
  require_defined("embedding", indices, "indices");
  common_device("embedding", {weight, indices});
  if (weight.dim() != 2)
    throw Error(ErrorKind::shape, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got " +
                                      describe(weight));
  require_index_dtype("embedding", indices, "indices");
  const std::int64_t v = weight.size(0), dsize = weight.size(1), n = indices.numel();
  std::optional<std::int64_t> padding;
  if (padding_idx) {
    if (*padding_idx < -v || *padding_idx >= v)
      throw Error(ErrorKind::index, "embedding: padding_idx " + std::to_string(*padding_idx) +
                                        " is out of range for weight " + describe(weight) + " (expected in [" +
                                        std::to_string(-v) + ", " + std::to_string(v) + "))");
    padding = *padding_idx < 0 ? *padding_idx + v : *padding_idx;
  }
  if (n > 0 && v == 0) empty_dim("embedding", weight, 0);
  Shape out_shape = indices.shape();
  out_shape.push_back(dsize);
  Tensor flat, index, out;
  {
    NoGradGuard no_grad;
    flat = indices.reshape({n});
    index = flat.unsqueeze(1).expand({n, dsize});
    out = gather_kernel(CheckedOp::embedding, "embedding", weight, 0, index).view(out_shape);
  }
  // The gradient: a scatter-add of the output gradient rows into zeros of weight's shape,
  // with the padding_idx rows zeroed.
  if (autograd::any_requires_grad({weight}) && is_floating_point(weight.dtype()))
    autograd::record("EmbeddingBackward", {weight}, {out}, {flat, index},
                     [shape = weight.shape(), padding](const autograd::Backward& c) {
                       Tensor index = c.saved(1);
                       Tensor rows = c.grad().reshape(index.shape());  // [N, D]
                       if (padding) rows = masked_fill(rows, eq(c.saved(0), *padding).unsqueeze(1), 0.0);
                       return autograd::Grads{scatter_into_zeros(CheckedOp::embedding, shape, 0, index, rows)};
                     });
  return out;
}

Tensor one_hot(const Tensor& indices, std::int64_t num_classes) {
  NvtxRange range("one_hot");
  require_defined("one_hot", indices, "indices");
  require_index_dtype("one_hot", indices, "indices");
  if (num_classes <= 0)
    throw Error(ErrorKind::value, "one_hot: num_classes must be > 0, got " + std::to_string(num_classes) +
                                      " (it is not inferred: that would need a host sync)");
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, {.dtype = DType::i64, .device = indices.device()});
  if (indices.numel() > 0) {
    NoGradGuard no_grad;
    Tensor index = indices.unsqueeze(-1);
    Tensor ones = full({}, 1.0, {.dtype = DType::i64, .device = indices.device()}).expand(index.shape());
    scatter_kernel(CheckedOp::one_hot, "one_hot", out, out.dim() - 1, index, ones);
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  NvtxRange range("masked_fill");
  require_defined("masked_fill", x);
  require_defined("masked_fill", mask, "mask");
  common_device("masked_fill", {x, mask});
  if (mask.dtype() != DType::boolean)
    throw Error::dtype_not_supported("masked_fill", "mask must be bool", mask);
  (void)broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  Tensor fill = full({}, value.value, {.dtype = x.dtype(), .device = x.device()});
  return where(mask, fill, x);
}

void set_deterministic(bool deterministic) { deterministic_on.store(deterministic); }
bool deterministic() { return deterministic_on.load(); }

}  // namespace brrr
