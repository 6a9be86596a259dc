// The world and its groups: init_process_group's rendezvous through the store, new_group,
// the collectives' argument checks, sequence numbers and BRRR_DIST_DEBUG's cross-rank check,
// and the failure report that names the ranks that did not arrive. The libraries that move
// the tensors are behind detail::Comm (dist/gloo_comm.cpp, dist/nccl_comm.cpp).
module;
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
module brrr.dist;
import brrr.tensor;

namespace brrr::dist {

using std::chrono::milliseconds;

const char* to_string(Backend b) {
  switch (b) {
    case Backend::automatic: return "automatic";
    case Backend::nccl: return "nccl";
    case Backend::gloo: return "gloo";
  }
  return "?";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::product: return "product";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

namespace detail {
const char* to_string(Op op) {
  switch (op) {
    case Op::all_reduce: return "all_reduce";
    case Op::broadcast: return "broadcast";
    case Op::reduce: return "reduce";
    case Op::all_gather: return "all_gather";
    case Op::reduce_scatter: return "reduce_scatter";
    case Op::all_to_all: return "all_to_all";
    case Op::all_to_all_list: return "all_to_all (lists)";
    case Op::send: return "send";
    case Op::recv: return "recv";
    case Op::barrier: return "barrier";
  }
  return "?";
}
}  // namespace detail

namespace {

struct World {
  bool initialized = false;
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  InitOptions options;
  std::optional<TCPStore> store;
  std::shared_ptr<detail::GroupState> group;               // the world group
  std::vector<std::weak_ptr<detail::GroupState>> groups;   // every group made, for destroy
  int next_group_id = 1;
  bool debug = false;
};

// Never destroyed: at exit the store's server, Gloo's workers and NCCL's watchdogs simply end
// with the process (joining them from a static destructor could wait on a dead peer, and the
// CUDA runtime may already be gone). destroy_process_group() is the orderly way out.
World& world() {
  static World& w = *new World;
  return w;
}

World& initialized(const char* op) {
  World& w = world();
  if (!w.initialized)
    throw Error(ErrorKind::value, std::string(op) + ": the process group is not initialised (call "
                                                     "dist::init_process_group() first)");
  return w;
}

// --- the environment -----------------------------------------------------------------------

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

long env_int(const char* name, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
    throw Error(ErrorKind::value, std::string("init_process_group: ") + name + "='" + text +
                                      "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                      "]");
  return v;
}

// The first of several spellings that is set (torchrun's, then Open MPI's).
std::optional<std::pair<const char*, std::string>> first_env(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (auto v = env(n)) return std::make_pair(n, *v);
  return std::nullopt;
}

struct Environment {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int listen_fd = -1;
  bool alone = false;  // no variables: a world of one with a private store
};

Environment read_environment() {
  Environment e;
  auto rank = first_env({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
  auto size = first_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
  auto addr = env("MASTER_ADDR");
  auto port = env("MASTER_PORT");
  if (!rank && !size && !addr && !port) {
    e.alone = true;
    return e;
  }
  std::vector<std::string> missing;
  if (!rank) missing.push_back("RANK");
  if (!size) missing.push_back("WORLD_SIZE");
  if (!addr) missing.push_back("MASTER_ADDR");
  if (!port) missing.push_back("MASTER_PORT");
  if (!missing.empty()) {
    std::string list;
    for (auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw Error(ErrorKind::value, "init_process_group: " + list +
                                      (missing.size() == 1 ? " is" : " are") +
                                      " not set (start the program with brrr-run, which sets RANK, WORLD_SIZE, "
                                      "MASTER_ADDR and MASTER_PORT, or set them yourself)");
  }
  e.size = static_cast<int>(env_int(size->first, size->second, 1, 1 << 20));
  e.rank = static_cast<int>(env_int(rank->first, rank->second, 0, e.size - 1));
  e.master_addr = *addr;
  if (e.master_addr.empty()) throw Error(ErrorKind::value, "init_process_group: MASTER_ADDR is empty");
  e.master_port = static_cast<int>(env_int("MASTER_PORT", *port, 1, 65535));
  if (auto ls = first_env({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}))
    e.local_size = static_cast<int>(env_int(ls->first, ls->second, 1, e.size));
  else
    e.local_size = e.size;
  if (auto lr = first_env({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}))
    e.local_rank = static_cast<int>(env_int(lr->first, lr->second, 0, e.local_size - 1));
  else
    e.local_rank = e.rank % e.local_size;
  if (auto fd = env("BRRR_STORE_LISTEN_FD"); fd && e.rank == 0)
    e.listen_fd = static_cast<int>(env_int("BRRR_STORE_LISTEN_FD", *fd, 0, 1 << 20));
  return e;
}

std::string identity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return "pid " + std::to_string(getpid()) + " on " + host;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// Every rank registers and waits for the others; the first problem seen is written to the
// store so that every rank fails with the same message. Rank 0, which hosts the store, stays
// (up to 3 s) until the others have read it.
void rendezvous(TCPStore& store, const Environment& e, milliseconds timeout) {
  const std::string me = "rank " + std::to_string(e.rank) + " (" + identity() + ")";
  store.add("init/arrived", 1);
  auto throw_error = [&](const std::string& message) {
    store.add("init/acks", 1);
    if (store.is_server()) {
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (store.add("init/acks", 0) < store.add("init/arrived", 0) && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(milliseconds(20));
    }
    throw Error(ErrorKind::distributed, "init_process_group: " + message);
  };
  auto fail_all = [&](const std::string& message) {
    store.compare_set("init/error", "", message);
    store.set("init/done", "error");
    throw_error(store.get("init/error"));
  };
  std::string size_seen = store.compare_set("init/world_size", "", std::to_string(e.size));
  if (size_seen != std::to_string(e.size))
    fail_all(me + " has WORLD_SIZE=" + std::to_string(e.size) + " but the ranks before it have WORLD_SIZE=" +
             size_seen);
  std::string holder = store.compare_set("init/rank/" + std::to_string(e.rank), "", me);
  if (holder != me)
    fail_all("RANK=" + std::to_string(e.rank) + " was taken twice: by " + holder + " and by " + me);
  std::int64_t joined = store.add("init/joined", 1);
  if (joined == e.size) store.compare_set("init/done", "", "ok");
  try {
    store.wait({"init/done"}, timeout);
  } catch (const Error&) {
    std::vector<int> absent;
    for (int r = 0; r < e.size; ++r)
      if (!store.check({"init/rank/" + std::to_string(r)})) absent.push_back(r);
    throw_error(std::to_string(e.size - static_cast<int>(absent.size())) + " of " + std::to_string(e.size) +
                " ranks joined within " + std::to_string(timeout.count()) + " ms; missing: rank" +
                (absent.size() == 1 ? " " : "s ") + rank_list(absent) + " (store at " + store.host() + ":" +
                std::to_string(store.port()) + ", WORLD_SIZE=" + std::to_string(e.size) + ")");
  }
  if (store.check({"init/error"})) throw_error(store.get("init/error"));
}

std::shared_ptr<detail::GroupState> make_group(World& w, int id, std::vector<int> ranks, Backend backend,
                                               milliseconds timeout) {
  auto g = std::make_shared<detail::GroupState>();
  g->id = id;
  g->name = id == 0 ? "world" : "group" + std::to_string(id);
  g->ranks = std::move(ranks);
  auto it = std::find(g->ranks.begin(), g->ranks.end(), w.rank);
  g->rank = it == g->ranks.end() ? -1 : static_cast<int>(it - g->ranks.begin());
  g->backend = backend;
  g->timeout = timeout;
  g->prefix = "g" + std::to_string(id) + "/";
  if (g->rank >= 0 && backend != Backend::nccl) g->gloo = detail::make_gloo(*g);
  w.groups.push_back(g);
  return g;
}

detail::GroupState& group_of(const CollectiveOptions& o, const char* op) {
  World& w = initialized(op);
  detail::GroupState& g = o.group ? *o.group->state() : *w.group;
  if (g.rank < 0)
    throw Error(ErrorKind::value, std::string(op) + ": rank " + std::to_string(w.rank) + " is not a member of " +
                                      g.name + " (world ranks " + rank_list(g.ranks) + ")");
  std::string failed = g.failure();
  if (!failed.empty())
    throw Error(ErrorKind::distributed, std::string(op) + ": " + g.name + " cannot run more collectives: " + failed);
  return g;
}

}  // namespace

// --- init / destroy ------------------------------------------------------------------------

bool has_nccl() {
#ifdef BRRR_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

void init_process_group(InitOptions options) {
  World& w = world();
  if (w.initialized)
    throw Error(ErrorKind::value, "init_process_group: already initialised (rank " + std::to_string(w.rank) +
                                      " of " + std::to_string(w.size) + "); call destroy_process_group() first");
  if (options.timeout.count() <= 0)
    throw Error(ErrorKind::value, "init_process_group: the timeout must be positive, not " +
                                      std::to_string(options.timeout.count()) + " ms");
  if (options.backend == Backend::nccl && !has_nccl())
    throw Error(ErrorKind::device, "init_process_group: backend nccl, but this build of brrr has no NCCL "
                                   "(built without CUDA, or NCCL was not found at build time); use gloo");
  Environment e = read_environment();
  w.store.reset();
  if (e.alone) {
    w.store.emplace("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = options.timeout});
  } else {
    w.store.emplace(e.rank == 0 ? std::string("127.0.0.1") : e.master_addr, e.master_port,
                    TCPStoreOptions{.is_server = e.rank == 0, .timeout = options.timeout, .listen_fd = e.listen_fd});
    if (e.listen_fd >= 0) unsetenv("BRRR_STORE_LISTEN_FD");  // adopted (and owned) by the store now
  }
  rendezvous(*w.store, e, options.timeout);
  w.rank = e.rank;
  w.size = e.size;
  w.local_rank = e.local_rank;
  w.local_size = e.local_size;
  w.options = options;
  const char* debug = std::getenv("BRRR_DIST_DEBUG");
  w.debug = debug && std::string(debug) != "0" && std::string(debug) != "";
  w.next_group_id = 1;
  w.groups.clear();
  std::vector<int> all(static_cast<std::size_t>(e.size));
  for (int r = 0; r < e.size; ++r) all[static_cast<std::size_t>(r)] = r;
  w.initialized = true;
  try {
    w.group = make_group(w, 0, std::move(all), options.backend, options.timeout);
  } catch (...) {
    w.initialized = false;
    throw;
  }
}

bool is_initialized() { return world().initialized; }

void destroy_process_group() {
  World& w = world();
  if (!w.initialized) return;
  // Rank 0 hosts the store: it stays until every rank is here (or the timeout passes).
  if (w.size > 1) {
    try {
      std::int64_t n = w.store->add("destroy/count", 1);
      if (n == w.size) w.store->set("destroy/done", "1");
      if (w.rank == 0) w.store->wait({"destroy/done"}, w.options.timeout);
    } catch (const Error&) {
      // Another rank died or left: nothing to wait for any more.
    }
  }
  for (auto& weak : w.groups)
    if (auto g = weak.lock()) {
      if (g->nccl) g->nccl->shutdown();
      if (g->gloo) g->gloo->shutdown();
      g->nccl.reset();
      g->gloo.reset();
      g->set_failure("the process group was destroyed");
    }
  w.groups.clear();
  w.group.reset();
  w.store.reset();
  w.initialized = false;
}

int rank() { return initialized("rank").rank; }
int world_size() { return initialized("world_size").size; }
int local_rank() { return initialized("local_rank").local_rank; }
int local_world_size() { return initialized("local_world_size").local_size; }
TCPStore& store() { return *initialized("store").store; }

namespace detail {
TCPStore& world_store() { return *initialized("store").store; }
int world_rank() { return initialized("rank").rank; }
}  // namespace detail

// --- groups ----------------------------------------------------------------------------------

int ProcessGroup::rank() const { return state_->rank; }
int ProcessGroup::size() const { return static_cast<int>(state_->ranks.size()); }
const std::vector<int>& ProcessGroup::ranks() const { return state_->ranks; }
Backend ProcessGroup::backend() const { return state_->backend; }
const std::string& ProcessGroup::name() const { return state_->name; }

ProcessGroup world_group() { return ProcessGroup(initialized("world_group").group); }

ProcessGroup new_group(std::vector<int> ranks, NewGroupOptions options) {
  World& w = initialized("new_group");
  if (ranks.empty())
    for (int r = 0; r < w.size; ++r) ranks.push_back(r);
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= w.size)
      throw Error(ErrorKind::value, "new_group: rank " + std::to_string(r) + " is outside the world [0, " +
                                        std::to_string(w.size) + ")");
    if (!seen.insert(r).second)
      throw Error(ErrorKind::value, "new_group: rank " + std::to_string(r) + " is listed twice in [" +
                                        rank_list(ranks) + "]");
  }
  Backend backend = options.backend.value_or(w.options.backend);
  if (backend == Backend::nccl && !has_nccl())
    throw Error(ErrorKind::device, "new_group: backend nccl, but this build of brrr has no NCCL");
  milliseconds timeout = options.timeout.value_or(w.options.timeout);
  if (timeout.count() <= 0) throw Error(ErrorKind::value, "new_group: the timeout must be positive");
  return ProcessGroup(make_group(w, w.next_group_id++, std::move(ranks), backend, timeout));
}

// --- Work --------------------------------------------------------------------------------------

void Work::wait() {
  if (state_) state_->wait();
}
bool Work::is_completed() const { return !state_ || state_->is_completed(); }
std::string Work::name() const { return state_ ? state_->label : std::string(); }

// --- failure reports ---------------------------------------------------------------------------

namespace detail {

std::string failure_report(TCPStore& store, const GroupState& g, std::uint64_t seq, const std::string& label,
                           const std::string& what) {
  std::string head = label + " failed on rank " + std::to_string(g.rank) + " of " + g.name + ": " + what;
  try {
    store.set(g.prefix + "fail/" + std::to_string(g.rank), std::to_string(seq) + " " + label);
    // The other ranks in the collective fail too (their peers closed or aborted): give their
    // reports a moment, and stop early once every member has one.
    auto deadline = std::chrono::steady_clock::now() + std::min(milliseconds(2000), std::max(g.timeout / 4, milliseconds(300)));
    std::vector<std::string> reports(g.ranks.size());
    while (true) {
      bool all = true;
      for (std::size_t i = 0; i < g.ranks.size(); ++i) {
        if (static_cast<int>(i) == g.rank || !reports[i].empty()) continue;
        std::string key = g.prefix + "fail/" + std::to_string(i);
        if (store.check({key})) reports[i] = store.get(key);
        else all = false;
      }
      if (all || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(milliseconds(50));
    }
    std::string absent;
    for (std::size_t i = 0; i < g.ranks.size(); ++i) {
      if (static_cast<int>(i) == g.rank) continue;
      std::string why;
      if (reports[i].empty()) {
        why = "no report: it exited, crashed or is busy outside brrr.dist";
      } else {
        std::uint64_t their = std::strtoull(reports[i].c_str(), nullptr, 10);
        if (their >= seq) continue;  // it reached this collective (and failed in it too)
        why = "it is in " + reports[i].substr(reports[i].find(' ') + 1);
      }
      absent += (absent.empty() ? "" : "; ") + std::string("rank ") + std::to_string(i) + " (" + why + ")";
    }
    if (absent.empty()) return head + " (every other rank reached it and failed too)";
    return head + "; ranks that did not arrive: " + absent;
  } catch (const Error& e) {
    return head + " (the other ranks could not be asked: " + e.what() + ")";
  }
}

}  // namespace detail

// --- collectives -------------------------------------------------------------------------------

namespace {

void require(bool ok, ErrorKind kind, const std::string& message) {
  if (!ok) throw Error(kind, message);
}

void check_tensor(const char* op, const Tensor& t, const char* what = "tensor") {
  require(t.defined(), ErrorKind::value, std::string(op) + ": the " + what + " is undefined");
  require(t.is_contiguous(), ErrorKind::value,
          std::string(op) + ": the " + what + " (" + describe(t) + ") must be contiguous");
}

void check_peer(const char* op, int peer, const detail::GroupState& g, const char* role) {
  require(peer >= 0 && peer < static_cast<int>(g.ranks.size()), ErrorKind::value,
          std::string(op) + ": " + role + " " + std::to_string(peer) + " is outside " + g.name + " [0, " +
              std::to_string(g.ranks.size()) + ")");
}

void check_avg(const char* op, ReduceOp r, DType d) {
  require(r != ReduceOp::avg || is_floating_point(d), ErrorKind::dtype,
          std::string(op) + ": ReduceOp::avg needs a floating dtype, not " + to_string(d));
}

void check_same(const char* op, const Tensor& a, const Tensor& b) {
  require(a.dtype() == b.dtype(), ErrorKind::dtype,
          std::string(op) + ": input " + describe(b) + " and output " + describe(a) + " differ in dtype");
  require(a.device() == b.device(), ErrorKind::device,
          std::string(op) + ": input " + describe(b) + " and output " + describe(a) + " are on different devices");
}

// "f32 [4, 5]" of each tensor, for the debug check.
std::string signature(const detail::Call& c) {
  std::string s = detail::to_string(c.op);
  auto shapes = [&](const std::vector<Tensor>& ts) {
    std::string r;
    for (const auto& t : ts) r += (r.empty() ? "" : ", ") + std::string(to_string(t.dtype())) + " " + brrr::to_string(t.shape());
    return r;
  };
  switch (c.op) {
    case detail::Op::all_reduce: return s + "(" + shapes(c.outputs) + ", " + to_string(c.reduce) + ")";
    case detail::Op::reduce: return s + "(" + shapes(c.outputs) + ", " + to_string(c.reduce) + ", dst " + std::to_string(c.peer) + ")";
    case detail::Op::broadcast: return s + "(" + shapes(c.outputs) + ", src " + std::to_string(c.peer) + ")";
    case detail::Op::reduce_scatter: return s + "(input " + shapes(c.inputs) + ", " + to_string(c.reduce) + ")";
    case detail::Op::all_gather:
    case detail::Op::all_to_all: return s + "(input " + shapes(c.inputs) + ")";
    case detail::Op::all_to_all_list:
      return s + "(" + std::to_string(c.inputs.size()) + " " + to_string(c.inputs.at(0).dtype()) + " tensors)";
    case detail::Op::barrier: return s + "()";
    case detail::Op::send:
    case detail::Op::recv: return s;
  }
  return s;
}

// BRRR_DIST_DEBUG: every member publishes the call's signature under the collective's
// sequence number and compares them all; the first rank that differs from rank 0 is named.
void debug_check(detail::GroupState& g, const detail::Call& c) {
  TCPStore& store = world().store.value();
  auto key = [&](std::uint64_t seq, std::size_t r) {
    return g.prefix + "debug/" + std::to_string(seq) + "/" + std::to_string(r);
  };
  std::string mine = signature(c);
  store.set(key(c.seq, static_cast<std::size_t>(g.rank)), mine);
  std::vector<std::string> keys;
  for (std::size_t r = 0; r < g.ranks.size(); ++r) keys.push_back(key(c.seq, r));
  try {
    store.wait(keys, g.timeout);
  } catch (const Error&) {
    std::vector<int> absent;
    for (std::size_t r = 0; r < g.ranks.size(); ++r)
      if (!store.check({keys[r]})) absent.push_back(static_cast<int>(r));
    throw Error(ErrorKind::distributed,
                "BRRR_DIST_DEBUG: " + c.label + ": rank" + (absent.size() == 1 ? " " : "s ") + rank_list(absent) +
                    " of " + g.name + " did not reach collective #" + std::to_string(c.seq) + " within " +
                    std::to_string(g.timeout.count()) + " ms (rank " + std::to_string(g.rank) + " called " + mine + ")");
  }
  std::vector<std::string> all;
  for (const auto& k : keys) all.push_back(store.get(k));
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0])
      throw Error(ErrorKind::distributed, "BRRR_DIST_DEBUG: collective #" + std::to_string(c.seq) + " of " + g.name +
                                              " differs between ranks: rank 0 called " + all[0] + " but rank " +
                                              std::to_string(r) + " called " + all[r]);
  // Every member has written #seq, so all have read #seq-1: drop this rank's old key.
  if (c.seq > 0) store.delete_key(key(c.seq - 1, static_cast<std::size_t>(g.rank)));
}

Work issue(detail::GroupState& g, detail::Call c) {
  if (c.op == detail::Op::send || c.op == detail::Op::recv) {
    // Point to point is not collective: it has its own count, and does not move the
    // collectives' sequence numbers, which must agree between ranks.
    c.seq = g.seq;
    c.label = std::string(detail::to_string(c.op)) + " #" + std::to_string(g.p2p_seq++) +
              (c.op == detail::Op::send ? " to rank " : " from rank ") + std::to_string(c.peer) + " (" + g.name + ")";
  } else {
    c.seq = g.seq++;
    c.label = std::string(detail::to_string(c.op)) + " #" + std::to_string(c.seq) + " (" + g.name + ")";
    if (world().debug) debug_check(g, c);
  }
  Device device = c.outputs.empty() ? (c.inputs.empty() ? Device::cpu() : c.inputs[0].device()) : c.outputs[0].device();
  detail::Comm* comm = nullptr;
  if (device.is_cpu()) {
    require(g.backend != Backend::nccl, ErrorKind::device,
            c.label + ": " + g.name + " has backend nccl, which moves CUDA tensors only; this one is on the CPU "
                                      "(use backend gloo or automatic, or move it to the GPU)");
    comm = g.gloo.get();
  } else {
    require(g.backend != Backend::gloo, ErrorKind::device,
            c.label + ": " + g.name + " has backend gloo, which moves CPU tensors only; this one is on " +
                device.str() + " (use backend nccl or automatic, or copy it to the CPU)");
    if (!g.nccl) g.nccl = detail::make_nccl(g, device.index());
    comm = g.nccl.get();
  }
  for (const auto& t : c.outputs) t.storage().bump_version();  // written in place
  return Work(comm->run(std::move(c)));
}

Work finish(Work w, const CollectiveOptions& o) {
  if (!o.async_op) {
    w.wait();
    return Work();
  }
  return w;
}

}  // namespace

Work all_reduce(const Tensor& tensor, ReduceOp op, CollectiveOptions o) {
  auto& g = group_of(o, "all_reduce");
  check_tensor("all_reduce", tensor);
  check_avg("all_reduce", op, tensor.dtype());
  return finish(issue(g, {.op = detail::Op::all_reduce, .reduce = op, .inputs = {tensor}, .outputs = {tensor},
                          .async_op = o.async_op}),
                o);
}

Work broadcast(const Tensor& tensor, int src, CollectiveOptions o) {
  auto& g = group_of(o, "broadcast");
  check_tensor("broadcast", tensor);
  check_peer("broadcast", src, g, "src");
  return finish(issue(g, {.op = detail::Op::broadcast, .peer = src, .inputs = {tensor}, .outputs = {tensor},
                          .async_op = o.async_op}),
                o);
}

Work reduce(const Tensor& tensor, int dst, ReduceOp op, CollectiveOptions o) {
  auto& g = group_of(o, "reduce");
  check_tensor("reduce", tensor);
  check_peer("reduce", dst, g, "dst");
  check_avg("reduce", op, tensor.dtype());
  return finish(issue(g, {.op = detail::Op::reduce, .reduce = op, .peer = dst, .inputs = {tensor},
                          .outputs = {tensor}, .async_op = o.async_op}),
                o);
}

Work all_gather(const Tensor& output, const Tensor& input, CollectiveOptions o) {
  auto& g = group_of(o, "all_gather");
  check_tensor("all_gather", input, "input");
  check_tensor("all_gather", output, "output");
  check_same("all_gather", output, input);
  require(output.numel() == input.numel() * static_cast<std::int64_t>(g.ranks.size()), ErrorKind::shape,
          "all_gather: output " + describe(output) + " must hold " + std::to_string(g.ranks.size()) +
              " inputs of " + describe(input));
  return finish(issue(g, {.op = detail::Op::all_gather, .inputs = {input}, .outputs = {output},
                          .async_op = o.async_op}),
                o);
}

Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input, CollectiveOptions o) {
  auto& g = group_of(o, "all_gather");
  check_tensor("all_gather", input, "input");
  require(outputs.size() == g.ranks.size(), ErrorKind::value,
          "all_gather: " + std::to_string(outputs.size()) + " outputs for " + std::to_string(g.ranks.size()) +
              " ranks of " + g.name);
  for (const auto& t : outputs) {
    check_tensor("all_gather", t, "output");
    check_same("all_gather", t, input);
    require(t.shape() == input.shape(), ErrorKind::shape,
            "all_gather: output " + describe(t) + " is not shaped like the input " + describe(input));
  }
  return finish(issue(g, {.op = detail::Op::all_gather, .inputs = {input}, .outputs = outputs,
                          .async_op = o.async_op}),
                o);
}

Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, CollectiveOptions o) {
  auto& g = group_of(o, "reduce_scatter");
  check_tensor("reduce_scatter", input, "input");
  check_tensor("reduce_scatter", output, "output");
  check_same("reduce_scatter", output, input);
  check_avg("reduce_scatter", op, input.dtype());
  require(input.numel() == output.numel() * static_cast<std::int64_t>(g.ranks.size()), ErrorKind::shape,
          "reduce_scatter: input " + describe(input) + " must hold " + std::to_string(g.ranks.size()) +
              " blocks of the output " + describe(output));
  return finish(issue(g, {.op = detail::Op::reduce_scatter, .reduce = op, .inputs = {input}, .outputs = {output},
                          .async_op = o.async_op}),
                o);
}

Work all_to_all(const Tensor& output, const Tensor& input, CollectiveOptions o) {
  auto& g = group_of(o, "all_to_all");
  check_tensor("all_to_all", input, "input");
  check_tensor("all_to_all", output, "output");
  check_same("all_to_all", output, input);
  auto n = static_cast<std::int64_t>(g.ranks.size());
  require(input.numel() == output.numel() && input.numel() % n == 0, ErrorKind::shape,
          "all_to_all: input " + describe(input) + " and output " + describe(output) +
              " must have one numel divisible by the " + std::to_string(n) + " ranks");
  return finish(issue(g, {.op = detail::Op::all_to_all, .inputs = {input}, .outputs = {output},
                          .async_op = o.async_op}),
                o);
}

Work all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs, CollectiveOptions o) {
  auto& g = group_of(o, "all_to_all");
  require(outputs.size() == g.ranks.size() && inputs.size() == g.ranks.size(), ErrorKind::value,
          "all_to_all: " + std::to_string(inputs.size()) + " inputs and " + std::to_string(outputs.size()) +
              " outputs for " + std::to_string(g.ranks.size()) + " ranks of " + g.name);
  for (const auto& t : inputs) {
    check_tensor("all_to_all", t, "input");
    check_same("all_to_all", inputs[0], t);
  }
  for (const auto& t : outputs) {
    check_tensor("all_to_all", t, "output");
    check_same("all_to_all", t, inputs[0]);
  }
  return finish(issue(g, {.op = detail::Op::all_to_all_list, .inputs = inputs, .outputs = outputs,
                          .async_op = o.async_op}),
                o);
}

namespace {
Work point_to_point(detail::Op op, const Tensor& t, int peer, CollectiveOptions o) {
  const char* name = detail::to_string(op);
  auto& g = group_of(o, name);
  check_tensor(name, t);
  check_peer(name, peer, g, op == detail::Op::send ? "dst" : "src");
  require(peer != g.rank, ErrorKind::value, std::string(name) + ": rank " + std::to_string(peer) + " is this rank");
  detail::Call c{.op = op, .peer = peer, .async_op = o.async_op};
  if (op == detail::Op::send) c.inputs = {t};
  else c.outputs = {t};
  return issue(g, std::move(c));
}
}  // namespace

void send(const Tensor& t, int dst, CollectiveOptions o) {
  o.async_op = false;
  point_to_point(detail::Op::send, t, dst, o).wait();
}
void recv(const Tensor& t, int src, CollectiveOptions o) {
  o.async_op = false;
  point_to_point(detail::Op::recv, t, src, o).wait();
}
Work isend(const Tensor& t, int dst, CollectiveOptions o) {
  o.async_op = true;
  return point_to_point(detail::Op::send, t, dst, o);
}
Work irecv(const Tensor& t, int src, CollectiveOptions o) {
  o.async_op = true;
  return point_to_point(detail::Op::recv, t, src, o);
}

void barrier(CollectiveOptions o) {
  auto& g = group_of(o, "barrier");
  if (g.gloo) {
    issue(g, {.op = detail::Op::barrier}).wait();
    return;
  }
  // No Gloo context (an nccl group): a barrier through the store.
  detail::Call c{.op = detail::Op::barrier, .seq = g.seq++};
  c.label = "barrier #" + std::to_string(c.seq) + " (" + g.name + ")";
  if (world().debug) debug_check(g, c);
  TCPStore& store = world().store.value();
  std::string base = g.prefix + "barrier/" + std::to_string(c.seq) + "/";
  store.set(base + std::to_string(g.rank), "1");
  std::vector<std::string> keys;
  for (std::size_t r = 0; r < g.ranks.size(); ++r) keys.push_back(base + std::to_string(r));
  try {
    store.wait(keys, g.timeout);
  } catch (const Error& e) {
    throw Error(ErrorKind::distributed, c.label + ": " + e.what());
  }
}

}  // namespace brrr::dist
