// brrr.cuda — the host/device model made visible: streams, events, synchronisation
// accounting and the caching allocator's statistics. Everything here is safe to call on a
// machine without a GPU: is_available() is false and device-taking calls throw
// Error(device).
module;
#include <cstddef>
#include <cstdint>
#include <memory>
export module brrr.cuda;
import brrr.tensor;
import brrr.backend;

export namespace brrr::cuda {

/// True when at least one CUDA device can be used. Never throws.
bool is_available();
/// Number of CUDA devices (0 without a driver or GPU). Never throws.
int device_count();

class Event;

/// A CUDA stream: an in-order queue of device work. Cheap handle; copies share the stream.
/// brrr's streams are non-blocking with respect to the legacy default stream.
class Stream {
public:
  /// A new stream on `device` (a CUDA device). priority: 0 is the default; negative is
  /// higher priority (clamped to the device's range). Throws Error(device) on a CPU device.
  static Stream create(Device device, int priority = 0);

  Device device() const;
  /// The cudaStream_t, for interop with other CUDA code.
  void* handle() const;
  int priority() const;
  /// True when all enqueued work has completed (never blocks, not counted as a sync).
  bool query() const;
  /// Blocks the host until all enqueued work completes. A counted sync point.
  void synchronize() const;
  /// Makes future work on this stream wait for `event` (device-side: the host stays free).
  void wait(const Event& event) const;
  /// Makes future work on this stream wait for all work enqueued on `other` so far (an
  /// event recorded on `other` and waited on here; device-side). Both on one device, else
  /// Error(device).
  void wait_stream(const Stream& other) const;
  /// A distinct number per stream (for printing).
  std::uint64_t id() const;
  friend bool operator==(const Stream& a, const Stream& b) { return a.state_ == b.state_; }

  explicit Stream(backend::StreamPtr state) : state_(std::move(state)) {}
  const backend::StreamPtr& state() const { return state_; }

private:
  backend::StreamPtr state_;
};

/// This thread's current stream of `device` (brrr's default stream unless a StreamGuard set
/// another). Every op on `device` is enqueued on it.
Stream current_stream(Device device);
/// brrr's default stream of `device`.
Stream default_stream(Device device);

/// Sets the current stream of the stream's device for this thread; restores the previous
/// one when destroyed (RAII).
class StreamGuard {
public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

private:
  backend::StreamPtr previous_;
};

/// A CUDA event: a marker in a stream. Created lazily on first record; timing enabled.
class Event {
public:
  /// enable_timing: allow elapsed_ms (slightly costlier to record).
  explicit Event(bool enable_timing = true);
  /// Records the event at the current end of `stream`.
  void record(const Stream& stream);
  /// Records on the current stream of `device`.
  void record(Device device);
  /// True when the work before the record has completed (or never recorded). Never blocks.
  bool query() const;
  /// Blocks the host until the recorded work completes. A counted sync point.
  void synchronize() const;
  /// Milliseconds between two completed events (both recorded with timing). Throws
  /// Error(cuda) if either has not completed or was not recorded.
  static float elapsed_ms(const Event& start, const Event& end);
  bool recorded() const;
  /// The cudaEvent_t (nullptr before the first record).
  void* handle() const;

private:
  friend class Stream;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// Blocks the host until all work on every stream of `device` (or the current device 0)
/// completes. A counted sync point.
void synchronize(Device device = Device::cuda(0));

/// Host-blocking calls (item, to_host, pageable copies, stream/event/device synchronize)
/// made by this process so far, all threads.
std::uint64_t sync_count();
/// allow: count only. warn: also print a line naming the API to stderr. error: throw
/// Error(sync) naming the API instead of blocking (for checking that a loop has no syncs).
using SyncPolicy = backend::SyncPolicy;
void set_sync_policy(SyncPolicy policy);
SyncPolicy sync_policy();
/// Sets a policy for a scope, restoring the previous one (RAII).
class SyncPolicyGuard {
public:
  explicit SyncPolicyGuard(SyncPolicy policy) : previous_(cuda::sync_policy()) { cuda::set_sync_policy(policy); }
  ~SyncPolicyGuard() { cuda::set_sync_policy(previous_); }
  SyncPolicyGuard(const SyncPolicyGuard&) = delete;
  SyncPolicyGuard& operator=(const SyncPolicyGuard&) = delete;

private:
  SyncPolicy previous_;
};

/// The stream check: when on, every op, copy, cuBLAS call, random draw and optimizer step
/// checks its tensors against the earlier accesses on other streams, tracked with vector
/// clocks that Event::record, Stream::wait, wait_stream and host synchronisations advance.
/// A read of data written on another stream, or a write of data another stream wrote or
/// read, with no event (or sync) ordering the two, throws Error(stream) naming the op, the
/// tensor's shape and dtype, both streams and the earlier op, before anything is enqueued.
/// Dropping the last handle of memory another stream may still use, without record_stream,
/// is reported (Error(stream)) by the next op or sync, since a destructor cannot throw.
/// Off by default (then an op pays one relaxed atomic load per CUDA tensor it touches, a
/// few nanoseconds against microseconds of launch); BRRR_STREAM_CHECK=1 in the
/// environment switches it on at start-up. Switching it on forgets accesses made before.
void set_stream_check(bool on);
bool stream_check_enabled();
/// Switches the stream check for a scope, restoring the previous state (RAII).
class StreamCheckGuard {
public:
  explicit StreamCheckGuard(bool on) : previous_(cuda::stream_check_enabled()) { cuda::set_stream_check(on); }
  ~StreamCheckGuard() { cuda::set_stream_check(previous_); }
  StreamCheckGuard(const StreamCheckGuard&) = delete;
  StreamCheckGuard& operator=(const StreamCheckGuard&) = delete;

private:
  bool previous_;
};

/// Caching allocator statistics of `device` (bytes and call counts).
using MemoryStats = backend::MemoryStats;
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
/// Returns cached, wholly free segments of `device` to the driver (cudaFree).
void empty_cache(Device device);
/// Marks `tensor`'s memory as in use by `stream` as well as by the stream it was allocated
/// on: when freed, the block is reused only after the work `stream` has enqueued by then.
void record_stream(const Tensor& tensor, const Stream& stream);
/// Pinned host allocator statistics.
using PinnedStats = backend::PinnedStats;
PinnedStats pinned_memory_stats();

}  // namespace brrr::cuda
