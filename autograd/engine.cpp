// The backward engine (brrr.tensor:graph): Kahn's topological order over the nodes reachable
// from the outputs (an explicit stack and dependency counts: no recursion, any graph depth),
// gradients summed per node input (accumulate()) before the node runs. Side-stream work the
// nodes enqueued (weight gradients, backend::SideWork) is joined when the pass ends.
module;
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr::autograd {

namespace {

thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

struct Capture {
  Node* node;
  std::uint32_t slot;
  std::size_t result_index;
};

// Runs the graph. With `captures` (autograd::grad) the gradients arriving at those (node,
// slot) pairs are returned and leaves' .grad() is left untouched.
std::vector<Tensor> run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                                 bool retain_graph, bool create_graph, const std::vector<Capture>* captures,
                                 std::size_t num_captures) {
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    throw Error(ErrorKind::autograd, "backward: " + std::to_string(outputs.size()) + " outputs but " +
                                         std::to_string(grad_outputs.size()) + " gradients");
  GradModeGuard mode(create_graph);
  AutocastGuard no_autocast(autocast::dtype(), false);  // backward ops run in their forward's dtypes
  // Callbacks queued during this pass run at its end (a nested pass has its own list).
  std::vector<std::function<void()>> callbacks;
  struct CallbackScope {
    std::vector<std::function<void()>>* outer = current_callbacks;
    explicit CallbackScope(std::vector<std::function<void()>>* mine) { current_callbacks = mine; }
    ~CallbackScope() { current_callbacks = outer; }
  } callback_scope(&callbacks);
  // Work the pass moved to side streams (weight gradients: backend::SideWork) is joined when
  // the pass ends, so that what follows on the current streams sees every gradient; also when
  // it throws (a graph capture must not end with the side stream forked).
  struct SideJoin {
    bool done = false;
    void join() {
      done = true;
      backend::join_side_work();
    }
    ~SideJoin() {
      if (done) return;
      try {
        backend::join_side_work();
      } catch (...) {  // unwinding already: the first error is the one to report
      }
    }
  } side_join;

  // Roots and their initial gradients.
  std::vector<std::pair<Edge, Tensor>> roots;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    if (!out.requires_grad())
      throw Error(ErrorKind::autograd, "backward: output " + std::to_string(i) + " (shape " + to_string(out.shape()) +
                                           ") does not require grad and has no grad_fn");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      if (out.numel() != 1)
        throw Error(ErrorKind::autograd, "backward: a gradient is needed for a non-scalar output of shape " +
                                             to_string(out.shape()));
      g = ones_like(out);
    } else if (g.shape() != out.shape()) {
      throw Error(ErrorKind::shape, "backward: gradient of shape " + to_string(g.shape()) + " for an output of shape " +
                                        to_string(out.shape()));
    }
    roots.emplace_back(gradient_edge(out), g);
  }

  // Discover the graph and count, for each node, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  for (auto& [edge, g] : roots)
    if (deps.emplace(edge.node.get(), 0).second) stack.push_back(edge.node.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      auto [it, fresh] = deps.emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    auto& buf = buffers[e.node.get()];
    if (buf.size() < e.node->num_outputs) buf.resize(e.node->num_outputs);
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? accumulate(slot, g) : g;
  };
  for (auto& [edge, g] : roots) deliver(edge, g);

  // Ready nodes, latest-created first (the order PyTorch uses for ties).
  auto later = [](Node* a, Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (auto& [node, count] : deps)
    if (count == 0) ready.push(node);

  std::vector<Tensor> captured(num_captures);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->num_outputs);
    for (std::size_t i = 0; i < node->output_hooks.size() && i < grads.size(); ++i)  // Tensor::register_hook
      if (node->output_hooks[i] && grads[i].defined())
        grads[i] = node->output_hooks[i]->run(std::move(grads[i]), "a tensor hook");
    const bool is_accumulator = node->is_accumulator();
    if (captures) {
      for (const Capture& c : *captures)
        if (c.node == node && grads[c.slot].defined())
          captured[c.result_index] = captured[c.result_index].defined() ? accumulate(captured[c.result_index], grads[c.slot])
                                                                        : grads[c.slot];
    }
    std::vector<Tensor> input_grads;
    if (!(captures && is_accumulator)) {
      bool any = false;
      for (const Tensor& g : grads) any = any || g.defined();
      if (any) input_grads = node->apply(std::move(grads));
      if (!retain_graph) {
        node->release_saved();
        node->released = true;
      }
    }
    for (std::size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (i < input_grads.size() && input_grads[i].defined()) deliver(e, input_grads[i]);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  side_join.join();
  for (std::size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();  // a callback may queue more
  return captured;
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  if (!current_callbacks)
    throw Error(ErrorKind::autograd, "queue_callback: no backward pass is running on this thread");
  current_callbacks->push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, nullptr, 0);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Capture> captures;
  std::vector<Edge> keep;  // holds accumulators alive while we run
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad())
      throw Error(ErrorKind::autograd, "grad: input " + std::to_string(i) + " (shape " + to_string(inputs[i].shape()) +
                                           ") does not require grad");
    Edge e = gradient_edge(inputs[i]);
    captures.push_back({e.node.get(), e.input_nr, i});
    keep.push_back(e);
  }
  std::vector<Tensor> result =
      run_backward(outputs, grad_outputs, retain_graph || create_graph, create_graph, &captures, inputs.size());
  for (std::size_t i = 0; i < result.size(); ++i)
    if (!result[i].defined() && !allow_unused)
      throw Error(ErrorKind::autograd, "grad: input " + std::to_string(i) + " (shape " + to_string(inputs[i].shape()) +
                                           ") was not used to compute the outputs (pass allow_unused = true)");
  return result;
}

}  // namespace brrr::autograd

namespace brrr {

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  checked("backward");
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

}  // namespace brrr
