// Joining and splitting: cat, stack, split, chunk.
// cat allocates its output and copies each input into its window (out.narrow) with the
// strided-copy kernel; its backward narrows the gradient back. stack is cat of unsqueezed
// inputs. split and chunk return narrow() views sharing one graph node, SplitBackward, whose
// gradient is one cat of the views' gradients (as PyTorch's split_backward).
module;
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;

namespace brrr {

using namespace ops_detail;

namespace {

// PyTorch's legacy rule: 1-D tensors of shape [0] take no part in cat's shape checks.
bool skipped(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

// Where each input of cat sits in its output, for the backward rule.
struct Part {
  std::int64_t offset = 0, length = 0;
  bool skipped = false;
  Shape shape;
  DType dtype = DType::f32;
};

// cat's gradient: the output gradient narrowed back to each input's window (zeros for the
// skipped [0] inputs), in each input's dtype.
autograd::Grads cat_rule(const autograd::Backward& c, std::int64_t dim, const std::vector<Part>& parts) {
  autograd::Grads out(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (!c.needs(i)) continue;
    const Part& p = parts[i];
    if (p.skipped) {
      out[i] = zeros(p.shape, {.dtype = p.dtype, .device = c.grad().device()});
      continue;
    }
    Tensor gi = c.grad().narrow(dim, p.offset, p.length);
    out[i] = gi.dtype() == p.dtype ? gi : gi.to(p.dtype);
  }
  return out;
}

Tensor cat_impl(const char* op, const std::vector<Tensor>& tensors, std::int64_t dim) {
  if (tensors.empty()) throw Error(ErrorKind::value, std::string(op) + ": expected a non-empty list of tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i)
    require_defined(op, tensors[i], ("tensor " + std::to_string(i)).c_str());
  Device dev = tensors[0].device();
  DType dtype = tensors[0].dtype();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.device() != dev)
      throw Error(ErrorKind::device, std::string(op) + ": expected all tensors on one device, got " +
                                         describe(tensors[0]) + " (tensor 0) and " + describe(t) + " (tensor " +
                                         std::to_string(i) + ")");
    if (t.dim() == 0)
      throw Error(ErrorKind::shape, std::string(op) + ": zero-dimensional tensor (tensor " + std::to_string(i) +
                                        ") cannot be concatenated");
    dtype = promote_types(dtype, t.dtype());
  }
  // The reference shape: the first tensor that is not a legacy [0].
  const Tensor* ref = nullptr;
  std::size_t ref_index = 0;
  for (std::size_t i = 0; i < tensors.size() && !ref; ++i)
    if (!skipped(tensors[i])) ref = &tensors[i], ref_index = i;
  if (!ref) {  // nothing but [0] tensors
    Tensor out = empty({0}, {.dtype = dtype, .device = dev});
    wrap_dim(op, dim, 1, out.shape());
    return out;
  }
  std::int64_t ndim = ref->dim();
  std::int64_t d = wrap_dim(op, dim, ndim, ref->shape());
  Shape shape = ref->shape();
  shape[d] = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
    if (t.dim() != ndim)
      throw Error(ErrorKind::shape, std::string(op) + ": tensors must have the same number of dims; tensor " +
                                        std::to_string(ref_index) + " has shape " + to_string(ref->shape()) +
                                        " and tensor " + std::to_string(i) + " has shape " + to_string(t.shape()));
    for (std::int64_t k = 0; k < ndim; ++k)
      if (k != d && t.size(k) != ref->size(k))
        throw Error(ErrorKind::shape, std::string(op) + ": sizes of tensors must match except in dim " +
                                          std::to_string(d) + "; tensor " + std::to_string(ref_index) + " has shape " +
                                          to_string(ref->shape()) + " and tensor " + std::to_string(i) +
                                          " has shape " + to_string(t.shape()) + " (dim " + std::to_string(k) +
                                          ": " + std::to_string(ref->size(k)) + " vs " + std::to_string(t.size(k)) +
                                          ")");
    shape[d] += t.size(d);
  }

  Tensor out;
  std::vector<Part> parts(tensors.size());
  {
    NoGradGuard no_grad;
    out = empty(shape, {.dtype = dtype, .device = dev});
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      parts[i].shape = t.shape();
      parts[i].dtype = t.dtype();
      if (skipped(t)) {
        parts[i].skipped = true;
        continue;
      }
      std::int64_t len = t.size(d);
      parts[i].offset = offset;
      parts[i].length = len;
      if (t.numel() > 0) out.narrow(d, offset, len).copy_(t);
      offset += len;
    }
  }
  if (autograd::any_requires_grad(tensors) && is_floating_point(dtype))
    autograd::record("CatBackward", tensors, {out}, [d, parts = std::move(parts)](const autograd::Backward& c) {
      return cat_rule(c, d, parts);
    });
  return out;
}

// The one node of a split's views: their gradients (zeros for the views that received none)
// joined along the split dim by one cat, instead of each view's own SliceBackward embedding
// its gradient in zeros of the input's shape and the engine adding those up (a fill, a copy
// and an add of the whole input per view).
class SplitBackward final : public autograd::Node {
public:
  SplitBackward(std::int64_t dim, std::vector<Shape> shapes, DType dtype, Device device)
      : Node("SplitBackward"), dim_(dim), shapes_(std::move(shapes)), dtype_(dtype), device_(device) {}
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    NvtxRange range(name_literal());
    std::vector<Tensor> parts(shapes_.size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const bool given = i < grads.size() && grads[i].defined();
      parts[i] = !given ? zeros(shapes_[i], {.dtype = dtype_, .device = device_})
                        : grads[i].dtype() == dtype_ ? grads[i] : grads[i].to(dtype_);
    }
    if (parts.size() == 1) return {parts[0]};
    if (Tensor whole = in_place(parts); whole.defined()) return {whole};
    return {cat(parts, dim_)};
  }

private:
  // When the gradients are already the windows of one contiguous tensor of the input's shape
  // (the fused attention writes q's, k's and v's so), that tensor: no copy. Undefined otherwise.
  Tensor in_place(const std::vector<Tensor>& parts) const {
    if (autograd::is_grad_enabled()) return Tensor();  // create_graph: the cat keeps the graph
    for (const Tensor& p : parts)
      if (p.numel() == 0) return Tensor();
    Shape whole = parts[0].shape();
    whole[static_cast<std::size_t>(dim_)] = 0;
    for (const Tensor& p : parts) whole[static_cast<std::size_t>(dim_)] += p.size(dim_);
    Shape strides(whole.size());
    std::int64_t stride = 1;
    for (std::size_t d = whole.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= whole[d];
    }
    std::int64_t offset = parts[0].storage_offset();
    for (const Tensor& p : parts) {
      if (p.storage().data() != parts[0].storage().data() || p.storage_offset() != offset) return Tensor();
      for (std::int64_t d = 0; d < p.dim(); ++d)
        if (p.size(d) > 1 && p.stride(d) != strides[static_cast<std::size_t>(d)]) return Tensor();
      offset += p.size(dim_) * strides[static_cast<std::size_t>(dim_)];
    }
    return parts[0].as_strided(whole, strides, parts[0].storage_offset());
  }

  std::int64_t dim_;
  std::vector<Shape> shapes_;
  DType dtype_;
  Device device_;
};

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, std::int64_t dim) {
  NvtxRange range("cat");
  return cat_impl("cat", tensors, dim);
}

Tensor stack(const std::vector<Tensor>& tensors, std::int64_t dim) {
  NvtxRange range("stack");
  if (tensors.empty()) throw Error(ErrorKind::value, "stack: expected a non-empty list of tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i)
    require_defined("stack", tensors[i], ("tensor " + std::to_string(i)).c_str());
  const Shape& shape = tensors[0].shape();
  for (std::size_t i = 1; i < tensors.size(); ++i)
    if (tensors[i].shape() != shape)
      throw Error(ErrorKind::shape, "stack: expects each tensor to be of equal shape, but got " + to_string(shape) +
                                        " at entry 0 and " + to_string(tensors[i].shape()) + " at entry " +
                                        std::to_string(i));
  std::int64_t ndim = static_cast<std::int64_t>(shape.size());
  std::int64_t d = wrap_dim("stack", dim, ndim + 1, shape);
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (const Tensor& t : tensors) expanded.push_back(t.unsqueeze(d));
  return cat_impl("stack", expanded, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes, std::int64_t dim) {
  NvtxRange range("split");
  require_defined("split", x);
  if (x.dim() == 0) throw Error(ErrorKind::shape, "split: cannot split a 0-d tensor");
  std::int64_t d = wrap_dim("split", dim, x.dim(), x.shape());
  std::int64_t total = 0;
  for (std::int64_t s : sizes) {
    if (s < 0)
      throw Error(ErrorKind::value, "split: split sizes must be non-negative, got " + to_string(Shape(sizes)));
    total += s;
  }
  if (total != x.size(d))
    throw Error(ErrorKind::value, "split: split sizes " + to_string(Shape(sizes)) + " must sum to the size " +
                                      std::to_string(x.size(d)) + " of dim " + std::to_string(d) + " (shape " +
                                      to_string(x.shape()) + ")");
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  {
    NoGradGuard no_grad;  // the views record one node together, below
    std::int64_t offset = 0;
    for (std::int64_t s : sizes) {
      out.push_back(x.narrow(d, offset, s));
      offset += s;
    }
  }
  if (autograd::any_requires_grad({x})) {
    std::vector<Shape> shapes;
    shapes.reserve(out.size());
    for (const Tensor& t : out) shapes.push_back(t.shape());
    autograd::connect(std::make_shared<SplitBackward>(d, std::move(shapes), x.dtype(), x.device()),
                     std::vector<Tensor>{x}, out);
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  NvtxRange range("split");
  require_defined("split", x);
  if (x.dim() == 0) throw Error(ErrorKind::shape, "split: cannot split a 0-d tensor");
  std::int64_t d = wrap_dim("split", dim, x.dim(), x.shape());
  std::int64_t size = x.size(d);
  if (split_size < 0 || (split_size == 0 && size > 0))
    throw Error(ErrorKind::value, "split: split_size must be positive (0 only for an empty dim), got " +
                                      std::to_string(split_size) + " for dim " + std::to_string(d) + " of size " +
                                      std::to_string(size));
  std::vector<std::int64_t> sizes;
  if (size == 0) {
    sizes.push_back(0);
  } else {
    for (std::int64_t offset = 0; offset < size;) {
      std::int64_t len = split_size < size - offset ? split_size : size - offset;
      sizes.push_back(len);
      offset += len;
    }
  }
  return split(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, std::int64_t chunks, std::int64_t dim) {
  NvtxRange range("chunk");
  require_defined("chunk", x);
  if (x.dim() == 0) throw Error(ErrorKind::shape, "chunk: expects at least a 1-d tensor");
  if (chunks <= 0) throw Error(ErrorKind::value, "chunk: chunks must be positive, got " + std::to_string(chunks));
  std::int64_t d = wrap_dim("chunk", dim, x.dim(), x.shape());
  std::int64_t size = x.size(d);
  if (size == 0) return split(x, std::vector<std::int64_t>(static_cast<std::size_t>(chunks), 0), d);
  return split(x, (size + chunks - 1) / chunks, d);
}

}  // namespace brrr
