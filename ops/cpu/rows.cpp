// Placeholder: replaced by the family's implementation.
module;
#include <cstdint>
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CpuBackend::softmax(const Operand&, const Operand&, bool) { throw Error(ErrorKind::value, "not implemented yet"); }
void CpuBackend::layer_norm(const Operand&, const Operand&, const Operand&, const Operand&, const Operand*, const Operand*, double) { throw Error(ErrorKind::value, "not implemented yet"); }
}  // namespace brrr::backend
