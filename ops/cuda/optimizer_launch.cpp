// CudaBackend::optimizer_step: hands one (device, dtype) group of parameters to the
// multi-tensor kernel of ops/cuda/optimizer.cu (one launch per 48 tensors on the current
// stream of the device) and checks the launch status. Nothing here waits for the device.
module;
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
#include "backend/stream_check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// The stream bookkeeping's view of an optimizer's tensors: 1-D [numel] of the step's dtype.
void announce(const OptimizerStep& s, const StreamState& stream) {
  const char* op = "optimizer step";
  switch (s.kind) {
    case OptimizerKind::sgd: op = "SGD::step"; break;
    case OptimizerKind::adam: op = "Adam::step"; break;
    case OptimizerKind::adamw: op = "AdamW::step"; break;
  }
  std::vector<Operand> uses;
  std::vector<const Operand*> writes, reads;
  auto add = [&](const std::vector<stream_check::AccessLog*>& logs, std::size_t k) {
    if (k >= logs.size() || !logs[k]) return;
    Operand o;
    o.dtype = s.dtype;
    o.ndim = 1;
    o.sizes[0] = o.numel = s.numels[k];
    o.log = logs[k];
    o.op = op;
    uses.push_back(o);
  };
  for (std::size_t k = 0; k < s.params.size(); ++k) {
    add(s.param_logs, k);
    add(s.state1_logs, k);
    add(s.state2_logs, k);
    add(s.state3_logs, k);
  }
  std::size_t written = uses.size();
  for (std::size_t k = 0; k < s.params.size(); ++k) add(s.grad_logs, k);
  for (std::size_t i = 0; i < uses.size(); ++i) (i < written ? writes : reads).push_back(&uses[i]);
  note_access(stream, writes, reads);
}

}  // namespace

void CudaBackend::optimizer_step(const OptimizerStep& s) {
  const std::size_t count = s.params.size();
  if (s.grads.size() != count || s.state1.size() != count || s.state2.size() != count || s.state3.size() != count ||
      s.numels.size() != count)
    throw Error(ErrorKind::value, "optimizer_step: inconsistent tensor lists");
  if (!is_floating_point(s.dtype))
    throw Error(ErrorKind::dtype, std::string("optimizer_step: parameters of dtype ") + to_string(s.dtype) +
                                      " cannot be optimized (floating dtypes only)");
  for (std::size_t k = 0; k < count; ++k) {
    bool ok = s.params[k] != nullptr && s.grads[k] != nullptr;
    switch (s.kind) {
      case OptimizerKind::sgd: ok = ok && (s.momentum == 0 || s.state1[k] != nullptr); break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw:
        ok = ok && s.state1[k] != nullptr && s.state2[k] != nullptr && (!s.amsgrad || s.state3[k] != nullptr);
        break;
    }
    if (!ok && s.numels[k] > 0)
      throw Error(ErrorKind::value, "optimizer_step: tensor " + std::to_string(k) + " lacks a pointer its update needs");
  }
  if (count == 0) return;
  DeviceGuard g(s.device);
  StreamPtr stream = current_stream(s.device);
  announce(s, *stream);
  BRRR_CUDA_CHECK(kernels::optimizer_step(s, stream->handle));
}

}  // namespace brrr::backend
