// brrr.backend — internal: the contract both backends implement (CPU in ops/cpu, CUDA in
// ops/cuda) and the CUDA runtime internals (raw streams, caching allocators, the one sync
// choke point, generator state). Not re-exported by `brrr`; users write brrr.cuda instead.
// The contract's value types (Operand, Window2d, OptimizerStep, GemmArgs, the op lists and
// the conversion rules) are in backend/contract.hpp, which nvcc compiles too.
module;
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <type_traits>
#include <string>
#include <vector>

#include "backend/contract.hpp"
#include "backend/stream_check.hpp"
export module brrr.backend;
import brrr.tensor;

export namespace brrr::backend {

using backend::AttentionDropout;
using backend::attention_keep_words;
using backend::BinaryKind;
using backend::BinaryOp;
using backend::CheckedOp;
using backend::Distribution;
using backend::GemmActivation;
using backend::GemmArgs;
using backend::GemmOperand;
using backend::Integers;
using backend::is_comparison;
using backend::is_rounding_division;
using backend::keeps_integers;
using backend::kind_of;
using backend::max_dims;
using backend::MultiTensor;
using backend::name_of;
using backend::Operand;
using backend::OptimizerKind;
using backend::OptimizerStep;
using backend::ReduceOp;
using backend::ScanOp;
using backend::ScatterOp;
using backend::UnaryOp;
using backend::Window2d;
using backend::with_op;

/// The operand of a tensor (any layout) for a kernel launch: `input` for a tensor the kernel
/// reads, `output` for one it writes (in-place updates included). Every launch builds its
/// operands with these (gemm and optimizer steps take their pointers from them), so they
/// are the one place that sees the tensors of each launch, read vs write, on the stream the
/// launch will use (the device's current one): where the stream bookkeeping hooks (each
/// CUDA tensor passes note_access on the current stream). Both throw Error(shape) naming `op`
/// past max_dims dims, or Error(stream) from the stream check. On the CPU they first wait for
/// an asynchronous copy into `t`'s pinned memory that may still run (wait_host_pending).
Operand input(const Tensor& t, const char* op);
Operand output(const Tensor& t, const char* op);
/// The same for kernels that take bare pointers (gemm, optimizer steps): t's data_ptr().
const void* input_data(const Tensor& t, const char* op);
void* output_data(const Tensor& t, const char* op);

/// The contract: BRRR_BACKEND_KERNELS (backend/contract.hpp), every kernel both backends
/// implement, written once there; it generates Backend's pure virtual members and the
/// CpuBackend and CudaBackend overrides below, so a kernel missing from a backend is a build
/// error (a link error naming it). CUDA implementations enqueue on the current stream of the
/// operands' device and return at once; CPU ones run before returning.
class Backend {
public:
  virtual ~Backend() = default;
#define BRRR_DECLARE(name, params) virtual void name params = 0;
  BRRR_BACKEND_KERNELS(BRRR_DECLARE)
#undef BRRR_DECLARE
};

/// The backend of `device`'s type.
Backend& backend_for(Device device);

/// GemmArgs' activation preconditions (aux given, batch 1, alpha 1, beta 0, no bias gradient
/// or f32 result, no bias with the backward): Error(value) naming them (ops/cpu/gemm.cpp).
void check_gemm_activation(const GemmArgs& g);
/// GemmArgs' activation without a fused epilogue, by `be`'s own kernels (what the CPU runs, and
/// CUDA where cuBLASLt's epilogue is not used): gelu_tanh has be.gemm write the product plus
/// bias to aux and then writes gelu(aux) to C; gelu_tanh_backward has it write the product to C
/// and multiplies C by gelu'(aux) in place. Checks the preconditions first.
void gemm_activation_unfused(Backend& be, const GemmArgs& g);

/// 32-bit Philox words that random() consumes for `numel` elements of `dist` (the generator
/// offset advances by this): uniform f32-likes 1, f64 and normals and integers 2 or 4.
std::uint64_t random_words(Distribution dist, DType dtype, std::int64_t numel);

/// Per-device generator state: seed, and the offset in 32-bit words already drawn.
struct GeneratorState {
  std::uint64_t seed = 0;
  std::uint64_t offset = 0;
};
/// The generator of `device` (CPU or cuda:N); manual_seed resets all of them.
GeneratorState& generator(Device device);
void seed_all(std::uint64_t seed);

/// The CPU backend's intra-op thread pool (ops/cpu/parallel.cpp): its size, the calling
/// thread included. Defaults to BRRR_NUM_THREADS, else the cores the process may use
/// (sched_getaffinity). set_num_threads throws Error(value) unless n >= 1.
void set_num_threads(int n);
int get_num_threads();
/// Makes the calling thread run its CPU kernels inline, never in the pool (DataLoader
/// workers call it, as PyTorch's workers run with one intra-op thread: no oversubscription).
void run_kernels_inline_on_this_thread();

// ---------------------------------------------------------------------------------------
// CUDA runtime internals (all safe to call without a GPU: they report none or throw). With
// CUDA they are cuda/runtime.cpp, allocator.cpp, pinned.cpp and device_errors.cpp; a build
// without CUDA (BRRR_CUDA=OFF) has cuda/no_cuda.cpp instead, where no device exists.
// ---------------------------------------------------------------------------------------

/// Number of CUDA devices; 0 when the driver/runtime reports any failure. Cached.
int device_count();

/// Throws Error(cuda) naming the call and file:line unless `status` is success.
void check_cuda(int status, const char* call, const char* file, int line);
void check_cublas(int status, const char* call, const char* file, int line);
void check_curand(int status, const char* call, const char* file, int line);

/// Makes `device` the calling thread's current CUDA device, restoring the previous one.
class DeviceGuard {
public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
  int previous_ = -1;
};

/// A CUDA stream brrr knows about. `handle` is a cudaStream_t.
struct StreamState {
  int device = 0;
  void* handle = nullptr;
  int priority = 0;
  bool is_default = false;
  std::uint64_t id = 0;
  /// The handle's dense number (new_stream_slot), kept when a recycled handle gets a new id.
  std::uint32_t slot = 0;
};
using StreamPtr = std::shared_ptr<StreamState>;

/// brrr's default stream of `device` (created once, non-blocking with respect to the legacy
/// default stream, never destroyed).
StreamPtr default_stream(int device);
/// This thread's current stream of `device` (its default stream unless a guard set one).
StreamPtr current_stream(int device);
void set_current_stream(StreamPtr stream);
/// A new (or recycled) non-blocking stream with `priority` (lower = higher priority,
/// clamped to the device's range). Streams return to a pool when the last handle drops.
StreamPtr create_stream(int device, int priority);
/// The device's priority range: {least, greatest} (greatest is numerically lower).
std::pair<int, int> stream_priority_range(int device);

/// How host-blocking calls are treated (see cuda::set_sync_policy).
enum class SyncPolicy : std::uint8_t { allow, warn, error };
/// THE choke point: every host-blocking call passes here first. Counts it, then warns or
/// throws Error(sync) naming `api` as the policy says.
void note_sync(const char* api);
std::uint64_t sync_count();
void set_sync_policy(SyncPolicy policy);
SyncPolicy sync_policy();

// --- stream bookkeeping (cuda/stream_order.cpp) ----------------------------------------
// Always on: each allocation remembers the streams that enqueued writes to it, so that host
// reads wait for them. With the stream check on (cuda::set_stream_check, BRRR_STREAM_CHECK=1),
// every access also goes through a stream_check::Checker, under one lock.

/// The flag behind stream_check_enabled(); set_stream_check() writes it.
std::atomic<bool> stream_check_flag{false};
/// Whether the stream check is on: the relaxed load each announced tensor pays when it is off.
inline bool stream_check_enabled() noexcept { return stream_check_flag.load(std::memory_order_relaxed); }
/// Switches the check; switching it on starts a new epoch (accesses recorded before are
/// forgotten, since the events and waits made while it was off were not seen).
void set_stream_check(bool on);

/// A number for a new CUDA stream handle of `device` (dense from 0, never reused).
std::uint32_t new_stream_slot(void* handle, int device);
inline stream_check::StreamInfo stream_info(const StreamState& s) { return {s.slot, s.id, s.device, s.is_default}; }
/// This thread's current stream of `device` by reference, without copying the handle: valid
/// until this thread's next StreamGuard change. `device` must be a valid CUDA device index.
const StreamState& current_stream_state(int device);

/// The checked path of note_access (the stream check is on). Throws Error(stream).
void check_access(const StreamState& stream, const Operand& o, stream_check::AccessKind kind);
/// The out-of-line part of note_access for bytes written by side-stream work (SideWork):
/// `stream` waits for that work unless it is the side stream or has waited for it already.
void join_side_ticket(const StreamState& stream, std::uint64_t ticket);
/// THE hook: every tensor of every piece of device work brrr enqueues passes here first,
/// with the stream that will run it and whether the work reads or writes it. Kernel launches
/// reach it through input()/output() (and input_data()/output_data() for gemm and optimizer
/// steps); the copies of tensor/convert.cpp and cuda/runtime.cpp call it directly. Operands
/// without a stream record (CPU heap memory) or without elements are skipped. Always: a write
/// makes `stream` a writer of the storage (host reads wait for it). With the check on: throws
/// Error(stream) for an access not ordered after a conflicting one on another stream, before
/// anything is enqueued. Bytes that side-stream work wrote (a ticket) are first waited for.
inline void note_access(const StreamState& stream, const Operand& o, stream_check::AccessKind kind) {
  if (!o.log || o.numel == 0) return;
  if (const std::uint64_t ticket = o.log->side_ticket()) [[unlikely]] join_side_ticket(stream, ticket);
  if (kind == stream_check::AccessKind::write) o.log->note_writer(stream.slot);
  if (stream_check_enabled()) [[unlikely]] check_access(stream, o, kind);
}

/// Work moved off the critical path onto this thread's side stream of a CUDA device, so that
/// its kernels overlap the current stream's (autograd's weight gradients: ops/matmul.cpp).
/// Construction forks (the side stream waits for the current stream's work so far) and makes
/// the side stream current; destruction makes the previous stream current again. Inputs the
/// work reads are declared with reads() (the allocator keeps their memory until the side
/// stream is done with it); outputs with writes(): they should be allocated before the fork,
/// on the current stream, and any other stream that later touches them waits for the side
/// work first (note_access), so that callers see ordinary stream-ordered results. The
/// pending work is joined by join_side_work() (autograd's backward ends with it).
class SideWork {
public:
  explicit SideWork(int device);
  ~SideWork();
  SideWork(const SideWork&) = delete;
  SideWork& operator=(const SideWork&) = delete;
  void reads(const Storage& storage) const;
  void writes(const Storage& storage) const;

private:
  StreamPtr main_, side_;
  std::uint64_t ticket_;
};
/// Whether SideWork is used for weight gradients: BRRR_WGRAD_STREAM=0 in the environment
/// turns it off (then everything runs on the current stream, as before).
bool side_work_enabled();
/// Makes each device's current stream wait for the side work this thread enqueued on it.
void join_side_work();
/// A graph capture begins on cuda:`device` (graph_capture_begin): side work enqueued before
/// is not waited for inside it.
void note_side_capture_begin(int device);
/// An Operand of `t` for note_access only (never for a kernel): like input()/output(), but a
/// tensor of more than max_dims dims is described by its element count instead of throwing.
Operand tracked(const Tensor& t, const char* op);

/// Makes `stream` wait, on the device, for every other stream that enqueued writes to
/// `storage` (an event on each): the first step of a host read, so that what it copies on
/// `stream` is complete. Costs nothing when `stream` is the only writer.
void order_after_writers(const Storage& storage, const StreamPtr& stream);
/// Makes later work on `waiter` wait for the work enqueued on `other` so far (an event).
void wait_stream(const StreamState& waiter, const StreamState& other);

/// With the check on: the clock an event recorded on `stream` captures (empty when off).
stream_check::VectorClock check_record(const StreamState& stream);
/// With the check on: `stream` waited for an event with clock `event`.
void check_wait(const StreamState& stream, const stream_check::VectorClock& event);
/// With the check on: the host waited for an event / a stream / a whole device.
void check_host_wait(const stream_check::VectorClock& event);
void check_host_wait_stream(const StreamState& stream);
void check_host_wait_device(int device);
/// cuda::record_stream(storage, stream): remembered for the check of frees.
void note_recorded_stream(const Storage& storage, const StreamState& stream);
/// From the caching allocator's deleter (a Storage's last handle is gone): with the check on,
/// checks that releasing the memory is safe. Cannot throw: a hazard is kept and thrown
/// (Error(stream)) by the next checked call.
void note_release(const stream_check::AccessLog& log, std::size_t nbytes) noexcept;
/// Throws the hazard note_release kept, if any (called by checked calls and note_sync).
void raise_pending_stream_error();


/// Blocking helpers: each calls note_sync(api), waits, then raises any deferred device error
/// (an out-of-range index met by a kernel; cuda/device_errors.cpp) as Error(index).
void synchronize_stream(const StreamState& stream, const char* api);
void synchronize_device(int device, const char* api);
/// note_sync(api), then waits for `event` (a cudaEvent_t recorded on `device`).
void synchronize_event(void* event, int device, const char* api);

/// Device allocator statistics, in bytes and calls.
struct MemoryStats {
  std::uint64_t allocated_bytes = 0;       ///< in blocks handed out now
  std::uint64_t peak_allocated_bytes = 0;  ///< max of allocated_bytes since reset
  std::uint64_t reserved_bytes = 0;        ///< in segments obtained from cudaMalloc
  std::uint64_t peak_reserved_bytes = 0;
  std::uint64_t num_allocs = 0;            ///< blocks handed out, ever
  std::uint64_t num_cuda_malloc = 0;       ///< cudaMalloc calls, ever
  std::uint64_t num_cuda_free = 0;         ///< cudaFree calls, ever
  std::uint64_t num_ooms = 0;              ///< cudaMalloc failures (before retry)
  std::uint64_t num_capture_cuda_malloc = 0;  ///< of num_cuda_malloc, made during CUDA graph captures
};

/// Caching device allocator: `nbytes` on `device`, stream-ordered on `stream` (a block is
/// reused by that stream without any CUDA call). The Storage returns it when released.
Storage allocate_device(std::size_t nbytes, int device, const StreamPtr& stream);
/// As allocate_device, but from the ordinary pool even while a CUDA graph capture is underway.
/// A capture's pool reuses memory in capture order, so a block taken there mid-capture may
/// also hold a temporary of the graph's earlier kernels; memory written before each replay
/// (by a replay hook) must not (capture_hook_buffer).
Storage allocate_device_outside_capture(std::size_t nbytes, int device, const StreamPtr& stream);
/// Marks storage as used by `stream` too: its block is reused only after the work that
/// `stream` has enqueued so far completes (an event decides).
void record_stream(const Storage& storage, const StreamPtr& stream);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
/// Frees cached, wholly unused segments (cudaFree).
void empty_cache(int device);

// --- CUDA graphs (cuda/graph.cpp; cuda/no_cuda.cpp throws) ---------------------------------
// A capture records the work enqueued on a stream (and on streams joined to it by events)
// into a graph instead of running it; a replay launches the whole graph at once. The pieces
// below are what the rest of brrr needs to behave under capture: a private allocator pool,
// the thread's capture state (the sync choke point refuses to block under it), replay hooks
// (host work run before every replay: the RNG's seed/offset, optimizer hyperparameters) and
// storages kept alive as long as the graph.

/// A private memory pool of the caching allocator (allocator.cpp): blocks allocated by a
/// capture that uses it come from its own segments and are never handed to work outside
/// captures using the same pool. Released when the last handle drops: its blocks return to
/// the device's ordinary pool once the work enqueued so far on every stream that replayed a
/// graph of the pool has completed (events decide).
struct PoolHandle {
  int device = 0;
  std::uint64_t id = 0;
  ~PoolHandle();
};
using PoolPtr = std::shared_ptr<PoolHandle>;
/// A new private pool of cuda:`device`.
PoolPtr pool_create(int device);
/// The allocator's side of a capture (graph.cpp calls these): from begin to end, allocations
/// on streams taking part in CUDA capture `capture_id` come from `pool`. One capture per device
/// at a time (Error(stream) otherwise).
void allocator_begin_capture(int device, std::uint64_t pool, unsigned long long capture_id);
void allocator_end_capture(int device);
/// A graph of `pool` was launched on `stream` (a cudaStream_t).
void allocator_note_replay(int device, std::uint64_t pool, void* stream);

/// The captured graph behind cuda::Graph (opaque; cuda/graph.cpp).
struct GraphImpl;
using GraphPtr = std::shared_ptr<GraphImpl>;
/// A graph of cuda:`device` whose captures allocate from `pool` (nullptr: a new pool).
GraphPtr graph_create(int device, PoolPtr pool);
/// Begins capturing on `stream` (cudaStreamCaptureModeThreadLocal). Error(stream) when this
/// thread already captures, the graph holds a capture (reset() first), or the stream is
/// already capturing; Error(cuda) from CUDA.
void graph_capture_begin(GraphImpl& g, const StreamPtr& stream);
/// Ends the capture and instantiates the graph. Error(stream) when the capture was
/// invalidated (a host sync or an illegal call inside it) or joined streams were not joined
/// back; the graph is then empty again.
void graph_capture_end(GraphImpl& g);
/// Ends a capture that failed (an exception left the capture): discards the partial graph and
/// restores the thread, allocator and generator state. Never throws.
void graph_capture_abort(GraphImpl& g) noexcept;
/// Runs the replay hooks, then launches the graph on `stream` (after the previous replay's
/// stream, if another). Error(value) when nothing was captured, Error(device) for a stream of
/// another device.
void graph_replay(GraphImpl& g, const StreamPtr& stream);
/// Drops the captured graph, its hooks and kept storages (the pool stays with the graph).
void graph_reset(GraphImpl& g);
bool graph_captured(const GraphImpl& g);
/// Nodes of the captured graph (kernels, copies, memsets, event nodes); 0 before a capture.
std::size_t graph_num_nodes(const GraphImpl& g);
PoolPtr graph_pool(const GraphImpl& g);
int graph_device(const GraphImpl& g);

/// Whether this thread is capturing a graph (any device). No CUDA call (cuda/sync.cpp).
bool capturing_on_this_thread() noexcept;
/// Maintained by graph_capture_begin/end/abort.
void set_capturing_on_this_thread(bool on) noexcept;
/// Whether this thread is capturing a graph on cuda:`device`.
bool capture_underway(int device) noexcept;
/// Under capture on cuda:`device` (this thread): runs `hook` on the host, in order of
/// registration, before each replay of the graph being captured, with the replay's stream.
/// Error(stream) when no capture is underway.
void capture_add_replay_hook(int device, std::function<void(const StreamState&)> hook);
/// Under capture: `bytes` of device memory that lives as long as the captured graph and that
/// no kernel of the graph uses for anything else, for what a replay hook writes before the
/// graph runs (an optimizer's coefficients, the generator's seed and offset).
void* capture_hook_buffer(int device, std::size_t bytes);
/// Under capture: a cuBLAS workspace of `bytes` for `stream` that belongs to the graph (so a
/// replay on another stream never shares one with eager work), made on first use.
void* capture_blas_workspace(int device, const StreamState& stream, std::size_t bytes);
/// Under capture: fills `out` (contiguous) like Backend::random, with Philox words at
/// (seed, offset + k) where seed and offset are read from device memory that a replay hook
/// sets from cuda:`device`'s generator before each replay (then advancing it by the words the
/// graph draws), and k counts the words drawn earlier in this capture. So every replay draws
/// fresh numbers, the same ones eager code would draw from the same generator state.
void capture_random(const Operand& out, Distribution dist, std::int64_t low, std::int64_t high);
/// Where a capturable kernel that draws its own Philox words finds them under capture.
struct CaptureRandomState {
  const std::uint64_t* seed_offset = nullptr;  ///< device {seed, offset}, written before each replay
  std::uint64_t extra = 0;                     ///< words drawn earlier in this capture
};
/// Under capture on cuda:`device`: reserves the next `words` Philox words of the graph's draws
/// (the same state and replay hook capture_random uses; the generator advances by `words`) for
/// a kernel that reads word k at (seed_offset[0], seed_offset[1] + extra + k), such as the
/// fused attention's dropout. Error(stream) when no capture is underway.
CaptureRandomState capture_random_words(int device, std::uint64_t words);
/// Fills `out` (contiguous, on a CUDA device) like capture_random, with the words reserved as
/// `at` (k counting from at.extra): the same numbers again, for a rule that rebuilds what a
/// capturable kernel drew (the fused attention's dropout mask under create_graph). The state
/// is read when the kernel runs: inside the capture that made it, or after one of its replays.
void random_at_capture_state(const Operand& out, Distribution dist, const CaptureRandomState& at, std::int64_t low,
                             std::int64_t high);

/// Capturable optimizer steps (ops/cuda/optimizer_launch.cpp): bytes of the device copy of an
/// OptimizerStep's derived hyperparameters, and an enqueued write of them (from `step`'s lr,
/// bias corrections, ...) to `dst` on `stream`. A step with device_coeffs set reads them from
/// there instead of its kernel arguments.
std::size_t optimizer_coeffs_bytes();
void optimizer_write_coeffs(const OptimizerStep& step, void* dst, const StreamState& stream);
/// Creates cuda:`device`'s cuBLAS handle now (a capture must not be the first cuBLAS use).
void blas_prepare(int device);

/// Pinned (page-locked) host memory from a cache of cudaHostAlloc blocks; a block is reused
/// only after the events recorded for its uses completed.
Storage allocate_pinned(std::size_t nbytes);
/// Records that `stream` reads or writes pinned `storage` asynchronously.
void record_pinned_use(const Storage& storage, const StreamPtr& stream);
/// An asynchronous device-to-host copy into pinned `storage` was just enqueued on `stream`:
/// records an event after it, so that host reads of the storage wait for it.
void note_host_pending(const Storage& storage, const StreamPtr& stream);
/// A host read or write of `storage` (CPU memory) is about to happen: if an asynchronous copy
/// into it may still run, waits for it (a counted sync, note_sync(api)); else returns at once.
void wait_host_pending(const Storage& storage, const char* api);
struct PinnedStats {
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t num_host_alloc = 0;  ///< cudaHostAlloc calls
};
PinnedStats pinned_stats();

/// The primitives behind brrr.cuda's Stream and Event (cuda/api.cpp), each on the device of
/// its stream or event: whether a stream's work has completed (never blocks); a device-side
/// wait of `stream` for `event`; and cudaEvent_t handles (`void*`) made, recorded, queried,
/// timed and destroyed.
bool stream_query(const StreamState& stream);
void stream_wait_event(const StreamState& stream, void* event);
void* event_create(int device, bool timing);
void event_destroy(void* event);
void event_record(void* event, const StreamState& stream);
bool event_query(void* event);
float event_elapsed_ms(void* start, void* end);

/// Direction of a copy.
enum class CopyKind : std::uint8_t { host_to_device, device_to_host, device_to_device };
/// Enqueues a copy of `bytes` on `stream` and returns (cudaMemcpyAsync). For pinned host
/// memory this is truly asynchronous; callers record_pinned_use() it.
void memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, const StreamPtr& stream);
/// A counted, host-blocking copy of the first `bytes` of contiguous device tensor `src` into
/// pageable host memory, on the current stream of its device: note_sync(api), then that
/// stream waits for the streams that wrote `src` (order_after_writers), then copy and wait.
void copy_device_to_host(void* dst, const Tensor& src, std::size_t bytes, const char* api);
/// A counted, host-blocking copy from pageable host memory to `device` (CUDA stages it and
/// returns only when the host buffer may be reused).
void copy_host_to_device(void* dst, const void* src, std::size_t bytes, int device, const char* api);

}  // namespace brrr::backend

// Not exported: helpers shared by the CPU kernels of every op family. Element types are the
// storage types of backend/contract.hpp (brrr::half, brrr::bfloat16, std::uint8_t for bool),
// converted by its rules (load, widen, narrow_to).
namespace brrr::backend::cpu {

/// Splits [0, n) into at most get_num_threads() contiguous chunks of at least `grain`
/// indices and runs f(begin, end) on each, the calling thread taking the first; returns
/// when all are done and rethrows the first exception a chunk threw. Runs f(0, n) inline
/// when one chunk suffices, when called from a pool worker (no nesting) or while another
/// thread holds the pool (a DataLoader worker, say): the pool never runs more threads than
/// its size. Chunks must write disjoint data.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& f);

/// Calls f(static_cast<T*>(nullptr)) with the element type of `dtype`.
template <class F> void dispatch(DType dtype, F&& f) { with_element_type<half, bfloat16>(dtype, f); }

// Calls f(offset_a, offset_b, i) for each element in row-major order of two same-shape
// operands, in elements.
template <class F> void for_each2(const Operand& a, const Operand& b, F&& f) {
  std::int64_t n = a.numel;
  bool a_cont = true, b_cont = true;
  {
    std::int64_t expect = 1;
    for (int d = a.ndim - 1; d >= 0; --d) {
      if (a.sizes[d] != 1 && a.strides[d] != expect) a_cont = false;
      if (b.sizes[d] != 1 && b.strides[d] != expect) b_cont = false;
      expect *= a.sizes[d];
    }
  }
  if (a_cont && b_cont) {
    for (std::int64_t i = 0; i < n; ++i) f(i, i, i);
    return;
  }
  std::int64_t idx[max_dims] = {};
  std::int64_t oa = 0, ob = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    f(oa, ob, i);
    for (int d = a.ndim - 1; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) {
        oa += a.strides[d];
        ob += b.strides[d];
        break;
      }
      oa -= (a.sizes[d] - 1) * a.strides[d];
      ob -= (a.sizes[d] - 1) * b.strides[d];
      idx[d] = 0;
    }
  }
}

/// Calls f(offsets) for every element, in row-major order, of N operands of one shape
/// (the first operand's), with each operand's element offset. Dims that are contiguous in
/// every operand are merged first, so broadcasts and transposes iterate few dims.
template <std::size_t N, class F> void for_each(const Operand* const (&ops)[N], F&& f) {
  const Operand& shape = *ops[0];
  std::int64_t sizes[max_dims];
  std::int64_t strides[N][max_dims];
  int nd = 0;
  for (int d = 0; d < shape.ndim; ++d) {
    if (shape.sizes[d] == 1) continue;
    bool merge = nd > 0;
    for (std::size_t k = 0; k < N && merge; ++k)
      merge = strides[k][nd - 1] == ops[k]->strides[d] * shape.sizes[d];
    if (merge) {
      sizes[nd - 1] *= shape.sizes[d];
      for (std::size_t k = 0; k < N; ++k) strides[k][nd - 1] = ops[k]->strides[d];
    } else {
      sizes[nd] = shape.sizes[d];
      for (std::size_t k = 0; k < N; ++k) strides[k][nd] = ops[k]->strides[d];
      ++nd;
    }
  }
  std::int64_t n = shape.numel;
  if (n == 0) return;
  std::int64_t off[N] = {};
  if (nd == 0) {
    f(off);
    return;
  }
  // Innermost dim as a tight loop; the outer dims as an odometer.
  std::int64_t inner = sizes[nd - 1];
  std::int64_t istride[N];
  for (std::size_t k = 0; k < N; ++k) istride[k] = strides[k][nd - 1];
  std::int64_t idx[max_dims] = {};
  for (std::int64_t done = 0; done < n; done += inner) {
    std::int64_t o[N];
    for (std::size_t k = 0; k < N; ++k) o[k] = off[k];
    for (std::int64_t i = 0; i < inner; ++i) {
      f(o);
      for (std::size_t k = 0; k < N; ++k) o[k] += istride[k];
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < sizes[d]) {
        for (std::size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < N; ++k) off[k] -= (sizes[d] - 1) * strides[k][d];
      idx[d] = 0;
    }
  }
}

}  // namespace brrr::backend::cpu

// Not exported: the two backends, declared here so that each op family can define its
// kernels in its own file (ops/cpu/<family>.cpp, ops/cuda/<family>_launch.cpp). A kernel
// declared here and defined nowhere is a link error.
namespace brrr::backend {

/// The CUDA backend (ops/cuda/backend_cuda.cpp); backend_for(cuda:N) returns it.
Backend& cuda_backend();

/// Shared by both backends' reduce (ops/cpu/reduce.cpp): Error unless the operands fit the
/// contract of Backend::reduce.
void check_reduce_operands(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                           const Operand* indices);

/// A device-visible pointer to cuda:`device`'s deferred error flag (cuda/device_errors.cpp).
int* device_error_flag(int device);
/// Raises the error a kernel stored in cuda:`device`'s flag, if any (after a host wait).
void check_device_errors(int device);

#define BRRR_OVERRIDE(name, params) void name params override;
class CpuBackend final : public Backend {
public:
  BRRR_BACKEND_KERNELS(BRRR_OVERRIDE)
};
class CudaBackend final : public Backend {
public:
  BRRR_BACKEND_KERNELS(BRRR_OVERRIDE)
};
#undef BRRR_OVERRIDE

}  // namespace brrr::backend
