// Portable code, checked in child processes (their stderr read through a pipe): pinned = true
// without a GPU warns once and falls back to pageable memory; an uncaught brrr::Error reports
// its kind and message readably (not a mangled type name) and aborts.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
import brrr;

using namespace brrr;

namespace {

struct ChildResult {
  std::string err;
  int status = 0;
};

// Runs `body` in a child process with its stderr (and stdout) into a pipe.
ChildResult run_child(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::dup2(fds[1], 2);
    ::dup2(fds[1], 1);
    body();
    std::fflush(stdout);
    std::fflush(stderr);
    ::_exit(0);
  }
  ::close(fds[1]);
  ChildResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, &r.status, 0);
  return r;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("pinned = true without a GPU: warned once, pageable memory") {
  if (cuda::is_available()) return;  // with a GPU it is pinned (tests/tensor/test_no_gpu.cpp)
  ChildResult r = run_child([] {
    Tensor a = empty({4}, {.pinned = true});
    Tensor b = zeros({2, 3}, {.pinned = true});
    Tensor c = Tensor::from_vector(std::vector<float>{1, 2, 3}).pin_memory();
    std::printf("pinned: %d %d %d values: %g %g\n", a.is_pinned(), b.is_pinned(), c.is_pinned(),
                static_cast<double>(c.to_host<float>()[2]), static_cast<double>(b.sum().item<float>()));
  });
  INFO("child output: ", r.err);
  CHECK(WIFEXITED(r.status));
  CHECK(count(r.err, "brrr: warning: pinned = true but no CUDA device is available") == 1);
  CHECK(r.err.find("pinned: 0 0 0 values: 3 0") != std::string::npos);
}

TEST_CASE("an uncaught brrr::Error reports its kind and message") {
  ChildResult r = run_child([] {
    // Uncaught in a thread of its own (doctest catches what the test body throws).
    std::thread([] {
      Tensor a = zeros({2, 3}), b = zeros({4, 5});
      (void)matmul(a, b);
    }).join();
  });
  INFO("child output: ", r.err);
  REQUIRE(WIFSIGNALED(r.status));
  CHECK(WTERMSIG(r.status) == SIGABRT);
  CHECK(r.err.find("terminate called after throwing a brrr::Error (kind shape):") != std::string::npos);
  CHECK(r.err.find("matmul: shapes [2, 3] and [4, 5] cannot be multiplied") != std::string::npos);
  CHECK(r.err.find("N4brrr") == std::string::npos);  // no mangled name
}

TEST_CASE("other uncaught exceptions still reach the standard handler") {
  ChildResult r = run_child([] { std::thread([] { throw std::runtime_error("plain failure"); }).join(); });
  INFO("child output: ", r.err);
  REQUIRE(WIFSIGNALED(r.status));
  CHECK(r.err.find("plain failure") != std::string::npos);
  CHECK(r.err.find("brrr::Error") == std::string::npos);
}
