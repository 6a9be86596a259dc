// Helpers of the GPU suites. Plain C++ and the CUDA runtime API only (no brrr types), so a
// suite includes this header with its other includes, before `import brrr;`.
#pragma once
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace gpu_test {

/// Holds a CUDA stream at the current end of its queue until open() is called (or a safety
/// timeout passes): work enqueued behind the gate cannot start, which makes "is this still
/// pending?" and "would this race?" deterministic instead of a matter of kernel length. It is
/// a host function (cudaLaunchHostFunc) that spins until released. While a gate is closed,
/// never block the host on that stream (or the whole device): open it first.
class StreamGate {
public:
  explicit StreamGate(void* stream, double timeout_s = 20.0)
      : state_(std::make_shared<State>()) {
    state_->timeout_s = timeout_s;
    auto* arg = new std::shared_ptr<State>(state_);
    cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &StreamGate::hold, arg);
    if (e != cudaSuccess) {
      delete arg;
      throw std::runtime_error(std::string("cudaLaunchHostFunc: ") + cudaGetErrorString(e));
    }
  }
  ~StreamGate() { open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void open() {
    int closed = 0;
    state_->phase.compare_exchange_strong(closed, 1);
  }
  /// True when the stream reached the gate (the host function started).
  bool reached() const { return state_->reached.load(); }
  /// True when the gate opened itself after the timeout (the test blocked on the gated stream).
  bool timed_out() const { return state_->phase.load() == 2; }

private:
  struct State {
    std::atomic<int> phase{0};  // 0 closed, 1 opened, 2 opened by the timeout
    std::atomic<bool> reached{false};
    double timeout_s = 20.0;
  };
  static void CUDART_CB hold(void* p) {
    auto* s = static_cast<std::shared_ptr<State>*>(p);
    State& st = **s;
    st.reached.store(true);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(st.timeout_s);
    while (st.phase.load() == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        int closed = 0;
        st.phase.compare_exchange_strong(closed, 2);
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    delete s;
  }
  std::shared_ptr<State> state_;
};

/// True when the suite runs under compute-sanitizer through .gpu/run.sh (which sets SANITIZE):
/// timing ratios mean nothing there, and API calls that are meant to fail (a 1 TiB cudaMalloc)
/// count as tool errors. Those few checks are skipped; everything else runs.
inline bool under_sanitizer() { return std::getenv("SANITIZE") != nullptr; }

/// Captures what the process writes to stderr (fd 2) until finish().
class StderrCapture {
public:
  StderrCapture() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(2);
    if (file_ && saved_ >= 0) dup2(fileno(file_), 2);
  }
  ~StderrCapture() {
    finish();
    if (file_) std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string finish() {
    if (saved_ >= 0) {
      std::fflush(stderr);
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
      if (file_) {
        std::rewind(file_);
        char buf[4096];
        std::size_t n;
        while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0) text_.append(buf, n);
      }
    }
    return text_;
  }

private:
  std::FILE* file_ = nullptr;
  int saved_ = -1;
  std::string text_;
};

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace gpu_test
