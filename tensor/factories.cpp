// Factories: empty, zeros, ones, full, arange, eye and the *_like forms. On CUDA each is a
// kernel on the current stream (no host round trip).
module;
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr {

namespace {
// empty() and full() under the name of the factory the user called, so errors name it.
Tensor allocate(const char* op, Shape shape, TensorOptions options) {
  DType dtype = options.dtype.value_or(DType::f32);
  std::int64_t numel = checked_numel(shape, op);
  if (options.pinned && !options.device.is_cpu())
    throw Error(ErrorKind::device, std::string(op) + ": pinned = true asks for page-locked host memory, but the "
                                       "device is " + options.device.str());
  if (numel > static_cast<std::int64_t>(SIZE_MAX / 16))
    throw Error(ErrorKind::value, std::string(op) + ": shape " + to_string(shape) + " is too large");
  Storage storage = Storage::allocate(static_cast<std::size_t>(numel) * itemsize(dtype), options.device,
                                      options.pinned);
  Tensor t(std::move(storage), Layout::contiguous(std::move(shape)), dtype);
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor filled(const char* op, Shape shape, double value, TensorOptions options) {
  bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = allocate(op, std::move(shape), options);
  t.fill_(value);
  if (rg) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(Shape shape, TensorOptions options) { return allocate("empty", std::move(shape), options); }
Tensor full(Shape shape, double value, TensorOptions options) { return filled("full", std::move(shape), value, options); }
Tensor zeros(Shape shape, TensorOptions options) { return filled("zeros", std::move(shape), 0.0, options); }
Tensor ones(Shape shape, TensorOptions options) { return filled("ones", std::move(shape), 1.0, options); }

Tensor arange(std::int64_t end, TensorOptions options) {
  if (!options.dtype) options.dtype = DType::i64;
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  auto text = [&] {
    return "arange(" + number_text(start) + ", " + number_text(end) + ", " + number_text(step) + ")";
  };
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw Error(ErrorKind::value, text() + ": step must be non-zero and all bounds finite");
  if ((end - start) * step < 0)
    throw Error(ErrorKind::value, text() + ": the step points away from end");
  double n = std::ceil((end - start) / step);
  if (!(n < 0x1p63))  // also catches an infinite (end - start) / step from finite bounds
    throw Error(ErrorKind::value, text() + ": too many elements (ceil((end - start) / step) does not fit in int64)");
  auto count = static_cast<std::int64_t>(n);
  bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = allocate("arange", {count}, options);
  if (count > 0) backend::backend_for(options.device).arange(backend::output(t, "arange"), start, step);
  if (rg) t.requires_grad_(true);
  return t;
}

Tensor eye(std::int64_t n, std::int64_t m, TensorOptions options) {
  if (m < 0) m = n;
  if (n < 0) throw Error(ErrorKind::value, "eye: n must be >= 0, got " + std::to_string(n));
  bool rg = options.requires_grad;
  options.requires_grad = false;
  Tensor t = filled("eye", {n, m}, 0.0, options);
  std::int64_t diag = n < m ? n : m;
  // The diagonal is a strided view with stride m + 1: fill it in place.
  if (diag > 0) t.as_strided({diag}, {m + 1}, 0).fill_(1.0);
  if (rg) t.requires_grad_(true);
  return t;
}

namespace {
TensorOptions like_options(const Tensor& like, const std::optional<TensorOptions>& options) {
  if (options) return *options;
  return {.dtype = like.dtype(), .device = like.device()};
}
}  // namespace

Tensor empty_like(const Tensor& like, std::optional<TensorOptions> o) { return empty(like.shape(), like_options(like, o)); }
Tensor zeros_like(const Tensor& like, std::optional<TensorOptions> o) { return zeros(like.shape(), like_options(like, o)); }
Tensor ones_like(const Tensor& like, std::optional<TensorOptions> o) { return ones(like.shape(), like_options(like, o)); }
Tensor full_like(const Tensor& like, double value, std::optional<TensorOptions> o) {
  return full(like.shape(), value, like_options(like, o));
}

Tensor wrapped_number(double value, DType dtype) {
  if (dtype != DType::f64 && dtype != DType::i64 && dtype != DType::boolean)
    throw Error(ErrorKind::dtype, std::string("wrapped_number: f64, i64 or bool, got ") + to_string(dtype));
  Tensor t = full({}, value, {.dtype = dtype});
  TensorInternals::impl(t).wrapped_number = true;
  return t;
}

bool is_wrapped_number(const Tensor& t) { return t.defined() && TensorInternals::impl(t).wrapped_number; }

namespace {
// Walks a literal: its shape (checked regular), its numbers in row-major order, and the
// kinds of numbers seen.
struct Literal {
  Shape shape;
  std::vector<double> reals;
  std::vector<std::int64_t> integers;
  bool any_floating = false, any_integer = false;
};

void walk(const TensorData& d, std::size_t depth, Literal& out, bool& shape_known) {
  using Kind = TensorData::Kind;
  if (d.kind() != Kind::list) {
    if (shape_known && depth != out.shape.size())
      throw Error(ErrorKind::shape, "tensor: a number at depth " + std::to_string(depth) + " of a literal whose " +
                                        "shape is " + to_string(out.shape) + " (nested lists must be regular)");
    if (!shape_known) {
      out.shape.resize(depth);
      shape_known = true;
    }
    out.any_floating = out.any_floating || d.kind() == Kind::floating;
    out.any_integer = out.any_integer || d.kind() == Kind::integer;
    out.reals.push_back(d.real());
    out.integers.push_back(d.kind() == Kind::floating ? 0 : d.integer());
    return;
  }
  const auto n = static_cast<std::int64_t>(d.list().size());
  if (!shape_known) {
    if (out.shape.size() <= depth) out.shape.resize(depth + 1);
    out.shape[depth] = n;
    if (n == 0) {
      out.shape.resize(depth + 1);
      shape_known = true;
    }
  } else if (depth >= out.shape.size() || out.shape[depth] != n) {
    throw Error(ErrorKind::shape, "tensor: a list of " + std::to_string(n) + " at depth " + std::to_string(depth) +
                                      " of a literal whose shape is " + to_string(out.shape) +
                                      " (nested lists must be regular)");
  }
  for (const TensorData& e : d.list()) walk(e, depth + 1, out, shape_known);
}
}  // namespace

Tensor tensor(const TensorData& data, TensorOptions options) {
  Literal lit;
  bool shape_known = false;
  walk(data, 0, lit, shape_known);
  DType inferred = lit.any_floating ? DType::f32 : lit.any_integer ? DType::i64 : DType::boolean;
  if (lit.reals.empty()) inferred = DType::f32;  // tensor({}): torch.tensor([]) is float
  DType dtype = options.dtype.value_or(inferred);
  Tensor host = lit.any_floating || is_floating_point(dtype)
                    ? Tensor::from_vector(lit.reals, lit.shape)
                    : Tensor::from_vector(lit.integers, lit.shape);
  if (lit.shape.empty()) host = host.reshape({});
  Tensor out = host.to(dtype).to(options.device);
  if (options.requires_grad) out.requires_grad_(true);
  return out;
}

}  // namespace brrr
