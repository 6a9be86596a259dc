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
}  // namespace

void note_sync(const char* api) {
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
