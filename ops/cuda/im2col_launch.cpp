// Placeholder: replaced by the family's implementation.
module;
#include <cstdint>
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CudaBackend::im2col(const Operand&, const Operand&, const Window2d&, double) { throw Error(ErrorKind::value, "not implemented yet"); }
void CudaBackend::col2im(const Operand&, const Operand&, const Window2d&) { throw Error(ErrorKind::value, "not implemented yet"); }
}  // namespace brrr::backend
