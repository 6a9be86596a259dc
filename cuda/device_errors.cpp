// Deferred device errors: how a kernel reports an out-of-range index (or an integer division
// by zero) without making the host wait. Each CUDA device has one int in mapped pinned host memory (cudaHostAlloc
// with cudaHostAllocMapped, created on first use); a kernel that meets a bad index clamps
// it (so no wild memory access happens) and stores the op's code there. The host reads the
// flag only after it has waited for the device anyway (check_device_errors, called after
// every host-blocking wait of cuda/runtime.cpp), so checking costs no extra sync; the error
// surfaces at the next sync point instead of at the op. docs/semantics.md, "Indexing".
//
// Also here: the thread's "current index op", which lets the op layer (brrr.ops) tell the
// kernels of both backends which public op they run for, so that messages name `embedding`
// rather than the `gather` kernel behind it.
module;
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "cuda/device_error_codes.hpp"
module brrr.backend;
import brrr.tensor;

extern "C++" {
namespace brrr::index_errors {

namespace {
thread_local int current = none;
}

int exchange_current_op(int code) noexcept {
  int previous = current;
  current = code;
  return previous;
}

int current_op(int fallback) noexcept { return current != none ? current : fallback; }

const char* op_name(int code) noexcept {
  switch (code) {
    case embedding: return "embedding";
    case gather: return "gather";
    case scatter_add: return "scatter_add";
    case index_select: return "index_select";
    case one_hot: return "one_hot";
    case nll_target: return "cross_entropy/nll_loss (target)";
    case floor_divide: return "floor_divide";
    case trunc_divide: return "div (rounding_mode trunc)";
    case remainder: return "remainder";
    case fmod: return "fmod";
    default: return "index kernel";
  }
}

}  // namespace brrr::index_errors
}

namespace brrr::backend {

namespace {

struct Flag {
  int* host = nullptr;    // what the host reads
  int* device = nullptr;  // what kernels write (the same memory, mapped)
};

std::mutex flags_mutex;
// One slot per device, filled on first use and never freed (kernels may still hold the
// pointer when the process exits).
std::vector<Flag>& flags() {
  static auto* f = new std::vector<Flag>();
  return *f;
}

}  // namespace

// An int in mapped pinned host memory, created lazily. Kernels store a nonzero op code into
// it on an out-of-range index.
int* device_error_flag(int device) {
  std::lock_guard lock(flags_mutex);
  auto& f = flags();
  if (device < 0) throw Error(ErrorKind::device, "device_error_flag: not a CUDA device index");
  if (static_cast<std::size_t>(device) >= f.size()) f.resize(static_cast<std::size_t>(device) + 1);
  Flag& slot = f[static_cast<std::size_t>(device)];
  if (slot.host == nullptr) {
    DeviceGuard g(device);
    void* host = nullptr;
    BRRR_CUDA_CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<volatile int*>(host) = 0;
    void* dev = nullptr;
    cudaError_t err = cudaHostGetDevicePointer(&dev, host, 0);
    if (err != cudaSuccess) {
      cudaFreeHost(host);
      BRRR_CUDA_CHECK(err);
    }
    slot.host = static_cast<int*>(host);
    slot.device = static_cast<int*>(dev);
  }
  return slot.device;
}

// Reads the flag; if a kernel set it, clears it and throws Error(index) naming the op. Call
// only after the host has waited for the device (the flag is written by kernels that may
// still be running otherwise). No CUDA call, never blocks.
void check_device_errors(int device) {
  int* host = nullptr;
  {
    std::lock_guard lock(flags_mutex);
    auto& f = flags();
    if (device < 0 || static_cast<std::size_t>(device) >= f.size()) return;
    host = f[static_cast<std::size_t>(device)].host;
  }
  if (host == nullptr) return;  // no index kernel ever ran there
  int code = __atomic_exchange_n(host, 0, __ATOMIC_SEQ_CST);
  if (code == 0) return;
  if (index_errors::is_division(code))
    throw Error(ErrorKind::value, std::string(index_errors::op_name(code)) +
                                      ": integer division by zero detected on cuda:" + std::to_string(device) +
                                      " by a kernel launched earlier (checked at this sync point); the quotients of "
                                      "a zero divisor were written as 0");
  throw Error(ErrorKind::index, std::string(index_errors::op_name(code)) +
                                    ": index out of range detected on cuda:" + std::to_string(device) +
                                    " by a kernel launched earlier (checked at this sync point); the values that op "
                                    "produced are undefined (its indices were clamped)");
}

}  // namespace brrr::backend
