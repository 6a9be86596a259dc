module;
module brrr.backend;
import brrr.tensor;
namespace brrr::backend {
void CpuBackend::gemm(const GemmArgs&) { throw Error(ErrorKind::value, "gemm: not implemented yet"); }
}  // namespace brrr::backend
