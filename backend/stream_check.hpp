// backend/stream_check.hpp — internal: which streams touched which allocation, and the
// vector-clock logic that decides whether two accesses on different streams are ordered.
// Plain C++ (standard headers only, no CUDA, no brrr types), like backend/contract.hpp: the
// interface of brrr.backend includes it, and the hazard rules are unit-tested on any machine
// (tests/cuda/test_stream_check.cpp). Implemented in cuda/stream_check.cpp; the CUDA runtime
// feeds it (cuda/stream_order.cpp).
//
// The model, after PyTorch's CUDA sanitizer (torch/cuda/_sanitizer.py, TORCH_CUDA_SANITIZER):
// - every stream slot S has a logical clock; each operation enqueued on S advances S's own
//   entry and is stamped with it (its sequence number);
// - each stream also keeps, per other stream, the newest sequence number known to have
//   happened before its next operation (a vector clock);
// - Event::record copies the stream's vector clock into the event; Stream::wait(event)
//   joins (element-wise max) the event's clock into the waiting stream's;
// - a host synchronisation (stream, event or device) joins into the host's clock, and
//   every operation the host enqueues afterwards joins the host's clock first;
// - access a is ordered before the next operation on T iff a.seq <= clock(T)[a.stream].
// An operation that reads a storage whose last write is not ordered before it
// (read-after-write), or writes one whose last write or any read since is not
// (write-after-write, write-after-read), is a hazard. So is releasing memory to the pool of
// the stream it was allocated on while an access on another stream is not ordered before
// that stream's later work and the other stream was not given with record_stream.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace brrr::stream_check {

/// Most sizes a tensor description keeps (brrr's operands have at most 8 dims).
inline constexpr int max_dims = 8;

/// A stream as the checker sees it. `slot` names the underlying queue (a cudaStream_t):
/// dense from 0, kept when brrr recycles the handle for a new Stream; `id` is the
/// Stream::id() of the handle that made the access (for messages).
struct StreamInfo {
  std::uint32_t slot = 0;
  std::uint64_t id = 0;
  int device = 0;
  bool is_default = false;
};

/// "stream #5 on cuda:0", or "the default stream of cuda:0 (#1)".
std::string describe(const StreamInfo& stream);

/// Shape and dtype of the tensor an access went through, for messages.
struct TensorDesc {
  const char* dtype = "?";
  int ndim = 0;
  std::int64_t sizes[max_dims] = {};
};
/// "[4, 5] f32".
std::string describe(const TensorDesc& tensor);

/// Entry s: how many operations of stream slot s are known to have happened before.
/// Missing entries are 0.
class VectorClock {
public:
  std::uint64_t operator[](std::uint32_t slot) const { return slot < t_.size() ? t_[slot] : 0; }
  /// Advances slot's own entry by one and returns the new value.
  std::uint64_t tick(std::uint32_t slot);
  /// Element-wise maximum.
  void join(const VectorClock& other);
  bool empty() const { return t_.empty(); }
  void clear() { t_.clear(); }

private:
  std::vector<std::uint64_t> t_;
};

enum class AccessKind : std::uint8_t { read, write };

/// One access made by an operation: on which stream, when, by which op, through which view.
struct Access {
  StreamInfo stream;
  std::uint64_t seq = 0;
  const char* op = "";
  TensorDesc tensor;
};

class Checker;

/// What brrr knows about the streams that used one allocation. The allocators keep one in
/// each block they hand out (reset for every new allocation) and the Storage points at it;
/// memory brrr does not allocate for devices (the CPU heap) has none. The writer and
/// record_stream masks are kept always (a relaxed load per written operand, an atomic or only
/// when a new stream writes); the access history only while the check is on, guarded by the
/// caller's lock around the Checker.
class AccessLog {
public:
  AccessLog() = default;
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  /// Forgets everything, for a new allocation of the same memory (the caller has the only
  /// access: the allocator, under its lock).
  void reset() noexcept {
    writers_.store(0, std::memory_order_relaxed);
    recorded_.store(0, std::memory_order_relaxed);
    host_pending_.store(false, std::memory_order_relaxed);
    side_ticket_.store(0, std::memory_order_relaxed);
    has_alloc_ = false;
    history_.reset();
  }

  /// Bit (slot % 64) of a stream slot, as in writer_mask() and recorded_mask().
  static std::uint64_t bit(std::uint32_t slot) { return std::uint64_t(1) << (slot % 64); }

  /// Remembers that work enqueued on stream `slot` writes these bytes.
  void note_writer(std::uint32_t slot) noexcept {
    std::uint64_t b = bit(slot);
    if (!(writers_.load(std::memory_order_relaxed) & b)) writers_.fetch_or(b, std::memory_order_relaxed);
  }
  /// Streams (bit slot % 64) that have enqueued writes to these bytes, ever.
  std::uint64_t writer_mask() const noexcept { return writers_.load(std::memory_order_relaxed); }

  /// cuda::record_stream(tensor, stream) was called: the allocator waits for `slot`.
  void note_recorded(std::uint32_t slot) noexcept { recorded_.fetch_or(bit(slot), std::memory_order_relaxed); }
  std::uint64_t recorded_mask() const noexcept { return recorded_.load(std::memory_order_relaxed); }

  /// The stream whose pool the memory returns to when released (caching allocator only).
  void set_allocation_stream(const StreamInfo& stream) noexcept {
    alloc_ = stream;
    has_alloc_ = true;
  }
  const StreamInfo* allocation_stream() const noexcept { return has_alloc_ ? &alloc_ : nullptr; }

  /// Pinned host memory only: an asynchronous device-to-host copy into it may still run, so
  /// the host must wait before reading (cuda/pinned.cpp keeps the event).
  void set_host_pending(bool pending) noexcept { host_pending_.store(pending, std::memory_order_relaxed); }
  bool host_pending() const noexcept { return host_pending_.load(std::memory_order_relaxed); }

  /// Written by deferred side-stream work (backend::SideWork): `ticket` (> 0) names
  /// that work; any other stream that touches these bytes first waits for it (note_access).
  void set_side_ticket(std::uint64_t ticket) noexcept { side_ticket_.store(ticket, std::memory_order_relaxed); }
  std::uint64_t side_ticket() const noexcept { return side_ticket_.load(std::memory_order_relaxed); }

  /// True when the check recorded accesses to these bytes (in any epoch).
  bool has_history() const noexcept { return history_ != nullptr; }

private:
  friend class Checker;
  // The check's record, made on the first checked access: the last write and, since it, the
  // newest read of each stream slot.
  struct History {
    std::uint64_t epoch = 0;
    std::optional<Access> write;
    std::vector<Access> reads;
  };
  std::atomic<std::uint64_t> writers_{0};
  std::atomic<std::uint64_t> recorded_{0};
  std::atomic<bool> host_pending_{false};
  std::atomic<std::uint64_t> side_ticket_{0};
  bool has_alloc_ = false;
  StreamInfo alloc_;
  std::unique_ptr<History> history_;
};

/// One storage an operation is about to touch.
struct Use {
  AccessLog* log = nullptr;
  AccessKind kind = AccessKind::read;
  const char* op = "";
  TensorDesc tensor;
};

/// The vector clocks of every stream and of the host, and the hazard rules. Not
/// synchronised: the runtime calls it under one lock. Methods that can find a hazard return
/// its message (the caller throws Error(stream)); nothing is recorded then.
class Checker {
public:
  /// An operation about to be enqueued on `stream` that makes `uses`. Checks every use
  /// against the history of its storage, then (no hazard) stamps it with the stream's next
  /// sequence number and records it.
  std::optional<std::string> launch(const StreamInfo& stream, std::span<const Use> uses);
  /// Event::record on `stream`: the clock the event captures.
  VectorClock record(const StreamInfo& stream);
  /// Stream::wait(event): later work on `stream` is ordered after the event's clock.
  void wait(const StreamInfo& stream, const VectorClock& event);
  /// waiter.wait_stream(other): an event recorded on `other` and waited on by `waiter`.
  void wait_stream(const StreamInfo& waiter, const StreamInfo& other);
  /// The host waited for an event (Event::synchronize, or query() returned true).
  void host_wait(const VectorClock& event);
  /// The host waited for everything enqueued on `stream` (Stream::synchronize, a blocking
  /// copy, query() returned true).
  void host_wait_stream(const StreamInfo& stream);
  /// The host waited for every stream of `device` (cuda::synchronize, cudaFree).
  void host_wait_device(int device);
  /// The memory of `log` goes back to the pool of its allocation stream. A hazard if an
  /// access on another stream is neither ordered before that stream's (or the host's) later
  /// work nor covered by record_stream. `nbytes` is for the message.
  std::optional<std::string> release(const AccessLog& log, std::size_t nbytes) const;

  /// Forgets every recorded access (they stay in the logs but count as absent): called when
  /// the check is switched on, since events and waits made while it was off were not seen.
  void begin_epoch() { ++epoch_; }
  std::uint64_t epoch() const { return epoch_; }

  /// For tests: a stream's clock (host's joined in) and the host's.
  VectorClock clock_of(const StreamInfo& stream);
  const VectorClock& host_clock() const { return host_; }

private:
  struct Slot {
    VectorClock clock;
    int device = -1;
  };
  // The slot of `stream`, created on first use, with the host's clock joined in (work the
  // host enqueues now is ordered after everything the host has waited for).
  Slot& touch(const StreamInfo& stream);
  AccessLog::History* live(const AccessLog& log) const;
  AccessLog::History& fresh(AccessLog& log);

  std::vector<Slot> slots_;
  VectorClock host_;
  std::uint64_t epoch_ = 1;
};

}  // namespace brrr::stream_check
