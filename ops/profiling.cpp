// NVTX ranges around ops (header-only NVTX3 from the CUDA toolkit).
module;
#include <nvtx3/nvToolsExt.h>

#include <atomic>
module brrr.ops;

namespace brrr {

namespace ops_detail {
std::atomic<bool> nvtx_on{false};
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }
}  // namespace ops_detail

void set_nvtx_enabled(bool enabled) { ops_detail::nvtx_on.store(enabled, std::memory_order_relaxed); }
bool nvtx_enabled() { return ops_detail::nvtx_on.load(std::memory_order_relaxed); }

}  // namespace brrr
