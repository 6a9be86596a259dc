// brrr.dist — ranks: one process per device, sharing nothing, cooperating through collectives.
// The rendezvous store (TCPStore), process groups over NCCL (CUDA tensors) and Gloo (CPU
// tensors), and the collectives. docs/ranks.md walks through it; docs/architecture.md, section
// "Ranks", has the design notes.
module;
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
export module brrr.dist;
import brrr.tensor;
import brrr.nn;
import brrr.optim;
import brrr.data;

export namespace brrr::dist {

// ---------------------------------------------------------------------------------------
// The rendezvous store
// ---------------------------------------------------------------------------------------

struct TCPStoreOptions {
  /// Host the store in this process (a thread serving every client), as rank 0 does.
  bool is_server = false;
  /// How long connecting, get() and wait() may take before Error(distributed).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// Server only: serve on this already-listening socket instead of binding `port` (brrr-run
  /// hands rank 0 the port it bound, in BRRR_STORE_LISTEN_FD). The store takes ownership.
  int listen_fd = -1;
};

/// A key-value store over TCP with PyTorch's TCPStore semantics: the server (one thread in
/// rank 0) keeps the keys; every rank is a client. Values are byte strings. Every call that
/// waits has a deadline: missing keys, a master that never appears and a server that went
/// away are Error(distributed) naming the keys or host:port, never a hang. A cheap handle:
/// copies share one connection (calls are serialised by a mutex); clone() opens another.
/// The wire format is dist/store_protocol.hpp.
class TCPStore {
public:
  /// Connects to host:port (retrying until the timeout: the server may start later), after
  /// starting the server first when options.is_server (port 0: any free port, see port()).
  TCPStore(std::string host, int port, TCPStoreOptions options = {});
  ~TCPStore();
  TCPStore(const TCPStore&) = default;
  TCPStore& operator=(const TCPStore&) = default;

  /// Sets key to value (waking every wait() for it).
  void set(const std::string& key, const std::string& value);
  /// The value of key, waiting up to the timeout for it to be set.
  std::string get(const std::string& key);
  /// Adds delta to the integer at key (absent: 0) and returns the sum. Error(distributed) if
  /// the key holds something else than a decimal integer.
  std::int64_t add(const std::string& key, std::int64_t delta);
  /// Whether every key is set; never waits.
  bool check(const std::vector<std::string>& keys);
  /// Waits until every key is set, up to the store's timeout (or `timeout`); the error names
  /// the keys still missing.
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// Removes key; returns whether it existed.
  bool delete_key(const std::string& key);
  /// Sets key to desired if it holds expected (or is absent and expected is empty); returns
  /// the value afterwards (PyTorch's compare_set).
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);

  /// The server's port (the bound one when 0 was asked).
  int port() const;
  const std::string& host() const;
  std::chrono::milliseconds timeout() const;
  void set_timeout(std::chrono::milliseconds timeout);
  bool is_server() const;
  /// A second connection to the same server (for another thread); keeps a hosted server alive.
  TCPStore clone() const;

private:
  struct Server;
  struct Connection;
  TCPStore(std::shared_ptr<Server> server, std::shared_ptr<Connection> connection);
  std::shared_ptr<Server> server_;          // set when this process hosts the store
  std::shared_ptr<Connection> connection_;
};

// ---------------------------------------------------------------------------------------
// Process groups
// ---------------------------------------------------------------------------------------

/// Which library moves the tensors. automatic: Gloo for CPU tensors and NCCL for CUDA
/// tensors (PyTorch's "cpu:gloo,cuda:nccl"); nccl: CUDA tensors only; gloo: CPU tensors only.
/// NCCL exists only in builds with CUDA and NCCL (has_nccl()).
enum class Backend : std::uint8_t { automatic, nccl, gloo };
const char* to_string(Backend backend);
/// Whether this build can run NCCL collectives.
bool has_nccl();

struct InitOptions {
  Backend backend = Backend::automatic;
  /// Deadline of the rendezvous and of every collective of the default group (a collective
  /// not finished by then is Error(distributed) on every rank that reached it).
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
};

/// Joins the world described by torchrun's variables: RANK, WORLD_SIZE, MASTER_ADDR and
/// MASTER_PORT (LOCAL_RANK, LOCAL_WORLD_SIZE optional; Open MPI's OMPI_COMM_WORLD_* too).
/// Rank 0 hosts the TCPStore at MASTER_PORT; every rank registers there and waits for the
/// others. With none of the variables set, a world of one (rank 0, a private store).
/// Errors (Error(distributed), within the timeout): a rank that does not join (named),
/// ranks that disagree on WORLD_SIZE, two processes with one RANK, a store that cannot be
/// reached; Error(value) for a missing or malformed variable; Error(value) when already
/// initialised. CUDA tensors' NCCL communicator is made at the first CUDA collective.
void init_process_group(InitOptions options = {});
bool is_initialized();
/// Waits until every rank has called it (rank 0 keeps the store up for the others until
/// then), then closes the communicators and the store. No-op when not initialised.
void destroy_process_group();
/// This process's rank in [0, world_size()). Error(value) before init_process_group.
int rank();
int world_size();
/// The rank's index on its node (LOCAL_RANK): the CUDA device to use, cuda:local_rank().
int local_rank();
int local_world_size();
/// The world group's store (for user rendezvous of their own).
TCPStore& store();

namespace detail {
struct GroupState;
struct WorkState;
}  // namespace detail

/// A set of ranks that run collectives together; ranks inside it are numbered from 0 in the
/// order given to new_group. A cheap handle.
class ProcessGroup {
public:
  /// This rank's index in the group, -1 when it is not a member.
  int rank() const;
  int size() const;
  bool is_member() const { return rank() >= 0; }
  /// The group's ranks as world ranks.
  const std::vector<int>& ranks() const;
  Backend backend() const;
  /// "world", "group1", ...: how errors name the group.
  const std::string& name() const;

  explicit ProcessGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}
  const std::shared_ptr<detail::GroupState>& state() const { return state_; }

private:
  std::shared_ptr<detail::GroupState> state_;
};

/// All ranks (PyTorch's group.WORLD).
ProcessGroup world_group();

struct NewGroupOptions {
  std::optional<Backend> backend;                   ///< default: the world's
  std::optional<std::chrono::milliseconds> timeout;  ///< default: the world's
};
/// A group of `ranks` (distinct world ranks, any order; empty = all). Every rank of the world
/// must call new_group with the same ranks in the same order of calls, members or not
/// (PyTorch's rule); a non-member gets a handle with rank() == -1.
ProcessGroup new_group(std::vector<int> ranks, NewGroupOptions options = {});

// ---------------------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------------------

/// Reductions. avg needs a floating dtype. On bool tensors sum and max are a logical or,
/// product and min a logical and (what PyTorch does for NCCL).
enum class ReduceOp : std::uint8_t { sum, avg, product, max, min };
const char* to_string(ReduceOp op);

/// A collective in flight. For CUDA tensors wait() makes the CURRENT stream wait for the
/// collective's event (device-side: the host returns at once) and is_completed() asks the
/// event; for CPU tensors (Gloo) wait() blocks the host until the worker thread is done.
/// Either way a failed collective throws its Error(distributed) from wait().
class Work {
public:
  Work() = default;
  explicit Work(std::shared_ptr<detail::WorkState> state) : state_(std::move(state)) {}
  void wait();
  /// Never blocks: true once the collective has finished (or failed).
  bool is_completed() const;
  /// "all_reduce #7 (group world)". Empty for a default Work.
  std::string name() const;
  bool defined() const { return state_ != nullptr; }

private:
  std::shared_ptr<detail::WorkState> state_;
};

struct CollectiveOptions {
  /// Return at once with a Work to wait() on. Without it the call returns when the result
  /// may be used in program order: for CUDA tensors the current stream already waits for the
  /// collective (still no host wait); for CPU tensors the host has waited.
  bool async_op = false;
  /// Default: the world.
  std::optional<ProcessGroup> group;
};

// Every collective must be called by every rank of the group, in the same order, with
// tensors of the same dtype and matching shapes; tensors must be contiguous, on the CPU
// (Gloo) or on this rank's CUDA device (NCCL), every dtype (f32, f64, bf16, f16, i32, i64,
// bool). Results are written in place (version counters bumped). Bad arguments are
// Error(shape|dtype|device|value) naming the collective; BRRR_DIST_DEBUG=1 checks through
// the store that all ranks called the same collective with the same dtype, shape and op,
// and reports the first rank that differs. Ranks below are group ranks.

/// Reduces `tensor` over the ranks, in place on every rank.
Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum, CollectiveOptions options = {});
/// Copies src's tensor into every rank's `tensor`.
Work broadcast(const Tensor& tensor, int src, CollectiveOptions options = {});
/// Reduces into dst's `tensor`; the others' tensors are left unchanged.
Work reduce(const Tensor& tensor, int dst, ReduceOp op = ReduceOp::sum, CollectiveOptions options = {});
/// output = every rank's input, in rank order along dim 0: output [N * d0, ...] (or any
/// contiguous shape of N * input.numel() elements, e.g. [N, d0, ...]).
Work all_gather(const Tensor& output, const Tensor& input, CollectiveOptions options = {});
/// outputs[r] = rank r's input (outputs.size() == N, each shaped like input).
Work all_gather(const std::vector<Tensor>& outputs, const Tensor& input, CollectiveOptions options = {});
/// Reduces input (N * output.numel() elements, rank r's block r after the reduction lands in
/// rank r's output): PyTorch's reduce_scatter_tensor.
Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                    CollectiveOptions options = {});
/// Block j of rank i's input (N equal blocks of input.numel() / N elements) goes to block i
/// of rank j's output (PyTorch's all_to_all_single with equal splits).
Work all_to_all(const Tensor& output, const Tensor& input, CollectiveOptions options = {});
/// outputs[i] = rank i's inputs[this rank]; sizes may differ per pair (both lists have N
/// entries, of one dtype).
Work all_to_all(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                CollectiveOptions options = {});
/// Point to point: the matching recv on rank dst gets `tensor` (same numel and dtype).
void send(const Tensor& tensor, int dst, CollectiveOptions options = {});
/// Receives from rank src into `tensor`.
void recv(const Tensor& tensor, int src, CollectiveOptions options = {});
Work isend(const Tensor& tensor, int dst, CollectiveOptions options = {});
Work irecv(const Tensor& tensor, int src, CollectiveOptions options = {});
/// Returns when every rank of the group has called it (a host wait; a store barrier when
/// the group has no Gloo context).
void barrier(CollectiveOptions options = {});

}  // namespace brrr::dist

// ---------------------------------------------------------------------------------------
// Data parallelism, ZeRO, tensor parallelism: the ranks' parts of nn, optim and data
// ---------------------------------------------------------------------------------------

export namespace brrr::nn {

struct DistributedDataParallelOptions {
  /// Bucket size limit in MiB (PyTorch's bucket_cap_mb); a parameter larger than it gets a
  /// bucket of its own.
  double bucket_cap_mb = 25;
  /// The first bucket (the last parameters, whose gradients come first) is smaller, so its
  /// all-reduce starts early (PyTorch's 1 MiB).
  double first_bucket_cap_mb = 1;
  /// Parameters that get no gradient in a backward pass count as zero gradients instead of
  /// an error.
  bool find_unused_parameters = false;
  /// Each forward broadcasts the module's buffers from rank 0 first.
  bool broadcast_buffers = true;
  /// Default: the world.
  std::optional<dist::ProcessGroup> process_group;
};

/// Data parallelism (Li et al. 2020, "PyTorch Distributed", VLDB): every rank holds the whole
/// module and a shard of each batch; gradients are averaged over the ranks during backward.
/// Construction broadcasts parameters and buffers from rank 0. Parameters (those requiring
/// grad) are split into buckets in reverse registration order (the order their gradients
/// come in), per dtype and device, the first one first_bucket_cap_mb, the others
/// bucket_cap_mb; each parameter's gradient lives in its bucket (grad() is a view of it, so
/// nothing is copied out). A post-accumulate-grad hook copies each gradient into its bucket;
/// the bucket whose last gradient arrives starts its all-reduce (ReduceOp::avg, async, on the
/// communication stream for CUDA) at once, while backward goes on, buckets always in index
/// order (the same order on every rank); the end of backward (autograd::queue_callback) makes
/// the current stream wait for them: no host wait. A parameter that got no gradient is an
/// Error(value) naming it, or a zero gradient with find_unused_parameters. Move the module to
/// its device before wrapping it.
class DistributedDataParallel : public Module {
public:
  explicit DistributedDataParallel(Module module, DistributedDataParallelOptions options = {});
  /// The wrapped module (registered as child "module").
  Module module() const;
  /// The dotted names of each bucket's parameters (bucket 0 first).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

  /// While alive, forward and backward passes accumulate gradients locally without
  /// communicating (gradient accumulation); the first synced backward after it averages the
  /// sum. Only a backward through a forward of this wrapper made outside no_sync communicates.
  /// RAII.
  class NoSyncGuard {
  public:
    explicit NoSyncGuard(std::shared_ptr<bool> flag) : flag_(std::move(flag)), previous_(*flag_) { *flag_ = true; }
    ~NoSyncGuard() { *flag_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

  private:
    std::shared_ptr<bool> flag_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() const;
};

struct ColumnParallelLinearOptions {
  bool bias = true;
  /// all_gather the output shards along the last dim (y is [..., out]); false leaves this
  /// rank's [..., out / N] for a RowParallelLinear to take.
  bool gather_output = true;
  std::optional<dist::ProcessGroup> group;
};

/// Megatron-LM's column-parallel linear layer (Shoeybi et al. 2019, section 3): y = x A^T + b
/// with A [out, in] split by rows (output features) over the N ranks of the group; rank r
/// holds A_r [out/N, in] and b_r. Forward: f (identity; its backward all-reduces the input's
/// gradient), y_r = x A_r^T + b_r, then g (all_gather along the last dim) when gather_output.
/// The weights are a shard of an nn::Linear(in, out) initialised from the seeded generator, so
/// with the same manual_seed on every rank the layer equals that unsharded Linear.
/// Error(value) unless N divides out.
class ColumnParallelLinear : public Module {
public:
  ColumnParallelLinear(std::int64_t in_features, std::int64_t out_features, ColumnParallelLinearOptions options = {});
  /// This rank's shard of `full` (copied).
  static ColumnParallelLinear from_linear(const Linear& full, ColumnParallelLinearOptions options = {});
  Tensor weight() const;  ///< [out/N, in]
  Tensor bias() const;    ///< [out/N] (undefined without bias)

private:
  explicit ColumnParallelLinear(std::shared_ptr<ModuleImpl> impl) : Module(std::move(impl)) {}
};

struct RowParallelLinearOptions {
  bool bias = true;
  /// The input is already split along its last dim ([..., in/N], e.g. from a column-parallel
  /// layer with gather_output = false); false: split the full input here.
  bool input_is_parallel = true;
  std::optional<dist::ProcessGroup> group;
};

/// Megatron-LM's row-parallel linear layer (Shoeybi et al. 2019, section 3): A [out, in] split
/// by columns (input features); rank r holds A_r [out, in/N]. Forward: y = all_reduce(x_r
/// A_r^T) + b (g: all_reduce forward, identity backward); b is whole on every rank. Equal to
/// nn::Linear(in, out) from the same seed. Error(value) unless N divides in.
class RowParallelLinear : public Module {
public:
  RowParallelLinear(std::int64_t in_features, std::int64_t out_features, RowParallelLinearOptions options = {});
  static RowParallelLinear from_linear(const Linear& full, RowParallelLinearOptions options = {});
  Tensor weight() const;  ///< [out, in/N]
  Tensor bias() const;    ///< [out]

private:
  explicit RowParallelLinear(std::shared_ptr<ModuleImpl> impl) : Module(std::move(impl)) {}
};

/// The transformer MLP split over the group (Megatron-LM's ParallelMLP): ColumnParallelLinear
/// (embed -> hidden, gather_output = false), GELU, RowParallelLinear (hidden -> embed,
/// input_is_parallel): one all-reduce forward and one backward. Children "fc" and "proj";
/// equal to Sequential{Linear(embed, hidden), GELU(), Linear(hidden, embed)} from the same seed.
class ParallelMLP : public Module {
public:
  ParallelMLP(std::int64_t embed_dim, std::int64_t hidden_dim, std::optional<dist::ProcessGroup> group = std::nullopt);
};

}  // namespace brrr::nn

export namespace brrr::optim {

struct ZeroOptions {
  /// Default: the world.
  std::optional<dist::ProcessGroup> process_group;
};

/// ZeRO stage 1 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
/// Trillion Parameter Models"): the optimizer state is sharded over the ranks. The parameters
/// (one device and dtype) become views of one flat buffer padded to a multiple of N; rank r
/// owns elements [r S, (r+1) S). step(): the gradients (local, not averaged: use it without
/// DDP) are copied into a flat buffer and reduce_scatter'ed with ReduceOp::avg, rank r updates
/// its shard with AdamW (or SGD), and all_gather brings every rank the updated parameters.
/// Optimizer state per rank is 1/N of the unsharded optimizer's (optimizer_state_bytes()).
/// A parameter without a gradient counts as a zero gradient.
class ZeroRedundancyOptimizer final : public Optimizer {
public:
  /// Over AdamW (Loshchilov & Hutter 2019) with these options.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 0.01},
                          ZeroOptions zero = {});
  /// Over SGD with these options.
  static std::unique_ptr<ZeroRedundancyOptimizer> with_sgd(std::vector<Tensor> params, SGDOptions options,
                                                           ZeroOptions zero = {});
  ~ZeroRedundancyOptimizer() override;
  void step() override;
  /// Elements of the flat parameter buffer this rank updates (S).
  std::int64_t shard_numel() const;
  /// Bytes of this rank's optimizer state (momentum buffers, Adam moments) now.
  std::uint64_t optimizer_state_bytes() const;
  /// This rank's shard of the state: the inner AdamW's or SGD's state_dict() over the shard
  /// ("state.0.*" are [S] tensors), plus "brrr.zero.world_size", "brrr.zero.rank" and
  /// "brrr.zero.shard_numel". Each rank saves its own file (as DeepSpeed's per-rank
  /// checkpoints; PyTorch's consolidate_state_dict() gathering to one rank is not offered).
  StateDict state_dict() const override;
  /// Restores state_dict() on the same rank of a group of the same size and shard:
  /// Error(value) naming the key when the rank, world size or shard size differ, otherwise
  /// the inner optimizer's errors.
  void load_state_dict(const StateDict& state) override;

private:
  struct State;
  static std::unique_ptr<State> make_state(const std::vector<Tensor>& params, const ZeroOptions& zero);
  ZeroRedundancyOptimizer(std::vector<Tensor> params, std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace brrr::optim

export namespace brrr::data {

struct DistributedSamplerOptions {
  std::optional<int> num_replicas;  ///< default: dist::world_size()
  std::optional<int> rank;          ///< default: dist::rank()
  bool shuffle = true;
  /// Epoch e shuffles with seed + e; the same on every rank, so shards are disjoint.
  std::uint64_t seed = 0;
  /// Drop the tail so every rank gets floor(n / N); otherwise pad by repeating the first
  /// indices to ceil(n / N) each (PyTorch's DistributedSampler).
  bool drop_last = false;
};

/// Each rank's share of a dataset of `size` examples per epoch (PyTorch's DistributedSampler):
/// the epoch's order (a seeded shuffle, or 0..n-1), padded or cut to a multiple of N, and rank
/// r takes positions r, r + N, r + 2N, ... Feed it through data::Subset.
class DistributedSampler {
public:
  explicit DistributedSampler(std::int64_t size, DistributedSamplerOptions options = {});
  /// Reshuffles: call at the start of every epoch.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }
  /// This rank's indices for the current epoch (num_samples() of them).
  std::vector<std::int64_t> indices() const;
  std::int64_t num_samples() const;

private:
  std::int64_t size_, epoch_ = 0;
  int replicas_, rank_;
  DistributedSamplerOptions options_;
};

}  // namespace brrr::data

// Not exported: what the implementation units of brrr.dist share.
namespace brrr::dist::detail {

/// The kinds of collective, for messages and the debug check.
enum class Op : std::uint8_t {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, all_to_all_list, send, recv, barrier
};
const char* to_string(Op op);

/// One call, as a backend sees it. Tensors are contiguous and checked. `peer` is the root
/// (broadcast, reduce) or the other rank (send, recv), as a group rank.
struct Call {
  Op op = Op::barrier;
  ReduceOp reduce = ReduceOp::sum;
  int peer = -1;
  std::vector<Tensor> inputs, outputs;
  bool async_op = false;
  std::uint64_t seq = 0;  ///< the group's count of collectives before this one (send/recv: not counted)
  std::string label;      ///< "all_reduce #7 (world)", "send #3 to rank 1 (world)"
};

struct WorkState {
  virtual ~WorkState() = default;
  virtual void wait() = 0;
  virtual bool is_completed() = 0;
  std::string label;
};

/// A library moving tensors for one group (Gloo or NCCL).
class Comm {
public:
  virtual ~Comm() = default;
  virtual std::shared_ptr<WorkState> run(Call call) = 0;
  /// Closes the communicator (waiting for work in flight up to the timeout).
  virtual void shutdown() = 0;
};

/// The state behind a ProcessGroup.
struct GroupState {
  int id = 0;                  ///< 0 for the world, then 1, 2, ... in new_group order
  std::string name;            ///< "world", "group1", ...
  std::vector<int> ranks;      ///< world ranks of the members
  int rank = -1;               ///< this process's group rank (-1: not a member)
  Backend backend = Backend::automatic;
  std::chrono::milliseconds timeout{0};
  std::string prefix;          ///< store keys of this group start with it: "g0/"
  std::uint64_t seq = 0;       ///< collectives issued so far (the same on every member)
  std::uint64_t p2p_seq = 0;   ///< sends and receives issued so far (differs between ranks)
  std::unique_ptr<Comm> gloo;  ///< made with the group (CPU tensors)
  std::unique_ptr<Comm> nccl;  ///< made at the first CUDA collective

  /// Set once a collective failed (by whichever thread saw it): the group refuses further
  /// work. Shared, so that a Work can still read it after the group is gone.
  struct Failure {
    mutable std::mutex mutex;
    std::string message;
    void set(const std::string& m) {
      std::lock_guard lock(mutex);
      if (message.empty()) message = m;
    }
    std::string get() const {
      std::lock_guard lock(mutex);
      return message;
    }
  };
  std::shared_ptr<Failure> failed = std::make_shared<Failure>();
  void set_failure(const std::string& message) { failed->set(message); }
  std::string failure() const { return failed->get(); }
};

/// The world's store (a clone per caller thread where needed).
TCPStore& world_store();
int world_rank();

/// After collective `label` (#seq) failed on this rank with `what`: publishes this rank's
/// position through the store, waits briefly for the other ranks' reports, and returns the
/// message naming the ranks that did not arrive. `store` is a connection of the caller's own.
std::string failure_report(TCPStore& store, const GroupState& group, std::uint64_t seq, const std::string& label,
                           const std::string& what);

/// Gloo for `group` (connects the full mesh through the store; the group's members only).
std::unique_ptr<Comm> make_gloo(GroupState& group);
/// NCCL for `group` on `device` (a CUDA device index); Error(device) in builds without NCCL.
std::unique_ptr<Comm> make_nccl(GroupState& group, int device);

}  // namespace brrr::dist::detail
