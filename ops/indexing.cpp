// LibTorch's indexing, x.index({...}) and x.index_put_({...}, v), as ops of other ops:
// integers, slices, None and Ellipsis are views (select, slice, unsqueeze); index tensors
// (advanced indexing, NumPy's rules) are one index_select over the indexed dims merged into
// one, whose linear index is sum_j idx_j * (product of the later indexed sizes); a bool mask
// is the index tensors of its true positions. index_put_ writes through update() (the
// in-place rules, ops/inplace.cpp): the positions x[indices] are found by indexing an
// arange of x's numel with the same indices, then one scatter_add writes them.
module;
#include <cstdint>
#include <limits>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;

namespace brrr {

using namespace ops_detail;
using indexing::TensorIndex;
using Kind = indexing::TensorIndex::Kind;

namespace {

std::string index_list_text(const std::vector<TensorIndex>& indices) {
  std::string s = "{";
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const TensorIndex& t = indices[i];
    if (i) s += ", ";
    switch (t.kind()) {
      case Kind::integer: s += std::to_string(t.integer()); break;
      case Kind::slice: s += "Slice"; break;
      case Kind::none: s += "None"; break;
      case Kind::ellipsis: s += "Ellipsis"; break;
      case Kind::tensor: s += describe(t.tensor()); break;
    }
  }
  return s + "}";
}

// The i64 index tensors of a bool mask's true positions, one per mask dim (a host sync).
std::vector<Tensor> mask_positions(const Tensor& mask, Device device) {
  std::vector<bool> bits = mask.to(Device::cpu()).contiguous().to_host<bool>();
  const Shape& shape = mask.shape();
  std::vector<std::vector<std::int64_t>> pos(shape.size());
  for (std::size_t flat = 0; flat < bits.size(); ++flat) {
    if (!bits[flat]) continue;
    std::size_t rest = flat;
    for (std::size_t d = shape.size(); d-- > 0;) {
      pos[d].push_back(static_cast<std::int64_t>(rest % static_cast<std::size_t>(shape[d])));
      rest /= static_cast<std::size_t>(shape[d]);
    }
  }
  std::vector<Tensor> out;
  for (auto& p : pos) out.push_back(Tensor::from_vector(p).to(device));
  return out;
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  NvtxRange range("index");
  require_defined("index", x);
  // How many dims of x the list consumes (None and Ellipsis none).
  std::int64_t consumed = 0, ellipses = 0;
  for (const TensorIndex& t : indices) {
    if (t.kind() == Kind::integer || t.kind() == Kind::slice) ++consumed;
    if (t.kind() == Kind::ellipsis) ++ellipses;
    if (t.kind() == Kind::tensor) {
      const Tensor& i = t.tensor();
      require_defined("index", i, "index tensor");
      if (i.dtype() == DType::boolean) {
        if (i.dim() == 0) throw Error(ErrorKind::value, "index: a 0-d bool index is not supported");
        consumed += i.dim();
      } else if (i.dtype() == DType::i64 || i.dtype() == DType::i32) {
        ++consumed;
      } else {
        throw Error::dtype_not_supported("index", "index tensors must be i64, i32 or bool", i);
      }
      if (i.device() != x.device())
        throw Error(ErrorKind::device, "index: index tensor " + describe(i) + " is not on the device of " +
                                           describe(x));
    }
  }
  if (ellipses > 1) throw Error(ErrorKind::index, "index: an index can only have a single Ellipsis");
  if (consumed > x.dim())
    throw Error(ErrorKind::index, "index: too many indices " + index_list_text(indices) + " for a " +
                                      std::to_string(x.dim()) + "-d tensor of shape " + to_string(x.shape()));

  // Basic indexing (views), keeping the dims that index tensors index for the second step.
  Tensor out = x;
  std::int64_t d = 0;  // the next dim of `out`
  std::vector<std::int64_t> dims;  // dims of `out` indexed by `tensors`
  std::vector<Tensor> tensors;
  for (const TensorIndex& t : indices) {
    switch (t.kind()) {
      case Kind::integer: {
        std::int64_t size = out.size(d), i = t.integer();
        if (i < -size || i >= size)
          throw Error(ErrorKind::index, "index: index " + std::to_string(i) + " is out of range for dim " +
                                            std::to_string(d) + " of size " + std::to_string(size) +
                                            " (tensor of shape " + to_string(x.shape()) + ")");
        out = out.select(d, i);
        break;
      }
      case Kind::slice: {
        const indexing::Slice& s = t.slice();
        out = out.slice(d, s.start.value_or(0), s.stop.value_or(std::numeric_limits<std::int64_t>::max()),
                        s.step.value_or(1));
        ++d;
        break;
      }
      case Kind::none: out = out.unsqueeze(d++); break;
      case Kind::ellipsis: d += x.dim() - consumed; break;
      case Kind::tensor: {
        const Tensor& i = t.tensor();
        if (i.dtype() == DType::boolean) {
          for (std::int64_t k = 0; k < i.dim(); ++k)
            if (i.size(k) != out.size(d + k))
              throw Error(ErrorKind::shape, "index: the mask " + describe(i) + " does not match the indexed dims " +
                                                std::to_string(d) + ".." + std::to_string(d + i.dim() - 1) +
                                                " of the tensor of shape " + to_string(x.shape()));
          for (Tensor& p : mask_positions(i, x.device())) {
            dims.push_back(d++);
            tensors.push_back(std::move(p));
          }
        } else {
          dims.push_back(d++);
          tensors.push_back(i);
        }
        break;
      }
    }
  }
  if (tensors.empty()) return out;

  // Advanced indexing: broadcast the index tensors, check and wrap each against its dim (an
  // index_select of arange does the range check, on either backend), merge them into one
  // linear index over the indexed dims moved to the front.
  Shape b = tensors[0].shape();
  for (const Tensor& t : tensors) b = broadcast_shapes(b, t.shape(), "index");
  Tensor linear;
  std::int64_t merged = 1;
  for (std::size_t j = tensors.size(); j-- > 0;) {
    std::int64_t size = out.size(dims[j]);
    Tensor i = tensors[j].to(DType::i64);
    i = where(lt(i, 0), add(i, size), i);
    Tensor checked = index_select(arange(size, {.dtype = DType::i64, .device = x.device()}), 0, i.reshape({-1}));
    Tensor term = mul(checked.view(i.shape()), merged).broadcast_to(b);
    linear = linear.defined() ? add(linear, term) : term;
    merged *= size;
  }
  Shape perm(dims.begin(), dims.end()), rest;
  for (std::int64_t k = 0; k < out.dim(); ++k) {
    bool indexed = false;
    for (std::int64_t dk : dims) indexed = indexed || dk == k;
    if (!indexed) {
      perm.push_back(k);
      rest.push_back(out.size(k));
    }
  }
  Shape front = rest;
  front.insert(front.begin(), merged);
  Tensor picked = index_select(out.permute(perm).reshape(front), 0, linear.reshape({-1}));
  Shape shape = b;
  shape.insert(shape.end(), rest.begin(), rest.end());
  picked = picked.reshape(shape);
  // Adjacent indexed dims keep their place (NumPy); separated ones stay in front.
  bool adjacent = true;
  for (std::size_t j = 1; j < dims.size(); ++j) adjacent = adjacent && dims[j] == dims[j - 1] + 1;
  if (!adjacent || dims[0] == 0) return picked;
  const std::int64_t nb = static_cast<std::int64_t>(b.size()), at = dims[0];
  Shape order;
  for (std::int64_t k = 0; k < at; ++k) order.push_back(nb + k);
  for (std::int64_t k = 0; k < nb; ++k) order.push_back(k);
  for (std::int64_t k = nb + at; k < picked.dim(); ++k) order.push_back(k);
  return picked.permute(order);
}

namespace {

bool has_tensor(const std::vector<TensorIndex>& indices) {
  for (const TensorIndex& t : indices)
    if (t.kind() == Kind::tensor) return true;
  return false;
}

}  // namespace

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& values,
                         bool accumulate) {
  NvtxRange range("index_put_");
  require_defined("index_put_", x);
  require_defined("index_put_", values, "values");
  if (values.device() != x.device() && !is_wrapped_number(values))
    throw Error(ErrorKind::device, "index_put_: values " + describe(values) + " are not on the device of " +
                                       describe(x));
  const bool record = autograd::is_grad_enabled() && (x.requires_grad() || values.requires_grad());
  if (!record && !accumulate && !has_tensor(indices)) {  // a view: copy into it
    NoGradGuard no_grad;
    index(x, indices).copy_(values);
    return x;
  }
  Tensor positions;
  {
    NoGradGuard no_grad;
    positions = index(arange(x.numel(), {.dtype = DType::i64, .device = x.device()}).view(x.shape()), indices);
  }
  return update("index_put_", x, values, [&](const Tensor& v) {
    Tensor lin = positions.reshape({-1});
    Tensor vals;
    try {
      vals = values.to(x.dtype()).broadcast_to(positions.shape()).reshape({-1});
    } catch (const Error&) {
      throw Error(ErrorKind::shape, "index_put_: values " + describe(values) + " cannot broadcast to the indexed " +
                                        "shape " + to_string(positions.shape()) + " of " + describe(x));
    }
    Tensor flat = v.reshape({-1});
    if (!accumulate) {  // the written positions are replaced, not added to
      Tensor hit;
      {
        NoGradGuard no_grad;
        hit = gt(scatter_add(zeros({x.numel()}, {.device = x.device()}), 0, lin,
                             ones({lin.numel()}, {.device = x.device()})),
                 0.0);
      }
      flat = where(hit, zeros_like(flat), flat);
    }
    return scatter_add(flat, 0, lin, vals).view(x.shape());
  }, {});
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, Scalar value) {
  require_defined("index_put_", x);
  // x.index_put_({mask}, v) with a mask of x's shape: masked_fill, without the host sync of
  // finding the mask's positions.
  if (indices.size() == 1 && indices[0].kind() == Kind::tensor && indices[0].tensor().dtype() == DType::boolean &&
      indices[0].tensor().shape() == x.shape()) {
    const Tensor mask = indices[0].tensor();
    NvtxRange range("index_put_");
    return update("index_put_", x, {}, [&](const Tensor& v) { return masked_fill(v, mask, value); }, {});
  }
  return index_put_(x, indices, full({}, value.value, {.dtype = x.dtype(), .device = x.device()}), false);
}

}  // namespace brrr
