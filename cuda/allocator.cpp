// The caching device allocator, in the manner of PyTorch's CUDACachingAllocator:
// - sizes round up to 512 bytes; requests <= 1 MiB come from 2 MiB segments ("small pool"),
//   larger ones from 20 MiB segments (or their own, rounded to 2 MiB, above 10 MiB);
// - a free block is split to fit and merged with free neighbours when released;
// - free blocks are kept per stream: a block freed on stream S is handed again to work on S
//   with no CUDA call and no event, because S runs in order;
// - record_stream() adds streams that also use a block: at release an event is recorded on
//   each, and the block returns to the pool only once they have all completed;
// - on cudaMalloc failure: free every cached unused segment, retry once, then throw;
// - private pools for CUDA graph captures (PyTorch's graph pools, our own code): while a
//   capture is underway on the device, an allocation on a capturing stream comes from the
//   capture's pool (id > 0), whose segments hold nothing else: first wholly free cached
//   segments taken over from the ordinary pool (no CUDA call), else cudaMalloc with the
//   thread's capture mode relaxed for that one call (cudaMalloc is not stream-ordered, so it
//   is harmless to the graph, but "potentially unsafe" to strict capture modes). A block of
//   the ordinary pool freed during a capture may be read by the graph's replays: the pool
//   holds it until it is released (a held block is in no free list, and a neighbour freed
//   later must not merge it back). Event processing (cudaEventQuery) waits until no capture
//   is underway, as querying an event captured into a graph is illegal.
// The hot path (a cached block handed out and returned) makes no CUDA call and no heap
// allocation: Block objects and the free-list tree's nodes are recycled under the
// allocator's mutex, and a Storage's deleter holds its Block, so freeing needs no lookup.
module;
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "backend/stream_check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

constexpr std::size_t min_block = 512;
constexpr std::size_t small_size = 1 << 20;          // requests up to 1 MiB use the small pool
constexpr std::size_t small_segment = 2 << 20;       // 2 MiB
constexpr std::size_t large_segment = 20 << 20;      // 20 MiB
constexpr std::size_t min_large_alloc = 10 << 20;    // above: a segment of its own
constexpr std::size_t round_large = 2 << 20;

struct Block {
  cudaStream_t stream;
  std::size_t size;
  char* ptr;
  bool small;
  std::uint64_t pool = 0;  // 0: the ordinary pool; else a private pool (all blocks of a segment share it)
  bool allocated = false;
  // Freed but not yet free: held by a capture's pool (the graph may use it) or deferred until
  // the capture ends. Such a block is neither in a free list nor mergeable into a neighbour.
  bool held = false;
  int pending_events = 0;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
  std::vector<cudaStream_t> other_streams;  // from record_stream
  stream_check::AccessLog log;              // the Storage's stream record (reset per allocation)
};

// What free blocks are ordered by: (pool, stream, size, address).
struct BlockKey {
  std::uint64_t pool;
  cudaStream_t stream;
  std::size_t size;
  char* ptr;
};

// Recycles the fixed-size nodes of the free-list trees. Only used under the owning
// allocator's mutex, and never destroyed (the allocators live until the process ends).
class NodePool {
public:
  static constexpr std::size_t node_size = 64;
  void* take(std::size_t bytes) {
    if (bytes > node_size) return ::operator new(bytes);
    if (!head_) return ::operator new(node_size);
    Node* n = head_;
    head_ = n->next;
    return n;
  }
  void give(void* p, std::size_t bytes) {
    if (bytes > node_size) return ::operator delete(p);
    auto* n = static_cast<Node*>(p);
    n->next = head_;
    head_ = n;
  }

private:
  struct Node {
    Node* next;
  };
  Node* head_ = nullptr;
};

template <class T> struct PoolAllocator {
  using value_type = T;
  NodePool* pool;
  explicit PoolAllocator(NodePool* p) : pool(p) {}
  template <class U> PoolAllocator(const PoolAllocator<U>& o) : pool(o.pool) {}
  T* allocate(std::size_t n) { return static_cast<T*>(pool->take(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) { pool->give(p, n * sizeof(T)); }
  template <class U> bool operator==(const PoolAllocator<U>& o) const { return pool == o.pool; }
};

struct BlockOrder {
  using is_transparent = void;  // lower_bound by a BlockKey, without making a Block
  static BlockKey key(const Block* b) { return {b->pool, b->stream, b->size, b->ptr}; }
  static const BlockKey& key(const BlockKey& k) { return k; }
  template <class A, class B> bool operator()(const A& a, const B& b) const {
    BlockKey x = key(a), y = key(b);
    if (x.pool != y.pool) return x.pool < y.pool;
    if (x.stream != y.stream) return x.stream < y.stream;
    if (x.size != y.size) return x.size < y.size;
    return x.ptr < y.ptr;
  }
};

std::string mib(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

using BlockSet = std::set<Block*, BlockOrder, PoolAllocator<Block*>>;

class DeviceAllocator {
public:
  explicit DeviceAllocator(int device)
      : device_(device),
        small_pool_(BlockOrder{}, PoolAllocator<Block*>(&nodes_)),
        large_pool_(BlockOrder{}, PoolAllocator<Block*>(&nodes_)) {}

  // `ordinary`: from the ordinary pool even while a capture is underway (memory a replay hook
  // writes before the graph runs, which no captured temporary may share).
  Block* allocate(std::size_t nbytes, cudaStream_t stream, bool ordinary = false) {
    std::lock_guard lock(mutex_);
    std::size_t size = std::max(min_block, (nbytes + min_block - 1) / min_block * min_block);
    bool small = size <= small_size;
    auto& pool = small ? small_pool_ : large_pool_;
    std::uint64_t pool_id = 0;
    if (capture_pool_ != 0) {
      pool_id = ordinary ? 0 : capturing_pool(stream);
    } else {
      process_events();
    }
    Block* block = find_free(pool, pool_id, stream, size);
    if (!block && pool_id != 0) block = take_cached_segment(pool, pool_id, stream, size);
    if (!block) block = new_segment(size, small, stream, nbytes, pool_id);
    block = split(block, size, pool);
    block->allocated = true;
    block->log.reset();
    stats_.allocated_bytes += block->size;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    ++stats_.num_allocs;
    return block;
  }

  // Called by the Storage's deleter with the block allocate() returned.
  void free(Block* block) {
    std::lock_guard lock(mutex_);
    block->allocated = false;
    stats_.allocated_bytes -= block->size;
    if (capture_pool_ != 0 && (block->pool == 0 || !block->other_streams.empty())) {
      // During a capture: an ordinary block may be read by the graph (held until the capture's
      // pool is released); a block of other streams waits for the capture to end (recording
      // its events now would capture them).
      block->held = true;
      (block->pool == 0 ? pools_[capture_pool_].held : capture_deferred_).push_back(block);
      return;
    }
    release_after_other_streams(block);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    Block* b = find_allocated(static_cast<char*>(ptr));
    if (!b)
      throw Error(ErrorKind::value, "record_stream: the tensor's memory does not come from brrr's CUDA allocator");
    if (stream == b->stream) return;
    if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) == b->other_streams.end())
      b->other_streams.push_back(stream);
  }

  std::size_t empty_cache() {
    std::lock_guard lock(mutex_);
    if (capture_pool_ != 0) return 0;  // cudaFree would break the capture (note_sync refused already)
    process_events();
    return release_cached();
  }

  bool has_cached_segments() {
    std::lock_guard lock(mutex_);
    for (auto* pool : {&small_pool_, &large_pool_})
      for (Block* b : *pool)
        if (!b->prev && !b->next && b->pool == 0) return true;
    return false;
  }

  MemoryStats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

  // --- private pools of CUDA graph captures ---

  std::uint64_t create_pool() {
    std::lock_guard lock(mutex_);
    std::uint64_t id = next_pool_++;
    pools_[id];
    return id;
  }

  // A capture on `stream` (its CUDA capture id `capture_id`) starts using pool `id`.
  void begin_capture(std::uint64_t id, unsigned long long capture_id) {
    std::lock_guard lock(mutex_);
    if (capture_pool_ != 0)
      throw Error(ErrorKind::stream, "CUDA graph capture: cuda:" + std::to_string(device_) +
                                         " already has a capture underway (one capture per device at a time)");
    capture_pool_ = id;
    capture_id_ = capture_id;
  }

  void end_capture() {
    std::lock_guard lock(mutex_);
    capture_pool_ = 0;
    capture_id_ = 0;
    std::vector<Block*> deferred;
    deferred.swap(capture_deferred_);
    for (Block* b : deferred) {  // the events are not captured now
      b->held = false;
      release_after_other_streams(b);
    }
  }

  // A graph of pool `id` was launched on `stream`: the pool's memory is in use there.
  void note_replay(std::uint64_t id, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    auto& streams = pools_[id].replay_streams;
    if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
  }

  // The last handle of pool `id` dropped: its segments (and the ordinary blocks it held)
  // return to the ordinary pool once the work its replays enqueued has completed.
  void release_pool(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = pools_.find(id);
    if (it == pools_.end()) return;
    PrivatePool pp = std::move(it->second);
    pools_.erase(it);
    DeviceGuard g(device_);
    std::vector<Block*> freed;
    for (auto& [base, first] : segments_) {
      if (first->pool != id) continue;
      for (Block* b = first; b; b = b->next) {
        if (!b->allocated) {  // free, or waiting for events already: both wait for the replays too
          if (b->pending_events == 0) (b->small ? small_pool_ : large_pool_).erase(b);
          freed.push_back(b);
        }
        b->pool = 0;
        if (b->allocated)  // still held by a tensor: freed later, after the replays
          for (cudaStream_t s : pp.replay_streams)
            if (s != b->stream && std::find(b->other_streams.begin(), b->other_streams.end(), s) == b->other_streams.end())
              b->other_streams.push_back(s);
      }
    }
    for (Block* b : pp.held) b->held = false;  // the events recorded below hold them now
    freed.insert(freed.end(), pp.held.begin(), pp.held.end());
    // Every block waits for at least one event (its own stream's), so nothing merges while
    // this loop still walks the list; process_events() returns them later.
    for (Block* b : freed) {
      std::vector<cudaStream_t> streams = pp.replay_streams;
      streams.insert(streams.end(), b->other_streams.begin(), b->other_streams.end());
      b->other_streams.clear();
      streams.push_back(b->stream);
      for (cudaStream_t s : streams) {
        cudaEvent_t e = take_event();
        if (cudaEventRecord(e, s) != cudaSuccess) {  // called from a destructor: cannot throw
          cudaGetLastError();
          event_pool_.push_back(e);
          continue;
        }
        ++b->pending_events;
        pending_.emplace_back(e, b);
      }
      // No event could be recorded (the CUDA context is gone at exit): the block stays out of
      // the free lists; a neighbour's release may still absorb it.
    }
  }

private:
  // Returns a freed block to its pool: at once, or once the work enqueued so far on the other
  // streams record_stream named has completed (an event on each).
  void release_after_other_streams(Block* block) {
    if (!block->other_streams.empty()) {
      DeviceGuard g(device_);
      for (cudaStream_t s : block->other_streams) {
        cudaEvent_t e = take_event();
        if (cudaEventRecord(e, s) != cudaSuccess) {  // cannot throw from a destructor path
          cudaGetLastError();
          continue;
        }
        ++block->pending_events;
        pending_.emplace_back(e, block);
      }
      block->other_streams.clear();
      if (block->pending_events > 0) return;
    }
    release(block);
  }

  struct PrivatePool {
    std::vector<Block*> held;                 // ordinary blocks freed during its captures
    std::vector<cudaStream_t> replay_streams;  // where its graphs were launched
  };

  // The pool of an allocation on `stream` while a capture is underway: the capture's when
  // `stream` takes part in it, else the ordinary one.
  std::uint64_t capturing_pool(cudaStream_t stream) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    BRRR_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
    return status == cudaStreamCaptureStatusActive && id == capture_id_ ? capture_pool_ : 0;
  }

  // A wholly free cached segment of the ordinary pool, of the pool's kind, big enough for
  // `size` and not needlessly big, handed over to private pool `id` (no CUDA call).
  Block* take_cached_segment(BlockSet& pool, std::uint64_t id, cudaStream_t stream, std::size_t size) {
    Block* best = nullptr;
    for (Block* b : pool) {
      if (b->pool != 0) break;  // ordered by pool first: the ordinary pool's blocks come first
      if (b->prev || b->next || b->pending_events != 0 || b->size < size) continue;
      if (!b->small && b->size > large_segment && b->size > 2 * size + round_large) continue;
      if (!best || b->size < best->size) best = b;
    }
    if (!best) return nullptr;
    pool.erase(best);
    best->pool = id;
    best->stream = stream;
    return best;
  }

  // The allocated block that starts at `ptr` (nullptr if none): its segment from the
  // segment index, then a walk along the segment's blocks. Rare (record_stream only).
  Block* find_allocated(char* ptr) {
    auto it = segments_.upper_bound(ptr);
    if (it == segments_.begin()) return nullptr;
    --it;
    for (Block* b = it->second; b; b = b->next)
      if (b->ptr == ptr) return b->allocated ? b : nullptr;
    return nullptr;
  }

  Block* make_block(cudaStream_t stream, std::size_t size, char* ptr, bool small, std::uint64_t pool) {
    Block* b;
    if (spare_blocks_.empty()) {
      b = new Block{stream, size, ptr, small, pool};
    } else {
      b = spare_blocks_.back();
      spare_blocks_.pop_back();
      b->stream = stream;
      b->size = size;
      b->ptr = ptr;
      b->small = small;
      b->pool = pool;
      b->allocated = false;
      b->held = false;
      b->pending_events = 0;
      b->prev = b->next = nullptr;
      b->other_streams.clear();
    }
    return b;
  }
  void drop_block(Block* b) { spare_blocks_.push_back(b); }

  Block* find_free(BlockSet& pool, std::uint64_t pool_id, cudaStream_t stream, std::size_t size) {
    auto it = pool.lower_bound(BlockKey{pool_id, stream, size, nullptr});
    if (it == pool.end() || (*it)->pool != pool_id || (*it)->stream != stream) return nullptr;
    // Do not carve a small request out of a big oversize block (bigger than a standard
    // 20 MiB segment, i.e. one made for a single large request): it would pin the segment.
    // Standard segments and their pieces serve any request that fits, so that a steady
    // stream of 1-10 MiB requests reuses them instead of calling cudaMalloc each time.
    if (!(*it)->small && (*it)->size > large_segment && (*it)->size > 2 * size + round_large) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  Block* new_segment(std::size_t size, bool small, cudaStream_t stream, std::size_t asked, std::uint64_t pool_id) {
    std::size_t seg = small ? small_segment
                            : (size < min_large_alloc ? large_segment : (size + round_large - 1) / round_large * round_large);
    DeviceGuard g(device_);
    void* p = nullptr;
    cudaError_t err = cudaSuccess;
    if (capture_pool_ != 0) {
      // Under a capture (ThreadLocal mode) cudaMalloc counts as "potentially unsafe": relax
      // this thread's mode for the one call, as the allocation outlives every replay anyway.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      BRRR_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      err = cudaMalloc(&p, seg);
      cudaThreadExchangeStreamCaptureMode(&mode);
      ++stats_.num_capture_cuda_malloc;
    } else {
      err = cudaMalloc(&p, seg);
    }
    if (err != cudaSuccess) {
      cudaGetLastError();
      ++stats_.num_ooms;
      if (capture_pool_ == 0) {  // cudaFree during a capture is not allowed: no retry then
        process_events();
        release_cached();
        err = cudaMalloc(&p, seg);
      }
      if (err != cudaSuccess) {
        cudaGetLastError();
        std::size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        throw Error(ErrorKind::out_of_memory,
                    "CUDA out of memory on cuda:" + std::to_string(device_) + ": tried to allocate " + mib(asked) +
                        " (" + std::to_string(asked) + " bytes, in a segment of " + mib(seg) + "); brrr holds " +
                        mib(stats_.allocated_bytes) + " (" + std::to_string(stats_.allocated_bytes) + " bytes)" +
                        " in tensors and " + mib(stats_.reserved_bytes) + " reserved; the device has " + mib(free_b) +
                        " free of " + mib(total_b) + " (" + cudaGetErrorString(err) + ")");
      }
    }
    ++stats_.num_cuda_malloc;
    stats_.reserved_bytes += seg;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    Block* b = make_block(stream, seg, static_cast<char*>(p), small, pool_id);
    segments_[b->ptr] = b;
    return b;
  }

  // Cuts `size` bytes off the front of `block`; the rest goes back to `pool`.
  Block* split(Block* block, std::size_t size, BlockSet& pool) {
    std::size_t rest = block->size - size;
    bool worth = block->small ? rest >= min_block : rest > small_size;
    if (!worth) return block;
    Block* tail = make_block(block->stream, rest, block->ptr + size, block->small, block->pool);
    tail->prev = block;
    tail->next = block->next;
    if (block->next) block->next->prev = tail;
    block->next = tail;
    block->size = size;
    pool.insert(tail);
    return block;
  }

  // Returns a free block to its pool, merged with free neighbours. The front block of a merge
  // survives, so a segment's first Block object never changes (segments_ stays valid).
  void release(Block* block) {
    auto& pool = block->small ? small_pool_ : large_pool_;
    auto mergeable = [](const Block* n) { return n && !n->allocated && !n->held && n->pending_events == 0; };
    if (Block* prev = block->prev; mergeable(prev)) {
      pool.erase(prev);
      prev->size += block->size;
      prev->next = block->next;
      if (prev->next) prev->next->prev = prev;
      drop_block(block);
      block = prev;
    }
    if (Block* next = block->next; mergeable(next)) {
      pool.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (block->next) block->next->prev = block;
      drop_block(next);
    }
    pool.insert(block);
  }

  void process_events() {
    while (!pending_.empty()) {
      auto [event, block] = pending_.front();
      cudaError_t q = cudaEventQuery(event);
      if (q == cudaErrorNotReady) {
        cudaGetLastError();
        break;
      }
      pending_.pop_front();
      event_pool_.push_back(event);
      if (--block->pending_events == 0) release(block);
    }
  }

  std::size_t release_cached() {
    std::size_t freed = 0;
    DeviceGuard g(device_);
    for (auto* pool : {&small_pool_, &large_pool_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev || b->next || b->pool != 0) {  // private pools keep their segments
          ++it;
          continue;
        }
        cudaFree(b->ptr);
        ++stats_.num_cuda_free;
        stats_.reserved_bytes -= b->size;
        freed += b->size;
        segments_.erase(b->ptr);
        it = pool->erase(it);
        drop_block(b);
      }
    }
    return freed;
  }

  cudaEvent_t take_event() {
    if (!event_pool_.empty()) {
      cudaEvent_t e = event_pool_.back();
      event_pool_.pop_back();
      return e;
    }
    cudaEvent_t e;
    BRRR_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  int device_;
  std::mutex mutex_;
  NodePool nodes_;  // before the pools that allocate from it
  BlockSet small_pool_, large_pool_;
  std::map<char*, Block*> segments_;  // segment base -> its first block (for record_stream)
  std::vector<Block*> spare_blocks_;
  std::deque<std::pair<cudaEvent_t, Block*>> pending_;
  std::vector<cudaEvent_t> event_pool_;
  std::map<std::uint64_t, PrivatePool> pools_;
  std::uint64_t next_pool_ = 1;
  std::uint64_t capture_pool_ = 0;        // the pool of the capture underway (0: none)
  unsigned long long capture_id_ = 0;     // its CUDA capture sequence id
  std::vector<Block*> capture_deferred_;  // private blocks freed during it, with other streams
  MemoryStats stats_;
};

DeviceAllocator& allocator(int device) {
  // Never destroyed: tensors released during static destruction still find their allocator.
  static auto* all = [] {
    auto* v = new std::vector<DeviceAllocator*>;
    for (int d = 0; d < device_count(); ++d) v->push_back(new DeviceAllocator(d));
    return v;
  }();
  if (device < 0 || device >= static_cast<int>(all->size()))
    throw Error(ErrorKind::device, "CUDA allocator: cuda:" + std::to_string(device) + " is not available (" +
                                       std::to_string(all->size()) + " CUDA device(s))");
  return *(*all)[static_cast<std::size_t>(device)];
}

}  // namespace

namespace {
Storage allocate_from(std::size_t nbytes, int device, const StreamPtr& stream, bool ordinary) {
  DeviceAllocator& a = allocator(device);
  if (nbytes == 0) return Storage(std::shared_ptr<void>(), 0, Device::cuda(device));
  Block* b = a.allocate(nbytes, static_cast<cudaStream_t>(stream->handle), ordinary);
  b->log.set_allocation_stream(stream_info(*stream));  // whose pool it returns to
  auto release = [&a, b, nbytes](void*) {
    // With the stream check on: is another stream still using it? (Reported later: a
    // deleter cannot throw.)
    if (b->log.has_history()) note_release(b->log, nbytes);
    a.free(b);
  };
  return Storage(std::shared_ptr<void>(b->ptr, release), nbytes, Device::cuda(device), false, &b->log);
}
}  // namespace

Storage allocate_device(std::size_t nbytes, int device, const StreamPtr& stream) {
  return allocate_from(nbytes, device, stream, false);
}

Storage allocate_device_outside_capture(std::size_t nbytes, int device, const StreamPtr& stream) {
  return allocate_from(nbytes, device, stream, true);
}

void record_stream(const Storage& storage, const StreamPtr& stream) {
  if (!storage.device().is_cuda())
    throw Error(ErrorKind::device, "record_stream: the tensor is on " + storage.device().str() + ", not a CUDA device");
  if (storage.device().index() != stream->device)
    throw Error(ErrorKind::device, "record_stream: the tensor is on " + storage.device().str() +
                                       " but the stream on cuda:" + std::to_string(stream->device));
  if (!storage.data()) return;
  allocator(stream->device).record_stream(storage.data(), static_cast<cudaStream_t>(stream->handle));
}

PoolHandle::~PoolHandle() {
  try {
    allocator(device).release_pool(id);
  } catch (...) {  // a destructor: the memory stays reserved rather than terminating
  }
}

PoolPtr pool_create(int device) {
  auto p = std::make_shared<PoolHandle>();
  p->device = device;
  p->id = allocator(device).create_pool();
  return p;
}

void allocator_begin_capture(int device, std::uint64_t pool, unsigned long long capture_id) {
  allocator(device).begin_capture(pool, capture_id);
}
void allocator_end_capture(int device) { allocator(device).end_capture(); }
void allocator_note_replay(int device, std::uint64_t pool, void* stream) {
  allocator(device).note_replay(pool, static_cast<cudaStream_t>(stream));
}

MemoryStats memory_stats(int device) { return allocator(device).stats(); }
void reset_peak_memory_stats(int device) { allocator(device).reset_peak(); }

void empty_cache(int device) {
  DeviceAllocator& a = allocator(device);
  // cudaFree waits for the whole device: a host-blocking call, counted when it happens.
  bool syncs = a.has_cached_segments();
  if (syncs) note_sync("cuda::empty_cache");
  a.empty_cache();
  if (syncs) check_host_wait_device(device);
}

}  // namespace brrr::backend
