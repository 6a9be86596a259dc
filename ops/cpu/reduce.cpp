// CPU kernels of the reductions (sum, max, min; max/min optionally with the index along the
// one reduced dim). f32/f64 sums of a contiguous input over its last dims (rows, a full sum)
// or its first dims (columns, a bias gradient) take a fast path: accumulated in their own
// type (as the CUDA backend's accumulate_t) by pairwise summation over blocks (error
// O(log n) ulps, as PyTorch's cascade sum), vectorisable, split over the intra-op pool in
// blocks fixed by the shape alone, so the result is bitwise the same for any thread count.
// Every other case takes one generic loop: the input is walked once in its memory order
// (dims sorted by stride), each element combined into the accumulator of its output
// position. Its accumulators are wide: double for every floating dtype, int64 for
// integers and bool. For
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
#include "ops/cpu/isa/kernels.hpp"
#include "ops/cpu/loops.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

template <class W> bool is_nan(W v) {
  if constexpr (std::is_floating_point_v<W>) return std::isnan(v);
  else return false;
}

// --- the fast path of f32/f64 sums --------------------------------------------------------

constexpr std::int64_t block = std::int64_t{1} << 15;  // a full sum's unit of parallel work

// A row of any length: fixed blocks summed in parallel, then their sums pairwise (the
// pairwise sum of the CPU's capability, ops/cpu/isa/kernels.inc).
template <class A> A pairwise_sum(const A* x, std::int64_t n) {
  if constexpr (std::is_same_v<A, float>) return isa().sum_f32(x, n);
  else return isa().sum_f64(x, n);
}

template <class A> A row_sum(const A* x, std::int64_t n) {
  if (n <= block) return pairwise_sum(x, n);
  std::int64_t blocks = (n + block - 1) / block;
  std::vector<A> part(static_cast<std::size_t>(blocks));
  cpu::parallel_for(blocks, 2, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) part[b] = pairwise_sum(x + b * block, std::min(block, n - b * block));
  });
  return pairwise_sum(part.data(), blocks);
}

// dst[c] = sum over rows r of x[r * ld + c] for c in [0, cols): pairwise over rows, each
// leaf a run of up to 64 rows added in order (vectorised across columns).
template <class A> void column_sums(const A* x, std::int64_t rows, std::int64_t cols, std::int64_t ld, A* dst) {
  if (rows <= 64) {
    for (std::int64_t c = 0; c < cols; ++c) dst[c] = A(0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) dst[c] += x[r * ld + c];
    return;
  }
  std::int64_t h = rows / 2;
  std::vector<A> right(static_cast<std::size_t>(cols));
  column_sums(x, h, cols, ld, dst);
  column_sums(x + h * ld, rows - h, cols, ld, right.data());
  for (std::int64_t c = 0; c < cols; ++c) dst[c] += right[c];
}

// The fast path when it applies (f32/f64 sum, contiguous operands, the reduced dims a
// suffix or a prefix of the non-trivial ones); false otherwise.
template <class T> bool fast_sum(const Operand& out, const Operand& in, std::uint32_t mask) {
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    return false;
  } else {
    if (!is_contiguous(in) || !is_contiguous(out) || out.dtype != in.dtype) return false;
    // Reduced-ness of each dim of size > 1, outermost first: R..RK..K (prefix) or K..KR..R.
    int changes = 0, first = -1, prev = -1;
    for (int d = 0; d < in.ndim; ++d) {
      if (in.sizes[d] == 1) continue;
      int r = (mask >> d) & 1u;
      if (first < 0) first = r;
      else if (r != prev) ++changes;
      prev = r;
    }
    if (changes > 1) return false;
    const auto* x = static_cast<const T*>(in.data);
    auto* y = static_cast<T*>(out.data);
    const std::int64_t kept = out.numel, reduced = kept == 0 ? 0 : in.numel / kept;
    if (first != 1 || changes == 0) {  // rows: kept dims outside, reduced inside (or nothing reduced)
      cpu::parallel_for(kept, std::max<std::int64_t>(1, block / std::max<std::int64_t>(reduced, 1)),
                        [&](std::int64_t r0, std::int64_t r1) {
                          for (std::int64_t r = r0; r < r1; ++r) y[r] = row_sum(x + r * reduced, reduced);
                        });
    } else {  // columns: reduced dims outside, kept inside
      cpu::parallel_for(kept, std::max<std::int64_t>(16, block / std::max<std::int64_t>(reduced, 1)),
                        [&](std::int64_t c0, std::int64_t c1) { column_sums(x + c0, reduced, c1 - c0, kept, y + c0); });
    }
    return true;
  }
}

template <class T>
void reduce_typed(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t mask, const Operand* indices) {
  if (op == ReduceOp::sum && !indices && fast_sum<T>(out, in, mask)) return;
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
