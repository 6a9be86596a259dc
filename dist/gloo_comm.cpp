// Gloo (Debian libgloo-dev, PyTorch's CPU backend) for CPU tensors. One Gloo context per
// group, connected as a full mesh through the world's TCPStore (Gloo's Store interface,
// backed by ours), over one TCP device per process. Collectives run in order on a worker
// thread per group, so async_op returns at once and a CPU DDP step overlaps its all-reduces
// with the rest of backward; send/recv are posted on the caller's thread (Gloo's unbound
// buffers), so isend/irecv pairs in any order cannot deadlock. Gloo's reductions get our own
// element functions, which cover every dtype (bf16 and bool too).
module;
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <unistd.h>

#include "backend/contract.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
module brrr.dist;
import brrr.tensor;

namespace brrr::dist::detail {

namespace {

using std::chrono::milliseconds;

// Gloo's rendezvous store interface over a connection of our own TCPStore.
class GlooStore final : public gloo::rendezvous::Store {
public:
  GlooStore(TCPStore store, std::string prefix) : store_(std::move(store)), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_.get(prefix_ + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, store_.timeout()); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout.count() > 0 ? timeout : store_.timeout());
  }

private:
  TCPStore store_;
  std::string prefix_;
};

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// One TCP device per process: the interface named by GLOO_SOCKET_IFNAME, else loopback when
// the master is local, else this host's name (PyTorch's choices).
std::shared_ptr<gloo::transport::Device> device() {
  static std::shared_ptr<gloo::transport::Device> d = [] {
    // Gloo's TCP pairs write with writev, which raises SIGPIPE when the peer has gone: a rank
    // left alone with a collective would be killed instead of getting the Error that names
    // the missing rank (dist_early_exit, ~1 run in 5 once start-up got faster; issue 18's
    // docs/benchmarks.md). Ignored as Python, and so PyTorch's ranks, ignore it, and only
    // when nobody chose a disposition: a program's own handler stays.
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO))
      signal(SIGPIPE, SIG_IGN);
    gloo::transport::tcp::attr attr;
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    const char* master = std::getenv("MASTER_ADDR");
    if (iface && *iface) {
      attr.iface = iface;
    } else if (!master || is_loopback(master)) {
      attr.hostname = "127.0.0.1";
    } else {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      attr.hostname = host;
    }
    return gloo::transport::tcp::CreateDevice(attr);
  }();
  return d;
}

// --- element functions -------------------------------------------------------------------

// S: the element type of the tensor's dtype (contract.hpp's; bool is uint8_t).
template <class F> void with_storage(DType dtype, F&& f) { backend::with_element_type<half, bfloat16>(dtype, f); }

template <class S> constexpr bool is_16bit_float = backend::is_float16<S>;

// The value type elements are combined in: float for the 16-bit floats, else S itself.
template <class S> using math_t = std::conditional_t<is_16bit_float<S>, float, S>;

template <class S> math_t<S> load(S v) {
  if constexpr (is_16bit_float<S>) return static_cast<float>(v);
  else return v;
}
template <class S> S store(math_t<S> v) {
  if constexpr (is_16bit_float<S>) return S(v);
  else return v;
}

// out[i] = a[i] (op) b[i]. bool: sum and max are or, product and min are and.
template <class S> gloo::AllreduceOptions::Func element_function(ReduceOp op) {
  auto make = [](auto combine) {
    return [combine](void* out, const void* a, const void* b, std::size_t n) {
      auto* o = static_cast<S*>(out);
      auto* x = static_cast<const S*>(a);
      auto* y = static_cast<const S*>(b);
      for (std::size_t i = 0; i < n; ++i) o[i] = store<S>(combine(load<S>(x[i]), load<S>(y[i])));
    };
  };
  using M = math_t<S>;
  if constexpr (std::is_same_v<S, std::uint8_t>) {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::max:
      case ReduceOp::avg: return make([](M p, M q) -> M { return (p || q) ? 1 : 0; });
      case ReduceOp::product:
      case ReduceOp::min: return make([](M p, M q) -> M { return (p && q) ? 1 : 0; });
    }
  } else {
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return make([](M p, M q) -> M { return p + q; });
      case ReduceOp::product: return make([](M p, M q) -> M { return p * q; });
      // NaN wins, as in torch.maximum.
      case ReduceOp::max: return make([](M p, M q) -> M { return p != p ? p : (q != q ? q : (p > q ? p : q)); });
      case ReduceOp::min: return make([](M p, M q) -> M { return p != p ? p : (q != q ? q : (p < q ? p : q)); });
    }
  }
  return {};
}

// x[i] /= n, for ReduceOp::avg (floating dtypes only: the op layer refuses the others).
template <class S> void divide(void* data, std::size_t count, std::size_t n) {
  if constexpr (std::is_floating_point_v<S> || is_16bit_float<S>) {
    auto* x = static_cast<S*>(data);
    for (std::size_t i = 0; i < count; ++i) x[i] = store<S>(load<S>(x[i]) / static_cast<math_t<S>>(n));
  }
}

// --- work ----------------------------------------------------------------------------------

struct GlooWork final : WorkState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::string error;
  void complete(std::string err) {
    std::lock_guard lock(mutex);
    done = true;
    error = std::move(err);
    cv.notify_all();
  }
  void wait() override {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return done; });
    if (!error.empty()) throw Error(ErrorKind::distributed, error);
  }
  bool is_completed() override {
    std::lock_guard lock(mutex);
    return done;
  }
};

class GlooComm final : public Comm {
public:
  explicit GlooComm(GroupState& g) : g_(g), report_store_(world_store().clone()) {
    context_ = std::make_shared<gloo::rendezvous::Context>(g.rank, static_cast<int>(g.ranks.size()));
    context_->setTimeout(g.timeout);
    if (g.ranks.size() > 1) {
      GlooStore store(world_store().clone(), g.prefix + "gloo/");
      auto dev = device();
      try {
        context_->connectFullMesh(store, dev);
        connected_ = true;
      } catch (const Error& e) {
        throw Error(ErrorKind::distributed, "Gloo: rank " + std::to_string(g.rank) + " of " + g.name +
                                                " could not connect to the others: " + e.what());
      } catch (const std::exception& e) {
        throw Error(ErrorKind::distributed, "Gloo: rank " + std::to_string(g.rank) + " of " + g.name +
                                                " could not connect to the others: " + e.what());
      }
    }
    worker_ = std::thread([this] { work_loop(); });
  }
  ~GlooComm() override { shutdown(); }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    close_connections();
  }

  std::shared_ptr<WorkState> run(Call call) override {
    auto work = std::make_shared<GlooWork>();
    work->label = call.label;
    if (call.op == Op::send || call.op == Op::recv) {
      post_point_to_point(std::move(call), work);
      return work;
    }
    {
      std::lock_guard lock(mutex_);
      queue_.push_back([this, work, c = std::move(call)]() mutable { execute(c, *work); });
    }
    cv_.notify_all();
    return work;
  }

private:
  void work_loop() {
    while (true) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping with nothing left
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }

  // Turns a Gloo exception into the failure report and poisons the group. The connections
  // close first: a peer still waiting on us inside the collective then fails at once and files
  // its report while we collect theirs (closed after the report, it waited its whole timeout
  // and was named as absent).
  std::string fail(TCPStore& store, const Call& c, const std::string& what) {
    close_connections();
    std::string message = failure_report(store, g_, c.seq, c.label, "Gloo: " + what);
    g_.set_failure(message);
    return message;
  }

  void close_connections() noexcept {
    if (!connected_) return;
    connected_ = false;
    try {
      context_->closeConnections();
    } catch (const std::exception&) {
      // already broken: nothing left to close
    }
  }

  void execute(Call& c, GlooWork& work) {
    std::string prior = g_.failure();
    if (!prior.empty()) {
      work.complete(c.label + ": " + g_.name + " failed earlier: " + prior);
      return;
    }
    try {
      collective(c);
      work.complete({});
    } catch (const Error& e) {
      work.complete(fail(report_store_, c, e.what()));
    } catch (const std::exception& e) {
      work.complete(fail(report_store_, c, e.what()));
    }
  }

  void collective(Call& c) {
    const std::size_t n = g_.ranks.size();
    const int me = g_.rank;
    const auto tag = static_cast<std::uint32_t>(c.seq);
    milliseconds timeout = g_.timeout;
    DType dtype = !c.outputs.empty() ? c.outputs[0].dtype() : !c.inputs.empty() ? c.inputs[0].dtype() : DType::f32;
    with_storage(dtype, [&](auto* type) {
      using S = std::remove_pointer_t<decltype(type)>;
      auto ptr = [](const Tensor& t) { return static_cast<S*>(t.data_ptr()); };
      auto count = [](const Tensor& t) { return static_cast<std::size_t>(t.numel()); };
      auto allreduce = [&](S* data, std::size_t elements) {
        if (n == 1 || elements == 0) return;
        gloo::AllreduceOptions o(context_);
        o.setOutput(data, elements);
        o.setReduceFunction(element_function<S>(c.reduce));
        o.setTag(tag);
        o.setTimeout(timeout);
        gloo::allreduce(o);
      };
      switch (c.op) {
        case Op::all_reduce: {
          const Tensor& t = c.outputs[0];
          allreduce(ptr(t), count(t));
          if (c.reduce == ReduceOp::avg) divide<S>(ptr(t), count(t), n);
          return;
        }
        case Op::broadcast: {
          const Tensor& t = c.outputs[0];
          if (n == 1 || count(t) == 0) return;
          gloo::BroadcastOptions o(context_);
          o.setOutput(ptr(t), count(t));
          o.setRoot(c.peer);
          o.setTag(tag);
          o.setTimeout(timeout);
          gloo::broadcast(o);
          return;
        }
        case Op::reduce: {
          const Tensor& t = c.outputs[0];
          if (n == 1 || count(t) == 0) {
            if (c.reduce == ReduceOp::avg) divide<S>(ptr(t), count(t), n);
            return;
          }
          // Gloo's ring uses the output as scratch on every rank: reduce a copy of the input
          // into the tensor on dst and into a scratch buffer elsewhere.
          std::vector<S> input(ptr(t), ptr(t) + count(t));
          std::vector<S> scratch(me == c.peer ? 0 : count(t));
          gloo::ReduceOptions o(context_);
          o.setInput(input.data(), input.size());
          o.setOutput(me == c.peer ? ptr(t) : scratch.data(), count(t));
          o.setRoot(c.peer);
          o.setReduceFunction(element_function<S>(c.reduce));
          o.setTag(tag);
          o.setTimeout(timeout);
          gloo::reduce(o);
          if (me == c.peer && c.reduce == ReduceOp::avg) divide<S>(ptr(t), count(t), n);
          return;
        }
        case Op::all_gather: {
          const Tensor& in = c.inputs[0];
          const std::size_t k = count(in);
          if (c.outputs.size() == 1 && count(c.outputs[0]) == n * k) {  // into one tensor
            S* out = ptr(c.outputs[0]);
            const bool in_place = ptr(in) == out + static_cast<std::size_t>(me) * k;  // the input is our block
            if (n == 1 || k == 0) {
              if (!in_place) std::memcpy(out, ptr(in), k * sizeof(S));
              return;
            }
            gloo::AllgatherOptions o(context_);
            if (!in_place) o.setInput(ptr(in), k);
            o.setOutput(out, n * k);
            o.setTag(tag);
            o.setTimeout(timeout);
            gloo::allgather(o);
            return;
          }
          std::vector<S> flat(n * k);
          if (n == 1 || k == 0) {
            std::memcpy(flat.data(), ptr(in), k * sizeof(S));
          } else {
            gloo::AllgatherOptions o(context_);
            o.setInput(ptr(in), k);
            o.setOutput(flat.data(), flat.size());
            o.setTag(tag);
            o.setTimeout(timeout);
            gloo::allgather(o);
          }
          for (std::size_t r = 0; r < n; ++r) std::memcpy(ptr(c.outputs[r]), flat.data() + r * k, k * sizeof(S));
          return;
        }
        case Op::reduce_scatter: {
          // An all-reduce of a copy of the input, then this rank's block (Gloo has no typed
          // reduce-scatter for custom element functions).
          const Tensor& in = c.inputs[0];
          const Tensor& out = c.outputs[0];
          std::vector<S> tmp(ptr(in), ptr(in) + count(in));
          allreduce(tmp.data(), tmp.size());
          std::memcpy(ptr(out), tmp.data() + static_cast<std::size_t>(me) * count(out), count(out) * sizeof(S));
          if (c.reduce == ReduceOp::avg) divide<S>(ptr(out), count(out), n);
          return;
        }
        case Op::all_to_all: {
          const Tensor& in = c.inputs[0];
          const Tensor& out = c.outputs[0];
          if (n == 1 || count(in) == 0) {
            std::memcpy(ptr(out), ptr(in), count(in) * sizeof(S));
            return;
          }
          gloo::AlltoallOptions o(context_);
          o.setInput(ptr(in), count(in));
          o.setOutput(ptr(out), count(out));
          o.setTag(tag);
          o.setTimeout(timeout);
          gloo::alltoall(o);
          return;
        }
        case Op::all_to_all_list: {
          std::vector<std::int64_t> in_counts, out_counts;
          std::vector<S> packed_in, packed_out;
          for (const auto& t : c.inputs) {
            in_counts.push_back(t.numel());
            packed_in.insert(packed_in.end(), ptr(t), ptr(t) + count(t));
          }
          std::size_t total_out = 0;
          for (const auto& t : c.outputs) {
            out_counts.push_back(t.numel());
            total_out += count(t);
          }
          packed_out.resize(total_out);
          if (n == 1) {
            if (in_counts[0] != out_counts[0])
              throw Error(ErrorKind::shape, c.label + ": input of " + std::to_string(in_counts[0]) +
                                                " elements for an output of " + std::to_string(out_counts[0]));
            packed_out = packed_in;
          } else {
            gloo::AlltoallvOptions o(context_);
            o.setInput(packed_in.data(), in_counts);
            o.setOutput(packed_out.data(), out_counts);
            o.setTag(tag);
            o.setTimeout(timeout);
            gloo::alltoallv(o);
          }
          std::size_t at = 0;
          for (const auto& t : c.outputs) {
            std::memcpy(ptr(t), packed_out.data() + at, count(t) * sizeof(S));
            at += count(t);
          }
          return;
        }
        case Op::barrier: {
          if (n == 1) return;
          gloo::BarrierOptions o(context_);
          o.setTag(tag);
          o.setTimeout(timeout);
          gloo::barrier(o);
          return;
        }
        case Op::send:
        case Op::recv: return;  // posted by post_point_to_point
      }
    });
  }

  // Posts the send or recv now, on the caller's thread, and queues the wait for it on the
  // worker: both sides' operations are posted before anyone waits, whatever the order.
  void post_point_to_point(Call c, const std::shared_ptr<GlooWork>& work) {
    std::string prior = g_.failure();
    if (!prior.empty()) {
      work->complete(c.label + ": " + g_.name + " failed earlier: " + prior);
      return;
    }
    const bool sending = c.op == Op::send;
    Tensor t = sending ? c.inputs[0] : c.outputs[0];
    // One slot for all point-to-point traffic (PyTorch's tag 0): a pair's messages match
    // in the order they were posted.
    const auto slot = gloo::Slot::build(0x20, 0);
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = context_->createUnboundBuffer(t.data_ptr(), t.nbytes());
      if (sending) buffer->send(c.peer, slot);
      else buffer->recv(c.peer, slot);
    } catch (const std::exception& e) {
      work->complete(fail(report_store_, c, e.what()));
      return;
    }
    {
      std::lock_guard lock(mutex_);
      queue_.push_back([this, work, buffer, t, c, sending] {
        try {
          bool ok = sending ? buffer->waitSend(g_.timeout) : buffer->waitRecv(g_.timeout);
          work->complete(ok ? std::string() : fail(report_store_, c, "the operation was aborted"));
        } catch (const std::exception& e) {
          work->complete(fail(report_store_, c, e.what()));
        }
      });
    }
    cv_.notify_all();
  }

  GroupState& g_;
  TCPStore report_store_;  // the worker thread's own connection, for failure reports
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::atomic<bool> connected_{false};
};

}  // namespace

std::unique_ptr<Comm> make_gloo(GroupState& group) { return std::make_unique<GlooComm>(group); }

}  // namespace brrr::dist::detail
