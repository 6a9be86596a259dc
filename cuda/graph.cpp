// CUDA graphs: capture of the work enqueued on a stream into a cudaGraph_t, instantiation,
// replay and reset, and what the rest of the runtime needs under a capture (the thread's
// capture, replay hooks, storages kept alive, the capturable RNG, cuBLAS workspaces).
//
// A capture (cudaStreamCaptureModeThreadLocal: only this thread's unsafe calls break it):
//   begin: the cuBLAS handle and the deferred-error flag are made first (neither may be made
//          under capture), the generator state is saved, cudaStreamBeginCapture, then the
//          allocator routes allocations of streams in this capture to the graph's pool;
//   end:   cudaStreamEndCapture (Error(stream) if invalidated: a joined stream not joined
//          back, an illegal call), cudaGraphInstantiate, cudaGraphUpload; the generator is
//          restored: a capture runs nothing, so it draws nothing in eager terms.
// A replay runs the hooks (each writes, on the replay stream, what changes between replays:
// the generator's seed and offset, an optimizer's learning rate and bias corrections), then
// cudaGraphLaunch. Replays on another stream than the previous one first wait for it, so
// that the graph's memory is never used by two replays at once.
module;
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "ops/cuda/kernels.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

struct GraphImpl {
  int device = 0;
  PoolPtr pool;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::size_t nodes = 0;
  // During a capture.
  StreamPtr capture_stream;
  bool capturing = false;
  GeneratorState saved_generator;
  // What the graph needs at every replay.
  std::vector<std::function<void(const StreamState&)>> hooks;
  std::vector<Storage> keep_alive;
  std::unordered_map<void*, void*> blas_workspaces;  // capturing stream -> workspace
  void* rng_state = nullptr;       // {seed, offset} the captured draws read (in keep_alive)
  std::uint64_t rng_words = 0;     // words one replay draws
  StreamPtr last_replay_stream;
  std::vector<void*> replay_streams;  // told to the allocator once each

  ~GraphImpl() {
    if (capturing) graph_capture_abort(*this);  // a capture left without end: discard it
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

namespace {

thread_local GraphImpl* current_capture = nullptr;

GraphImpl& capture_of(int device, const char* api) {
  if (!current_capture || current_capture->device != device)
    throw Error(ErrorKind::stream, std::string(api) + ": no CUDA graph capture is underway on cuda:" +
                                       std::to_string(device) + " in this thread");
  return *current_capture;
}

// Undoes graph_capture_begin's bookkeeping (not CUDA's capture).
void leave_capture(GraphImpl& g) noexcept {
  g.capturing = false;
  current_capture = nullptr;
  set_capturing_on_this_thread(false);
  try {
    allocator_end_capture(g.device);
  } catch (...) {
  }
  generator(Device::cuda(g.device)) = g.saved_generator;
}

void clear_captured(GraphImpl& g) {
  if (g.exec) BRRR_CUDA_CHECK(cudaGraphExecDestroy(g.exec));
  if (g.graph) BRRR_CUDA_CHECK(cudaGraphDestroy(g.graph));
  g.exec = nullptr;
  g.graph = nullptr;
  g.nodes = 0;
  g.hooks.clear();
  g.keep_alive.clear();
  g.blas_workspaces.clear();
  g.rng_state = nullptr;
  g.rng_words = 0;
}

}  // namespace

GraphPtr graph_create(int device, PoolPtr pool) {
  if (device < 0 || device >= device_count())
    throw Error(ErrorKind::device, "cuda::Graph: cuda:" + std::to_string(device) + " is not available (" +
                                       std::to_string(device_count()) + " CUDA device(s))");
  auto g = std::make_shared<GraphImpl>();
  g->device = device;
  if (pool && pool->device != device)
    throw Error(ErrorKind::device, "cuda::Graph: the memory pool belongs to cuda:" + std::to_string(pool->device) +
                                       ", the graph to cuda:" + std::to_string(device));
  g->pool = pool ? std::move(pool) : pool_create(device);
  return g;
}

void graph_capture_begin(GraphImpl& g, const StreamPtr& stream) {
  if (stream->device != g.device)
    throw Error(ErrorKind::device, "Graph::capture_begin: the graph belongs to cuda:" + std::to_string(g.device) +
                                       ", the stream to cuda:" + std::to_string(stream->device));
  if (capturing_on_this_thread())
    throw Error(ErrorKind::stream, "Graph::capture_begin: this thread is already capturing a CUDA graph");
  if (g.exec || g.capturing)
    throw Error(ErrorKind::stream, "Graph::capture_begin: the graph already holds a capture; reset() it first");
  DeviceGuard guard(g.device);
  auto s = static_cast<cudaStream_t>(stream->handle);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  BRRR_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  if (status != cudaStreamCaptureStatusNone)
    throw Error(ErrorKind::stream, "Graph::capture_begin: stream " + std::to_string(stream->id) +
                                       " is already capturing");
  // Made now: neither may be created under capture.
  blas_prepare(g.device);
  device_error_flag(g.device);

  g.saved_generator = generator(Device::cuda(g.device));
  BRRR_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  unsigned long long id = 0;
  cudaError_t e = cudaStreamGetCaptureInfo(s, &status, &id);
  if (e == cudaSuccess) {
    try {
      allocator_begin_capture(g.device, g.pool->id, id);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(s, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
  } else {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(s, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
    BRRR_CUDA_CHECK(e);
  }
  g.capture_stream = stream;
  g.capturing = true;
  current_capture = &g;
  set_capturing_on_this_thread(true);
  note_side_capture_begin(g.device);
  // Draws inside count from 0: their offsets are relative to the state at each replay.
  generator(Device::cuda(g.device)).offset = 0;
}

void graph_capture_end(GraphImpl& g) {
  if (!g.capturing || current_capture != &g)
    throw Error(ErrorKind::stream, "Graph::capture_end: no capture of this graph is underway in this thread");
  DeviceGuard guard(g.device);
  auto s = static_cast<cudaStream_t>(g.capture_stream->handle);
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  leave_capture(g);
  if (e != cudaSuccess) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    std::string why = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
    clear_captured(g);
    throw Error(ErrorKind::stream,
                "Graph::capture_end: the capture failed with " + why +
                    "; a call not allowed under capture was made (a host sync, an allocation or query CUDA "
                    "forbids there), or a stream that joined the capture was not joined back to the capturing "
                    "stream (make it wait_stream on the side stream before capture_end)");
  }
  g.graph = graph;
  std::size_t n = 0;
  BRRR_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  g.nodes = n;
  e = cudaGraphInstantiate(&g.exec, graph, 0);
  if (e != cudaSuccess) {
    g.exec = nullptr;
    cudaGetLastError();
    clear_captured(g);
    BRRR_CUDA_CHECK(e);
  }
  BRRR_CUDA_CHECK(cudaGraphUpload(g.exec, s));
}

void graph_capture_abort(GraphImpl& g) noexcept {
  if (!g.capturing) return;
  cudaGraph_t graph = nullptr;
  {
    int current = -1;
    cudaGetDevice(&current);
    cudaSetDevice(g.device);
    if (cudaStreamEndCapture(static_cast<cudaStream_t>(g.capture_stream->handle), &graph) == cudaSuccess && graph)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    if (current >= 0) cudaSetDevice(current);
  }
  leave_capture(g);
  try {
    clear_captured(g);
  } catch (...) {
  }
}

void graph_replay(GraphImpl& g, const StreamPtr& stream) {
  if (!g.exec)
    throw Error(ErrorKind::value, "Graph::replay: nothing has been captured (capture first, or after reset())");
  if (stream->device != g.device)
    throw Error(ErrorKind::device, "Graph::replay: the graph belongs to cuda:" + std::to_string(g.device) +
                                       ", the current stream to cuda:" + std::to_string(stream->device));
  if (capturing_on_this_thread())
    throw Error(ErrorKind::stream, "Graph::replay: cannot replay a graph inside a capture");
  DeviceGuard guard(g.device);
  if (g.last_replay_stream && g.last_replay_stream->handle != stream->handle)
    wait_stream(*stream, *g.last_replay_stream);  // one replay at a time over the graph's memory
  g.last_replay_stream = stream;
  bool known = false;
  for (void* h : g.replay_streams) known = known || h == stream->handle;
  if (!known) {
    g.replay_streams.push_back(stream->handle);
    allocator_note_replay(g.device, g.pool->id, stream->handle);
  }
  for (auto& hook : g.hooks) hook(*stream);
  BRRR_CUDA_CHECK(cudaGraphLaunch(g.exec, static_cast<cudaStream_t>(stream->handle)));
}

void graph_reset(GraphImpl& g) {
  if (g.capturing)
    throw Error(ErrorKind::stream, "Graph::reset: a capture of this graph is underway; end it first");
  DeviceGuard guard(g.device);
  clear_captured(g);
}

bool graph_captured(const GraphImpl& g) { return g.exec != nullptr; }
std::size_t graph_num_nodes(const GraphImpl& g) { return g.nodes; }
PoolPtr graph_pool(const GraphImpl& g) { return g.pool; }
int graph_device(const GraphImpl& g) { return g.device; }

bool capture_underway(int device) noexcept { return current_capture && current_capture->device == device; }

void capture_add_replay_hook(int device, std::function<void(const StreamState&)> hook) {
  capture_of(device, "capture_add_replay_hook").hooks.push_back(std::move(hook));
}

void* capture_hook_buffer(int device, std::size_t bytes) {
  GraphImpl& g = capture_of(device, "capture_hook_buffer");
  // Not from the capture's pool: a block freed earlier in this capture and reused here would
  // be overwritten, at every replay, by the earlier kernels after the hook wrote it.
  Storage s = allocate_device_outside_capture(bytes, device, current_stream(device));
  void* p = s.data();
  g.keep_alive.push_back(std::move(s));
  return p;
}

void* capture_blas_workspace(int device, const StreamState& stream, std::size_t bytes) {
  GraphImpl& g = capture_of(device, "gemm");
  auto it = g.blas_workspaces.find(stream.handle);
  if (it != g.blas_workspaces.end()) return it->second;
  Storage ws = allocate_device(bytes, device, current_stream(device));
  void* p = ws.data();
  g.keep_alive.push_back(std::move(ws));
  g.blas_workspaces.emplace(stream.handle, p);
  return p;
}

CaptureRandomState capture_random_words(int device, std::uint64_t words) {
  GraphImpl& g = capture_of(device, "random draw");
  if (!g.rng_state) {
    g.rng_state = capture_hook_buffer(device, 2 * sizeof(std::uint64_t));
    auto* state = static_cast<std::uint64_t*>(g.rng_state);
    GraphImpl* graph = &g;  // the hook lives in the graph: it never outlives it
    g.hooks.push_back([graph, state](const StreamState& s) {
      GeneratorState& gen = generator(Device::cuda(graph->device));
      DeviceGuard guard(s.device);
      BRRR_CUDA_CHECK(kernels::store_u64_pair(state, gen.seed, gen.offset, s.handle));
      gen.offset += graph->rng_words;
    });
  }
  GeneratorState& gen = generator(Device::cuda(device));
  const std::uint64_t extra = gen.offset;  // words drawn earlier in this capture
  gen.offset += words;
  g.rng_words = gen.offset;
  return {static_cast<const std::uint64_t*>(g.rng_state), extra};
}

void random_at_capture_state(const Operand& out, Distribution dist, const CaptureRandomState& at, std::int64_t low,
                             std::int64_t high) {
  const StreamState& stream = current_stream_state(out.device);
  DeviceGuard guard(out.device);
  BRRR_CUDA_CHECK(kernels::random_capturable(out, at.seed_offset, at.extra, dist, low, high, stream.handle));
}

void capture_random(const Operand& out, Distribution dist, std::int64_t low, std::int64_t high) {
  const CaptureRandomState at = capture_random_words(out.device, random_words(dist, out.dtype, out.numel));
  random_at_capture_state(out, dist, at, low, high);
}

}  // namespace brrr::backend
