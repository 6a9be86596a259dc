// The CUDA runtime internals of a build without CUDA (BRRR_CUDA=OFF, no toolkit needed): no
// device exists. device_count() is 0, so Device::cuda() already refuses every CUDA device,
// and nothing below is reached by a correct program; each entry still throws Error(device)
// naming itself rather than pretending. Pinned memory needs a CUDA driver: Error(device), as
// on a machine without a GPU. The CUDA build compiles cuda/runtime.cpp, allocator.cpp,
// pinned.cpp, device_errors.cpp and ops/cuda/ instead.
module;
#include "backend/contract.hpp"  // BRRR_BACKEND_KERNELS

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {
[[noreturn]] void no_cuda(const char* api) {
  throw Error(ErrorKind::device, std::string(api) + ": no CUDA device is available (brrr was built without CUDA, "
                                                    "BRRR_CUDA=OFF)");
}
}  // namespace

int device_count() { return 0; }

void check_cuda(int, const char* call, const char*, int) { no_cuda(call); }
void check_cublas(int, const char* call, const char*, int) { no_cuda(call); }
void check_curand(int, const char* call, const char*, int) { no_cuda(call); }

DeviceGuard::DeviceGuard(int) { no_cuda("DeviceGuard"); }
DeviceGuard::~DeviceGuard() = default;

StreamPtr default_stream(int) { no_cuda("default_stream"); }
StreamPtr current_stream(int) { no_cuda("current_stream"); }
const StreamState& current_stream_state(int) { no_cuda("current_stream"); }
void set_current_stream(StreamPtr) { no_cuda("set_current_stream"); }
StreamPtr create_stream(int, int) { no_cuda("Stream::create"); }
std::pair<int, int> stream_priority_range(int) { no_cuda("stream_priority_range"); }

void synchronize_stream(const StreamState&, const char* api) { no_cuda(api); }
void synchronize_device(int, const char* api) { no_cuda(api); }
void synchronize_event(void*, int, const char* api) { no_cuda(api); }

Storage allocate_device(std::size_t, int, const StreamPtr&) { no_cuda("allocate_device"); }
Storage allocate_device_outside_capture(std::size_t, int, const StreamPtr&) { no_cuda("allocate_device"); }
void record_stream(const Storage&, const StreamPtr&) { no_cuda("record_stream"); }
MemoryStats memory_stats(int) { no_cuda("memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("reset_peak_memory_stats"); }
void empty_cache(int) { no_cuda("empty_cache"); }

Storage allocate_pinned(std::size_t) {
  throw Error(ErrorKind::device, "pinned memory: page-locked host memory needs a CUDA device, and none is available "
                                 "(brrr was built without CUDA, BRRR_CUDA=OFF)");
}
void record_pinned_use(const Storage&, const StreamPtr&) { no_cuda("record_pinned_use"); }
void note_host_pending(const Storage&, const StreamPtr&) { no_cuda("note_host_pending"); }
void wait_host_pending(const Storage&, const char*) {}  // no pinned memory, no async copy into it
PinnedStats pinned_stats() { return {}; }

bool stream_query(const StreamState&) { no_cuda("Stream::query"); }
void stream_wait_event(const StreamState&, void*) { no_cuda("Stream::wait"); }
void* event_create(int, bool) { no_cuda("Event::record"); }
void event_destroy(void*) {}  // no event was ever made
void event_record(void*, const StreamState&) { no_cuda("Event::record"); }
bool event_query(void*) { no_cuda("Event::query"); }
float event_elapsed_ms(void*, void*) { no_cuda("Event::elapsed_ms"); }

void memcpy_async(void*, const void*, std::size_t, CopyKind, const StreamPtr&) { no_cuda("memcpy_async"); }
void copy_device_to_host(void*, const Tensor&, std::size_t, const char* api) { no_cuda(api); }
void copy_host_to_device(void*, const void*, std::size_t, int, const char* api) { no_cuda(api); }

PoolHandle::~PoolHandle() = default;
PoolPtr pool_create(int) { no_cuda("cuda::MemPool"); }
void allocator_begin_capture(int, std::uint64_t, unsigned long long) { no_cuda("Graph::capture_begin"); }
void allocator_end_capture(int) {}
void allocator_note_replay(int, std::uint64_t, void*) { no_cuda("Graph::replay"); }
struct GraphImpl {};  // never made: graph_create throws
GraphPtr graph_create(int, PoolPtr) { no_cuda("cuda::Graph"); }
void graph_capture_begin(GraphImpl&, const StreamPtr&) { no_cuda("Graph::capture_begin"); }
void graph_capture_end(GraphImpl&) { no_cuda("Graph::capture_end"); }
void graph_capture_abort(GraphImpl&) noexcept {}
void graph_replay(GraphImpl&, const StreamPtr&) { no_cuda("Graph::replay"); }
void graph_reset(GraphImpl&) { no_cuda("Graph::reset"); }
bool graph_captured(const GraphImpl&) { return false; }
std::size_t graph_num_nodes(const GraphImpl&) { return 0; }
PoolPtr graph_pool(const GraphImpl&) { return nullptr; }
int graph_device(const GraphImpl&) { return -1; }
bool capture_underway(int) noexcept { return false; }
void capture_add_replay_hook(int, std::function<void(const StreamState&)>) { no_cuda("capture_add_replay_hook"); }
void* capture_hook_buffer(int, std::size_t) { no_cuda("capture_hook_buffer"); }
void* capture_blas_workspace(int, const StreamState&, std::size_t) { no_cuda("capture_blas_workspace"); }
void capture_random(const Operand&, Distribution, std::int64_t, std::int64_t) { no_cuda("capture_random"); }
CaptureRandomState capture_random_words(int, std::uint64_t) { no_cuda("capture_random_words"); }
void random_at_capture_state(const Operand&, Distribution, const CaptureRandomState&, std::int64_t, std::int64_t) {
  no_cuda("random_at_capture_state");
}
std::size_t optimizer_coeffs_bytes() { return 0; }
void optimizer_write_coeffs(const OptimizerStep&, void*, const StreamState&) { no_cuda("optimizer_write_coeffs"); }
void blas_prepare(int) { no_cuda("blas_prepare"); }

Backend& cuda_backend() { no_cuda("the CUDA backend"); }
// CudaBackend's members, never reached (no CudaBackend exists: cuda_backend() throws).
#define BRRR_NO_KERNEL(name, params) \
  void CudaBackend::name params { no_cuda("CudaBackend::" #name); }
BRRR_BACKEND_KERNELS(BRRR_NO_KERNEL)
#undef BRRR_NO_KERNEL
int* device_error_flag(int) { no_cuda("device_error_flag"); }
void check_device_errors(int) {}

}  // namespace brrr::backend
