// brrr.backend — internal: the contract both backends implement (CPU in ops/cpu, CUDA in
// ops/cuda) and the CUDA runtime internals (raw streams, caching allocators, the one sync
// choke point, generator state). Not re-exported by `brrr`; users write brrr.cuda instead.
module;
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
export module brrr.backend;
import brrr.tensor;

export namespace brrr::backend {

/// Most dims an operand may have: shapes and strides travel by value in fixed arrays.
inline constexpr int max_dims = 8;

/// A strided view as kernels see it: data already includes the layout offset.
struct Operand {
  void* data = nullptr;
  DType dtype = DType::f32;
  int device = -1;  ///< CUDA device index, -1 on the CPU
  int ndim = 0;
  std::int64_t numel = 0;
  std::int64_t sizes[max_dims] = {};
  std::int64_t strides[max_dims] = {};
};

/// The operand of `t` (any layout). Throws Error(shape) past max_dims dims.
Operand operand(const Tensor& t, const char* op);

/// What a random fill draws.
enum class Distribution : std::uint8_t { uniform, normal, integer };

/// The contract. Every backend implements all of it (pure virtual: a missing kernel is a
/// build error). CUDA implementations enqueue on the current stream of the operands' device
/// and return at once; CPU ones run before returning.
class Backend {
public:
  virtual ~Backend() = default;
  /// out[i] = value, converted to out.dtype.
  virtual void fill(const Operand& out, double value) = 0;
  /// dst[i] = convert(src[i]); same shape, any strides, any dtype pair.
  virtual void copy(const Operand& dst, const Operand& src) = 0;
  /// out (contiguous) [i] = start + i * step, converted to out.dtype.
  virtual void arange(const Operand& out, double start, double step) = 0;
  /// out (contiguous) from Philox words at (seed, offset); `low`/`high` bound integers.
  virtual void random(const Operand& out, Distribution dist, std::uint64_t seed,
                      std::uint64_t offset, std::int64_t low, std::int64_t high) = 0;
};

/// The backend of `device`'s type.
Backend& backend_for(Device device);

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

// ---------------------------------------------------------------------------------------
// CUDA runtime internals (all safe to call without a GPU: they report none or throw).
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

/// Blocking helpers: each calls note_sync(api) and then waits.
void synchronize_stream(const StreamState& stream, const char* api);
void synchronize_device(int device, const char* api);

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
};

/// Caching device allocator: `nbytes` on `device`, stream-ordered on `stream` (a block is
/// reused by that stream without any CUDA call). The Storage returns it when released.
Storage allocate_device(std::size_t nbytes, int device, const StreamPtr& stream);
/// Marks storage as used by `stream` too: its block is reused only after the work that
/// `stream` has enqueued so far completes (an event decides).
void record_stream(const Storage& storage, const StreamPtr& stream);
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);
/// Frees cached, wholly unused segments (cudaFree).
void empty_cache(int device);

/// Pinned (page-locked) host memory from a cache of cudaHostAlloc blocks; a block is reused
/// only after the events recorded for its uses completed.
Storage allocate_pinned(std::size_t nbytes);
/// Records that `stream` reads or writes pinned `storage` asynchronously.
void record_pinned_use(const Storage& storage, const StreamPtr& stream);
struct PinnedStats {
  std::uint64_t allocated_bytes = 0;
  std::uint64_t reserved_bytes = 0;
  std::uint64_t num_host_alloc = 0;  ///< cudaHostAlloc calls
};
PinnedStats pinned_stats();

/// Direction of a copy.
enum class CopyKind : std::uint8_t { host_to_device, device_to_host, device_to_device };
/// Enqueues a copy of `bytes` on `stream` and returns (cudaMemcpyAsync). For pinned host
/// memory this is truly asynchronous; callers record_pinned_use() it.
void memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, const StreamPtr& stream);
/// A counted, host-blocking copy from device memory into pageable host memory on the
/// current stream of `device`: note_sync(api), enqueue, wait.
void copy_device_to_host(void* dst, const void* src, std::size_t bytes, int device, const char* api);
/// A counted, host-blocking copy from pageable host memory to `device` (CUDA stages it and
/// returns only when the host buffer may be reused).
void copy_host_to_device(void* dst, const void* src, std::size_t bytes, int device, const char* api);

}  // namespace brrr::backend
