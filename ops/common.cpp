// Helpers shared by the op families: device checks, dims, shapes, promotion, broadcasting.
module;
#include <cstdio>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;

namespace brrr {

namespace ops_detail {

void require_defined(const char* op, const Tensor& t, const char* name) {
  if (!t.defined()) throw Error(ErrorKind::value, std::string(op) + ": " + name + " is an undefined tensor");
}

void require_floating(const char* op, const Tensor& t, const char* what) {
  if (!is_floating_point(t.dtype()))
    throw Error::dtype_not_supported(op, std::string("expected a floating-point ") + what + " (f32, f64, bf16, f16)", t);
}

void require_index_dtype(const char* op, const Tensor& t, const char* what) {
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64)
    throw Error::dtype_not_supported(op, std::string(what) + " must be i32 or i64", t);
}

Device common_device(const char* op, std::initializer_list<Tensor> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!first) {
      first = &t;
    } else if (t.device() != first->device()) {
      throw Error(ErrorKind::device, std::string(op) + ": expected all tensors on one device, got " + describe(*first) +
                                         " and " + describe(t) + " (copy explicitly with .to(device))");
    }
  }
  if (!first) throw Error(ErrorKind::value, std::string(op) + ": no defined input tensor");
  return first->device();
}

std::int64_t wrap_dim(const char* op, std::int64_t dim, std::int64_t ndim, const Shape& shape) {
  std::int64_t n = ndim == 0 ? 1 : ndim;  // a 0-d tensor accepts dim 0 / -1, as in PyTorch
  if (dim < -n || dim >= n) throw Error::dim_out_of_range(op, dim, ndim, shape);
  return dim < 0 ? dim + n : dim;
}

std::uint32_t dims_mask(const char* op, const std::vector<std::int64_t>& dims, const Shape& shape) {
  std::int64_t n = static_cast<std::int64_t>(shape.size());
  if (n > 32) throw Error(ErrorKind::shape, std::string(op) + ": more than 32 dims");
  if (dims.empty()) return n == 0 ? 0u : static_cast<std::uint32_t>((std::uint64_t(1) << n) - 1);
  std::uint32_t mask = 0;
  for (std::int64_t d : dims) {
    std::int64_t w = wrap_dim(op, d, n, shape);
    if (n == 0) continue;
    if (mask & (1u << w))
      throw Error(ErrorKind::value, std::string(op) + ": dim " + std::to_string(w) + " appears more than once");
    mask |= 1u << w;
  }
  return mask;
}

Shape reduced_shape(const Shape& shape, std::uint32_t mask, bool keepdim) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (mask & (1u << d)) {
      if (keepdim) out.push_back(1);
    } else {
      out.push_back(shape[d]);
    }
  }
  return out;
}

Tensor unsqueeze_reduced(const Tensor& t, std::uint32_t mask, std::int64_t input_dim, bool keepdim) {
  if (keepdim) return t;
  Tensor r = t;
  for (std::int64_t d = 0; d < input_dim; ++d)
    if (mask & (1u << d)) r = r.unsqueeze(d);
  return r;
}

}  // namespace ops_detail

// --- promotion and broadcasting ----------------------------------------------------------

namespace {
int kind_rank(DType d) {  // bool < integer < floating
  switch (d) {
    case DType::boolean: return 0;
    case DType::i32: case DType::i64: return 1;
    case DType::f16: case DType::bf16: case DType::f32: case DType::f64: return 2;
  }
  return 0;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ka = kind_rank(a), kb = kind_rank(b);
  if (ka != kb) return ka > kb ? a : b;
  if (ka == 1) return DType::i64;  // i32 with i64
  // two different floating types
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  auto width = [](DType d) { return itemsize(d); };
  return width(a) >= width(b) ? a : b;
}

DType result_type(DType tensor, const Scalar& scalar) {
  if (!scalar.is_integral && !is_floating_point(tensor)) return DType::f32;
  if (scalar.is_integral && tensor == DType::boolean) return DType::i64;
  return tensor;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  std::size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw Error::shape_mismatch(op, a, b, "cannot be broadcast (dim " + std::to_string(i) + ": " +
                                                std::to_string(da) + " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace brrr
