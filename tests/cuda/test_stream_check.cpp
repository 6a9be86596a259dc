// The stream check's rules (brrr.stream_check), on any machine: vector clocks, the hazards
// they reveal (read-after-write, write-after-read, write-after-write, unsafe frees), the
// orderings that clear them (events, wait_stream, host synchronisations, record_stream),
// and a randomised comparison with an independent happens-before model (explicit ancestor
// sets instead of counters).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "backend/stream_check.hpp"
import brrr;
#include "tests/tensor/helpers.hpp"

using namespace brrr::stream_check;

namespace {

StreamInfo stream(std::uint32_t slot, int device = 0) { return {slot, 100 + slot, device, slot == 0}; }

TensorDesc desc(std::initializer_list<std::int64_t> sizes, const char* dtype = "f32") {
  TensorDesc d;
  d.dtype = dtype;
  for (auto s : sizes) d.sizes[d.ndim++] = s;
  return d;
}

Use read(AccessLog& log, const char* op, TensorDesc t = desc({4})) { return {&log, AccessKind::read, op, t}; }
Use write(AccessLog& log, const char* op, TensorDesc t = desc({4})) { return {&log, AccessKind::write, op, t}; }

std::optional<std::string> run(Checker& c, const StreamInfo& s, std::initializer_list<Use> uses) {
  return c.launch(s, std::span<const Use>(uses.begin(), uses.size()));
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("stream check: a vector clock joins element-wise, ticks its own entry, reads 0 past its end") {
  VectorClock a, b;
  CHECK(a.empty());
  CHECK(a[7] == 0);
  CHECK(a.tick(2) == 1);
  CHECK(a.tick(2) == 2);
  CHECK(b.tick(5) == 1);
  b.tick(0);
  a.join(b);
  CHECK(a[0] == 1);
  CHECK(a[2] == 2);
  CHECK(a[5] == 1);
  CHECK(a[9] == 0);
  VectorClock c;
  c.tick(2);
  a.join(c);  // a smaller entry never lowers one
  CHECK(a[2] == 2);
  a.clear();
  CHECK(a.empty());
}

TEST_CASE("stream check: describe names streams and tensors") {
  CHECK(describe(StreamInfo{0, 1, 0, true}) == "the default stream of cuda:0 (#1)");
  CHECK(describe(StreamInfo{3, 7, 1, false}) == "stream #7 on cuda:1");
  CHECK(describe(desc({2, 3}, "bf16")) == "[2, 3] bf16");
  CHECK(describe(desc({})) == "[] f32");
}

TEST_CASE("stream check: accesses on one stream are in program order, never a hazard") {
  Checker c;
  AccessLog x, y;
  StreamInfo s = stream(1);
  CHECK_FALSE(run(c, s, {write(x, "fill_")}));
  CHECK_FALSE(run(c, s, {read(x, "add"), write(y, "add")}));
  CHECK_FALSE(run(c, s, {write(x, "mul_"), read(x, "mul_")}));  // in place: reads and writes x
  CHECK_FALSE(run(c, s, {read(y, "sum")}));
  CHECK_FALSE(run(c, s, {write(y, "copy_"), read(x, "copy_")}));
}

TEST_CASE("stream check: a read of another stream's unordered write is a hazard naming both ops and streams") {
  Checker c;
  AccessLog x;
  StreamInfo writer{0, 1, 0, true}, reader{1, 5, 0, false};
  REQUIRE_FALSE(run(c, writer, {write(x, "fill_", desc({1024}))}));
  auto hazard = run(c, reader, {read(x, "clone", desc({32, 32}))});
  REQUIRE(hazard);
  MESSAGE(*hazard);
  CHECK(contains(*hazard, "clone: stream #5 on cuda:0 reads a [32, 32] f32 tensor"));
  CHECK(contains(*hazard, "fill_ wrote on the default stream of cuda:0 (#1)"));
  CHECK(contains(*hazard, "through a [1024] f32 view"));
  CHECK(contains(*hazard, "read-after-write"));
  CHECK(contains(*hazard, "stream check"));
  CHECK(contains(*hazard, "Stream::wait"));
  // Refused: nothing was recorded, so asking again gives the same answer.
  CHECK(run(c, reader, {read(x, "clone")}));
}

TEST_CASE("stream check: an event recorded after the write and waited on orders it; one recorded before does not") {
  Checker c;
  AccessLog x;
  StreamInfo s1 = stream(1), s2 = stream(2);
  VectorClock before = c.record(s1);
  REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
  c.wait(s2, before);
  CHECK(run(c, s2, {read(x, "sum")}));  // the event predates the write
  VectorClock after = c.record(s1);
  c.wait(s2, after);
  CHECK_FALSE(run(c, s2, {read(x, "sum")}));
  // Writing x again on s1 must follow s2's read (write-after-read) ...
  CHECK(run(c, s1, {write(x, "fill_")}));
  c.wait_stream(s1, s2);
  REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
  // ... and that write, past the event s2 waited for, is unordered for s2 again.
  CHECK(run(c, s2, {read(x, "sum")}));
}

TEST_CASE("stream check: ordering is transitive through a chain of events and wait_stream") {
  Checker c;
  AccessLog x;
  StreamInfo s1 = stream(1), s2 = stream(2), s3 = stream(3), s4 = stream(4);
  REQUIRE_FALSE(run(c, s1, {write(x, "randn")}));
  c.wait(s2, c.record(s1));
  c.wait(s3, c.record(s2));  // s3 waits for s2, which waited for s1
  CHECK_FALSE(run(c, s3, {read(x, "matmul")}));
  c.wait_stream(s4, s3);
  CHECK_FALSE(run(c, s4, {read(x, "relu")}));
  CHECK(run(c, stream(5), {read(x, "relu")}));  // nobody ordered s5
}

TEST_CASE("stream check: reads on different streams do not conflict; a write must follow all of them") {
  Checker c;
  AccessLog x;
  StreamInfo s0 = stream(0), s1 = stream(1), s2 = stream(2), s3 = stream(3);
  REQUIRE_FALSE(run(c, s0, {write(x, "fill_")}));
  c.wait_stream(s1, s0);
  c.wait_stream(s2, s0);
  CHECK_FALSE(run(c, s1, {read(x, "sum")}));
  CHECK_FALSE(run(c, s2, {read(x, "mean")}));
  // s3 ordered after s0's write and s1's read, but not after s2's read.
  c.wait_stream(s3, s1);
  auto hazard = run(c, s3, {write(x, "add_")});
  REQUIRE(hazard);
  CHECK(contains(*hazard, "write-after-read"));
  CHECK(contains(*hazard, "mean read on stream #102"));
  c.wait_stream(s3, s2);
  CHECK_FALSE(run(c, s3, {write(x, "add_")}));
}

TEST_CASE("stream check: an unordered write after another stream's write is a hazard") {
  Checker c;
  AccessLog x;
  REQUIRE_FALSE(run(c, stream(0), {write(x, "zeros")}));
  auto hazard = run(c, stream(1), {write(x, "fill_")});
  REQUIRE(hazard);
  CHECK(contains(*hazard, "write-after-write"));
  CHECK(contains(*hazard, "fill_: stream #101 on cuda:0 writes"));
  CHECK(contains(*hazard, "zeros wrote"));
}

TEST_CASE("stream check: a write replaces the history; the reads before it no longer matter") {
  Checker c;
  AccessLog x;
  StreamInfo s0 = stream(0), s1 = stream(1), s2 = stream(2);
  REQUIRE_FALSE(run(c, s0, {write(x, "fill_")}));
  c.wait_stream(s1, s0);
  REQUIRE_FALSE(run(c, s1, {read(x, "sum")}));
  c.wait_stream(s0, s1);
  REQUIRE_FALSE(run(c, s0, {write(x, "fill_")}));  // after s1's read
  // s2 ordered after s0's second write (hence after s1's read too).
  c.wait_stream(s2, s0);
  CHECK_FALSE(run(c, s2, {write(x, "copy_")}));
  // Without the wait, s1 reading again before s0's write would be the race the write guards.
  CHECK(run(c, s1, {read(x, "sum")}));
}

TEST_CASE("stream check: host synchronisations order what the host enqueues afterwards") {
  StreamInfo s1 = stream(1), s2 = stream(2);
  SUBCASE("stream synchronize") {
    Checker c;
    AccessLog x;
    REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
    c.host_wait_stream(s1);
    CHECK_FALSE(run(c, s2, {read(x, "sum")}));
    CHECK_FALSE(run(c, stream(9), {read(x, "mean")}));  // a stream first seen after the sync
    CHECK(run(c, stream(9), {write(x, "fill_")}));        // but s2's read is not ordered before it
  }
  SUBCASE("event synchronize: only up to the record") {
    Checker c;
    AccessLog x, y;
    REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
    VectorClock e = c.record(s1);
    REQUIRE_FALSE(run(c, s1, {write(y, "fill_")}));
    c.host_wait(e);
    CHECK_FALSE(run(c, s2, {read(x, "sum")}));
    CHECK(run(c, s2, {read(y, "sum")}));  // written after the event
  }
  SUBCASE("device synchronize: every stream of that device, no other") {
    Checker c;
    AccessLog x, y;
    StreamInfo other_device = stream(3, 1);
    REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
    REQUIRE_FALSE(run(c, other_device, {write(y, "fill_")}));
    c.host_wait_device(0);
    CHECK_FALSE(run(c, s2, {read(x, "sum")}));
    CHECK(run(c, s2, {read(y, "sum")}));
    c.host_wait_device(1);
    CHECK_FALSE(run(c, s2, {read(y, "sum")}));
  }
  SUBCASE("a sync orders nothing that was enqueued before it: the hazard is caught at launch") {
    Checker c;
    AccessLog x;
    REQUIRE_FALSE(run(c, s1, {write(x, "fill_")}));
    CHECK(run(c, s2, {read(x, "sum")}));
    CHECK(c.clock_of(s2)[s1.slot] == 0);
    c.host_wait_stream(s1);
    CHECK(c.clock_of(s2)[s1.slot] == 1);  // the host's clock joins into later work
    CHECK(c.host_clock()[s1.slot] == 1);
  }
}

TEST_CASE("stream check: releasing memory another stream may still use is a hazard unless ordered or recorded") {
  StreamInfo alloc = stream(0), user = stream(1);
  auto used_on_other_stream = [&](Checker& c, AccessLog& x) {
    x.set_allocation_stream(alloc);
    REQUIRE_FALSE(run(c, alloc, {write(x, "fill_", desc({256}))}));
    c.wait_stream(user, alloc);
    REQUIRE_FALSE(run(c, user, {read(x, "clone", desc({256}))}));
  };
  SUBCASE("unordered: a hazard naming record_stream") {
    Checker c;
    AccessLog x;
    used_on_other_stream(c, x);
    auto hazard = c.release(x, 1024);
    REQUIRE(hazard);
    MESSAGE(*hazard);
    CHECK(contains(*hazard, "[256] f32 tensor (1024 bytes, allocated on the default stream of cuda:0 (#100))"));
    CHECK(contains(*hazard, "stream #101 on cuda:0 may still read it (clone)"));
    CHECK(contains(*hazard, "record_stream"));
    CHECK(hazard->rfind("free: ", 0) == 0);
  }
  SUBCASE("record_stream") {
    Checker c;
    AccessLog x;
    used_on_other_stream(c, x);
    x.note_recorded(user.slot);
    CHECK_FALSE(c.release(x, 1024));
  }
  SUBCASE("the allocation stream waited for the user") {
    Checker c;
    AccessLog x;
    used_on_other_stream(c, x);
    c.wait_stream(alloc, user);
    CHECK_FALSE(c.release(x, 1024));
  }
  SUBCASE("the host synchronised the user") {
    Checker c;
    AccessLog x;
    used_on_other_stream(c, x);
    c.host_wait_stream(user);
    CHECK_FALSE(c.release(x, 1024));
  }
  SUBCASE("used only on its own stream, or never allocated by the caching allocator") {
    Checker c;
    AccessLog own, foreign;
    own.set_allocation_stream(alloc);
    REQUIRE_FALSE(run(c, alloc, {write(own, "fill_"), write(foreign, "fill_")}));
    REQUIRE_FALSE(run(c, alloc, {read(own, "sum")}));
    CHECK_FALSE(c.release(own, 16));
    c.wait_stream(user, alloc);
    REQUIRE_FALSE(run(c, user, {read(foreign, "sum")}));
    CHECK_FALSE(c.release(foreign, 16));  // no allocation stream: nothing to check
  }
}

TEST_CASE("stream check: a new epoch forgets earlier accesses") {
  Checker c;
  AccessLog x;
  REQUIRE_FALSE(run(c, stream(0), {write(x, "fill_")}));
  REQUIRE(run(c, stream(1), {read(x, "sum")}));
  c.begin_epoch();
  CHECK_FALSE(run(c, stream(1), {read(x, "sum")}));
  CHECK(x.has_history());
}

TEST_CASE("stream check: the always-on masks of an access log, and its reset for a new allocation") {
  AccessLog log;
  CHECK(log.writer_mask() == 0);
  log.note_writer(3);
  log.note_writer(3);
  log.note_writer(64 + 5);  // slots alias modulo 64: a superset, never a miss
  CHECK(log.writer_mask() == ((1ull << 3) | (1ull << 5)));
  CHECK(AccessLog::bit(69) == AccessLog::bit(5));
  log.note_recorded(2);
  CHECK(log.recorded_mask() == (1ull << 2));
  CHECK(log.allocation_stream() == nullptr);
  log.set_allocation_stream(stream(4));
  REQUIRE(log.allocation_stream() != nullptr);
  CHECK(log.allocation_stream()->slot == 4);
  CHECK_FALSE(log.host_pending());
  log.set_host_pending(true);
  CHECK(log.host_pending());
  CHECK_FALSE(log.has_history());
  // A new allocation of the same block starts from nothing.
  Checker c;
  REQUIRE_FALSE(run(c, stream(1), {write(log, "fill_")}));
  CHECK(log.has_history());
  log.reset();
  CHECK(log.writer_mask() == 0);
  CHECK(log.recorded_mask() == 0);
  CHECK(log.allocation_stream() == nullptr);
  CHECK_FALSE(log.host_pending());
  CHECK_FALSE(log.has_history());
  CHECK_FALSE(run(c, stream(2), {read(log, "sum")}));  // the old write is gone
}

// --- an independent model: happens-before as explicit sets of operation numbers ---------------

namespace {

// Each launched operation gets a number; every stream and the host know a set of numbers
// that happened before their next operation. Event record = a copy of the stream's set.
struct Model {
  std::vector<std::set<int>> known;  // per slot
  std::set<int> host;
  std::vector<std::uint32_t> op_slot;
  struct Storage {
    std::optional<int> write;
    std::vector<int> reads;  // since the write, newest per slot
    std::uint64_t recorded = 0;
    std::uint32_t alloc = 0;
  };
  std::vector<Storage> storages;

  std::set<int>& of(std::uint32_t s) {
    if (known.size() <= s) known.resize(s + 1);
    known[s].insert(host.begin(), host.end());
    return known[s];
  }
  bool before(int op, std::uint32_t s) { return op_slot[static_cast<std::size_t>(op)] == s || of(s).count(op); }
  // Returns whether the launch is refused.
  bool launch(std::uint32_t s, const std::vector<std::pair<int, bool>>& uses) {
    for (auto [k, w] : uses) {
      Storage& st = storages[static_cast<std::size_t>(k)];
      if (st.write && !before(*st.write, s)) return true;
      if (w)
        for (int r : st.reads)
          if (!before(r, s)) return true;
    }
    int id = static_cast<int>(op_slot.size());
    op_slot.push_back(s);
    for (auto [k, w] : uses) {
      Storage& st = storages[static_cast<std::size_t>(k)];
      if (w) {
        st.write = id;
        st.reads.clear();
      } else {
        bool replaced = false;
        for (int& r : st.reads)
          if (op_slot[static_cast<std::size_t>(r)] == s) r = id, replaced = true;
        if (!replaced) st.reads.push_back(id);
      }
    }
    of(s).insert(id);
    return false;
  }
  std::set<int> record(std::uint32_t s) { return of(s); }
  void wait(std::uint32_t s, const std::set<int>& e) { of(s).insert(e.begin(), e.end()); }
  bool release_unsafe(int k) {
    Storage& st = storages[static_cast<std::size_t>(k)];
    std::set<int> later = of(st.alloc);
    auto unsafe = [&](int op) {
      std::uint32_t s = op_slot[static_cast<std::size_t>(op)];
      return s != st.alloc && !later.count(op) && !(st.recorded & AccessLog::bit(s));
    };
    if (st.write && unsafe(*st.write)) return true;
    for (int r : st.reads)
      if (unsafe(r)) return true;
    return false;
  }
};

}  // namespace

TEST_CASE("stream check: the vector clocks agree with explicit happens-before sets on random programs") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  std::mt19937_64 rng(seed);
  constexpr std::uint32_t slots = 4;
  constexpr int storages = 5;
  int hazards = 0, launches = 0, unsafe_frees = 0;
  for (int program = 0; program < 200; ++program) {
    Checker c;
    Model m;
    std::vector<std::unique_ptr<AccessLog>> logs;
    m.storages.resize(storages);
    for (int k = 0; k < storages; ++k) {
      logs.push_back(std::make_unique<AccessLog>());
      std::uint32_t alloc = static_cast<std::uint32_t>(rng() % slots);
      logs.back()->set_allocation_stream(stream(alloc));
      m.storages[static_cast<std::size_t>(k)].alloc = alloc;
    }
    std::vector<std::pair<VectorClock, std::set<int>>> events;
    for (int step = 0; step < 60; ++step) {
      std::uint32_t s = static_cast<std::uint32_t>(rng() % slots);
      int what = static_cast<int>(rng() % 10);
      if (what < 5) {
        // A launch touching 1-3 distinct storages, each read or written.
        std::vector<std::pair<int, bool>> uses;
        std::vector<Use> cuses;
        int n = 1 + static_cast<int>(rng() % 3);
        for (int u = 0; u < n; ++u) {
          int k = static_cast<int>(rng() % storages);
          bool dup = false;
          for (auto& p : uses) dup = dup || p.first == k;
          if (dup) continue;
          bool w = rng() % 2;
          uses.emplace_back(k, w);
          cuses.push_back(w ? write(*logs[static_cast<std::size_t>(k)], "op") : read(*logs[static_cast<std::size_t>(k)], "op"));
        }
        bool refused = m.launch(s, uses);
        bool flagged = c.launch(stream(s), cuses).has_value();
        REQUIRE(refused == flagged);
        ++launches;
        hazards += flagged;
      } else if (what < 7) {
        events.emplace_back(c.record(stream(s)), m.record(s));
      } else if (what < 8 && !events.empty()) {
        auto& e = events[rng() % events.size()];
        c.wait(stream(s), e.first);
        m.wait(s, e.second);
      } else if (what < 9) {
        if (rng() % 2) {
          c.host_wait_stream(stream(s));
          auto k = m.of(s);
          m.host.insert(k.begin(), k.end());
        } else if (!events.empty()) {
          auto& e = events[rng() % events.size()];
          c.host_wait(e.first);
          m.host.insert(e.second.begin(), e.second.end());
        }
      } else {
        int k = static_cast<int>(rng() % storages);
        if (rng() % 3 == 0) {
          logs[static_cast<std::size_t>(k)]->note_recorded(s);
          m.storages[static_cast<std::size_t>(k)].recorded |= AccessLog::bit(s);
        }
        bool unsafe = m.release_unsafe(k);
        REQUIRE(unsafe == c.release(*logs[static_cast<std::size_t>(k)], 64).has_value());
        unsafe_frees += unsafe;
      }
    }
  }
  MESSAGE(launches << " launches, " << hazards << " hazards, " << unsafe_frees << " unsafe frees");
  CHECK(hazards > 0);  // the programs exercise both outcomes
  CHECK(hazards < launches);
  CHECK(unsafe_frees > 0);
}
