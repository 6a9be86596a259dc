// NCCL for CUDA tensors: one communicator per group (made at the group's first CUDA
// collective, its unique id passed through the store) and one communication stream. A
// collective is ordered after the work already enqueued on the caller's current stream by an
// event, runs on the communication stream, protects its tensors for the caching allocator
// (record_stream), and records a "done" event that Work::wait() makes the current stream wait
// for: the host never waits. Communicators are non-blocking (config.blocking = 0), so no NCCL
// call can hold the host past the timeout, and a watchdog thread polls every 50 ms for NCCL's
// asynchronous errors and for collectives past their deadline; on either it aborts the
// communicator (the stuck kernels exit, the streams move on), files the failure report and
// poisons the group, so the next brrr.dist call on it throws.
module;
#ifdef BRRR_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/stream_check.hpp"
module brrr.dist;
import brrr.tensor;
#ifdef BRRR_HAVE_NCCL
import brrr.cuda;
import brrr.backend;
#endif

namespace brrr::dist::detail {

#ifndef BRRR_HAVE_NCCL

std::unique_ptr<Comm> make_nccl(GroupState& group, int device) {
  throw Error(ErrorKind::device, group.name + ": a tensor on cuda:" + std::to_string(device) +
                                     " needs NCCL, which this build of brrr does not have (built without CUDA, or NCCL was not "
                                     "found at build time)");
}

#else

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string nccl_text(ncclResult_t r) { return ncclGetErrorString(r); }

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::boolean: return ncclUint8;
  }
  return ncclFloat32;
}

// bool as uint8: sum and max are or, product and min are and (what PyTorch does).
ncclRedOp_t nccl_op(ReduceOp op, DType d) {
  if (d == DType::boolean) return op == ReduceOp::product || op == ReduceOp::min ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::product: return ncclProd;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

struct NcclWork final : WorkState {
  cuda::Event done{false};
  int device = 0;
  std::shared_ptr<GroupState::Failure> failed;  // the group's
  void wait() override {
    std::string why = failed->get();
    if (!why.empty()) throw Error(ErrorKind::distributed, label + ": " + why);
    cuda::current_stream(Device::cuda(device)).wait(done);  // device-side
  }
  bool is_completed() override { return !failed->get().empty() || done.query(); }
};

class NcclComm final : public Comm {
public:
  NcclComm(GroupState& g, int device) : g_(g), device_(device), report_store_(world_store().clone()) {
    stream_.emplace(cuda::Stream::create(Device::cuda(device), -1000));  // the greatest priority
    TCPStore& store = world_store();
    const std::string base = g.prefix + "nccl/";
    ncclUniqueId id;
    if (g.rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store.set(base + "id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    }
    store.set(base + "joined/" + std::to_string(g.rank), "1");
    std::string bytes;
    try {
      bytes = store.get(base + "id");
    } catch (const Error& e) {
      throw Error(ErrorKind::distributed, "NCCL: " + g.name + "'s rank 0 did not publish the communicator's id: " +
                                              e.what());
    }
    if (bytes.size() != sizeof id) throw Error(ErrorKind::distributed, "NCCL: malformed unique id in the store");
    std::memcpy(&id, bytes.data(), sizeof id);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    {
      backend::DeviceGuard guard(device_);
      std::lock_guard lock(mutex_);
      ncclResult_t r = ncclCommInitRankConfig(&comm_, static_cast<int>(g.ranks.size()), id, g.rank, &config);
      if (r != ncclSuccess && r != ncclInProgress) throw Error(ErrorKind::distributed, init_failure(nccl_text(r)));
      std::string err = settle(Clock::now() + g.timeout);
      if (!err.empty()) {
        abort_locked();
        std::vector<int> absent;
        for (std::size_t i = 0; i < g.ranks.size(); ++i)
          if (!store.check({base + "joined/" + std::to_string(i)})) absent.push_back(static_cast<int>(i));
        std::string who;
        for (int a : absent) who += (who.empty() ? "" : ", ") + std::to_string(a);
        throw Error(ErrorKind::distributed,
                    init_failure(err) + (absent.empty() ? "" : "; ranks that did not join: " + who));
      }
    }
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclComm() override { shutdown(); }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard lock(mutex_);
    if (!comm_) return;
    backend::DeviceGuard guard(device_);
    // Flush what is in flight (bounded by the timeout), then free; abort if it does not end.
    ncclResult_t r = ncclCommFinalize(comm_);
    std::string err = r == ncclSuccess || r == ncclInProgress ? settle(Clock::now() + g_.timeout) : nccl_text(r);
    if (err.empty()) {
      ncclCommDestroy(comm_);
      comm_ = nullptr;
      return;
    }
    abort_locked();
  }

  std::shared_ptr<WorkState> run(Call c) override {
    auto work = std::make_shared<NcclWork>();
    work->label = c.label;
    work->device = device_;
    work->failed = g_.failed;
    std::string failed = g_.failure();
    if (!failed.empty()) throw Error(ErrorKind::distributed, c.label + ": " + g_.name + " failed earlier: " + failed);
    for (const auto* list : {&c.inputs, &c.outputs})
      for (const Tensor& t : *list)
        if (t.device() != Device::cuda(device_))
          throw Error(ErrorKind::device, c.label + ": this rank's NCCL communicator for " + g_.name + " is on cuda:" +
                                             std::to_string(device_) + ", the tensor " + describe(t) + " is not");
    Device dev = Device::cuda(device_);
    cuda::Stream current = cuda::current_stream(dev);
    // Gradients still being written on a side stream (backend::SideWork: a hook reducing a
    // weight's gradient during backward) are waited for by the caller's stream first.
    for (const auto* list : {&c.inputs, &c.outputs})
      for (const Tensor& t : *list)
        if (const stream_check::AccessLog* log = t.storage().access_log(); log && log->side_ticket() != 0)
          backend::join_side_ticket(*current.state(), log->side_ticket());
    cuda::Event ready(false);
    ready.record(current);
    stream_->wait(ready);  // the inputs are written by work already enqueued on the caller's stream
    {
      backend::DeviceGuard guard(device_);
      std::lock_guard lock(mutex_);
      if (!comm_) throw Error(ErrorKind::distributed, c.label + ": " + g_.name + "'s NCCL communicator is closed");
      enqueue(c);
      std::string err = settle(Clock::now() + g_.timeout);
      if (!err.empty()) {
        abort_locked();
        std::string message = failure_report(report_store_, g_, c.seq, c.label, "NCCL: " + err);
        g_.set_failure(message);
        throw Error(ErrorKind::distributed, message);
      }
    }
    for (const auto* list : {&c.inputs, &c.outputs})
      for (const Tensor& t : *list) cuda::record_stream(t, *stream_);
    work->done.record(*stream_);
    {
      std::lock_guard lock(mutex_);
      pending_.push_back({work->done, Clock::now() + g_.timeout, c.seq, c.label});
    }
    return work;
  }

private:
  struct Pending {
    cuda::Event done;
    Clock::time_point deadline;
    std::uint64_t seq;
    std::string label;
  };

  std::string init_failure(const std::string& what) const {
    return "NCCL: rank " + std::to_string(g_.rank) + " of " + g_.name + " could not make its communicator on cuda:" +
           std::to_string(device_) + " within " + std::to_string(g_.timeout.count()) + " ms: " + what;
  }

  void check(ncclResult_t r, const char* call) {
    if (r != ncclSuccess && r != ncclInProgress)
      throw Error(ErrorKind::distributed, std::string("NCCL: ") + call + " failed: " + nccl_text(r));
  }

  // Waits (host-side, no device sync) until the communicator has taken the last call: with
  // a non-blocking communicator calls may return ncclInProgress. Returns an error text, or ""
  // on success. Caller holds mutex_.
  std::string settle(Clock::time_point deadline) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) return "ncclCommGetAsyncError: " + nccl_text(r);
      if (state == ncclSuccess) return "";
      if (state != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        return nccl_text(state) + (last && *last ? std::string(" (") + last + ")" : "");
      }
      if (Clock::now() >= deadline) return "timed out after " + std::to_string(g_.timeout.count()) + " ms";
      std::this_thread::yield();
    }
  }

  void abort_locked() {
    if (!comm_) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  // The NCCL calls of one collective on the communication stream. Caller holds mutex_.
  void enqueue(const Call& c) {
    auto s = static_cast<cudaStream_t>(stream_->handle());
    const int n = static_cast<int>(g_.ranks.size());
    const Tensor& first = !c.outputs.empty() ? c.outputs[0] : c.inputs[0];
    const ncclDataType_t type = nccl_type(first.dtype());
    auto count = [](const Tensor& t) { return static_cast<std::size_t>(t.numel()); };
    auto group = [&](auto&& calls) {
      check(ncclGroupStart(), "ncclGroupStart");
      calls();
      check(ncclGroupEnd(), "ncclGroupEnd");
    };
    switch (c.op) {
      case Op::all_reduce:
        check(ncclAllReduce(first.data_ptr(), first.data_ptr(), count(first), type, nccl_op(c.reduce, first.dtype()),
                            comm_, s),
              "ncclAllReduce");
        return;
      case Op::broadcast:
        check(ncclBroadcast(first.data_ptr(), first.data_ptr(), count(first), type, c.peer, comm_, s), "ncclBroadcast");
        return;
      case Op::reduce:
        check(ncclReduce(first.data_ptr(), first.data_ptr(), count(first), type, nccl_op(c.reduce, first.dtype()),
                         c.peer, comm_, s),
              "ncclReduce");
        return;
      case Op::all_gather: {
        const Tensor& in = c.inputs[0];
        if (c.outputs.size() == 1 && count(c.outputs[0]) == count(in) * static_cast<std::size_t>(n)) {
          check(ncclAllGather(in.data_ptr(), c.outputs[0].data_ptr(), count(in), type, comm_, s), "ncclAllGather");
          return;
        }
        // Into a list: gather into one buffer on the communication stream, then copy out there.
        cuda::StreamGuard on_comm(*stream_);
        Tensor flat = empty({n * in.numel()}, {.dtype = in.dtype(), .device = in.device()});
        check(ncclAllGather(in.data_ptr(), flat.data_ptr(), count(in), type, comm_, s), "ncclAllGather");
        NoGradGuard no_grad;
        for (int r = 0; r < n; ++r) {
          Tensor out = c.outputs[static_cast<std::size_t>(r)];
          out.copy_(flat.slice(0, r * in.numel(), (r + 1) * in.numel()).view(in.shape()));
        }
        return;
      }
      case Op::reduce_scatter: {
        const Tensor& in = c.inputs[0];
        const Tensor& out = c.outputs[0];
        check(ncclReduceScatter(in.data_ptr(), out.data_ptr(), count(out), type, nccl_op(c.reduce, in.dtype()), comm_,
                                s),
              "ncclReduceScatter");
        return;
      }
      case Op::all_to_all: {
        const Tensor& in = c.inputs[0];
        const Tensor& out = c.outputs[0];
        std::size_t block = count(in) / static_cast<std::size_t>(n);
        std::size_t bytes = block * in.itemsize();
        group([&] {
          for (int p = 0; p < n; ++p) {
            check(ncclSend(static_cast<char*>(in.data_ptr()) + p * bytes, block, type, p, comm_, s), "ncclSend");
            check(ncclRecv(static_cast<char*>(out.data_ptr()) + p * bytes, block, type, p, comm_, s), "ncclRecv");
          }
        });
        return;
      }
      case Op::all_to_all_list:
        group([&] {
          for (int p = 0; p < n; ++p) {
            const Tensor& i = c.inputs[static_cast<std::size_t>(p)];
            const Tensor& o = c.outputs[static_cast<std::size_t>(p)];
            check(ncclSend(i.data_ptr(), count(i), type, p, comm_, s), "ncclSend");
            check(ncclRecv(o.data_ptr(), count(o), type, p, comm_, s), "ncclRecv");
          }
        });
        return;
      case Op::send: check(ncclSend(first.data_ptr(), count(first), type, c.peer, comm_, s), "ncclSend"); return;
      case Op::recv: check(ncclRecv(first.data_ptr(), count(first), type, c.peer, comm_, s), "ncclRecv"); return;
      case Op::barrier: {
        // One element all-reduced on the device (the host does not wait for it).
        cuda::StreamGuard on_comm(*stream_);
        Tensor one = zeros({1}, {.device = Device::cuda(device_)});
        check(ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, comm_, s), "ncclAllReduce");
        return;
      }
    }
  }

  // Every 50 ms: NCCL's asynchronous error, finished collectives, deadlines.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      cv_.wait_for(lock, milliseconds(50));
      if (stopping_ || !comm_) continue;
      std::string what;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        what = "asynchronous error " + nccl_text(state) + (last && *last ? std::string(" (") + last + ")" : "");
      }
      try {
        while (!pending_.empty() && pending_.front().done.query()) pending_.pop_front();
      } catch (const Error&) {
        // The CUDA runtime is unloading (process exit: the world is never destroyed, so this
        // thread may outlive main) or the device failed, which the rank's own next CUDA call
        // reports: either way the watch ends here rather than terminating the process.
        return;
      }
      if (what.empty() && !pending_.empty() && Clock::now() > pending_.front().deadline)
        what = "timed out after " + std::to_string(g_.timeout.count()) + " ms";
      if (what.empty()) continue;
      Pending p = pending_.empty() ? Pending{cuda::Event(false), Clock::now(), g_.seq, "a collective"} : pending_.front();
      abort_locked();
      pending_.clear();
      lock.unlock();  // the report talks to the store for up to a few seconds
      g_.set_failure(failure_report(report_store_, g_, p.seq, p.label, "NCCL: " + what));
      lock.lock();
    }
  }

  GroupState& g_;
  int device_;
  TCPStore report_store_;
  std::optional<cuda::Stream> stream_;
  ncclComm_t comm_ = nullptr;
  std::thread watchdog_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::list<Pending> pending_;
  bool stopping_ = false;
};

}  // namespace

std::unique_ptr<Comm> make_nccl(GroupState& group, int device) { return std::make_unique<NcclComm>(group, device); }

#endif

}  // namespace brrr::dist::detail
