// Sorting and what is built on it: sort, argsort, topk, kthvalue, median, mode, unique,
// bincount, searchsorted. One backend sort (stable, NaN largest) over the dim moved last, and
// the backend's topk (its first k columns, selected before sorting); the others are
// compositions. The gradient of the sorted values (and of topk, kthvalue, median,
// mode) goes back to the positions the values came from (a scatter_add of the indices). unique and
// bincount have data-dependent output sizes: they read a count back to the host (one counted
// sync on CUDA, backend::note_sync via item/to_host).
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

namespace brrr {

using namespace ops_detail;
using autograd::Backward;
using autograd::Grads;

namespace {

// values and indices of x sorted along d, never recorded.
ValuesIndices sort_forward(const Tensor& x, std::int64_t d, bool descending) {
  NoGradGuard no_grad;
  if (x.dim() == 0) return {x.clone(), zeros({}, {.dtype = DType::i64, .device = x.device()})};
  const std::int64_t last = x.dim() - 1;
  Tensor moved = (d == last ? x : x.transpose(d, last)).contiguous();
  Tensor values = empty(moved.shape(), {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(moved.shape(), {.dtype = DType::i64, .device = x.device()});
  if (values.numel() > 0)
    backend::backend_for(x.device()).sort(backend::output(values, "sort"), backend::output(indices, "sort"),
                                          backend::input(moved, "sort"), descending);
  if (d != last) return {values.transpose(d, last), indices.transpose(d, last)};
  return {values, indices};
}

// The first k of sort_forward(x, d, largest) along d (x at least 1-D), never recorded: the
// backend's topk, which selects before it sorts.
ValuesIndices topk_forward(const Tensor& x, std::int64_t k, std::int64_t d, bool largest) {
  NoGradGuard no_grad;
  const std::int64_t last = x.dim() - 1;
  Tensor moved = (d == last ? x : x.transpose(d, last)).contiguous();
  Shape shape = moved.shape();
  shape.back() = k;
  Tensor values = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(shape, {.dtype = DType::i64, .device = x.device()});
  if (values.numel() > 0)
    backend::backend_for(x.device()).topk(backend::output(values, "topk"), backend::output(indices, "topk"),
                                          backend::input(moved, "topk"), k, largest);
  if (d != last) return {values.transpose(d, last), indices.transpose(d, last)};
  return {values, indices};
}

// Records values = x gathered at `indices` along d: the gradient scattered back.
void record_picked(const char* node, const Tensor& x, const Tensor& values, const Tensor& indices, std::int64_t d) {
  if (!autograd::any_requires_grad({x}) || !is_floating_point(x.dtype())) return;
  autograd::record(node, {x}, {values}, {indices}, [d, shape = x.shape()](const Backward& b) {
    if (shape.empty()) return Grads{b.grad()};
    return Grads{scatter_add(zeros(shape, {.dtype = b.grad().dtype(), .device = b.grad().device()}), d, b.saved(0),
                             b.grad())};
  });
}

// Records r.values = x at r.indices along d (reduced away unless keepdim): the gradient goes
// back to those positions.
void record_reduced(const char* node, const Tensor& x, const ValuesIndices& r, std::int64_t d, bool keepdim) {
  if (!autograd::any_requires_grad({x}) || !is_floating_point(x.dtype())) return;
  autograd::record(node, {x}, {r.values}, {r.indices}, [d, keepdim, shape = x.shape()](const Backward& b) {
    if (shape.empty()) return Grads{b.grad()};
    Tensor g = keepdim ? b.grad() : b.grad().unsqueeze(d);
    Tensor idx = keepdim ? b.saved(0) : b.saved(0).unsqueeze(d);
    return Grads{scatter_add(zeros(shape, {.dtype = g.dtype(), .device = g.device()}), d, idx, g)};
  });
}

}  // namespace

ValuesIndices sort(const Tensor& x, std::int64_t dim, bool descending, bool stable) {
  NvtxRange range("sort");
  require_defined("sort", x);
  (void)stable;  // always stable
  const std::int64_t d = wrap_dim("sort", dim, x.dim(), x.shape());
  ValuesIndices r = sort_forward(x, d, descending);
  record_picked("SortBackward", x, r.values, r.indices, d);
  return r;
}

Tensor argsort(const Tensor& x, std::int64_t dim, bool descending, bool stable) {
  NvtxRange range("argsort");
  require_defined("argsort", x);
  (void)stable;
  return sort_forward(x, wrap_dim("argsort", dim, x.dim(), x.shape()), descending).indices;
}

ValuesIndices topk(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest, bool sorted) {
  NvtxRange range("topk");
  require_defined("topk", x);
  const std::int64_t d = wrap_dim("topk", dim, x.dim(), x.shape());
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 0 || k > n)
    throw Error(ErrorKind::index, "topk: k = " + std::to_string(k) + " is out of range for dim " + std::to_string(d) +
                                      " of size " + std::to_string(n) + " (shape " + to_string(x.shape()) + ")");
  (void)sorted;  // always sorted
  ValuesIndices r = x.dim() == 0 ? sort_forward(x, d, largest) : topk_forward(x, k, d, largest);
  record_picked("TopkBackward", x, r.values, r.indices, d);
  return r;
}

namespace {
// The element of rank `k` (0-based, ascending) along d.
ValuesIndices ranked(const char* name, const char* node, const Tensor& x, std::int64_t k, std::int64_t d, bool keepdim) {
  ValuesIndices r;
  {
    ValuesIndices s = sort_forward(x, d, false);
    NoGradGuard no_grad;
    if (x.dim() == 0) {
      r = s;
    } else {
      r = {s.values.narrow(d, k, 1), s.indices.narrow(d, k, 1)};
      if (!keepdim) r = {r.values.squeeze(d), r.indices.squeeze(d)};
    }
  }
  record_reduced(node, x, r, d, keepdim);
  (void)name;
  return r;
}
}  // namespace

ValuesIndices kthvalue(const Tensor& x, std::int64_t k, std::int64_t dim, bool keepdim) {
  NvtxRange range("kthvalue");
  require_defined("kthvalue", x);
  const std::int64_t d = wrap_dim("kthvalue", dim, x.dim(), x.shape());
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (k < 1 || k > n)
    throw Error(ErrorKind::index, "kthvalue: k = " + std::to_string(k) + " is out of range for dim " +
                                      std::to_string(d) + " of size " + std::to_string(n) + " (expected [1, " +
                                      std::to_string(n) + "])");
  return ranked("kthvalue", "KthvalueBackward", x, k - 1, d, keepdim);
}

ValuesIndices median(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("median");
  require_defined("median", x);
  const std::int64_t d = wrap_dim("median", dim, x.dim(), x.shape());
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (n == 0) throw Error(ErrorKind::value, "median: cannot reduce dim " + std::to_string(d) + " of size 0 (shape " + to_string(x.shape()) + ")");
  // The lower median; NaN sorts last, so a line holding a NaN has its first NaN picked
  // instead (PyTorch: median propagates NaN).
  if (!is_floating_point(x.dtype()) || x.dim() == 0) return ranked("median", "MedianBackward", x, (n - 1) / 2, d, keepdim);
  Tensor nan_count, first_nan;
  {
    NoGradGuard no_grad;
    Tensor isn = isnan(x);
    nan_count = sum(isn, {d}, true);
    first_nan = sub(Scalar(n), nan_count);  // sorted position of the first NaN: n - count
  }
  // rank = count > 0 ? n - count : (n - 1) / 2, per line: gather it from the sorted values.
  ValuesIndices s = sort_forward(x, d, false);
  Tensor rank;
  {
    NoGradGuard no_grad;
    rank = where(gt(nan_count, 0), first_nan, full_like(nan_count, static_cast<double>((n - 1) / 2)));
  }
  ValuesIndices r;
  {
    NoGradGuard no_grad;
    r = {gather(s.values, d, rank), gather(s.indices, d, rank)};
    if (!keepdim) r = {r.values.squeeze(d), r.indices.squeeze(d)};
  }
  record_reduced("MedianBackward", x, r, d, keepdim);
  return r;
}

Tensor median(const Tensor& x) {
  NvtxRange range("median");
  require_defined("median", x);
  if (x.numel() == 0) return full({}, std::numeric_limits<double>::quiet_NaN(), {.dtype = x.dtype(), .device = x.device()});
  return median(x.reshape({-1}), 0, false).values;
}

ValuesIndices mode(const Tensor& x, std::int64_t dim, bool keepdim) {
  NvtxRange range("mode");
  require_defined("mode", x);
  const std::int64_t d = wrap_dim("mode", dim, x.dim(), x.shape());
  const std::int64_t n = x.dim() == 0 ? 1 : x.size(d);
  if (n == 0)
    throw Error(ErrorKind::value, "mode: cannot reduce dim " + std::to_string(d) + " of size 0 (shape " +
                                      to_string(x.shape()) + ")");
  // Sorted (stably), equal values form runs whose last element is the value's last position
  // in x. The running length of each run peaks at that last element; the first peak of the
  // longest run is the smallest most frequent value.
  ValuesIndices s = sort_forward(x, d, false);
  ValuesIndices r;
  {
    NoGradGuard no_grad;
    if (x.dim() == 0) {
      r = s;
    } else {
      const TensorOptions i64{.dtype = DType::i64, .device = x.device()};
      Shape line(static_cast<std::size_t>(x.dim()), 1);
      line[static_cast<std::size_t>(d)] = n;
      Tensor pos = arange(n, i64).reshape(line);
      Tensor starts = pos;  // where(run starts here, position, 0)
      if (n > 1) {
        Tensor prev = s.values.narrow(d, 0, n - 1), cur = s.values.narrow(d, 1, n - 1);
        Tensor differs = ne(cur, prev);
        if (is_floating_point(x.dtype()))  // NaNs (sorted last) count as one value
          differs = logical_and(differs, logical_not(logical_and(isnan(cur), isnan(prev))));
        Tensor first = ones(s.values.narrow(d, 0, 1).shape(), {.dtype = DType::boolean, .device = x.device()});
        starts = where(cat({first, differs}, d), pos, zeros({}, i64));
      }
      Tensor run_length = add(sub(pos, cummax(starts.expand(s.values.shape()), d).values), 1);
      Tensor best = argmax(run_length, d, true);
      r = {gather(s.values, d, best), gather(s.indices, d, best)};
      if (!keepdim) r = {r.values.squeeze(d), r.indices.squeeze(d)};
    }
  }
  record_reduced("ModeBackward", x, r, d, keepdim);
  return r;
}

UniqueResult unique(const Tensor& x, bool sorted, bool return_inverse, bool return_counts) {
  NvtxRange range("unique");
  require_defined("unique", x);
  (void)sorted;  // always sorted (as PyTorch's CUDA unique, and its CPU one for sorted = true)
  NoGradGuard no_grad;
  const Device dev = x.device();
  Tensor flat = x.reshape({-1});
  const std::int64_t n = flat.numel();
  UniqueResult r;
  if (n == 0) {
    r.values = empty({0}, {.dtype = x.dtype(), .device = dev});
    if (return_inverse) r.inverse = empty(x.shape(), {.dtype = DType::i64, .device = dev});
    if (return_counts) r.counts = empty({0}, {.dtype = DType::i64, .device = dev});
    return r;
  }
  ValuesIndices s = sort_forward(flat, 0, false);
  // A new value starts where it differs from its predecessor (NaN differs from NaN: each
  // NaN is its own value, as PyTorch's).
  Tensor starts = cat({ones({1}, {.dtype = DType::boolean, .device = dev}), ne(s.values.narrow(0, 1, n - 1), s.values.narrow(0, 0, n - 1))});
  Tensor group = sub(cumsum(starts, 0), 1);  // i64: each sorted element's unique slot
  const std::int64_t count = group.narrow(0, n - 1, 1).reshape({}).item<std::int64_t>() + 1;  // the host sync
  // Slot of each unique value: written once (at its start), zeros elsewhere added to it.
  Tensor picked = where(starts, s.values, zeros({}, {.dtype = x.dtype(), .device = dev}));
  r.values = scatter_add(zeros({count}, {.dtype = x.dtype(), .device = dev}), 0, group, picked);
  if (return_inverse)
    r.inverse = scatter_add(zeros({n}, {.dtype = DType::i64, .device = dev}), 0, s.indices, group).reshape(x.shape());
  if (return_counts)
    r.counts = scatter_add(zeros({count}, {.dtype = DType::i64, .device = dev}), 0, group,
                           ones({n}, {.dtype = DType::i64, .device = dev}));
  return r;
}

Tensor bincount(const Tensor& input, const Tensor& weights, std::int64_t minlength) {
  NvtxRange range("bincount");
  require_defined("bincount", input);
  if (input.dtype() != DType::i32 && input.dtype() != DType::i64 && input.dtype() != DType::boolean)
    throw Error::dtype_not_supported("bincount", "input must hold non-negative integers (i32, i64 or bool)", input);
  if (input.dim() != 1) throw Error(ErrorKind::shape, "bincount: input must be 1-D, got " + describe(input));
  if (minlength < 0) throw Error::bad_value("bincount", "minlength", static_cast<double>(minlength), "non-negative");
  if (weights.defined()) {
    common_device("bincount", {input, weights});
    if (weights.shape() != input.shape())
      throw Error::shape_mismatch("bincount", input.shape(), weights.shape(), "(input, weights) must be equal");
  }
  NoGradGuard no_grad;
  const Device dev = input.device();
  Tensor idx = input.to(DType::i64);
  std::int64_t size = minlength;
  if (idx.numel() > 0) {
    // One read-back of (min, max): the output size depends on the data (a counted sync on CUDA).
    std::vector<std::int64_t> mm = stack({amin(idx, {0}), amax(idx, {0})}).to(Device::cpu()).to_host<std::int64_t>();
    if (mm[0] < 0) throw Error(ErrorKind::value, "bincount: input must be non-negative, got " + std::to_string(mm[0]));
    size = std::max(size, mm[1] + 1);
  }
  const DType dt = weights.defined() ? (is_floating_point(weights.dtype()) ? weights.dtype() : DType::f64) : DType::i64;
  Tensor src = weights.defined() ? weights.to(dt) : ones(idx.shape(), {.dtype = DType::i64, .device = dev});
  return scatter_add(zeros({size}, {.dtype = dt, .device = dev}), 0, idx, src);
}

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right) {
  NvtxRange range("searchsorted");
  require_defined("searchsorted", sorted_sequence, "sorted_sequence");
  require_defined("searchsorted", values, "values");
  const Device dev = common_device("searchsorted", {sorted_sequence, values});
  const Tensor& s = sorted_sequence;
  if (s.dim() == 0) throw Error(ErrorKind::shape, "searchsorted: sorted_sequence must have at least 1 dim, got a 0-d tensor");
  // 1-D sequences serve every value; N-D ones match values' leading dims.
  if (s.dim() > 1) {
    Shape lead_s(s.shape().begin(), s.shape().end() - 1), lead_v = values.shape();
    if (!lead_v.empty()) lead_v.pop_back();
    if (values.dim() == 0 || lead_s != lead_v)
      throw Error::shape_mismatch("searchsorted", s.shape(), values.shape(),
                                  "(sorted_sequence, values): the leading dims must be equal for an N-D sequence");
  }
  NoGradGuard no_grad;
  const DType dt = promote_types(s.dtype(), values.dtype());
  const std::int64_t n = s.size(-1);
  Tensor ss = s.to(dt).contiguous().reshape({s.dim() == 1 ? 1 : s.numel() / std::max<std::int64_t>(n, 1), n});
  const std::int64_t m = values.dim() == 0 ? 1 : values.size(-1);
  const std::int64_t vrows = s.dim() == 1 ? (m == 0 ? 0 : values.numel() / m) : ss.size(0);
  Tensor vv = values.to(dt).contiguous().reshape({vrows, m});
  Tensor out = empty({vrows, m}, {.dtype = DType::i64, .device = dev});
  if (out.numel() > 0)
    backend::backend_for(dev).searchsorted(backend::output(out, "searchsorted"), backend::input(ss, "searchsorted"),
                                           backend::input(vv, "searchsorted"), right);
  out = out.reshape(values.shape());
  return out_int32 ? out.to(DType::i32) : out;
}

}  // namespace brrr
