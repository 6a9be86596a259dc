// The CPU backend's intra-op thread pool: size - 1 worker threads plus the caller. One
// parallel region at a time; a region that finds the pool busy, or starts inside a worker,
// runs inline, so nested or concurrent callers (DataLoader workers) never add threads.
// Chunks are claimed, not assigned: the caller and each worker take the next unclaimed
// chunk until none is left, so a region never waits for a worker that has not started yet
// (on the 2-vCPU build machine a sleeping thread took from ~0.01 to several tenths of a ms
// to run again; with a chunk fixed per thread, a 0.5 ms GEMM took 0.5 or 0.8 ms from run to
// run, docs/benchmarks.md, issue 18). Which thread runs a chunk never changes its bounds.
module;
#include <sched.h>
#if defined(__x86_64__)
#include <immintrin.h>  // _mm_pause
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
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

// How long a worker stays awake for the next region before it sleeps: BRRR_POOL_SPIN_US
// (0 to 10000; 0: sleep at once), 50 by default. A sleeping worker's vCPU halts, and waking
// it again costs tens of µs on the 2-vCPU build machine: with the spin the 2-thread GEMMs
// 128x784x512 / 128x512x256 ran 0.43 / 0.14 ms against 0.46 / 0.16 without (PyTorch 0.46 /
// 0.14; docs/benchmarks.md, issue 18). It costs ~5 % when another process holds the other
// core; 200 us and 1 ms cost more there.
int worker_spin_us() {
  if (const char* env = std::getenv("BRRR_POOL_SPIN_US")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0 && v <= 10000) return static_cast<int>(v);
  }
  return 50;
}

// Spins until done() or `limit` has passed. The caller waits so (200 us) for chunks that
// workers are running (they end about when its own do), so that it does not sleep and then
// wait for its own wake-up; workers wait so for the next job only briefly (worker_spin_us):
// longer spins made the 2-thread GEMM slower with other processes on the machine
// (docs/benchmarks.md, issue 18).
template <class Done> void spin_briefly(Done done, std::chrono::microseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  do {
    for (int i = 0; i < 64; ++i) {
      if (done()) return;
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
  } while (std::chrono::steady_clock::now() < until);
}

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
    std::int64_t chunks = std::min<std::int64_t>({size, (n + grain - 1) / std::max<std::int64_t>(grain, 1), 4096});
    if (chunks <= 1) return f(0, n);
    resize(size);
    in_worker = true;  // the caller's own chunk: nested regions run inline
    struct Restore {
      ~Restore() { in_worker = false; }
    } restore;
    bool notify = false;
    std::uint64_t gen = 0;
    {
      std::lock_guard lock(mutex_);
      job_.store(&f, std::memory_order_relaxed);
      n_.store(n, std::memory_order_relaxed);
      pending_.store(chunks, std::memory_order_relaxed);
      error_ = nullptr;
      gen = ((state_.load(std::memory_order_relaxed) >> 32) + 1) & 0xffffffffu;
      state_.store(gen << 32 | static_cast<std::uint64_t>(chunks) << 16, std::memory_order_release);  // chunk 0 next
      notify = sleeping_ > 0;
    }
    if (notify) wake_.notify_all();
    // The caller claims chunks like any worker: a worker that wakes late finds them taken.
    std::exception_ptr mine;
    for (std::int64_t c; (c = claim(gen)) >= 0;) {
      try {
        f(bound(c, n, chunks), bound(c + 1, n, chunks));
      } catch (...) {
        if (!mine) mine = std::current_exception();
      }
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
    const auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
    spin_briefly(all_done, std::chrono::microseconds(200));
    std::unique_lock lock(mutex_);
    done_.wait(lock, all_done);
    job_.store(nullptr, std::memory_order_relaxed);
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

private:
  static std::int64_t bound(std::int64_t chunk, std::int64_t n, std::int64_t chunks) { return n * chunk / chunks; }

  // The next unclaimed chunk of job `gen`, or -1 when all are taken or the job is gone.
  std::int64_t claim(std::uint64_t gen) {
    std::uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      if ((s >> 32) != gen || (s & 0xffff) >= ((s >> 16) & 0xffff)) return -1;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        return static_cast<std::int64_t>(s & 0xffff);
    }
  }

  // Starts or stops workers so that size - 1 run. Called with region_ held (or at exit).
  void resize(int size) {
    if (static_cast<int>(workers_.size()) == size - 1) return;
    {
      std::lock_guard lock(mutex_);
      stop_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
    stop_.store(false, std::memory_order_relaxed);
    // The generation they start from is read here, before any job of theirs is posted: a
    // worker reading it once running could take a posted job's generation as seen.
    const std::uint64_t seen = state_.load(std::memory_order_relaxed) >> 32;
    for (int i = 1; i < size; ++i) workers_.emplace_back([this, seen] { work(seen); });
  }

  void work(std::uint64_t seen) {
    in_worker = true;
    const auto posted = [&] {
      return stop_.load(std::memory_order_relaxed) || (state_.load(std::memory_order_acquire) >> 32) != seen;
    };
    const int spin_us = worker_spin_us();
    for (;;) {
      // Awake for a moment after a region: the next one of a burst of ops (back-to-back
      // GEMMs, a training step) usually comes within it, and then finds the worker running.
      // Short, so a core shared with other processes loses little.
      if (spin_us > 0) spin_briefly(posted, std::chrono::microseconds(spin_us));
      {
        std::unique_lock lock(mutex_);
        ++sleeping_;
        wake_.wait(lock, posted);
        --sleeping_;
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      // The job of generation `seen`: read after the state that names it (release/acquire);
      // the caller keeps them until every claimed chunk is done, and a chunk is claimed
      // only while the state still names this generation.
      const std::uint64_t state = state_.load(std::memory_order_acquire);
      seen = state >> 32;
      const auto* job = job_.load(std::memory_order_relaxed);
      const std::int64_t n = n_.load(std::memory_order_relaxed), chunks = static_cast<std::int64_t>((state >> 16) & 0xffff);
      if (job == nullptr) continue;
      for (std::int64_t c; (c = claim(seen)) >= 0;) {
        std::exception_ptr err;
        try {
          (*job)(bound(c, n, chunks), bound(c + 1, n, chunks));
        } catch (...) {
          err = std::current_exception();
        }
        if (err) {
          std::lock_guard lock(mutex_);
          if (!error_) error_ = err;
        }
        if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
          std::lock_guard lock(mutex_);  // the caller may be between its check and its wait
          done_.notify_one();
        }
      }
    }
  }

  std::mutex region_;  // held by the thread running a parallel region
  std::atomic<int> size_;
  std::mutex mutex_;   // guards the job below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  // The posted job, written under mutex_ before state_ names its generation.
  std::atomic<const std::function<void(std::int64_t, std::int64_t)>*> job_{nullptr};
  std::atomic<std::int64_t> n_{0};
  std::atomic<std::uint64_t> state_{0};  // generation << 32 | chunks << 16 | the next chunk to claim
  std::atomic<std::int64_t> pending_{0};  // chunks not yet done
  std::atomic<bool> stop_{false};
  int sleeping_ = 0;  // workers waiting on wake_ (guarded by mutex_)
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
