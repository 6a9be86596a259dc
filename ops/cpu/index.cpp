// CPU kernels of the indexing ops: gather and scatter_add (behind gather, scatter_add,
// index_select, embedding and one_hot; ops/index.cpp). Indices may be i32 or i64; an index
// outside [0, size) throws Error(index) naming the op the thread is running (set by the op
// layer), the index, the dim and its size. scatter_add adds in row-major order of the index,
// rounding to the element type after each addition, so it is always deterministic;
// scatter_reduce combines in the same order (ops/scatter_math.hpp), so assign's last write wins.
module;
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include "backend/contract.hpp"
#include "ops/scatter_math.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

bool is_index_dtype(DType d) { return d == DType::i32 || d == DType::i64; }

[[noreturn]] void out_of_range(CheckedOp op, std::int64_t k, int dim, std::int64_t size) {
  throw Error(ErrorKind::index, std::string(name_of(op)) + ": index " + std::to_string(k) + " is out of range for dim " +
                                    std::to_string(dim) + " of size " + std::to_string(size) +
                                    " (expected 0 <= index < " + std::to_string(size) + ")");
}

[[noreturn]] void bad_operands(const char* what, const Operand& out, const Operand& index) {
  throw Error(ErrorKind::value, std::string("CpuBackend::") + what + ": invalid operands (out " +
                                    std::to_string(out.ndim) + "-d " + to_string(out.dtype) + ", index " +
                                    std::to_string(index.ndim) + "-d " + to_string(index.dtype) + ")");
}

// Calls f(I*) with the index element type.
template <class F> void with_index(DType d, F&& f) {
  if (d == DType::i32) f(static_cast<const std::int32_t*>(nullptr));
  else f(static_cast<const std::int64_t*>(nullptr));
}

// `base` seen with `shape`'s sizes and stride 0 along dim: iterating it next to index gives
// the offset of every coordinate except dim's, to which index * stride[dim] is added.
Operand along(const Operand& base, const Operand& shape, int dim) {
  Operand v = base;
  v.ndim = shape.ndim;
  v.numel = shape.numel;
  for (int d = 0; d < shape.ndim; ++d) {
    v.sizes[d] = shape.sizes[d];
    v.strides[d] = d == dim ? 0 : base.strides[d];
  }
  return v;
}

template <class E, class I>
void gather_loop(const Operand& out, const Operand& in, int dim, const Operand& index, CheckedOp op) {
  auto* o = static_cast<E*>(out.data);
  const auto* x = static_cast<const E*>(in.data);
  const auto* ix = static_cast<const I*>(index.data);
  const std::int64_t size = in.sizes[dim], stride = in.strides[dim];
  Operand view = along(in, out, dim);
  const Operand* ops[3] = {&out, &index, &view};
  for_each(ops, [&](const std::int64_t* off) {
    std::int64_t k = static_cast<std::int64_t>(ix[off[1]]);
    if (k < 0 || k >= size) out_of_range(op, k, dim, size);
    o[off[0]] = x[off[2] + k * stride];
  });
}

}  // namespace

void CpuBackend::gather(const Operand& out, const Operand& in, int dim, const Operand& index, CheckedOp op) {
  if (out.numel == 0) return;
  if (!is_index_dtype(index.dtype) || in.dtype != out.dtype || index.ndim != out.ndim || in.ndim != out.ndim ||
      dim < 0 || dim >= out.ndim)
    bad_operands("gather", out, index);
  for (int d = 0; d < out.ndim; ++d)
    if (index.sizes[d] != out.sizes[d]) bad_operands("gather", out, index);
  with_index(index.dtype, [&]<class I>(const I*) {
    switch (itemsize(out.dtype)) {
      case 1: return gather_loop<std::uint8_t, I>(out, in, dim, index, op);
      case 2: return gather_loop<std::uint16_t, I>(out, in, dim, index, op);
      case 4: return gather_loop<std::uint32_t, I>(out, in, dim, index, op);
      default: return gather_loop<std::uint64_t, I>(out, in, dim, index, op);
    }
  });
}

namespace {

// The checks both scatter kernels make (the op layer has already checked the user's input).
void check_scatter_operands(const char* what, const Operand& out, int dim, const Operand& index, const Operand& src) {
  if (!is_index_dtype(index.dtype) || src.dtype != out.dtype || index.ndim != out.ndim || src.ndim != index.ndim ||
      dim < 0 || dim >= out.ndim)
    bad_operands(what, out, index);
  for (int d = 0; d < index.ndim; ++d)
    if (src.sizes[d] != index.sizes[d]) bad_operands(what, out, index);
}

// dst = combine(dst, src) for every position of index, in its row-major order (for_each's):
// the fixed order of the CPU's scatters.
template <class T, class Combine>
void scatter_loop(const Operand& out, int dim, const Operand& index, const Operand& src, CheckedOp code,
                  Combine combine) {
  with_index(index.dtype, [&]<class I>(const I*) {
    auto* o = static_cast<T*>(out.data);
    const auto* s = static_cast<const T*>(src.data);
    const auto* ix = static_cast<const I*>(index.data);
    const std::int64_t size = out.sizes[dim], stride = out.strides[dim];
    Operand view = along(out, index, dim);
    const Operand* ops[3] = {&index, &src, &view};
    for_each(ops, [&](const std::int64_t* off) {
      std::int64_t k = static_cast<std::int64_t>(ix[off[0]]);
      if (k < 0 || k >= size) out_of_range(code, k, dim, size);
      T& dst = o[off[2] + k * stride];
      dst = combine(dst, s[off[1]]);
    });
  });
}

}  // namespace

void CpuBackend::scatter_add(const Operand& out, int dim, const Operand& index, const Operand& src, bool,
                             CheckedOp op) {
  if (index.numel == 0) return;
  check_scatter_operands("scatter_add", out, dim, index, src);
  if (out.dtype == DType::boolean) throw Error(ErrorKind::dtype, "scatter_add: bool tensors are not supported");
  dispatch(out.dtype, [&]<class T>(T*) {
    if constexpr (!is_bool_storage<T>)
      scatter_loop<T>(out, dim, index, src, op, [](T d, T v) { return narrow_to<T>(load<T>(d) + load<T>(v)); });
  });
}

void CpuBackend::scatter_reduce(ScatterOp op, const Operand& out, int dim, const Operand& index, const Operand& src,
                                CheckedOp code) {
  if (index.numel == 0) return;
  check_scatter_operands("scatter_reduce", out, dim, index, src);
  with_op(op, [&]<ScatterOp OP>() {
    dispatch(out.dtype, [&]<class T>(T*) {
      scatter_loop<T>(out, dim, index, src, code,
                      [](T d, T v) { return narrow_to<T>(scatter_math::combine<OP>(load<T>(d), load<T>(v))); });
    });
  });
}

}  // namespace brrr::backend
