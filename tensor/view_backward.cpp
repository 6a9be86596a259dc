// Backward rules of the views (tensor/views.cpp) and of clone/contiguous. A view is pure
// metadata in forward; when its input requires grad it records one of these rules on the
// returned view (autograd::record):
//   view/reshape/flatten/squeeze/unsqueeze  -> reshape(g, input shape)
//   permute/transpose/t                     -> g permuted back
//   expand/broadcast_to                     -> sum_to_size(g, input shape)
//   slice/narrow/select/as_strided          -> "embed": g written into zeros of the input's
//                                              shape at the view's position (summed where
//                                              an as_strided view's elements overlap)
//   contiguous, clone (copies)              -> g
// Every rule is written with Tensor ops (the embed is itself a differentiable op whose
// backward re-applies the view), so create_graph gives higher-order gradients.
module;
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "backend/contract.hpp"
module brrr.tensor;
import brrr.backend;

namespace brrr::view_autograd {

using autograd::Backward;
using autograd::Grads;

namespace {

using ViewFn = std::function<Tensor(const Tensor&)>;

// zeros(shape) with `view(zeros)` set to g: the adjoint of `view`. Differentiable in g (its
// gradient is the view of the gradient).
Tensor embed(const Tensor& g, const Shape& shape, const ViewFn& view, const char* name) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
    Tensor window = view(out);
    if (window.numel() > 0) window.copy_(g);
  }
  if (autograd::any_requires_grad({g}))
    autograd::record(name, {g}, {out}, [view](const Backward& b) { return Grads{view(b.grad())}; });
  return out;
}

// The backward of slice/narrow/select: embed g at the view's position in zeros of the
// input's shape; `view` re-applies the view to any tensor of the input's shape.
void record_subview(const char* name, const char* embed_name, const Tensor& input, const Tensor& out, ViewFn view) {
  autograd::record(name, {input}, {out}, [shape = input.shape(), view = std::move(view), embed_name](const Backward& b) {
    return Grads{embed(b.grad(), shape, view, embed_name)};
  });
}

// The position in a flat buffer starting at storage position `lo` of each element of the
// layout, row-major, as an i64 tensor on `device`: sum over dims of ((i / inner_d) % size_d)
// * stride_d, computed by backend kernels (no host data is uploaded, so no sync).
Tensor positions(const Layout& l, std::int64_t lo, Device device) {
  const char* op = "as_strided backward";
  backend::Backend& be = backend::backend_for(device);
  const std::int64_t n = l.numel();
  Tensor index = arange(n, {.dtype = DType::i64, .device = device});
  Tensor pos = zeros({n}, {.dtype = DType::i64, .device = device});
  Tensor t = empty({n}, {.dtype = DType::i64, .device = device});
  be.binary_scalar(backend::BinaryOp::add, backend::output(pos, op), backend::input(pos, op),
                   static_cast<double>(l.offset - lo), false);
  std::int64_t inner = 1;
  for (std::size_t k = l.sizes.size(); k-- > 0;) {
    const std::int64_t size = l.sizes[k];
    if (size > 1 && l.strides[k] != 0) {
      be.binary_scalar(backend::BinaryOp::floor_divide, backend::output(t, op), backend::input(index, op),
                       static_cast<double>(inner), false);
      be.binary_scalar(backend::BinaryOp::remainder, backend::output(t, op), backend::input(t, op),
                       static_cast<double>(size), false);
      be.binary_scalar(backend::BinaryOp::mul, backend::output(t, op), backend::input(t, op),
                       static_cast<double>(l.strides[k]), false);
      be.binary(backend::BinaryOp::add, backend::output(pos, op), backend::input(pos, op), backend::input(t, op));
    }
    inner *= size;
  }
  return pos;
}

// zeros({length}) with g summed into the positions of the (overlapping) view: a scatter-add
// in a fixed order, the adjoint of reading the view. Differentiable in g (its gradient is
// the view of the gradient, `view`).
Tensor embed_summed(const Tensor& g, std::int64_t length, const Layout& view_layout, std::int64_t lo,
                    const ViewFn& view) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = zeros({length}, {.dtype = g.dtype(), .device = g.device()});
    if (g.numel() > 0) {
      Tensor index = positions(view_layout, lo, g.device());
      Tensor src = g.contiguous().reshape({g.numel()});
      backend::backend_for(g.device())
          .scatter_add(backend::output(out, "as_strided backward"), 0, backend::input(index, "as_strided backward"),
                       backend::input(src, "as_strided backward"), true, backend::CheckedOp::scatter_add);
    }
  }
  if (autograd::any_requires_grad({g}))
    autograd::record("AsStridedEmbedBackward", {g}, {out}, [view](const Backward& b) { return Grads{view(b.grad())}; });
  return out;
}

// Lowest and highest storage positions a layout reaches (sizes > 0).
std::pair<std::int64_t, std::int64_t> extent(const Layout& l) {
  std::int64_t lo = l.offset, hi = l.offset;
  for (std::size_t d = 0; d < l.sizes.size(); ++d) {
    std::int64_t span = (l.sizes[d] - 1) * l.strides[d];
    if (span < 0) lo += span;
    else hi += span;
  }
  return {lo, hi};
}

// True when no two elements of the layout share a storage position (a sufficient test:
// dims sorted by stride, each stride beyond the reach of the smaller ones).
bool non_overlapping(const Layout& l) {
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (|stride|, size)
  for (std::size_t d = 0; d < l.sizes.size(); ++d)
    if (l.sizes[d] > 1) dims.emplace_back(l.strides[d] < 0 ? -l.strides[d] : l.strides[d], l.sizes[d]);
  std::sort(dims.begin(), dims.end());
  std::int64_t reach = 0;  // largest offset reachable with the dims so far
  for (auto [stride, size] : dims) {
    if (stride <= reach) return false;
    reach += (size - 1) * stride;
  }
  return true;
}

// as_strided addresses the storage, not the input's elements. Its gradient, computed on a
// flat buffer over the storage positions both layouts reach: g embedded at the view's
// positions, then read back at the input's positions (an as_strided of the buffer, itself a
// recorded view). Where the view's elements overlap, their gradients are summed into the
// shared position (PyTorch's rule). Inputs whose own elements share positions (expanded
// ones) get the shared position's gradient in each of them.
Tensor as_strided_backward(const Tensor& g, const Layout& input, const Layout& view_layout) {
  std::int64_t lo = 0, hi = -1;
  bool any = false;
  for (const Layout* l : {&input, &view_layout}) {
    if (l->numel() == 0) continue;
    auto [a, b] = extent(*l);
    lo = any ? std::min(lo, a) : a;
    hi = any ? std::max(hi, b) : b;
    any = true;
  }
  const std::int64_t length = any ? hi - lo + 1 : 0;
  ViewFn view = [v = view_layout, lo](const Tensor& buffer) {
    Tensor flat = buffer.contiguous();
    return flat.as_strided(v.sizes, v.strides, flat.storage_offset() + v.offset - lo);
  };
  Tensor buffer = non_overlapping(view_layout) ? embed(g, {length}, view, "AsStridedEmbedBackward")
                                                : embed_summed(g, length, view_layout, lo, view);
  return buffer.as_strided(input.sizes, input.strides, buffer.storage_offset() + input.offset - lo);
}

}  // namespace

void record_reshape(const char* name, const Tensor& input, const Tensor& view) {
  autograd::record(name, {input}, {view}, [shape = input.shape()](const Backward& b) {
    const Tensor& g = b.grad();
    return Grads{g.shape() == shape ? g : g.reshape(shape)};
  });
}

void record_permute(const char* name, const Tensor& input, const Tensor& view, const Shape& dims) {
  Shape inverse(dims.size());
  for (std::size_t k = 0; k < dims.size(); ++k) inverse[static_cast<std::size_t>(dims[k])] = static_cast<std::int64_t>(k);
  autograd::record(name, {input}, {view},
                   [inverse = std::move(inverse)](const Backward& b) { return Grads{b.grad().permute(inverse)}; });
}

void record_expand(const Tensor& input, const Tensor& view) {
  autograd::record("ExpandBackward", {input}, {view}, [shape = input.shape()](const Backward& b) {
    const Tensor& g = b.grad();
    return Grads{g.shape() == shape ? g : sum_to_size(g, shape)};
  });
}

void record_slice(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t start, std::int64_t end,
                  std::int64_t step) {
  record_subview("SliceBackward", "SliceEmbedBackward", input, view,
                 [dim, start, end, step](const Tensor& t) { return t.slice(dim, start, end, step); });
}

void record_select(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t index) {
  record_subview("SelectBackward", "SelectEmbedBackward", input, view,
                 [dim, index](const Tensor& t) { return t.select(dim, index); });
}

void record_as_strided(const Tensor& input, const Tensor& view) {
  autograd::record("AsStridedBackward", {input}, {view}, [in = input.layout(), v = view.layout()](const Backward& b) {
    return Grads{as_strided_backward(b.grad(), in, v)};
  });
}

void record_identity(const char* name, const Tensor& input, const Tensor& out) {
  autograd::record(name, {input}, {out}, [](const Backward& b) { return Grads{b.grad()}; });
}

}  // namespace brrr::view_autograd
