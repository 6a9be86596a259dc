// Stream bookkeeping: which streams wrote each storage (always: host reads wait for them),
// and the stream check (cuda::set_stream_check, BRRR_STREAM_CHECK=1): every access brrr
// enqueues, every event record and wait and every host synchronisation goes through one
// stream_check::Checker under one lock. Off, an op pays one relaxed load (note_access in
// modules/backend.cppm). The rules themselves are in cuda/stream_check.cpp. No CUDA call
// here (events go through the runtime's primitives): a build without CUDA has it too, where
// no stream exists and only the CPU-side parts are reached.
module;
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/stream_check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// --- stream slots: a dense number per cudaStream_t brrr created -----------------------------

struct SlotEntry {
  void* handle;
  int device;
};
struct SlotTable {
  std::mutex mutex;
  std::vector<SlotEntry> entries;
};
// Never destroyed (like the allocators): tensors released during static destruction still
// find it.
SlotTable& slots() {
  static auto* t = new SlotTable;
  return *t;
}
std::atomic<std::uint32_t> slot_count{0};

// --- the check ---------------------------------------------------------------------------------

struct CheckState {
  std::mutex mutex;
  stream_check::Checker checker;
  std::string pending_error;  // a hazard found where nothing can throw (a free)
};
CheckState& state() {
  static auto* s = new CheckState;  // never destroyed, as slots()
  return *s;
}

// BRRR_STREAM_CHECK=1 switches the check on before main.
[[maybe_unused]] const bool check_from_environment = [] {
  const char* v = std::getenv("BRRR_STREAM_CHECK");
  if (v && std::strcmp(v, "0") != 0 && *v) stream_check_flag.store(true);
  return true;
}();

// Throws the hazard a free left behind, if any. Call with state().mutex held.
void raise_pending_locked() {
  std::string& pending = state().pending_error;
  if (pending.empty()) return;
  std::string message = std::move(pending);
  pending.clear();
  throw Error(ErrorKind::stream, message);
}

stream_check::TensorDesc describe_operand(const Operand& o) {
  stream_check::TensorDesc d;
  d.dtype = to_string(o.dtype);
  d.ndim = o.ndim;
  for (int i = 0; i < o.ndim && i < stream_check::max_dims; ++i) d.sizes[i] = o.sizes[i];
  return d;
}

// One event per (host thread, device), re-recorded for each wait: a stream waits for the
// record made before its wait, so the next record cannot disturb an earlier wait.
struct WaitEvents {
  std::vector<void*> events;
  ~WaitEvents() {
    for (void* e : events) event_destroy(e);
  }
};

// `waiter` waits, on the device, for the work enqueued on `other` so far.
void enqueue_wait(const StreamState& waiter, const StreamState& other) {
  thread_local WaitEvents cache;
  auto d = static_cast<std::size_t>(other.device);
  if (cache.events.size() <= d) cache.events.resize(d + 1, nullptr);
  void*& e = cache.events[d];
  if (!e) e = event_create(other.device, false);
  event_record(e, other);
  stream_wait_event(waiter, e);
}

}  // namespace

std::uint32_t new_stream_slot(void* handle, int device) {
  SlotTable& t = slots();
  std::lock_guard lock(t.mutex);
  t.entries.push_back({handle, device});
  slot_count.store(static_cast<std::uint32_t>(t.entries.size()), std::memory_order_relaxed);
  return static_cast<std::uint32_t>(t.entries.size() - 1);
}

void set_stream_check(bool on) {
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  if (on && !stream_check_flag.load()) c.checker.begin_epoch();
  if (!on) c.pending_error.clear();
  stream_check_flag.store(on);
}

void check_access(const StreamState& stream, const Operand& o, stream_check::AccessKind kind) {
  stream_check::Use use{o.log, kind, o.op, describe_operand(o)};
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  raise_pending_locked();
  if (auto hazard = c.checker.launch(stream_info(stream), std::span<const stream_check::Use>(&use, 1)))
    throw Error(ErrorKind::stream, *hazard);
}

Operand tracked(const Tensor& t, const char* op) {
  Operand o;
  o.data = t.data_ptr();
  o.dtype = t.dtype();
  o.device = t.device().is_cuda() ? t.device().index() : -1;
  o.numel = t.numel();
  if (t.dim() <= max_dims) {
    o.ndim = static_cast<int>(t.dim());
    for (int i = 0; i < o.ndim; ++i) {
      o.sizes[i] = t.shape()[i];
      o.strides[i] = t.strides()[i];
    }
  } else {
    o.ndim = 1;
    o.sizes[0] = o.numel;
    o.strides[0] = 1;
  }
  o.log = t.storage().access_log();
  o.op = op;
  return o;
}

stream_check::AccessLog* access_log(const Tensor& t) { return t.defined() ? t.storage().access_log() : nullptr; }

void order_after_writers(const Storage& storage, const StreamPtr& stream) {
  const stream_check::AccessLog* log = storage.access_log();
  if (!log) return;
  std::uint64_t mask = log->writer_mask();
  // The common case: no writer but `stream` (bits alias only past 64 streams).
  if ((mask & ~stream_check::AccessLog::bit(stream->slot)) == 0 && slot_count.load(std::memory_order_relaxed) <= 64)
    return;
  std::vector<std::pair<std::uint32_t, SlotEntry>> others;
  {
    SlotTable& t = slots();
    std::lock_guard lock(t.mutex);
    for (std::uint32_t i = 0; i < t.entries.size(); ++i)
      if (i != stream->slot && (mask & stream_check::AccessLog::bit(i))) others.emplace_back(i, t.entries[i]);
  }
  for (const auto& [slot, entry] : others) {
    StreamState writer;  // the handle and device are all enqueue_wait needs
    writer.device = entry.device;
    writer.handle = entry.handle;
    writer.slot = slot;
    enqueue_wait(*stream, writer);
    if (stream_check_enabled()) {
      CheckState& c = state();
      std::lock_guard lock(c.mutex);
      c.checker.wait_stream(stream_info(*stream), stream_check::StreamInfo{slot, 0, entry.device, false});
    }
  }
}

void wait_stream(const StreamState& waiter, const StreamState& other) {
  if (waiter.handle == other.handle) return;
  enqueue_wait(waiter, other);
  if (stream_check_enabled()) {
    CheckState& c = state();
    std::lock_guard lock(c.mutex);
    c.checker.wait_stream(stream_info(waiter), stream_info(other));
  }
}

stream_check::VectorClock check_record(const StreamState& stream) {
  if (!stream_check_enabled()) return {};
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  return c.checker.record(stream_info(stream));
}

void check_wait(const StreamState& stream, const stream_check::VectorClock& event) {
  if (!stream_check_enabled()) return;
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  c.checker.wait(stream_info(stream), event);
}

void check_host_wait(const stream_check::VectorClock& event) {
  if (!stream_check_enabled()) return;
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  c.checker.host_wait(event);
}

void check_host_wait_stream(const StreamState& stream) {
  if (!stream_check_enabled()) return;
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  c.checker.host_wait_stream(stream_info(stream));
}

void check_host_wait_device(int device) {
  if (!stream_check_enabled()) return;
  CheckState& c = state();
  std::lock_guard lock(c.mutex);
  c.checker.host_wait_device(device);
}

void note_recorded_stream(const Storage& storage, const StreamState& stream) {
  if (stream_check::AccessLog* log = storage.access_log()) log->note_recorded(stream.slot);
}

void note_release(const stream_check::AccessLog& log, std::size_t nbytes) noexcept {
  if (!stream_check_enabled()) return;
  try {
    CheckState& c = state();
    std::lock_guard lock(c.mutex);
    if (auto hazard = c.checker.release(log, nbytes); hazard && c.pending_error.empty()) c.pending_error = *hazard;
  } catch (...) {
    // out of memory while describing the hazard: nothing sensible left to report
  }
}

void raise_pending_stream_error() {
  std::lock_guard lock(state().mutex);
  raise_pending_locked();
}


// --- side-stream work (SideWork) -----------------------------------------------------------
// A ticket names one piece of side work: (side stream slot << 40) | sequence number. Each side
// stream's latest sequence number is kept, and for each (waiting stream, side stream) pair the
// sequence number it has waited for, so that a stream touching many outputs of one side
// stream waits once, and not again for work it is already ordered after.

namespace {

constexpr int kTicketShift = 40;

struct SideRegistry {
  std::mutex mutex;
  std::uint64_t next_seq = 0;
  std::unordered_map<std::uint32_t, StreamPtr> side_by_slot;
  std::unordered_map<std::uint32_t, std::uint64_t> latest;  // side slot -> its newest enqueued work
  std::unordered_map<std::uint64_t, std::uint64_t> joined;  // (waiter slot << 32 | side slot) -> seq
  std::unordered_map<int, std::uint64_t> capture_floor;     // device -> the last seq before its capture
};
SideRegistry& side_registry() {
  static auto* r = new SideRegistry;  // never destroyed, as slots()
  return *r;
}

// This thread's side stream of each device, and whether it has work not yet joined.
struct ThreadSide {
  std::vector<StreamPtr> streams;
  std::vector<bool> pending;
};
thread_local ThreadSide thread_side;

std::uint64_t join_key(std::uint32_t waiter, std::uint32_t side) {
  return static_cast<std::uint64_t>(waiter) << 32 | side;
}

// `waiter` waits for everything `side` has enqueued, unless it already waited for `seq`. Under
// a graph capture on the waiter's device, side work enqueued before the capture began is not
// waited for: a capture cannot wait for an event outside it, and that work is ordered like
// any other eager work enqueued before the capture (the pass that made it joined it).
void join_locked_out(const StreamState& waiter, const StreamPtr& side, std::uint64_t seq) {
  SideRegistry& r = side_registry();
  const bool capturing = capture_underway(waiter.device);
  std::uint64_t latest;
  {
    std::lock_guard lock(r.mutex);
    if (capturing && seq <= r.capture_floor[waiter.device]) return;
    auto it = r.joined.find(join_key(waiter.slot, side->slot));
    if (it != r.joined.end() && it->second >= seq) return;
    latest = r.latest[side->slot];
  }
  wait_stream(waiter, *side);
  std::lock_guard lock(r.mutex);
  std::uint64_t& j = r.joined[join_key(waiter.slot, side->slot)];
  if (j < latest) j = latest;
}

}  // namespace

void join_side_ticket(const StreamState& stream, std::uint64_t ticket) {
  const auto side_slot = static_cast<std::uint32_t>(ticket >> kTicketShift);
  if (side_slot == stream.slot) return;
  StreamPtr side;
  {
    SideRegistry& r = side_registry();
    std::lock_guard lock(r.mutex);
    auto it = r.side_by_slot.find(side_slot);
    if (it == r.side_by_slot.end()) return;
    side = it->second;
  }
  join_locked_out(stream, side, ticket & ((std::uint64_t(1) << kTicketShift) - 1));
}

bool side_work_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRRR_WGRAD_STREAM");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

SideWork::SideWork(int device) : main_(current_stream(device)) {
  ThreadSide& t = thread_side;
  const auto d = static_cast<std::size_t>(device);
  if (t.streams.size() <= d) {
    t.streams.resize(d + 1);
    t.pending.resize(d + 1, false);
  }
  if (!t.streams[d]) t.streams[d] = create_stream(device, main_->priority);
  side_ = t.streams[d];
  t.pending[d] = true;
  SideRegistry& r = side_registry();
  {
    std::lock_guard lock(r.mutex);
    const std::uint64_t seq = ++r.next_seq;
    r.side_by_slot[side_->slot] = side_;
    ticket_ = static_cast<std::uint64_t>(side_->slot) << kTicketShift | seq;
  }
  wait_stream(*side_, *main_);
  set_current_stream(side_);
}

SideWork::~SideWork() {
  // The work is enqueued now: a stream that waits for the side stream from here on is ordered
  // after it (published only now, so that a waiter on another thread never records it as
  // waited for when its event came before the work).
  {
    SideRegistry& r = side_registry();
    std::lock_guard lock(r.mutex);
    std::uint64_t& latest = r.latest[side_->slot];
    const std::uint64_t seq = ticket_ & ((std::uint64_t(1) << kTicketShift) - 1);
    if (latest < seq) latest = seq;
  }
  set_current_stream(main_);
}

void SideWork::reads(const Storage& storage) const {
  if (!storage.device().is_cuda()) return;
  record_stream(storage, side_);
  note_recorded_stream(storage, *side_);
}

void SideWork::writes(const Storage& storage) const {
  if (stream_check::AccessLog* log = storage.access_log()) log->set_side_ticket(ticket_);
  // Freed before any stream touched it (autograd::grad leaving a weight's gradient unused, an
  // exception in the pass), the block waits for the side stream before its pool reuses it.
  reads(storage);
}

void note_side_capture_begin(int device) {
  SideRegistry& r = side_registry();
  std::lock_guard lock(r.mutex);
  r.capture_floor[device] = r.next_seq;
}

void join_side_work() {
  ThreadSide& t = thread_side;
  for (std::size_t d = 0; d < t.pending.size(); ++d) {
    if (!t.pending[d]) continue;
    t.pending[d] = false;
    const StreamPtr main = current_stream(static_cast<int>(d));
    std::uint64_t latest;
    {
      std::lock_guard lock(side_registry().mutex);
      latest = side_registry().latest[t.streams[d]->slot];
    }
    join_locked_out(*main, t.streams[d], latest);
  }
}

}  // namespace brrr::backend
