// Deferred device errors: how a kernel reports an out-of-range index (or an integer division
// by zero) without making the host wait. Each CUDA device has one int in mapped pinned host memory (cudaHostAlloc
// with cudaHostAllocMapped, created on first use); a kernel that meets a bad index clamps
// it (so no wild memory access happens) and stores the op's code there. The host reads the
// flag only after it has waited for the device anyway (check_device_errors, called after
// every host-blocking wait of cuda/runtime.cpp), so checking costs no extra sync; the error
// surfaces at the next sync point instead of at the op. docs/semantics.md, "Indexing".
// The codes are the enumerators of backend::CheckedOp (the list BRRR_CHECKED_OPS of
// backend/contract.hpp); the op layer passes the public op with each launch, so messages name
// `embedding` rather than the `gather` kernel behind it.
module;
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "backend/contract.hpp"
#include "cuda/check.hpp"
module brrr.backend;
import brrr.tensor;

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
  const int code = __atomic_exchange_n(host, 0, __ATOMIC_SEQ_CST);
  if (code == 0) return;
  const auto op = static_cast<CheckedOp>(code);  // BRRR_CHECKED_OPS (backend/contract.hpp)
  if (is_domain(op))
    throw Error(ErrorKind::value, std::string(name_of(op)) + ": a negative or NaN argument detected on cuda:" +
                                      std::to_string(device) + " by a kernel launched earlier (checked at this sync "
                                      "point); its results there were written as NaN");
  if (is_division(op))
    throw Error(ErrorKind::value, std::string(name_of(op)) +
                                      ": integer division by zero detected on cuda:" + std::to_string(device) +
                                      " by a kernel launched earlier (checked at this sync point); the quotients of "
                                      "a zero divisor were written as 0");
  throw Error(ErrorKind::index, std::string(name_of(op)) +
                                    ": index out of range detected on cuda:" + std::to_string(device) +
                                    " by a kernel launched earlier (checked at this sync point); the values that op "
                                    "produced are undefined (its indices were clamped)");
}

}  // namespace brrr::backend
