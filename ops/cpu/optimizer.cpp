// Placeholder: replaced by the family's implementation.
module;
#include <cstdint>
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CpuBackend::optimizer_step(const OptimizerStep&) { throw Error(ErrorKind::value, "not implemented yet"); }
}  // namespace brrr::backend
