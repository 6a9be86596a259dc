// Ops whose output size is the number of true elements of a mask: nonzero, masked_select;
// and masked_scatter, which reads that many source elements. Compositions: the mask's
// running count (cumsum) gives each true element its slot, a scatter_add into one spare
// slot more than needed places the flat positions, and index_select / where pick the
// values, so gradients come from those ops. nonzero and masked_select read the count back
// to the host with item(): on CUDA one host sync, counted at the sync choke point
// (cuda::sync_count(); an Error under SyncPolicy::error), as PyTorch's.
module;
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

// The flat positions (i64 [count]) of the true elements of the bool `mask`, in row-major
// order: one host read of the count.
Tensor true_positions(const Tensor& mask) {
  NoGradGuard no_grad;
  const Device dev = mask.device();
  Tensor flat = mask.reshape({-1});
  const std::int64_t n = flat.numel();
  if (n == 0) return empty({0}, {.dtype = DType::i64, .device = dev});
  Tensor running = cumsum(flat, 0);  // i64: the count up to and including each element
  const std::int64_t count = running.narrow(0, n - 1, 1).reshape({}).item<std::int64_t>();  // the host sync
  // Element p goes to slot running[p] - 1 when true, else to the spare slot `count`.
  Tensor slot = where(flat, sub(running, 1), full({}, static_cast<double>(count), {.dtype = DType::i64, .device = dev}));
  Tensor at = scatter_add(zeros({count + 1}, {.dtype = DType::i64, .device = dev}), 0, slot,
                          where(flat, arange(n, {.dtype = DType::i64, .device = dev}), zeros({}, {.dtype = DType::i64, .device = dev})));
  return at.narrow(0, 0, count);
}

Tensor as_mask(const char* op, const Tensor& mask) {
  require_defined(op, mask, "mask");
  if (mask.dtype() != DType::boolean) throw Error::dtype_not_supported(op, "mask must be bool", mask);
  return mask;
}

}  // namespace

Tensor nonzero(const Tensor& x) {
  NvtxRange range("nonzero");
  require_defined("nonzero", x);
  NoGradGuard no_grad;
  Tensor mask = x.dtype() == DType::boolean ? x : ne(x, 0);
  Tensor pos = true_positions(mask);
  const std::int64_t k = pos.numel(), nd = x.dim();
  if (nd == 0 || k == 0) return empty({k, nd}, {.dtype = DType::i64, .device = x.device()});
  // Coordinates from the flat positions, dim by dim (row-major).
  std::vector<Tensor> coords(static_cast<std::size_t>(nd));
  Tensor rest = pos;
  for (std::int64_t d = nd - 1; d >= 0; --d) {
    const std::int64_t size = x.size(d);
    coords[static_cast<std::size_t>(d)] = remainder(rest, size);
    rest = floor_divide(rest, size);
  }
  return stack(coords, 1);
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  constexpr const char* name = "masked_select";
  NvtxRange range(name);
  require_defined(name, x);
  as_mask(name, mask);
  common_device(name, {x, mask});
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), name);
  Tensor pos = true_positions(mask.broadcast_to(shape));
  return index_select(x.broadcast_to(shape).reshape({-1}), 0, pos);  // recorded: the gradient
}

Tensor masked_scatter(const Tensor& x, const Tensor& mask, const Tensor& source) {
  constexpr const char* name = "masked_scatter";
  NvtxRange range(name);
  require_defined(name, x);
  as_mask(name, mask);
  require_defined(name, source, "source");
  common_device(name, {x, mask, source});
  if (source.dtype() != x.dtype())
    throw Error(ErrorKind::dtype, "masked_scatter: source " + describe(source) + " must have the dtype of input " +
                                      describe(x));
  if (broadcast_shapes(x.shape(), mask.shape(), name) != x.shape())
    throw Error::shape_mismatch(name, x.shape(), mask.shape(), "(input, mask): mask must broadcast to input's shape");
  Tensor m, slot;
  {
    NoGradGuard no_grad;
    m = mask.broadcast_to(x.shape()).reshape({-1});
    // The i-th true element (row-major) takes source's i-th element.
    slot = m.numel() > 0 ? sub(cumsum(m, 0), 1) : empty({0}, {.dtype = DType::i64, .device = x.device()});
    if (x.device().is_cpu() && m.numel() > 0) {  // on CUDA this check would be a host sync
      const std::int64_t needed = slot.narrow(0, m.numel() - 1, 1).reshape({}).item<std::int64_t>() + 1;
      if (needed > source.numel())
        throw Error(ErrorKind::value, "masked_scatter: mask has " + std::to_string(needed) + " true elements but source " +
                                          describe(source) + " has only " + std::to_string(source.numel()));
    }
    slot = where(m, slot, zeros({}, {.dtype = DType::i64, .device = x.device()}));
  }
  if (m.numel() == 0) return x.clone();
  if (source.numel() == 0) {  // valid only for an all-false mask (checked on the CPU above)
    if (!x.device().is_cpu() && any(m).item<bool>())  // a rare case: one host sync
      throw Error(ErrorKind::value, "masked_scatter: mask has true elements but source " + describe(source) + " is empty");
    return x.clone();
  }
  Tensor taken = index_select(source.reshape({-1}), 0, slot).reshape(x.shape());
  return where(m.reshape(x.shape()), taken, x);
}

// In place (LibTorch's Tensor::masked_fill_ / masked_scatter_), under ops/inplace.cpp's rules.
const Tensor& masked_fill_(const Tensor& x, const Tensor& mask, Scalar value) {
  NvtxRange range("masked_fill_");
  return update("masked_fill_", x, {}, [&](const Tensor& v) { return masked_fill(v, mask, value); }, {});
}
const Tensor& masked_scatter_(const Tensor& x, const Tensor& mask, const Tensor& source) {
  NvtxRange range("masked_scatter_");
  return update("masked_scatter_", x, source, [&](const Tensor& v) { return masked_scatter(v, mask, source); }, {});
}

}  // namespace brrr
