module;
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "backend/stream_check.hpp"
module brrr.tensor;
import brrr.backend;

namespace brrr {

Storage::Storage(std::shared_ptr<void> data, std::size_t nbytes, Device device, bool pinned,
                 stream_check::AccessLog* log)
    : impl_(std::make_shared<Impl>()) {
  impl_->data = std::move(data);
  impl_->nbytes = nbytes;
  impl_->device = device;
  impl_->pinned = pinned;
  impl_->log = log;
}

Storage Storage::allocate(std::size_t nbytes, Device device, bool pinned) {
  if (pinned && !device.is_cpu())
    throw Error(ErrorKind::device, "Storage::allocate: pinned memory is host memory, not " + device.str());
  switch (device.type()) {
    case DeviceType::cpu: {
      // Without a CUDA device pinned memory has no use: warn once and give pageable memory
      // (PyTorch's DataLoader does the same with pin_memory=True), so portable code needs no
      // branch. is_pinned() tells which one was given.
      if (pinned && backend::device_count() == 0) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          std::fprintf(stderr, "brrr: warning: pinned = true but no CUDA device is available; using pageable "
                               "host memory instead (this warning is shown once)\n");
        pinned = false;
      }
      if (pinned) return backend::allocate_pinned(nbytes);
      // 64-byte aligned so that Eigen and vector loads never see a misaligned base.
      std::size_t rounded = (nbytes + 63) / 64 * 64;
      void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
      if (rounded && !p)
        throw Error(ErrorKind::out_of_memory, "Storage::allocate: cannot allocate " +
                                                  std::to_string(nbytes) + " bytes of host memory");
      return Storage(std::shared_ptr<void>(p, [](void* q) { std::free(q); }), nbytes, device);
    }
    case DeviceType::cuda:
      return backend::allocate_device(nbytes, device.index(), backend::current_stream(device.index()));
  }
  throw Error(ErrorKind::device, "Storage::allocate: unknown device");
}

stream_check::AccessLog* Storage::access_log() const { return impl_ ? impl_->log : nullptr; }

void* Storage::data() const { return impl_ ? impl_->data.get() : nullptr; }
std::size_t Storage::nbytes() const { return impl_ ? impl_->nbytes : 0; }
Device Storage::device() const { return impl_ ? impl_->device : Device::cpu(); }
bool Storage::pinned() const { return impl_ && impl_->pinned; }
std::uint64_t Storage::version() const { return impl_ ? impl_->version : 0; }
void Storage::bump_version() const {
  if (impl_) ++impl_->version;
}

}  // namespace brrr
