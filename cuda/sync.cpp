// The one choke point of host-blocking calls: every one passes note_sync() before it blocks,
// which counts it and applies the sync policy. No CUDA call: a build without CUDA has it too
// (CPU reads are never device syncs, but the accounting API exists everywhere).
module;
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {
std::atomic<std::uint64_t> syncs{0};
std::atomic<SyncPolicy> policy{SyncPolicy::allow};
thread_local bool capturing = false;  // a CUDA graph capture is underway on this thread
}  // namespace

bool capturing_on_this_thread() noexcept { return capturing; }
void set_capturing_on_this_thread(bool on) noexcept { capturing = on; }

void note_sync(const char* api) {
  // Under a CUDA graph capture nothing runs, so there is nothing to wait for, and a wait on
  // the capturing stream would invalidate the capture: refuse before any CUDA call, whatever
  // the policy. (Only this thread's captures: others' streams are not this thread's to block.)
  if (capturing)
    throw Error(ErrorKind::stream, std::string(api) + " would block the host, which is not allowed inside a CUDA graph "
                                                      "capture (nothing captured has run yet); read results after "
                                                      "Graph::replay(), outside the capture");
  if (stream_check_enabled()) raise_pending_stream_error();  // a free the check found unsafe
  switch (policy.load()) {
    case SyncPolicy::allow: break;
    case SyncPolicy::warn:
      std::fprintf(stderr, "brrr: host-device synchronisation in %s (sync #%llu)\n", api,
                   static_cast<unsigned long long>(syncs.load() + 1));
      break;
    case SyncPolicy::error:
      throw Error(ErrorKind::sync, std::string(api) + " would block the host until the device catches up, and the "
                                                      "sync policy is SyncPolicy::error");
  }
  ++syncs;
}

std::uint64_t sync_count() { return syncs.load(); }
void set_sync_policy(SyncPolicy p) { policy.store(p); }
SyncPolicy sync_policy() { return policy.load(); }

}  // namespace brrr::backend
