// CUDA runtime internals: status checks, device discovery, streams (default, current per
// thread, pooled), host waits, the stream and event primitives of brrr.cuda, and copies.
// A build without CUDA compiles cuda/no_cuda.cpp instead; the sync choke point, which both
// need, is cuda/sync.cpp.
module;
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/check.hpp"
#include "backend/stream_check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

// --- status checks ------------------------------------------------------------------------

void check_cuda(int status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  auto err = static_cast<cudaError_t>(status);
  cudaGetLastError();  // clear the sticky-less error so later calls start clean
  ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::cuda;
  throw Error(kind, std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " +
                        call + " at " + file + ":" + std::to_string(line));
}

void check_cublas(int status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(ErrorKind::cuda, std::string("cuBLAS error ") +
                                   cublasGetStatusString(static_cast<cublasStatus_t>(status)) + " in " + call +
                                   " at " + file + ":" + std::to_string(line));
}

void check_curand(int status, const char* call, const char* file, int line) {
  if (status == CURAND_STATUS_SUCCESS) return;
  throw Error(ErrorKind::cuda, "cuRAND error " + std::to_string(status) + " in " + call + " at " + file + ":" +
                                   std::to_string(line));
}

// --- devices --------------------------------------------------------------------------------

int device_count() {
  static const int count = [] {
    int n = 0;
    // Any failure (no driver: 35, no device: 100, ...) means "no CUDA device", never a crash.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

namespace {

void require_device(int device, const char* op) {
  if (device < 0 || device >= device_count())
    throw Error(ErrorKind::device, std::string(op) + ": cuda:" + std::to_string(device) + " is not available (" +
                                       std::to_string(device_count()) + " CUDA device(s))");
}

// --- streams -------------------------------------------------------------------------------

std::atomic<std::uint64_t> next_stream_id{1};

struct PooledStream {
  int priority;
  cudaStream_t handle;
  std::uint32_t slot;
};
struct StreamPool {
  std::mutex mutex;
  std::vector<PooledStream> free;
};
StreamPool& stream_pool(int device) {
  static std::vector<std::unique_ptr<StreamPool>> pools = [] {
    std::vector<std::unique_ptr<StreamPool>> v;
    for (int d = 0; d < device_count(); ++d) v.push_back(std::make_unique<StreamPool>());
    return v;
  }();
  return *pools[static_cast<std::size_t>(device)];
}

std::vector<StreamPtr>& thread_current() {
  thread_local std::vector<StreamPtr> current(static_cast<std::size_t>(device_count()));
  return current;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  int current = 0;
  BRRR_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    BRRR_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}
DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

StreamPtr default_stream(int device) {
  require_device(device, "default_stream");
  static std::vector<StreamPtr> defaults(static_cast<std::size_t>(device_count()));
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  StreamPtr& s = defaults[static_cast<std::size_t>(device)];
  if (!s) {
    DeviceGuard g(device);
    cudaStream_t handle;
    // Non-blocking: brrr's work never serialises with the legacy default stream (stream 0).
    BRRR_CUDA_CHECK(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking));
    s = std::make_shared<StreamState>(
        StreamState{device, handle, 0, true, next_stream_id++, new_stream_slot(handle, device)});
  }
  return s;
}

StreamPtr current_stream(int device) {
  require_device(device, "current_stream");
  StreamPtr& s = thread_current()[static_cast<std::size_t>(device)];
  if (!s) s = default_stream(device);
  return s;
}

const StreamState& current_stream_state(int device) {
  StreamPtr& s = thread_current()[static_cast<std::size_t>(device)];
  if (!s) s = default_stream(device);
  return *s;
}

void set_current_stream(StreamPtr stream) {
  require_device(stream->device, "set_current_stream");
  thread_current()[static_cast<std::size_t>(stream->device)] = std::move(stream);
}

std::pair<int, int> stream_priority_range(int device) {
  require_device(device, "stream_priority_range");
  DeviceGuard g(device);
  int least = 0, greatest = 0;
  BRRR_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

StreamPtr create_stream(int device, int priority) {
  require_device(device, "Stream::create");
  auto [least, greatest] = stream_priority_range(device);
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  StreamPool& pool = stream_pool(device);
  cudaStream_t handle = nullptr;
  std::uint32_t slot = 0;
  {
    std::lock_guard lock(pool.mutex);
    for (auto it = pool.free.begin(); it != pool.free.end(); ++it)
      if (it->priority == priority) {
        handle = it->handle;
        slot = it->slot;
        pool.free.erase(it);
        break;
      }
  }
  if (!handle) {
    DeviceGuard g(device);
    BRRR_CUDA_CHECK(cudaStreamCreateWithPriority(&handle, cudaStreamNonBlocking, priority));
    slot = new_stream_slot(handle, device);
  }
  // Streams are recycled, never destroyed: a block cached for a stream stays valid, and
  // pending work on a dropped stream simply runs before the next user's (the handle keeps
  // its slot, so the stream check sees that order too).
  return StreamPtr(new StreamState{device, handle, priority, false, next_stream_id++, slot}, [](StreamState* s) {
    StreamPool& p = stream_pool(s->device);
    {
      std::lock_guard lock(p.mutex);
      p.free.push_back({s->priority, static_cast<cudaStream_t>(s->handle), s->slot});
    }
    delete s;
  });
}

// --- synchronisation (the choke point note_sync is cuda/sync.cpp) ----------------------------

void synchronize_stream(const StreamState& stream, const char* api) {
  note_sync(api);
  BRRR_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
  check_host_wait_stream(stream);
  check_device_errors(stream.device);
}

void synchronize_device(int device, const char* api) {
  require_device(device, api);
  note_sync(api);
  DeviceGuard g(device);
  BRRR_CUDA_CHECK(cudaDeviceSynchronize());
  check_host_wait_device(device);
  check_device_errors(device);
}

void synchronize_event(void* event, int device, const char* api) {
  note_sync(api);
  BRRR_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  check_device_errors(device);
}

// --- stream and event primitives of brrr.cuda (cuda/api.cpp) -----------------------------------

bool stream_query(const StreamState& stream) {
  DeviceGuard g(stream.device);
  cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream.handle));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  BRRR_CUDA_CHECK(e);
  return true;
}

void stream_wait_event(const StreamState& stream, void* event) {
  DeviceGuard g(stream.device);
  BRRR_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle), static_cast<cudaEvent_t>(event), 0));
}

void* event_create(int device, bool timing) {
  DeviceGuard g(device);
  cudaEvent_t e = nullptr;
  BRRR_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, const StreamState& stream) {
  DeviceGuard g(stream.device);
  BRRR_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream.handle)));
}

bool event_query(void* event) {
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  BRRR_CUDA_CHECK(e);
  return true;
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  BRRR_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

// --- copies -----------------------------------------------------------------------------------

void memcpy_async(void* dst, const void* src, std::size_t bytes, CopyKind kind, const StreamPtr& stream) {
  cudaMemcpyKind k = cudaMemcpyDefault;
  switch (kind) {
    case CopyKind::host_to_device: k = cudaMemcpyHostToDevice; break;
    case CopyKind::device_to_host: k = cudaMemcpyDeviceToHost; break;
    case CopyKind::device_to_device: k = cudaMemcpyDefault; break;  // peers too, through UVA
  }
  DeviceGuard g(stream->device);
  BRRR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream->handle)));
}

void copy_device_to_host(void* dst, const Tensor& src, std::size_t bytes, const char* api) {
  int device = src.device().index();
  StreamPtr stream = current_stream(device);
  note_sync(api);  // before enqueueing: under SyncPolicy::error nothing is left in flight
  // The copy runs on the current stream; the data may have been written on others (work
  // under a StreamGuard, ordered by events): the copy waits for them, so a host read is
  // never stale whatever the current stream.
  order_after_writers(src.storage(), stream);
  note_access(*stream, tracked(src, api), stream_check::AccessKind::read);
  DeviceGuard g(device);
  auto s = static_cast<cudaStream_t>(stream->handle);
  BRRR_CUDA_CHECK(cudaMemcpyAsync(dst, src.data_ptr(), bytes, cudaMemcpyDeviceToHost, s));
  BRRR_CUDA_CHECK(cudaStreamSynchronize(s));
  check_host_wait_stream(*stream);
  check_device_errors(device);
}

void copy_host_to_device(void* dst, const void* src, std::size_t bytes, int device, const char* api) {
  StreamPtr stream = current_stream(device);
  note_sync(api);
  DeviceGuard g(device);
  // From pageable memory CUDA waits for the stream, stages the bytes and returns once the
  // host buffer may be reused: host-blocking, hence counted.
  BRRR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream->handle)));
}

}  // namespace brrr::backend
