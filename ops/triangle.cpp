// tril / triu: keep the lower (upper) triangle of the last two dims, zero the rest. The mask
// is built on the tensor's device from two aranges (keep where col - row <= diagonal for
// tril, >= diagonal for triu: PyTorch's definition of `diagonal`), then where(mask, x, 0),
// so the gradient is masked the same way (WhereBackward). Any dtype; batched over the
// leading dims by broadcasting.
module;
#include <cstdint>
#include <string>
module brrr.ops;
import brrr.tensor;

namespace brrr {

using namespace ops_detail;

namespace {

Tensor triangle(const char* op, const Tensor& x, std::int64_t diagonal, bool lower) {
  NvtxRange range(op);
  require_defined(op, x);
  if (x.dim() < 2)
    throw Error(ErrorKind::shape, std::string(op) + ": input must have at least 2 dims, got " + describe(x));
  Tensor keep, zero;
  {
    NoGradGuard no_grad;
    TensorOptions i64{.dtype = DType::i64, .device = x.device()};
    Tensor rows = arange(x.size(-2), i64).unsqueeze(1);  // [H, 1]
    Tensor cols = arange(x.size(-1), i64);               // [W]
    Tensor offset = sub(cols, rows);                     // [H, W]: col - row
    keep = lower ? le(offset, diagonal) : ge(offset, diagonal);
    zero = zeros({}, {.dtype = x.dtype(), .device = x.device()});
  }
  return where(keep, x, zero);
}

}  // namespace

Tensor tril(const Tensor& x, std::int64_t diagonal) { return triangle("tril", x, diagonal, true); }
Tensor triu(const Tensor& x, std::int64_t diagonal) { return triangle("triu", x, diagonal, false); }

}  // namespace brrr
