// Backward rules of the views (tensor/views.cpp). A view is pure metadata in forward; when
// its input requires grad it records one of these nodes on the returned view:
//   view/reshape/flatten/squeeze/unsqueeze  -> reshape(g, input shape)
//   permute/transpose/t                     -> g permuted back
//   expand/broadcast_to                     -> sum_to_size(g, input shape)
//   slice/narrow/select/as_strided          -> "embed": g written into zeros of the input's
//                                              shape at the view's position
//   contiguous (when it copies)             -> g
// Every rule is written with Tensor ops (the embed is itself a differentiable op whose
// backward re-applies the view), so create_graph gives higher-order gradients.
//
// This is an implementation unit of brrr.tensor (not brrr.ops): tensor/views.cpp must reach
// these functions, and brrr.ops exports nothing for it. The functions have module linkage;
// views.cpp declares them again (same module, same entity) and calls them.
module;
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>
module brrr.tensor;
import brrr.ops;

namespace brrr::view_autograd {

namespace {

using ViewFn = std::function<Tensor(const Tensor&)>;

// The gradient of a view when grad flows back: a reshape (any view that keeps the elements'
// row-major order).
class ReshapeBackward final : public autograd::Node {
public:
  ReshapeBackward(const char* op, Shape input_shape) : op_(op), input_shape_(std::move(input_shape)) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    return {g[0].shape() == input_shape_ ? g[0] : g[0].reshape(input_shape_)};
  }
  std::string name() const override { return op_ + "Backward"; }

private:
  std::string op_;
  Shape input_shape_;
};

class PermuteBackward final : public autograd::Node {
public:
  PermuteBackward(const char* op, const Shape& dims) : op_(op), inverse_(dims.size()) {
    for (std::size_t k = 0; k < dims.size(); ++k) inverse_[static_cast<std::size_t>(dims[k])] = static_cast<std::int64_t>(k);
  }
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    return {g[0].permute(inverse_)};
  }
  std::string name() const override { return op_ + "Backward"; }

private:
  std::string op_;
  Shape inverse_;
};

class ExpandBackward final : public autograd::Node {
public:
  ExpandBackward(const char* op, Shape input_shape) : op_(op), input_shape_(std::move(input_shape)) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    return {g[0].shape() == input_shape_ ? g[0] : sum_to_size(g[0], input_shape_)};
  }
  std::string name() const override { return op_ + "Backward"; }

private:
  std::string op_;
  Shape input_shape_;
};

class IdentityBackward final : public autograd::Node {
public:
  explicit IdentityBackward(const char* op) : op_(op) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override { return {g[0]}; }
  std::string name() const override { return op_ + "Backward"; }

private:
  std::string op_;
};

Tensor embed(const Tensor& g, const Shape& shape, const ViewFn& view, const std::string& op);

// The backward of embed: the gradient of the embedded tensor is the view of it.
class EmbedBackward final : public autograd::Node {
public:
  EmbedBackward(std::string op, ViewFn view) : op_(std::move(op)), view_(std::move(view)) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    return {view_(g[0])};
  }
  std::string name() const override { return op_ + "EmbedBackward"; }

private:
  std::string op_;
  ViewFn view_;
};

// zeros(shape) with `view(zeros)` set to g: the adjoint of `view`. Differentiable in g.
Tensor embed(const Tensor& g, const Shape& shape, const ViewFn& view, const std::string& op) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = zeros(shape, {.dtype = g.dtype(), .device = g.device()});
    Tensor window = view(out);
    if (window.numel() > 0) window.copy_(g);
  }
  if (autograd::any_requires_grad({g})) autograd::connect(std::make_shared<EmbedBackward>(op, view), {g}, {out});
  return out;
}

// The backward of slice/narrow/select: embed g at the view's position in zeros of the
// input's shape; `view` re-applies the view to any tensor of the input's shape.
class SubviewBackward final : public autograd::Node {
public:
  SubviewBackward(const char* op, Shape input_shape, ViewFn view)
      : op_(op), input_shape_(std::move(input_shape)), view_(std::move(view)) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    return {embed(g[0], input_shape_, view_, op_)};
  }
  std::string name() const override { return op_ + "Backward"; }

private:
  std::string op_;
  Shape input_shape_;
  ViewFn view_;
};

// Lowest and highest storage positions a layout reaches (sizes > 0, strides >= 0).
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
// recorded view). Inputs whose own elements share positions (expanded ones) get the shared
// position's gradient in each of them.
class AsStridedBackward final : public autograd::Node {
public:
  AsStridedBackward(const Layout& input, const Layout& view) : input_(input), view_(view) {}
  std::vector<Tensor> apply(std::vector<Tensor> g) override {
    if (!g[0].defined()) return {Tensor()};
    if (!non_overlapping(view_))
      throw Error(ErrorKind::autograd, "as_strided: backward through a view whose elements overlap (sizes " +
                                           to_string(view_.sizes) + ", strides " + to_string(view_.strides) +
                                           ") is not supported");
    std::int64_t lo = 0, hi = -1;
    bool any = false;
    for (const Layout* l : {&input_, &view_}) {
      if (l->numel() == 0) continue;
      auto [a, b] = extent(*l);
      lo = any ? std::min(lo, a) : a;
      hi = any ? std::max(hi, b) : b;
      any = true;
    }
    std::int64_t length = any ? hi - lo + 1 : 0;
    Layout v = view_;
    ViewFn view = [v, lo](const Tensor& buffer) {
      Tensor flat = buffer.contiguous();
      return flat.as_strided(v.sizes, v.strides, flat.storage_offset() + v.offset - lo);
    };
    Tensor buffer = embed(g[0], {length}, view, "as_strided");
    return {buffer.as_strided(input_.sizes, input_.strides, buffer.storage_offset() + input_.offset - lo)};
  }
  std::string name() const override { return "AsStridedBackward"; }

private:
  Layout input_, view_;
};

}  // namespace

// --- the recording functions views.cpp calls (module linkage, declared there too) ---------

void record_reshape(const char* op, const Tensor& input, const Tensor& view) {
  autograd::connect(std::make_shared<ReshapeBackward>(op, input.shape()), {input}, {view});
}

void record_permute(const char* op, const Tensor& input, const Tensor& view, const Shape& dims) {
  autograd::connect(std::make_shared<PermuteBackward>(op, dims), {input}, {view});
}

void record_expand(const char* op, const Tensor& input, const Tensor& view) {
  autograd::connect(std::make_shared<ExpandBackward>(op, input.shape()), {input}, {view});
}

void record_slice(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t start, std::int64_t end,
                  std::int64_t step) {
  ViewFn f = [dim, start, end, step](const Tensor& t) { return t.slice(dim, start, end, step); };
  autograd::connect(std::make_shared<SubviewBackward>("Slice", input.shape(), std::move(f)), {input}, {view});
}

void record_select(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t index) {
  ViewFn f = [dim, index](const Tensor& t) { return t.select(dim, index); };
  autograd::connect(std::make_shared<SubviewBackward>("Select", input.shape(), std::move(f)), {input}, {view});
}

void record_as_strided(const Tensor& input, const Tensor& view) {
  autograd::connect(std::make_shared<AsStridedBackward>(input.layout(), view.layout()), {input}, {view});
}

void record_identity(const char* op, const Tensor& input, const Tensor& out) {
  autograd::connect(std::make_shared<IdentityBackward>(op), {input}, {out});
}

}  // namespace brrr::view_autograd
