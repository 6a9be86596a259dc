// Shape ops made of views, copies and gathers: repeat, tile, repeat_interleave, roll,
// diagonal, diag, trace, unbind, movedim, unflatten, tensor_split, meshgrid,
// take_along_dim. Compositions of recorded ops and views (their gradients come from those).
module;
#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

Tensor repeat(const Tensor& x, const std::vector<std::int64_t>& repeats) {
  NvtxRange range("repeat");
  require_defined("repeat", x);
  const std::size_t nd = repeats.size();
  if (nd < static_cast<std::size_t>(x.dim()))
    throw Error(ErrorKind::shape, "repeat: " + std::to_string(nd) + " repeats for a " + std::to_string(x.dim()) +
                                      "-d tensor (need at least one per dim)");
  for (auto r : repeats)
    if (r < 0) throw Error::bad_value("repeat", "repeats", static_cast<double>(r), "non-negative");
  // x as [1, s0, 1, s1, ...] (leading dims of size 1), expanded to [r0, s0, r1, s1, ...].
  Shape padded(nd - static_cast<std::size_t>(x.dim()), 1);
  padded.insert(padded.end(), x.shape().begin(), x.shape().end());
  Shape interleaved, expanded, out;
  for (std::size_t i = 0; i < nd; ++i) {
    interleaved.insert(interleaved.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    std::int64_t size = 0;
    if (__builtin_mul_overflow(repeats[i], padded[i], &size))
      throw Error(ErrorKind::value, "repeat: repeats " + to_string(Shape(repeats)) + " of " + describe(x) +
                                        " give a dim past 2^63 elements");
    out.push_back(size);
  }
  return x.reshape(interleaved).expand(expanded).contiguous().reshape(out);
}

Tensor tile(const Tensor& x, std::vector<std::int64_t> reps) {
  require_defined("tile", x);
  while (reps.size() < static_cast<std::size_t>(x.dim())) reps.insert(reps.begin(), 1);
  return repeat(x, reps);
}

Tensor repeat_interleave(const Tensor& x, std::int64_t repeats, std::optional<std::int64_t> dim) {
  NvtxRange range("repeat_interleave");
  require_defined("repeat_interleave", x);
  if (repeats < 0) throw Error::bad_value("repeat_interleave", "repeats", static_cast<double>(repeats), "non-negative");
  Tensor t = dim ? x : x.reshape({-1});
  const std::int64_t d = dim ? wrap_dim("repeat_interleave", *dim, t.dim(), t.shape()) : 0;
  if (t.dim() == 0) t = t.reshape({1});
  Shape e = t.shape();
  e.insert(e.begin() + d + 1, repeats);
  Shape out = t.shape();
  if (__builtin_mul_overflow(out[static_cast<std::size_t>(d)], repeats, &out[static_cast<std::size_t>(d)]))
    throw Error(ErrorKind::value, "repeat_interleave: repeats " + std::to_string(repeats) + " of dim " +
                                      std::to_string(d) + " of " + describe(t) + " give a dim past 2^63 elements");
  return t.unsqueeze(d + 1).expand(e).contiguous().reshape(out);
}

Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<std::int64_t> dim) {
  NvtxRange range("repeat_interleave");
  require_defined("repeat_interleave", x);
  require_defined("repeat_interleave", repeats, "repeats");
  common_device("repeat_interleave", {x, repeats});
  Tensor t = dim ? x : x.reshape({-1});
  const std::int64_t d = dim ? wrap_dim("repeat_interleave", *dim, t.dim(), t.shape()) : 0;
  if (repeats.dim() > 1 || (repeats.numel() != 1 && repeats.numel() != t.size(d)))
    throw Error::shape_mismatch("repeat_interleave", t.shape(), repeats.shape(),
                                "(input, repeats): repeats must be one number or one per element of the dim");
  if (repeats.dtype() != DType::i64 && repeats.dtype() != DType::i32)
    throw Error::dtype_not_supported("repeat_interleave", "repeats must be i32 or i64", repeats);
  Tensor r = repeats.to(DType::i64).reshape({-1}).expand({t.size(d)});
  Tensor ends = cumsum(r, 0);
  // The output length depends on the data: one read-back (a counted sync on CUDA).
  const std::int64_t total = ends.numel() == 0 ? 0 : ends.select(0, ends.numel() - 1).item<std::int64_t>();
  Tensor slot = arange(total, {.dtype = DType::i64, .device = x.device()});
  return index_select(t, d, searchsorted(ends, slot, false, true));
}

Tensor roll(const Tensor& x, const std::vector<std::int64_t>& shifts, const std::vector<std::int64_t>& dims) {
  NvtxRange range("roll");
  require_defined("roll", x);
  if (dims.empty()) {
    if (shifts.size() != 1) throw Error(ErrorKind::value, "roll: without dims, give exactly one shift");
    return roll(x.reshape({-1}), shifts, {0}).reshape(x.shape());
  }
  if (shifts.size() != dims.size())
    throw Error(ErrorKind::value, "roll: " + std::to_string(shifts.size()) + " shifts for " + std::to_string(dims.size()) + " dims");
  Tensor r = x;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = wrap_dim("roll", dims[i], x.dim(), x.shape()), n = x.size(d);
    if (n == 0) continue;
    const std::int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    r = cat({r.narrow(d, n - s, s), r.narrow(d, 0, n - s)}, d);
  }
  return r.is_same(x) ? x.clone() : r;
}

Tensor diagonal(const Tensor& x, std::int64_t offset, std::int64_t dim1, std::int64_t dim2) {
  NvtxRange range("diagonal");
  require_defined("diagonal", x);
  if (x.dim() < 2) throw Error(ErrorKind::shape, "diagonal: expected at least 2 dims, got " + describe(x));
  const std::int64_t a = wrap_dim("diagonal", dim1, x.dim(), x.shape()), b = wrap_dim("diagonal", dim2, x.dim(), x.shape());
  if (a == b) throw Error(ErrorKind::value, "diagonal: dim1 and dim2 must differ, both are " + std::to_string(a));
  // The two dims moved last and flattened; the diagonal is a strided slice of that line.
  Shape perm;
  for (std::int64_t d = 0; d < x.dim(); ++d)
    if (d != a && d != b) perm.push_back(d);
  perm.push_back(a);
  perm.push_back(b);
  Tensor m = x.permute(perm);
  const std::int64_t n1 = x.size(a), n2 = x.size(b);
  const std::int64_t len = std::max<std::int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  Shape lead(m.shape().begin(), m.shape().end() - 2);
  Shape flat = lead;
  flat.push_back(n1 * n2);
  Tensor line = m.reshape(flat);
  if (len == 0) {
    Shape s = lead;
    s.push_back(0);
    return line.narrow(-1, 0, 0).reshape(s);
  }
  const std::int64_t start = offset >= 0 ? offset : -offset * n2;  // |offset| < n1 or n2 here: no overflow
  return line.slice(-1, start, start + (len - 1) * (n2 + 1) + 1, n2 + 1);
}

Tensor diag(const Tensor& x, std::int64_t diagonal_offset) {
  NvtxRange range("diag");
  require_defined("diag", x);
  if (x.dim() == 2) return diagonal(x, diagonal_offset, 0, 1);
  if (x.dim() != 1) throw Error(ErrorKind::shape, "diag: expected a 1-D or 2-D input, got " + describe(x));
  // A [m, m] matrix, m = n + |k|, with x on diagonal k: x scattered into zeros.
  const std::int64_t n = x.size(0), k = diagonal_offset;
  std::int64_t m = 0, mm = 0;  // checked: an offset near +-2^63 must not wrap into a size
  if (k == INT64_MIN || __builtin_add_overflow(n, k >= 0 ? k : -k, &m) || __builtin_mul_overflow(m, m, &mm))
    throw Error(ErrorKind::value, "diag: offset " + std::to_string(k) + " puts " + describe(x) +
                                      " in a matrix of more than 2^63 elements");
  Tensor i = arange(n, {.dtype = DType::i64, .device = x.device()});
  Tensor pos = add(mul(add(i, k >= 0 ? 0 : -k), m), add(i, k >= 0 ? k : 0));
  return scatter_add(zeros({mm}, {.dtype = x.dtype(), .device = x.device()}), 0, pos, x).reshape({m, m});
}

Tensor trace(const Tensor& x) {
  NvtxRange range("trace");
  require_defined("trace", x);
  if (x.dim() != 2) throw Error(ErrorKind::shape, "trace: expected a 2-D input, got " + describe(x));
  return sum(diagonal(x, 0, 0, 1));
}

std::vector<Tensor> unbind(const Tensor& x, std::int64_t dim) {
  require_defined("unbind", x);
  const std::int64_t d = wrap_dim("unbind", dim, x.dim(), x.shape());
  if (x.dim() == 0) throw Error(ErrorKind::shape, "unbind: a 0-d tensor has no dim to unbind");
  std::vector<Tensor> out;
  for (std::int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

Tensor movedim(const Tensor& x, std::int64_t source, std::int64_t destination) {
  require_defined("movedim", x);
  const std::int64_t s = wrap_dim("movedim", source, x.dim(), x.shape());
  const std::int64_t d = wrap_dim("movedim", destination, x.dim(), x.shape());
  Shape perm;
  for (std::int64_t i = 0; i < x.dim(); ++i)
    if (i != s) perm.push_back(i);
  perm.insert(perm.begin() + d, s);
  return x.permute(perm);
}

Tensor unflatten(const Tensor& x, std::int64_t dim, const Shape& sizes) {
  require_defined("unflatten", x);
  const std::int64_t d = wrap_dim("unflatten", dim, x.dim(), x.shape());
  Shape s(x.shape().begin(), x.shape().begin() + d);
  s.insert(s.end(), sizes.begin(), sizes.end());
  s.insert(s.end(), x.shape().begin() + d + 1, x.shape().end());
  Shape check = s;
  std::int64_t known = 1, unknown = 0;
  for (auto v : sizes) v == -1 ? ++unknown : known *= v;
  if (unknown > 1 || (unknown == 0 && known != x.size(d)) || (unknown == 1 && (known == 0 || x.size(d) % known)))
    throw Error::shape_mismatch("unflatten", x.shape(), sizes, "(input, sizes): sizes must multiply to the dim's size " +
                                                                   std::to_string(x.size(d)));
  return x.reshape(s);
}

std::vector<Tensor> tensor_split(const Tensor& x, std::int64_t sections, std::int64_t dim) {
  require_defined("tensor_split", x);
  if (sections <= 0) throw Error::bad_value("tensor_split", "sections", static_cast<double>(sections), "positive");
  const std::int64_t d = wrap_dim("tensor_split", dim, x.dim(), x.shape()), n = x.size(d);
  // The first n % sections parts get one element more (NumPy's array_split).
  std::vector<Tensor> out;
  std::int64_t start = 0;
  for (std::int64_t i = 0; i < sections; ++i) {
    const std::int64_t len = n / sections + (i < n % sections ? 1 : 0);
    out.push_back(x.narrow(d, start, len));
    start += len;
  }
  return out;
}

std::vector<Tensor> tensor_split(const Tensor& x, const std::vector<std::int64_t>& indices, std::int64_t dim) {
  require_defined("tensor_split", x);
  const std::int64_t d = wrap_dim("tensor_split", dim, x.dim(), x.shape()), n = x.size(d);
  std::vector<Tensor> out;
  std::int64_t start = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    std::int64_t end = i < indices.size() ? std::clamp<std::int64_t>(indices[i], 0, n) : n;
    end = std::max(end, start);
    out.push_back(x.narrow(d, start, end - start));
    start = end;
  }
  return out;
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  if (indexing != "ij" && indexing != "xy")
    throw Error(ErrorKind::value, "meshgrid: indexing must be \"ij\" or \"xy\", got \"" + indexing + "\"");
  Shape shape;
  for (const Tensor& t : tensors) {
    require_defined("meshgrid", t);
    if (t.dim() > 1) throw Error(ErrorKind::shape, "meshgrid: expected 0-d or 1-D tensors, got " + describe(t));
    shape.push_back(t.numel());
  }
  const bool xy = indexing == "xy" && tensors.size() >= 2;
  if (xy) std::swap(shape[0], shape[1]);
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    std::size_t at = i;
    if (xy && i < 2) at = 1 - i;
    Shape v(tensors.size(), 1);
    v[at] = tensors[i].numel();
    out.push_back(tensors[i].reshape(v).expand(shape));
  }
  return out;
}

Tensor take_along_dim(const Tensor& x, const Tensor& indices, std::int64_t dim) {
  NvtxRange range("take_along_dim");
  require_defined("take_along_dim", x);
  require_defined("take_along_dim", indices, "indices");
  if (x.dim() != indices.dim())
    throw Error::shape_mismatch("take_along_dim", x.shape(), indices.shape(), "(input, indices) must have the same number of dims");
  const std::int64_t d = wrap_dim("take_along_dim", dim, x.dim(), x.shape());
  // Broadcast every dim but `dim` (PyTorch), then gather.
  Shape xs = x.shape(), is = indices.shape();
  xs[static_cast<std::size_t>(d)] = 1;
  is[static_cast<std::size_t>(d)] = 1;
  Shape b = broadcast_shapes(xs, is, "take_along_dim");
  Shape xe = b, ie = b;
  xe[static_cast<std::size_t>(d)] = x.size(d);
  ie[static_cast<std::size_t>(d)] = indices.size(d);
  return gather(x.expand(xe), d, indices.to(DType::i64).expand(ie));
}

}  // namespace brrr
