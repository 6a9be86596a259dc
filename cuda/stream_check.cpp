// The stream check's logic (backend/stream_check.hpp): vector clocks per stream slot and the
// host, per-allocation access histories, and the messages of the hazards they reveal. A
// plain translation unit (no module), like the header.
#include "backend/stream_check.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace brrr::stream_check {

std::string describe(const StreamInfo& s) {
  std::string dev = "cuda:" + std::to_string(s.device);
  if (s.is_default) return "the default stream of " + dev + " (#" + std::to_string(s.id) + ")";
  return "stream #" + std::to_string(s.id) + " on " + dev;
}

std::string describe(const TensorDesc& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.sizes[i]);
  return s + "] " + t.dtype;
}

std::uint64_t VectorClock::tick(std::uint32_t slot) {
  if (slot >= t_.size()) t_.resize(slot + 1, 0);
  return ++t_[slot];
}

void VectorClock::join(const VectorClock& other) {
  if (other.t_.size() > t_.size()) t_.resize(other.t_.size(), 0);
  for (std::size_t i = 0; i < other.t_.size(); ++i) t_[i] = std::max(t_[i], other.t_[i]);
}

namespace {

bool ordered(const Access& a, const VectorClock& clock) { return a.seq <= clock[a.stream.slot]; }

const char* verb(AccessKind k) { return k == AccessKind::read ? "reads" : "writes"; }

std::string hazard(const StreamInfo& stream, const Use& use, const Access& earlier, bool earlier_is_write) {
  const bool reading = use.kind == AccessKind::read;
  const char* kind = reading ? "read-after-write" : earlier_is_write ? "write-after-write" : "write-after-read";
  std::string here = describe(stream), there = describe(earlier.stream);
  std::string seen = describe(earlier.tensor), mine = describe(use.tensor);
  return std::string(use.op) + ": " + here + " " + verb(use.kind) + " a " + mine + " tensor that " + earlier.op +
         " " + (earlier_is_write ? "wrote" : "read") + " on " + there +
         (seen == mine ? "" : " (through a " + seen + " view)") + ", and nothing orders that " +
         (earlier_is_write ? "write" : "read") + " before this " + (reading ? "read" : "write") + " (a " + kind +
         " race, found by the stream check). Record a cuda::Event on " + there + " after " + earlier.op +
         " and make " + here + " wait for it (Stream::wait), or call wait_stream, or synchronize, before " + use.op;
}

}  // namespace

AccessLog::History* Checker::live(const AccessLog& log) const {
  AccessLog::History* h = log.history_.get();
  return h && h->epoch == epoch_ ? h : nullptr;
}

AccessLog::History& Checker::fresh(AccessLog& log) {
  if (!log.history_) log.history_ = std::make_unique<AccessLog::History>();
  AccessLog::History& h = *log.history_;
  if (h.epoch != epoch_) {
    h.epoch = epoch_;
    h.write.reset();
    h.reads.clear();
  }
  return h;
}

Checker::Slot& Checker::touch(const StreamInfo& stream) {
  if (stream.slot >= slots_.size()) slots_.resize(stream.slot + 1);
  Slot& s = slots_[stream.slot];
  s.device = stream.device;
  s.clock.join(host_);
  return s;
}

std::optional<std::string> Checker::launch(const StreamInfo& stream, std::span<const Use> uses) {
  Slot& me = touch(stream);
  for (const Use& u : uses) {
    if (!u.log) continue;
    const AccessLog::History* h = live(*u.log);
    if (!h) continue;
    if (h->write && !ordered(*h->write, me.clock)) return hazard(stream, u, *h->write, true);
    if (u.kind == AccessKind::write)
      for (const Access& r : h->reads)
        if (!ordered(r, me.clock)) return hazard(stream, u, r, false);
  }
  std::uint64_t seq = me.clock.tick(stream.slot);
  for (const Use& u : uses) {
    if (!u.log) continue;
    AccessLog::History& h = fresh(*u.log);
    Access a{stream, seq, u.op, u.tensor};
    if (u.kind == AccessKind::write) {
      h.write = a;
      h.reads.clear();
      continue;
    }
    auto same = std::find_if(h.reads.begin(), h.reads.end(),
                             [&](const Access& r) { return r.stream.slot == stream.slot; });
    if (same != h.reads.end())
      *same = a;  // a later read on the same stream is ordered after the earlier one
    else
      h.reads.push_back(a);
  }
  return std::nullopt;
}

VectorClock Checker::record(const StreamInfo& stream) { return touch(stream).clock; }

void Checker::wait(const StreamInfo& stream, const VectorClock& event) { touch(stream).clock.join(event); }

void Checker::wait_stream(const StreamInfo& waiter, const StreamInfo& other) {
  VectorClock c = touch(other).clock;
  touch(waiter).clock.join(c);
}

void Checker::host_wait(const VectorClock& event) { host_.join(event); }

void Checker::host_wait_stream(const StreamInfo& stream) { host_.join(touch(stream).clock); }

void Checker::host_wait_device(int device) {
  for (Slot& s : slots_)
    if (s.device == device) host_.join(s.clock);
}

VectorClock Checker::clock_of(const StreamInfo& stream) { return touch(stream).clock; }

std::optional<std::string> Checker::release(const AccessLog& log, std::size_t nbytes) const {
  const AccessLog::History* h = live(log);
  const StreamInfo* alloc = log.allocation_stream();
  if (!h || !alloc) return std::nullopt;
  // The block is next handed to work on `alloc`, which the host enqueues from now on: it is
  // ordered after alloc's clock and after everything the host has waited for.
  VectorClock later = host_;
  if (alloc->slot < slots_.size()) later.join(slots_[alloc->slot].clock);
  auto unsafe = [&](const Access& a) {
    return a.stream.slot != alloc->slot && !ordered(a, later) && !(log.recorded_mask() & AccessLog::bit(a.stream.slot));
  };
  const Access* bad = nullptr;
  bool bad_is_write = false;
  if (h->write && unsafe(*h->write)) {
    bad = &*h->write;
    bad_is_write = true;
  }
  for (const Access& r : h->reads)
    if (!bad && unsafe(r)) bad = &r;
  if (!bad) return std::nullopt;
  std::string owner = describe(*alloc), user = describe(bad->stream);
  return "free: the memory of a " + describe(bad->tensor) + " tensor (" + std::to_string(nbytes) +
         " bytes, allocated on " + owner + ") was freed while " + user + " may still " +
         (bad_is_write ? "write" : "read") + " it (" + bad->op + "): the block returns to " + owner +
         "'s pool, and the next allocation there could overwrite it under that access. Call "
         "cuda::record_stream(tensor, that stream) while the tensor is alive, or make " +
         owner + " wait for " + user + " (an Event and Stream::wait, or wait_stream) before dropping the last "
         "handle (found by the stream check)";
}

}  // namespace brrr::stream_check
