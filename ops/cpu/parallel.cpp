// The CPU backend's intra-op thread pool: size - 1 worker threads plus the caller. One
// parallel region at a time; a region that finds the pool busy, or starts inside a worker,
// runs inline, so nested or concurrent callers (DataLoader workers) never add threads.
module;
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "backend/contract.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int default_threads() {
  if (const char* env = std::getenv("BRRR_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= 4096) return static_cast<int>(v);
  }
  return usable_cores();
}

thread_local bool in_worker = false;

class Pool {
public:
  Pool() : size_(default_threads()) {}
  ~Pool() { resize(1); }

  // Lock-free: a kernel inside a region (on the region's own thread) may ask for the size.
  // A new size takes effect at the next region.
  int size() const { return size_.load(std::memory_order_relaxed); }
  void set_size(int n) { size_.store(n, std::memory_order_relaxed); }

  void run(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& f) {
    if (in_worker) return f(0, n);  // checked first: the region's owner may be this thread
    std::unique_lock region(region_, std::try_to_lock);
    const int size = size_.load(std::memory_order_relaxed);
    if (!region.owns_lock() || size <= 1) return f(0, n);
    std::int64_t chunks = std::min<std::int64_t>(size, (n + grain - 1) / std::max<std::int64_t>(grain, 1));
    if (chunks <= 1) return f(0, n);
    resize(size);
    in_worker = true;  // the caller's own chunk: nested regions run inline
    struct Restore {
      ~Restore() { in_worker = false; }
    } restore;
    {
      std::lock_guard lock(mutex_);
      job_ = &f;
      n_ = n;
      chunks_ = chunks;
      pending_ = static_cast<int>(chunks - 1);
      error_ = nullptr;
      ++generation_;
    }
    wake_.notify_all();
    std::exception_ptr mine;
    try {
      f(0, bound(1));
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

private:
  std::int64_t bound(std::int64_t chunk) const { return n_ * chunk / chunks_; }

  // Starts or stops workers so that size - 1 run. Called with region_ held (or at exit).
  void resize(int size) {
    if (static_cast<int>(workers_.size()) == size - 1) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_ = false;
    // The generation they start from is read here, before any job of theirs is posted: a
    // worker reading it once running could take a posted job's generation as seen.
    for (int i = 1; i < size; ++i) workers_.emplace_back([this, i, seen = generation_] { work(i, seen); });
  }

  void work(int index, std::uint64_t seen) {
    in_worker = true;
    for (;;) {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (index >= chunks_) continue;
      const auto* job = job_;
      std::int64_t begin = bound(index), end = bound(index + 1);
      lock.unlock();
      std::exception_ptr err;
      try {
        (*job)(begin, end);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex region_;  // held by the thread running a parallel region
  std::atomic<int> size_;
  std::mutex mutex_;   // guards the job below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t n_ = 0, chunks_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw Error::bad_value("set_num_threads", "n", n, ">= 1");
  pool().set_size(n);
}

int get_num_threads() { return pool().size(); }

void run_kernels_inline_on_this_thread() { in_worker = true; }

void cpu::parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& f) {
  if (n <= 0) return;
  if (n < 2 * grain) return f(0, n);
  pool().run(n, grain, f);
}

}  // namespace brrr::backend
