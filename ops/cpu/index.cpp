// Placeholder: replaced by the family's implementation.
module;
#include <cstdint>
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CpuBackend::gather(const Operand&, const Operand&, int, const Operand&) { throw Error(ErrorKind::value, "not implemented yet"); }
void CpuBackend::scatter_add(const Operand&, int, const Operand&, const Operand&, bool) { throw Error(ErrorKind::value, "not implemented yet"); }
}  // namespace brrr::backend
