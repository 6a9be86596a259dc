// CudaBackend's im2col/col2im members (ops/cuda/im2col.cu).
module;
#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

kernels::Strided strided(const Operand& o);  // ops/cuda/backend_cuda.cpp

namespace {
kernels::Window window(const Window2d& g) {
  return {g.n, g.c, g.h, g.w, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.out_h, g.out_w};
}
}  // namespace

void CudaBackend::im2col(const Operand& out, const Operand& in, const Window2d& w, double pad_value) {
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  note_access(*stream, {&out}, {&in});
  BRRR_CUDA_CHECK(kernels::im2col(strided(out), strided(in), window(w), pad_value, stream->handle));
}

void CudaBackend::col2im(const Operand& out, const Operand& in, const Window2d& w) {
  DeviceGuard g(out.device);
  StreamPtr stream = current_stream(out.device);
  note_access(*stream, {&out}, {&in});
  BRRR_CUDA_CHECK(kernels::col2im(strided(out), strided(in), window(w), stream->handle));
}

}  // namespace brrr::backend
