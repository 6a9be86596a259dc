// The DataLoader: a worker thread fills a bounded queue with host batches (pinned when the
// target is a GPU); the consuming thread copies batch i+1 to the device on a transfer
// stream while the caller computes on batch i, and makes the compute stream wait for each
// batch's copy with an event. Nothing here blocks the host on the device.
module;
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>
module brrr.data;
import brrr.tensor;
import brrr.cuda;
import brrr.backend;

namespace brrr::data {

struct DataLoader::State {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions options;
  std::uint64_t epoch = 0;

  // Worker side.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::vector<Tensor>> ready;  // host batches, in order
  bool stop = false, finished = false;
  std::exception_ptr error;

  // Device side.
  std::optional<cuda::Stream> transfer, compute;
  std::optional<Batch> pending;       // next batch, its copy in flight on `transfer`
  std::optional<cuda::Event> pending_copied;

  void stop_worker() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    ready.clear();
    stop = finished = false;
    error = nullptr;
    pending.reset();
    pending_copied.reset();
  }

  std::vector<std::vector<std::int64_t>> plan_epoch() {
    std::int64_t n = dataset->size(), bs = options.batch_size;
    std::vector<std::int64_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    if (options.shuffle) {
      std::mt19937_64 rng(options.seed + epoch);
      std::shuffle(order.begin(), order.end(), rng);
    }
    std::vector<std::vector<std::int64_t>> batches;
    for (std::int64_t start = 0; start < n; start += bs) {
      std::int64_t end = std::min(n, start + bs);
      if (end - start < bs && options.drop_last) break;
      batches.emplace_back(order.begin() + start, order.begin() + end);
    }
    return batches;
  }

  void start_epoch() {
    stop_worker();
    auto plan = plan_epoch();
    ++epoch;
    bool pin = options.device.is_cuda();
    worker = std::thread([this, plan = std::move(plan), pin] {
      backend::run_kernels_inline_on_this_thread();  // the intra-op pool is the training thread's
      try {
        auto fields = dataset->fields();
        for (const auto& indices : plan) {
          std::vector<Tensor> host;
          for (const auto& [shape, dtype] : fields) {
            Shape s{static_cast<std::int64_t>(indices.size())};
            s.insert(s.end(), shape.begin(), shape.end());
            host.push_back(empty(s, {.dtype = dtype, .pinned = pin}));
          }
          dataset->gather(indices, host);
          std::unique_lock lock(mutex);
          cv.wait(lock, [&] { return stop || static_cast<int>(ready.size()) < options.prefetch; });
          if (stop) return;
          ready.push_back(std::move(host));
          cv.notify_all();
        }
      } catch (...) {
        std::lock_guard lock(mutex);
        error = std::current_exception();
      }
      std::lock_guard lock(mutex);
      finished = true;
      cv.notify_all();
    });
  }

  // The next host batch from the worker, or nullopt at the end of the epoch. The host waits
  // for the worker thread here, never for the device.
  std::optional<std::vector<Tensor>> next_host() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return !ready.empty() || finished; });
    if (!ready.empty()) {
      auto b = std::move(ready.front());
      ready.pop_front();
      cv.notify_all();
      return b;
    }
    if (error) std::rethrow_exception(error);
    return std::nullopt;
  }

  // Starts the copy of the next batch to the device (or takes it as is on the CPU).
  void prefetch() {
    auto host = next_host();
    if (!host) {
      pending.reset();
      return;
    }
    if (!options.device.is_cuda()) {
      pending = Batch{std::move(*host)};
      return;
    }
    Batch b;
    {
      cuda::StreamGuard guard(*transfer);
      for (const Tensor& t : *host) {
        Tensor d = t.to(options.device, {.non_blocking = true});  // pinned -> truly async
        cuda::record_stream(d, *compute);  // its memory is used on the compute stream too
        b.fields.push_back(std::move(d));
      }
    }
    cuda::Event copied(false);
    copied.record(*transfer);
    pending = std::move(b);
    pending_copied = std::move(copied);
  }

  // Hands out the prefetched batch (ordering the compute stream after its copy) and starts
  // copying the one after it.
  std::optional<Batch> take() {
    if (!pending) return std::nullopt;
    Batch b = std::move(*pending);
    if (pending_copied) compute->wait(*pending_copied);
    pending.reset();
    pending_copied.reset();
    prefetch();
    if (options.transform && !b.fields.empty()) {
      NoGradGuard no_grad;
      if (compute) {
        cuda::StreamGuard guard(*compute);  // ordered after the copy, like the user's work
        b.fields[0] = options.transform(b.fields[0]);
      } else {
        b.fields[0] = options.transform(b.fields[0]);
      }
    }
    return b;
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : state_(std::make_unique<State>()) {
  if (!dataset) throw Error(ErrorKind::value, "DataLoader: no dataset");
  if (options.batch_size <= 0)
    throw Error(ErrorKind::value, "DataLoader: batch_size must be positive, got " + std::to_string(options.batch_size));
  if (options.prefetch < 1) throw Error(ErrorKind::value, "DataLoader: prefetch must be at least 1");
  state_->dataset = std::move(dataset);
  state_->options = options;
  if (options.device.is_cuda()) {
    state_->compute = cuda::current_stream(options.device);
    state_->transfer = cuda::Stream::create(options.device);
  }
}

DataLoader::~DataLoader() { state_->stop_worker(); }

std::int64_t DataLoader::num_batches() const {
  std::int64_t n = state_->dataset->size(), bs = state_->options.batch_size;
  return state_->options.drop_last ? n / bs : (n + bs - 1) / bs;
}

const DataLoaderOptions& DataLoader::options() const { return state_->options; }

DataLoader::Iterator DataLoader::begin() {
  state_->start_epoch();
  state_->prefetch();
  Iterator it;
  it.loader_ = this;
  it.done_ = false;
  ++it;
  return it;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  auto b = loader_->state_->take();
  if (!b) {
    done_ = true;
    batch_ = Batch();
  } else {
    batch_ = std::move(*b);
  }
  return *this;
}

}  // namespace brrr::data
