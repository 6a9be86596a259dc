// CPU kernels of the reductions (sum, max, min; max/min optionally with the index along the
// one reduced dim). One loop for every case: the input is walked once in its memory order
// (dims sorted by stride), each element combined into the accumulator of its output
// position. Accumulators are wide: double for every floating dtype (so f32/bf16/f16 sums
// are accurate to the last bit for any practical length), int64 for integers and bool. For
// a fixed output position the reduced index only ever increases along the walk, so keeping
// the first extreme (strict comparison) gives the first index on ties; the first NaN wins.
module;
#include <algorithm>
#include <cstdlib>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>
#include "backend/contract.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

template <class W> bool is_nan(W v) {
  if constexpr (std::is_floating_point_v<W>) return std::isnan(v);
  else return false;
}

template <class T>
void reduce_typed(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t mask, const Operand* indices) {
  using W = wide_t<T>;
  const int nd = in.ndim;

  // Accumulator slot of each input dim: row-major over out's shape, 0 on reduced dims.
  std::int64_t acc_strides[max_dims] = {};
  std::int64_t out_numel = 1;
  for (int d = nd - 1; d >= 0; --d) {
    if (!(mask & (1u << d))) acc_strides[d] = out_numel;
    out_numel *= out.sizes[d];
  }
  // Walk the input in memory order: dims sorted by stride, largest first (stable).
  int order[max_dims];
  std::iota(order, order + nd, 0);
  for (int i = 1; i < nd; ++i)  // insertion sort: stable, at most 8 dims
    for (int j = i; j > 0 && std::llabs(in.strides[order[j - 1]]) < std::llabs(in.strides[order[j]]); --j)
      std::swap(order[j - 1], order[j]);
  Operand walk_in = in, walk_acc = in, walk_idx = in;
  for (int k = 0; k < nd; ++k) {
    int d = order[k];
    walk_in.sizes[k] = walk_acc.sizes[k] = walk_idx.sizes[k] = in.sizes[d];
    walk_in.strides[k] = in.strides[d];
    walk_acc.strides[k] = acc_strides[d];
    walk_idx.strides[k] = (mask & (1u << d)) ? 1 : 0;  // only read with a single reduced dim
  }

  const auto* x = static_cast<const T*>(in.data);
  std::vector<W> acc(static_cast<std::size_t>(out_numel), W(0));
  std::vector<std::int64_t> arg;  // max/min: index of the extreme, -1 before the first element
  if (op != ReduceOp::sum) arg.assign(static_cast<std::size_t>(out_numel), -1);

  const Operand* ops[3] = {&walk_in, &walk_acc, &walk_idx};
  switch (op) {
    case ReduceOp::sum:
      for_each(ops, [&](const std::int64_t* o) { acc[o[1]] += widen<T>(x[o[0]]); });
      break;
    case ReduceOp::max:
    case ReduceOp::min: {
      const bool is_max = op == ReduceOp::max;
      for_each(ops, [&](const std::int64_t* o) {
        W v = widen<T>(x[o[0]]);
        W& a = acc[o[1]];
        std::int64_t& i = arg[o[1]];
        if (i >= 0 && is_nan(a)) return;  // the first NaN stays
        if (i < 0 || is_nan(v) || (is_max ? v > a : v < a)) {
          a = v;
          i = o[2];
        }
      });
      break;
    }
  }

  // Write out (and indices) row-major over out's shape, converting to out's dtype.
  Operand lin = out;
  {
    std::int64_t s = 1;
    for (int d = nd - 1; d >= 0; --d) {
      lin.strides[d] = s;
      s *= out.sizes[d];
    }
  }
  const Operand& idx_op = indices ? *indices : out;
  const Operand* outs[3] = {&out, &lin, &idx_op};
  auto* ip = indices ? static_cast<std::int64_t*>(indices->data) : nullptr;
  dispatch(out.dtype, [&]<class O>(O*) {
    auto* po = static_cast<O*>(out.data);
    for_each(outs, [&](const std::int64_t* o) {
      po[o[0]] = narrow_to<O>(acc[o[1]]);
      if (ip) ip[o[2]] = arg[o[1]];
    });
  });
}

}  // namespace

void check_reduce_operands(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                           const Operand* indices) {
  if (out.ndim != in.ndim)
    throw Error(ErrorKind::shape, "reduce: output and input must have the same number of dims (keepdim shape)");
  if (in.ndim < 32 && (dims_mask >> in.ndim) != 0)
    throw Error(ErrorKind::index, "reduce: dims mask names dims past the input's " + std::to_string(in.ndim));
  std::int64_t reduced = 1;
  for (int d = 0; d < in.ndim; ++d) {
    bool r = dims_mask & (1u << d);
    if (out.sizes[d] != (r ? 1 : in.sizes[d]))
      throw Error(ErrorKind::shape, "reduce: output size " + std::to_string(out.sizes[d]) + " at dim " +
                                        std::to_string(d) + " does not match the input's " +
                                        std::to_string(in.sizes[d]));
    if (r) reduced *= in.sizes[d];
  }
  bool dtype_ok = false;
  switch (op) {
    case ReduceOp::sum:
      switch (in.dtype) {
        case DType::f32: case DType::f64: dtype_ok = out.dtype == in.dtype; break;
        case DType::bf16: case DType::f16: dtype_ok = out.dtype == in.dtype || out.dtype == DType::f32; break;
        case DType::i32: case DType::i64: case DType::boolean: dtype_ok = out.dtype == DType::i64; break;
      }
      break;
    case ReduceOp::max:
    case ReduceOp::min: dtype_ok = out.dtype == in.dtype; break;
  }
  if (!dtype_ok)
    throw Error(ErrorKind::dtype, std::string("reduce: output dtype ") + to_string(out.dtype) +
                                      " does not fit input dtype " + to_string(in.dtype));
  if (out.numel > 0 && op != ReduceOp::sum && reduced == 0)
    throw Error(ErrorKind::value, "reduce: max/min over zero elements is undefined");
  if (indices) {
    if (op == ReduceOp::sum || indices->dtype != DType::i64 || std::popcount(dims_mask) > 1)
      throw Error(ErrorKind::value, "reduce: indices need max/min, i64 and at most one reduced dim");
    for (int d = 0; d < out.ndim; ++d)
      if (indices->ndim != out.ndim || indices->sizes[d] != out.sizes[d])
        throw Error(ErrorKind::shape, "reduce: indices must have the output's shape");
  }
}

void CpuBackend::reduce(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                        const Operand* indices) {
  check_reduce_operands(op, out, in, dims_mask, indices);
  if (out.numel == 0) return;
  dispatch(in.dtype, [&]<class T>(T*) { reduce_typed<T>(op, out, in, dims_mask, indices); });
}

}  // namespace brrr::backend
