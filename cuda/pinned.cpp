// The pinned host allocator: page-locked blocks from cudaHostAlloc, cached by size (rounded
// up to a power of two, at least 4 KiB). Async copies record the streams that use a block;
// when it is released an event is recorded on each, and the block is handed out again only
// after they complete, so a reused buffer is never overwritten under an in-flight copy.
// An async device-to-host copy into a block also records the block's write event: host
// reads of the tensor (item, to_host, printing, CPU ops) wait for it when it has not
// completed yet, so they are never stale.
module;
#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/check.hpp"
#include "backend/stream_check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

struct PinnedBlock {
  std::size_t size;
  void* ptr;
  int pending_events = 0;
  std::vector<StreamPtr> uses;
  // The newest async copy into the block: an event after it (kept with the block, made on
  // write_device) and, with the stream check on, the clock it captured.
  cudaEvent_t write_event = nullptr;
  int write_device = -1;
  stream_check::VectorClock write_clock;
  stream_check::AccessLog log;  // the Storage's stream record (reset per allocation)
};

struct PendingWrite {
  cudaEvent_t event = nullptr;
  int device = -1;
  stream_check::VectorClock clock;
};

class PinnedAllocator {
public:
  PinnedBlock* allocate(std::size_t nbytes) {
    std::lock_guard lock(mutex_);
    std::size_t size = std::bit_ceil(std::max<std::size_t>(nbytes, 4096));
    process_events();
    auto it = free_.find(size);
    PinnedBlock* block;
    if (it != free_.end()) {
      block = it->second;
      free_.erase(it);
    } else {
      if (device_count() == 0)
        throw Error(ErrorKind::device, "pinned memory: page-locked host memory needs a CUDA device, and none is "
                                       "available (cuda::is_available() is false)");
      void* p = nullptr;
      cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      if (err != cudaSuccess) {
        cudaGetLastError();
        release_cached();
        err = cudaHostAlloc(&p, size, cudaHostAllocDefault);
      }
      BRRR_CUDA_CHECK(err);
      ++stats_.num_host_alloc;
      stats_.reserved_bytes += size;
      block = new PinnedBlock{size, p};
      blocks_[p] = block;
    }
    stats_.allocated_bytes += block->size;
    block->log.reset();
    return block;
  }

  void free(void* ptr) {
    std::lock_guard lock(mutex_);
    PinnedBlock* b = blocks_.at(ptr);
    stats_.allocated_bytes -= b->size;
    for (const StreamPtr& s : b->uses) {
      DeviceGuard g(s->device);
      cudaEvent_t e = take_event();
      if (cudaEventRecord(e, static_cast<cudaStream_t>(s->handle)) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      ++b->pending_events;
      pending_.emplace_back(e, b);
    }
    b->uses.clear();
    if (b->pending_events == 0) free_.emplace(b->size, b);
  }

  void record_use(void* ptr, const StreamPtr& stream) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    for (const StreamPtr& s : it->second->uses)
      if (s == stream) return;
    it->second->uses.push_back(stream);
  }

  void record_write(void* ptr, const StreamPtr& stream, stream_check::VectorClock clock) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return;
    PinnedBlock& b = *it->second;
    DeviceGuard g(stream->device);
    if (b.write_event && b.write_device != stream->device) {
      cudaEventDestroy(b.write_event);  // released once it completes
      b.write_event = nullptr;
    }
    if (!b.write_event) {
      BRRR_CUDA_CHECK(cudaEventCreateWithFlags(&b.write_event, cudaEventDisableTiming));
      b.write_device = stream->device;
    }
    BRRR_CUDA_CHECK(cudaEventRecord(b.write_event, static_cast<cudaStream_t>(stream->handle)));
    b.write_clock = std::move(clock);
  }

  std::optional<PendingWrite> pending_write(void* ptr) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second->write_event) return std::nullopt;
    return PendingWrite{it->second->write_event, it->second->write_device, it->second->write_clock};
  }

  PinnedStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }

private:
  void process_events() {
    while (!pending_.empty()) {
      auto [event, block] = pending_.front();
      if (cudaEventQuery(event) == cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      pending_.pop_front();
      events_.push_back(event);
      if (--block->pending_events == 0) free_.emplace(block->size, block);
    }
  }

  void release_cached() {
    for (auto& [size, b] : free_) {
      if (b->write_event) cudaEventDestroy(b->write_event);
      cudaFreeHost(b->ptr);
      stats_.reserved_bytes -= size;
      blocks_.erase(b->ptr);
      delete b;
    }
    free_.clear();
  }

  cudaEvent_t take_event() {
    if (!events_.empty()) {
      cudaEvent_t e = events_.back();
      events_.pop_back();
      return e;
    }
    cudaEvent_t e;
    BRRR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  std::mutex mutex_;
  std::multimap<std::size_t, PinnedBlock*> free_;
  std::unordered_map<void*, PinnedBlock*> blocks_;
  std::deque<std::pair<cudaEvent_t, PinnedBlock*>> pending_;
  std::vector<cudaEvent_t> events_;
  PinnedStats stats_;
};

PinnedAllocator& pinned() {
  static auto* a = new PinnedAllocator;  // never destroyed (see allocator.cpp)
  return *a;
}

}  // namespace

Storage allocate_pinned(std::size_t nbytes) {
  PinnedBlock* b = pinned().allocate(nbytes);
  return Storage(std::shared_ptr<void>(b->ptr, [](void* q) { pinned().free(q); }), nbytes, Device::cpu(), true, &b->log);
}

void record_pinned_use(const Storage& storage, const StreamPtr& stream) {
  if (storage.pinned()) pinned().record_use(storage.data(), stream);
}

void note_host_pending(const Storage& storage, const StreamPtr& stream) {
  if (!storage.pinned() || !storage.data()) return;
  pinned().record_write(storage.data(), stream, check_record(*stream));
  if (stream_check::AccessLog* log = storage.access_log()) log->set_host_pending(true);
}

void wait_host_pending(const Storage& storage, const char* api) {
  stream_check::AccessLog* log = storage.access_log();
  if (!log || !log->host_pending()) return;
  // The storage is alive (the caller holds it), so its block and event are too.
  if (auto w = pinned().pending_write(storage.data())) {
    cudaError_t q = cudaEventQuery(w->event);
    if (q == cudaErrorNotReady) {
      cudaGetLastError();
      note_sync(api);
      BRRR_CUDA_CHECK(cudaEventSynchronize(w->event));
      check_device_errors(w->device);
    } else {
      BRRR_CUDA_CHECK(q);
    }
    check_host_wait(w->clock);
  }
  log->set_host_pending(false);
}

PinnedStats pinned_stats() { return pinned().stats(); }

}  // namespace brrr::backend
