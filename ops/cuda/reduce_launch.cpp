module;
#include <cstdint>
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CudaBackend::reduce(ReduceOp, const Operand&, const Operand&, std::uint32_t, const Operand*) {
  throw Error(ErrorKind::value, "reduce: not implemented yet");
}
}  // namespace brrr::backend
