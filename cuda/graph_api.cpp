// brrr.cuda's CUDA graphs: Graph, GraphCapture, MemPool and GraphedStep over the capture
// internals of brrr.backend (cuda/graph.cpp; without CUDA every entry throws Error(device)).
module;
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>
module brrr.cuda;
import brrr.tensor;
import brrr.backend;

namespace brrr::cuda {

namespace {
int graph_index(Device device, const char* op) {
  if (!device.is_cuda())
    throw Error(ErrorKind::device, std::string(op) + ": CUDA graphs need a CUDA device, got " + device.str());
  return device.index();
}
}  // namespace

MemPool::MemPool(Device device) : state_(backend::pool_create(graph_index(device, "cuda::MemPool"))) {}
Device MemPool::device() const { return Device::cuda(state_->device); }

Graph::Graph(Device device) : impl_(backend::graph_create(graph_index(device, "cuda::Graph"), nullptr)) {}
Graph::Graph(Device device, const MemPool& pool)
    : impl_(backend::graph_create(graph_index(device, "cuda::Graph"), pool.state())) {}

void Graph::capture_begin() {
  backend::graph_capture_begin(*impl_, backend::current_stream(backend::graph_device(*impl_)));
}
void Graph::capture_end() { backend::graph_capture_end(*impl_); }

void Graph::capture(const std::function<void()>& fn) {
  capture_begin();
  try {
    fn();
  } catch (...) {
    backend::graph_capture_abort(*impl_);
    throw;
  }
  capture_end();
}

void Graph::replay() { backend::graph_replay(*impl_, backend::current_stream(backend::graph_device(*impl_))); }
void Graph::reset() { backend::graph_reset(*impl_); }
bool Graph::captured() const { return backend::graph_captured(*impl_); }
std::size_t Graph::num_nodes() const { return backend::graph_num_nodes(*impl_); }
MemPool Graph::pool() const { return MemPool(backend::graph_pool(*impl_)); }
Device Graph::device() const { return Device::cuda(backend::graph_device(*impl_)); }

GraphCapture::GraphCapture(Graph& graph) : graph_(graph) { graph_.capture_begin(); }
GraphCapture::~GraphCapture() {
  if (open_) backend::graph_capture_abort(*graph_.impl_);
}
void GraphCapture::end() {
  open_ = false;
  graph_.capture_end();
}

bool is_capturing(Device device) { return device.is_cuda() && backend::capture_underway(device.index()); }

GraphedStep::GraphedStep(Device device, std::function<std::vector<Tensor>()> step, GraphedStepOptions options)
    : graph_(options.pool ? Graph(device, *options.pool) : Graph(device)) {
  if (!step) throw Error(ErrorKind::value, "GraphedStep: the step is empty");
  if (options.warmup < 0) throw Error::bad_value("GraphedStep", "warmup", options.warmup, ">= 0");
  for (int i = 0; i < options.warmup; ++i) (void)step();
  graph_.capture([&] { outputs_ = step(); });
}

const std::vector<Tensor>& GraphedStep::operator()() {
  graph_.replay();
  return outputs_;
}

}  // namespace brrr::cuda
