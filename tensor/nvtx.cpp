// NVTX ranges around ops and backward rules (header-only NVTX3 from the CUDA toolkit; a build
// without CUDA keeps the switch and opens no range).
module;
#include <atomic>
#ifdef BRRR_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif
module brrr.tensor;

namespace brrr {

std::atomic<bool> nvtx_on{false};

#ifdef BRRR_HAVE_CUDA
void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }
#else
void nvtx_push(const char*) {}
void nvtx_pop() {}
#endif

void set_nvtx_enabled(bool enabled) { nvtx_on.store(enabled, std::memory_order_relaxed); }
bool nvtx_enabled() { return nvtx_on.load(std::memory_order_relaxed); }

}  // namespace brrr
