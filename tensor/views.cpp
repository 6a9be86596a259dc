// Views: each makes a new Layout over the same Storage. No numbers move (except reshape and
// contiguous, which copy only when no view can express the result). When the input requires
// grad (and grad mode is on) the returned view records a graph node; the backward rules live
// in tensor/view_backward.cpp. Also sum_to_size, expand's adjoint (its gradient rule).
module;
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr {

namespace {

bool records(const Tensor& input) { return autograd::any_requires_grad({input}); }

// A view that keeps the row-major order of the elements: its gradient is a reshape.
Tensor reshape_node(const char* op, const Tensor& input, Tensor view) {
  if (records(input)) view_autograd::record_reshape(op, input, view);
  return view;
}

// Wraps a possibly negative dim into [0, ndim). `ndim` may be one larger for unsqueeze.
std::int64_t wrap_dim(const char* op, std::int64_t d, std::int64_t ndim, const Shape& shape) {
  if (d < -ndim || d >= ndim) throw Error::dim_out_of_range(op, d, ndim, shape);
  return d < 0 ? d + ndim : d;
}

Tensor make_view(const Tensor& base, Layout layout) {
  return Tensor(base.storage(), std::move(layout), base.dtype());
}

// Resolves a single -1 in `shape` against `numel`.
Shape infer_size(const char* op, Shape shape, std::int64_t numel, const Shape& from) {
  std::int64_t known = 1;
  std::optional<std::size_t> infer;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer)
        throw Error(ErrorKind::shape, std::string(op) + ": only one dimension can be -1, got " + to_string(shape));
      infer = i;
    } else if (shape[i] < 0) {
      throw Error(ErrorKind::shape, std::string(op) + ": invalid size " + std::to_string(shape[i]) + " in " +
                                        to_string(shape));
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      throw Error(ErrorKind::shape, std::string(op) + ": shape " + to_string(shape) + " is invalid for input " +
                                        to_string(from) + " of size " + std::to_string(numel) +
                                        " (its size overflows int64)");
    }
  }
  if (infer) {
    if (known == 0 || numel % known != 0)
      throw Error(ErrorKind::shape, std::string(op) + ": shape " + to_string(shape) + " is invalid for input " +
                                        to_string(from) + " of size " + std::to_string(numel));
    shape[*infer] = numel / known;
  } else if (known != numel) {
    throw Error(ErrorKind::shape, std::string(op) + ": shape " + to_string(shape) + " is invalid for input " +
                                      to_string(from) + " of size " + std::to_string(numel));
  }
  return shape;
}

// Strides that let `new_shape` view a tensor of (old_shape, old_strides) without copying,
// or nullopt. The algorithm of PyTorch's at::detail::computeStride: walk both shapes from
// the innermost dim, matching chunks of old dims that are contiguous with each other.
std::optional<Shape> view_strides(const Shape& old_shape, const Shape& old_strides, const Shape& new_shape) {
  Shape out(new_shape.size(), 1);
  if (old_shape.empty()) return out;
  if (std::find(old_shape.begin(), old_shape.end(), 0) != old_shape.end()) {  // empty: any strides do
    if (old_shape == new_shape) return old_strides;
    return Layout::contiguous(new_shape).strides;
  }
  std::int64_t view_d = static_cast<std::int64_t>(new_shape.size()) - 1;
  std::int64_t chunk_base_stride = old_strides.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t td = static_cast<std::int64_t>(old_shape.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_shape[td];
    if (td == 0 || (old_shape[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor Tensor::view(Shape shape) const {
  const Impl& i = checked("view");
  Shape sizes = infer_size("view", std::move(shape), i.layout.numel(), i.layout.sizes);
  auto strides = view_strides(i.layout.sizes, i.layout.strides, sizes);
  if (!strides)
    throw Error(ErrorKind::shape, "view: shape " + to_string(sizes) + " cannot view a tensor of shape " +
                                      to_string(i.layout.sizes) + " with strides " + to_string(i.layout.strides) +
                                      " without a copy; use reshape()");
  return reshape_node("ViewBackward", *this, make_view(*this, Layout{std::move(sizes), std::move(*strides), i.layout.offset}));
}

Tensor Tensor::reshape(Shape shape) const {
  const Impl& i = checked("reshape");
  Shape sizes = infer_size("reshape", std::move(shape), i.layout.numel(), i.layout.sizes);
  if (auto strides = view_strides(i.layout.sizes, i.layout.strides, sizes))
    return reshape_node("ReshapeBackward", *this, make_view(*this, Layout{std::move(sizes), std::move(*strides), i.layout.offset}));
  Tensor copy;
  {
    NoGradGuard no_grad;
    copy = clone().view(std::move(sizes));
  }
  return reshape_node("ReshapeBackward", *this, copy);
}

Tensor Tensor::permute(Shape dims) const {
  const Impl& i = checked("permute");
  std::int64_t n = i.layout.dim();
  if (static_cast<std::int64_t>(dims.size()) != n)
    throw Error(ErrorKind::shape, "permute: " + to_string(dims) + " has " + std::to_string(dims.size()) +
                                      " dims, the tensor " + to_string(i.layout.sizes) + " has " + std::to_string(n));
  Layout l{Shape(n), Shape(n), i.layout.offset};
  std::vector<bool> seen(n, false);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t d = wrap_dim("permute", dims[k], n, i.layout.sizes);
    if (seen[d])
      throw Error(ErrorKind::shape, "permute: " + to_string(dims) + " repeats dim " + std::to_string(d));
    seen[d] = true;
    l.sizes[k] = i.layout.sizes[d];
    l.strides[k] = i.layout.strides[d];
    dims[k] = d;
  }
  Tensor out = make_view(*this, std::move(l));
  if (records(*this)) view_autograd::record_permute("PermuteBackward", *this, out, dims);
  return out;
}

Tensor Tensor::transpose(std::int64_t dim0, std::int64_t dim1) const {
  const Impl& i = checked("transpose");
  std::int64_t n = i.layout.dim();
  if (n == 0 && (dim0 == 0 || dim0 == -1) && (dim1 == 0 || dim1 == -1))
    return reshape_node("TransposeBackward", *this, make_view(*this, i.layout));
  std::int64_t a = wrap_dim("transpose", dim0, n, i.layout.sizes);
  std::int64_t b = wrap_dim("transpose", dim1, n, i.layout.sizes);
  Layout l = i.layout;
  std::swap(l.sizes[a], l.sizes[b]);
  std::swap(l.strides[a], l.strides[b]);
  Tensor out = make_view(*this, std::move(l));
  if (records(*this)) {
    Shape dims(static_cast<std::size_t>(n));
    for (std::int64_t k = 0; k < n; ++k) dims[k] = k;
    std::swap(dims[a], dims[b]);
    view_autograd::record_permute("TransposeBackward", *this, out, dims);
  }
  return out;
}

Tensor Tensor::t() const {
  std::int64_t n = checked("t").layout.dim();
  if (n > 2)
    throw Error(ErrorKind::shape, "t: expects a tensor with <= 2 dims, got shape " + to_string(shape()) +
                                      "; use transpose(dim0, dim1)");
  return n < 2 ? reshape_node("TBackward", *this, make_view(*this, layout())) : transpose(0, 1);
}

Tensor Tensor::slice(std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step) const {
  const Impl& i = checked("slice");
  std::int64_t n = i.layout.dim();
  if (n == 0) throw Error(ErrorKind::index, "slice: cannot slice a 0-d tensor");
  std::int64_t d = wrap_dim("slice", dim, n, i.layout.sizes);
  if (step <= 0)
    throw Error(ErrorKind::value, "slice: step must be positive, got " + std::to_string(step));
  std::int64_t size = i.layout.sizes[d];
  auto clamp = [size](std::int64_t v) {
    if (v < 0) v += size;
    return std::clamp<std::int64_t>(v, 0, size);
  };
  std::int64_t s = clamp(start), e = clamp(end);
  if (e < s) e = s;
  Layout l = i.layout;
  l.offset += s * l.strides[d];
  l.sizes[d] = e == s ? 0 : (e - s - 1) / step + 1;  // ceil((e - s) / step) without overflow
  l.strides[d] *= step;
  Tensor out = make_view(*this, std::move(l));
  if (records(*this)) view_autograd::record_slice(*this, out, d, s, e, step);
  return out;
}

Tensor Tensor::narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const {
  const Impl& i = checked("narrow");
  std::int64_t n = i.layout.dim();
  if (n == 0) throw Error(ErrorKind::index, "narrow: cannot narrow a 0-d tensor");
  std::int64_t d = wrap_dim("narrow", dim, n, i.layout.sizes);
  std::int64_t size = i.layout.sizes[d];
  std::int64_t s = start < 0 ? start + size : start;
  if (s < 0 || s > size || length < 0 || length > size - s)
    throw Error(ErrorKind::index, "narrow: start " + std::to_string(start) + " length " + std::to_string(length) +
                                      " is out of range for dim " + std::to_string(d) + " of size " +
                                      std::to_string(size) + " (shape " + to_string(i.layout.sizes) + ")");
  return slice(d, s, s + length);
}

Tensor Tensor::select(std::int64_t dim, std::int64_t index) const {
  const Impl& i = checked("select");
  std::int64_t n = i.layout.dim();
  if (n == 0) throw Error(ErrorKind::index, "select: cannot select on a 0-d tensor");
  std::int64_t d = wrap_dim("select", dim, n, i.layout.sizes);
  std::int64_t size = i.layout.sizes[d];
  if (index < -size || index >= size)
    throw Error(ErrorKind::index, "select: index " + std::to_string(index) + " is out of range for dim " +
                                      std::to_string(d) + " of size " + std::to_string(size) + " (shape " +
                                      to_string(i.layout.sizes) + ")");
  if (index < 0) index += size;
  Layout l = i.layout;
  l.offset += index * l.strides[d];
  l.sizes.erase(l.sizes.begin() + d);
  l.strides.erase(l.strides.begin() + d);
  Tensor out = make_view(*this, std::move(l));
  if (records(*this)) view_autograd::record_select(*this, out, d, index);
  return out;
}

Tensor Tensor::expand(Shape shape) const {
  const Impl& i = checked("expand");
  std::int64_t n = i.layout.dim();
  std::int64_t m = static_cast<std::int64_t>(shape.size());
  auto fail = [&](const std::string& why) {
    return Error(ErrorKind::shape, "expand: cannot expand shape " + to_string(i.layout.sizes) + " to " +
                                       to_string(shape) + ": " + why);
  };
  if (m < n) throw fail("the target has fewer dims");
  Layout l{Shape(m), Shape(m), i.layout.offset};
  for (std::int64_t k = m - 1; k >= 0; --k) {
    std::int64_t od = k - (m - n);  // matching old dim, from the right
    std::int64_t want = shape[k];
    if (od < 0) {
      if (want < 0) throw fail("size " + std::to_string(want) + " for a new leading dim");
      l.sizes[k] = want;
      l.strides[k] = 0;
      continue;
    }
    std::int64_t have = i.layout.sizes[od];
    if (want == -1 || want == have) {
      l.sizes[k] = have;
      l.strides[k] = i.layout.strides[od];
    } else if (have == 1 && want >= 0) {
      l.sizes[k] = want;
      l.strides[k] = 0;
    } else {
      throw fail("dim " + std::to_string(k) + " has size " + std::to_string(have) + ", which is not 1 and not " +
                 std::to_string(want));
    }
  }
  Tensor out = make_view(*this, std::move(l));
  if (records(*this)) view_autograd::record_expand(*this, out);
  return out;
}

Tensor Tensor::broadcast_to(Shape shape) const {
  checked("broadcast_to");
  try {
    return expand(shape);
  } catch (const Error& e) {
    throw Error(ErrorKind::shape, "broadcast_to: shape " + to_string(this->shape()) + " cannot broadcast to " +
                                      to_string(shape) + " (NumPy rules: align from the right; each size must "
                                      "match or be 1)");
  }
}

Tensor Tensor::squeeze() const {
  const Impl& i = checked("squeeze");
  Layout l{{}, {}, i.layout.offset};
  for (std::size_t k = 0; k < i.layout.sizes.size(); ++k)
    if (i.layout.sizes[k] != 1) {
      l.sizes.push_back(i.layout.sizes[k]);
      l.strides.push_back(i.layout.strides[k]);
    }
  return reshape_node("SqueezeBackward", *this, make_view(*this, std::move(l)));
}

Tensor Tensor::squeeze(std::int64_t dim) const {
  const Impl& i = checked("squeeze");
  std::int64_t n = i.layout.dim();
  if (n == 0 && (dim == 0 || dim == -1)) return reshape_node("SqueezeBackward", *this, make_view(*this, i.layout));
  std::int64_t d = wrap_dim("squeeze", dim, n, i.layout.sizes);
  Layout l = i.layout;
  if (l.sizes[d] == 1) {
    l.sizes.erase(l.sizes.begin() + d);
    l.strides.erase(l.strides.begin() + d);
  }
  return reshape_node("SqueezeBackward", *this, make_view(*this, std::move(l)));
}

Tensor Tensor::unsqueeze(std::int64_t dim) const {
  const Impl& i = checked("unsqueeze");
  std::int64_t n = i.layout.dim();
  std::int64_t d = wrap_dim("unsqueeze", dim, n + 1, i.layout.sizes);
  Layout l = i.layout;
  // The new dim's stride: as if contiguous over the dims to its right.
  std::int64_t stride = d < n ? l.sizes[d] * l.strides[d] : 1;
  l.sizes.insert(l.sizes.begin() + d, 1);
  l.strides.insert(l.strides.begin() + d, stride);
  return reshape_node("UnsqueezeBackward", *this, make_view(*this, std::move(l)));
}

Tensor Tensor::flatten(std::int64_t start_dim, std::int64_t end_dim) const {
  const Impl& i = checked("flatten");
  std::int64_t n = i.layout.dim();
  if (n == 0) return reshape({1});
  std::int64_t s = wrap_dim("flatten", start_dim, n, i.layout.sizes);
  std::int64_t e = wrap_dim("flatten", end_dim, n, i.layout.sizes);
  if (s > e)
    throw Error(ErrorKind::index, "flatten: start_dim " + std::to_string(start_dim) + " comes after end_dim " +
                                      std::to_string(end_dim) + " for shape " + to_string(i.layout.sizes));
  if (s == e) return reshape_node("FlattenBackward", *this, make_view(*this, i.layout));
  Shape sizes(i.layout.sizes.begin(), i.layout.sizes.begin() + s);
  std::int64_t merged = 1;
  for (std::int64_t k = s; k <= e; ++k) merged *= i.layout.sizes[k];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), i.layout.sizes.begin() + e + 1, i.layout.sizes.end());
  return reshape(std::move(sizes));
}

Tensor Tensor::as_strided(Shape sizes, Shape strides, std::int64_t offset) const {
  checked("as_strided");
  if (offset < 0)
    throw Error(ErrorKind::index, "as_strided: negative offset " + std::to_string(offset));
  Tensor out;
  try {
    out = make_view(*this, Layout{std::move(sizes), std::move(strides), offset});
  } catch (const Error& e) {  // the layout checks of Tensor's constructor, named after this op
    std::string what = e.what();
    if (what.rfind("Tensor: ", 0) == 0) what.erase(0, 8);
    throw Error(e.kind(), "as_strided: " + what);
  }
  if (records(*this)) view_autograd::record_as_strided(*this, out);
  return out;
}

Tensor Tensor::contiguous() const {
  if (checked("contiguous").layout.is_contiguous()) return *this;
  Tensor out;
  {
    NoGradGuard no_grad;  // clone() may record a node of its own one day; this one is enough
    out = clone();
  }
  if (records(*this)) view_autograd::record_identity("ContiguousBackward", *this, out);
  return out;
}

Tensor sum_to_size(const Tensor& x, const Shape& shape) {
  if (!x.defined()) throw Error(ErrorKind::value, "sum_to_size: input is an undefined tensor");
  const Shape& in = x.shape();
  auto not_expandable = [&] {
    return Error(ErrorKind::shape, "sum_to_size: size " + to_string(shape) + " is not expandable to size " +
                                       to_string(in) + " of the input");
  };
  if (in.size() > 32) throw Error(ErrorKind::shape, "sum_to_size: more than 32 dims");
  if (shape.size() > in.size()) throw not_expandable();
  const std::size_t lead = in.size() - shape.size();
  std::uint32_t mask = 0;  // the dims summed: the leading extra ones and those of size 1 in `shape`
  Shape kept(in.size());   // the sum with those dims kept as 1
  for (std::size_t d = 0; d < in.size(); ++d) {
    kept[d] = in[d];
    if (d >= lead) {
      const std::int64_t want = shape[d - lead];
      if (want == in[d]) continue;
      if (want != 1) throw not_expandable();
    }
    mask |= 1u << d;
    kept[d] = 1;
  }
  if (mask == 0) return x;
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty(kept, {.dtype = is_floating_point(x.dtype()) ? x.dtype() : DType::i64, .device = x.device()});
    if (out.numel() > 0)
      backend::backend_for(x.device())
          .reduce(backend::ReduceOp::sum, backend::output(out, "sum_to_size"), backend::input(x, "sum_to_size"),
                  mask, nullptr);
    out = out.view(shape);
  }
  if (autograd::any_requires_grad({x}) && is_floating_point(x.dtype()))
    autograd::record("SumToSizeBackward", {x}, {out},
                     [in](const autograd::Backward& b) { return autograd::Grads{b.grad().expand(in)}; });
  return out;
}

}  // namespace brrr
