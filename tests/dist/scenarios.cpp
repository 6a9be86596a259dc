// Failure scenarios of the ranks, one per mode (argv[1]), each run by CTest through brrr-run
// (tests/CMakeLists.txt): every rank checks that it got the Error it should, naming the right
// ranks, within the time it should, and exits 0; anything else exits 1 with what it got.
//   wrong_world_size  rank 1 says WORLD_SIZE + 1
//   duplicate_rank    the last rank says RANK=1 too
//   missing_rank      the last rank never joins
//   no_master         (run alone) RANK=1 of 2 with a MASTER_PORT nobody serves
//   debug_mismatch    BRRR_DIST_DEBUG=1: rank 1 calls broadcast where the others all_reduce,
//                     then a shape differs
//   early_exit        the last rank leaves after one collective; the others' next one fails
//   stuck_rank        the last rank sleeps past the timeout; the others' collective times out
//   sum N             an all_reduce of the ranks in a world of N (the two-launcher test)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>
import brrr;

using namespace brrr;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Rank 0 hosts the store: after a failure without destroy_process_group it stays a moment,
// so that the others can still file and read their failure reports.
int linger(int rc) {
  if (dist::rank() == 0) std::this_thread::sleep_for(1500ms);
  return rc;
}

// Runs f, which must throw Error(kind) whose message holds every part; returns 0 if so.
template <class F> int expect_error(const char* what, F&& f, ErrorKind kind, std::vector<std::string> parts,
                                    double max_seconds = 1e9) {
  auto t0 = Clock::now();
  try {
    f();
  } catch (const Error& e) {
    double took = seconds_since(t0);
    std::string msg = e.what();
    bool ok = e.kind() == kind && took <= max_seconds;
    for (const auto& p : parts) ok = ok && msg.find(p) != std::string::npos;
    std::printf("%s: %s after %.2f s: %s\n", what, ok ? "expected error" : "WRONG ERROR", took, msg.c_str());
    if (!ok) {
      std::printf("  wanted kind %s within %.1f s with:", to_string(kind), max_seconds);
      for (const auto& p : parts) std::printf(" [%s]", p.c_str());
      std::printf("\n");
    }
    return ok ? 0 : 1;
  }
  std::printf("%s: NO ERROR (expected one)\n", what);
  return 1;
}

int wrong_world_size() {
  int n = env_int("WORLD_SIZE");
  if (env_int("RANK") == 1) setenv("WORLD_SIZE", std::to_string(n + 1).c_str(), 1);
  return expect_error("init_process_group", [] { dist::init_process_group({.timeout = 20s}); },
                      ErrorKind::distributed,
                      {"WORLD_SIZE=" + std::to_string(n), "WORLD_SIZE=" + std::to_string(n + 1), "rank "}, 10);
}

int duplicate_rank() {
  int n = env_int("WORLD_SIZE");
  if (env_int("RANK") == n - 1) setenv("RANK", "1", 1);
  return expect_error("init_process_group", [] { dist::init_process_group({.timeout = 20s}); },
                      ErrorKind::distributed, {"RANK=1 was taken twice", "pid "}, 10);
}

int missing_rank() {
  int n = env_int("WORLD_SIZE");
  if (env_int("RANK") == n - 1) return 0;  // never joins
  return expect_error("init_process_group", [] { dist::init_process_group({.timeout = 2s}); },
                      ErrorKind::distributed,
                      {std::to_string(n - 1) + " of " + std::to_string(n) + " ranks joined within 2000 ms",
                       "missing: rank " + std::to_string(n - 1)},
                      6);
}

int no_master() {
  int port = 0;
  {
    dist::TCPStore probe("127.0.0.1", 0, {.is_server = true});
    port = probe.port();
  }  // nobody serves it any more
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  return expect_error("init_process_group", [] { dist::init_process_group({.timeout = 1s}); },
                      ErrorKind::distributed,
                      {"could not connect to the store at 127.0.0.1:" + std::to_string(port), "within 1000 ms"}, 4);
}

int debug_mismatch() {
  setenv("BRRR_DIST_DEBUG", "1", 1);
  dist::init_process_group({.timeout = 20s});
  int r = dist::rank(), n = dist::world_size();
  int rc = 0;
  Tensor t = ones({4});
  rc |= expect_error("mismatched op",
                     [&] {
                       if (r == 1) dist::broadcast(t, 0);
                       else dist::all_reduce(t);
                     },
                     ErrorKind::distributed,
                     {"BRRR_DIST_DEBUG", "collective #0 of world", "rank 0 called all_reduce(f32 [4], sum)",
                      "rank 1 called broadcast(f32 [4], src 0)"},
                     10);
  rc |= expect_error("mismatched shape",
                     [&] {
                       Tensor u = ones({r == n - 1 ? 5 : 4});
                       dist::all_reduce(u, dist::ReduceOp::max);
                     },
                     ErrorKind::distributed,
                     {"collective #1", "rank 0 called all_reduce(f32 [4], max)",
                      "rank " + std::to_string(n - 1) + " called all_reduce(f32 [5], max)"},
                     10);
  // Matching calls still work, and are checked too.
  Tensor s = full({3}, r);
  dist::all_reduce(s);
  double expect = n * (n - 1) / 2.0;
  if (s.to_host<float>() != std::vector<float>(3, static_cast<float>(expect))) {
    std::printf("all_reduce after the mismatches: wrong sum\n");
    rc = 1;
  }
  dist::destroy_process_group();
  return rc;
}

int early_exit() {
  dist::init_process_group({.timeout = 10s});
  int r = dist::rank(), n = dist::world_size();
  Tensor t = ones({1000});
  dist::all_reduce(t);
  if (r == n - 1) {
    std::fflush(stdout);
    std::_Exit(0);  // leaves without a word: no destroy_process_group
  }
  int rc = expect_error("all_reduce after a rank left",
                        [&] {
                          for (int i = 0; i < 3; ++i) dist::all_reduce(t);
                        },
                        ErrorKind::distributed,
                        {"all_reduce #", "failed on rank " + std::to_string(r),
                         "did not arrive: rank " + std::to_string(n - 1)},
                        9);
  // The group refuses more work, at once.
  rc |= expect_error("the next collective", [&] { dist::all_reduce(t); }, ErrorKind::distributed,
                     {"cannot run more collectives"}, 1);
  return linger(rc);  // no destroy: the world is broken
}

int stuck_rank() {
  dist::init_process_group({.timeout = 2s});
  int r = dist::rank(), n = dist::world_size();
  Tensor t = ones({8});
  if (r == n - 1) {
    std::this_thread::sleep_for(4s);  // alive, but nowhere near a collective
    std::fflush(stdout);
    std::_Exit(0);
  }
  return linger(expect_error("all_reduce with a stuck rank", [&] { dist::all_reduce(t); }, ErrorKind::distributed,
                             {"all_reduce #0 (world) failed", "Timed out",
                              "did not arrive: rank " + std::to_string(n - 1) + " (no report"},
                             3.5));
}

int sum(int expected_world) {
  dist::init_process_group({.timeout = 20s});
  int r = dist::rank(), n = dist::world_size();
  Tensor t = full({4}, r);
  dist::all_reduce(t);
  bool ok = n == expected_world && t.to_host<float>() == std::vector<float>(4, n * (n - 1) / 2.0f);
  std::printf("rank %d of %d (local rank %d of %d): sum %s\n", r, n, dist::local_rank(), dist::local_world_size(),
              ok ? "ok" : "WRONG");
  dist::destroy_process_group();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "wrong_world_size") return wrong_world_size();
    if (mode == "duplicate_rank") return duplicate_rank();
    if (mode == "missing_rank") return missing_rank();
    if (mode == "no_master") return no_master();
    if (mode == "debug_mismatch") return debug_mismatch();
    if (mode == "early_exit") return early_exit();
    if (mode == "stuck_rank") return stuck_rank();
    if (mode == "sum" && argc > 2) return sum(std::atoi(argv[2]));
  } catch (const std::exception& e) {
    std::printf("unexpected error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s MODE (see the file's head)\n", argv[0]);
  return 2;
}
