// brrr.tensor:graph — the autograd core every tensor carries: graph nodes and edges, saved
// tensors, grad mode, the helper that records an op's backward rule, the leaves' gradient
// accumulators and the engine that walks the graph (autograd/graph.cpp, autograd/engine.cpp).
// A partition of brrr.tensor because Tensor and Node refer to each other; it uses no op of
// brrr.ops: gradients are summed by the backend's add kernel directly (accumulate()).
module;
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>
export module brrr.tensor:graph;
import :core;

export namespace brrr::autograd {

/// Where one input's gradient goes: into output slot `input_nr` of `node` (the node that
/// produced that input, or a leaf's accumulator).
struct Edge {
  std::shared_ptr<Node> node;
  std::uint32_t input_nr = 0;
  bool defined() const { return node != nullptr; }
};

/// The hooks of one tensor (leaf) or of one output of a node, by registration id.
struct HookList {
  std::uint64_t next_id = 0;
  std::vector<std::pair<std::uint64_t, std::function<Tensor(const Tensor&)>>> grad;
  std::vector<std::pair<std::uint64_t, std::function<void(const Tensor&)>>> post_accumulate;
  /// Runs the gradient hooks on `g` in order; returns the (possibly replaced) gradient.
  Tensor run(Tensor g, const char* what) const;
};

/// What register_hook returns: remove() unregisters the hook (idempotent; harmless once the
/// tensor is gone), like torch.utils.hooks.RemovableHandle.
class RemovableHandle {
public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<HookList> list, std::uint64_t id) : list_(std::move(list)), id_(id) {}
  void remove();

private:
  std::weak_ptr<HookList> list_;
  std::uint64_t id_ = 0;
};

/// A recorded op: given the gradients of its outputs, returns those of its inputs (one per
/// next_edges entry; undefined where an input needs none). Ops make nodes with record()
/// below; the only other kind is a leaf's gradient accumulator.
class Node {
public:
  /// `name` (a string literal: it is kept as a pointer) is the op's with "Backward", e.g.
  /// "MulBackward".
  explicit Node(const char* name);
  /// Frees the nodes this one owns through next_edges with a loop, not a recursion, so that
  /// dropping a graph of any depth cannot overflow the stack.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  /// grad_outputs[i] is the gradient of output i (undefined means zero).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  /// Frees saved tensors once backward ran without retain_graph.
  virtual void release_saved() {}
  std::string name() const { return name_; }
  const char* name_literal() const { return name_; }
  /// True for a leaf's gradient accumulator (the engine's sink for leaves).
  bool is_accumulator() const { return accumulator_; }

  std::vector<Edge> next_edges;
  /// Hooks on the gradients of this node's outputs (index = output_nr), run by the engine
  /// before apply(); empty unless some output has a hook (Tensor::register_hook).
  std::vector<std::shared_ptr<HookList>> output_hooks;
  std::uint32_t num_outputs = 1;
  std::uint64_t sequence_nr;  ///< creation order: later nodes run first on ties
  bool released = false;

protected:
  struct AccumulatorTag {};
  Node(const char* name, AccumulatorTag);

private:
  const char* name_;
  bool accumulator_ = false;
};

/// Where the gradient of `t` goes: its grad_fn, a leaf's accumulator (made on first use and
/// kept while the graph holds it), or nowhere.
Edge gradient_edge(const Tensor& t);

/// A tensor kept for backward, with the storage version it had when saved: unpack() throws
/// Error(autograd) if it was modified in place since. Saving an op's own output keeps only a
/// weak link to the node (no reference cycle).
class SavedTensor {
public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output = false);
  Tensor unpack(const Node& owner) const;
  void reset();
  bool defined() const { return data_.defined(); }

private:
  Tensor data_;
  std::uint64_t version_ = 0;
  std::weak_ptr<Node> grad_fn_;
  std::uint32_t output_nr_ = 0;
  bool is_output_ = false;
};

/// Whether ops record graph nodes on this thread (default true).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

/// True when grad mode is on and some defined input requires grad: the op must record.
bool any_requires_grad(std::initializer_list<Tensor> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

/// Makes `node` the grad_fn of outputs[i] (output i), with one next edge per input (an
/// undefined input gets an empty edge). record() calls it; custom nodes may too.
void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs,
             std::initializer_list<Tensor> outputs);
void connect(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
             const std::vector<Tensor>& outputs);

// ---------------------------------------------------------------------------------------
// Recording an op's backward rule
// ---------------------------------------------------------------------------------------

/// The gradients a rule returns: one per input of the op, undefined where none is needed.
using Grads = std::vector<Tensor>;

/// What a backward rule receives: the gradients of the op's outputs, the tensors saved for
/// it, and which inputs want a gradient.
class Backward {
public:
  Backward(const std::vector<Tensor>& grads, const SavedTensor* saved, const Node& node)
      : grads_(grads), saved_(saved), node_(node) {}
  /// The gradient of output `i` (undefined when that output received none: zero).
  const Tensor& grad(std::size_t i = 0) const { return grads_[i]; }
  /// Saved tensor `i` (in record()'s order), checked against in-place changes.
  Tensor saved(std::size_t i) const { return saved_[i].unpack(node_); }
  /// Whether input `i` wants a gradient: rules compute only those.
  bool needs(std::size_t i) const { return i < node_.next_edges.size() && node_.next_edges[i].defined(); }

private:
  const std::vector<Tensor>& grads_;
  const SavedTensor* saved_;
  const Node& node_;
};

/// The node of record(): the rule and the saved tensors in one allocation. (A rule's captures
/// must not be const: a const capture is copied, not moved, into the node.)
template <class Rule, std::size_t N> class RuleNode final : public Node {
public:
  RuleNode(const char* name, Rule rule) : Node(name), rule_(std::move(rule)) {}
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    NvtxRange range(name_literal());
    return rule_(Backward(grads, saved.data(), *this));
  }
  void release_saved() override {
    for (SavedTensor& s : saved) s.reset();
  }
  std::array<SavedTensor, N> saved;

private:
  Rule rule_;
};

/// Records the backward rule of an op: makes one node, named `name` (a string literal, e.g.
/// "MulBackward"), the grad_fn of `outputs`, with an edge to each of `inputs` (undefined
/// inputs get none), saving `saved` for it: rule(const Backward&) -> Grads, one gradient per
/// input, written with Tensor ops so that create_graph differentiates it again. A saved
/// tensor that is one of `outputs` is kept without a reference cycle. The node frees the
/// saved tensors after a backward without retain_graph, and runs the rule inside an NVTX
/// range of its name. Call it only when any_requires_grad(inputs): its captures cost
/// nothing then. One allocation for the node (rule captures and saved tensors included),
/// one for its edges.
template <class Rule, std::size_t N>
void record(const char* name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            const Tensor (&saved)[N], Rule rule);
template <class Rule>
void record(const char* name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            Rule rule);
/// The same for ops with a list of inputs (cat).
template <class Rule>
void record(const char* name, const std::vector<Tensor>& inputs, std::initializer_list<Tensor> outputs, Rule rule);

// ---------------------------------------------------------------------------------------
// The engine (autograd/engine.cpp)
// ---------------------------------------------------------------------------------------

/// Runs backward from `outputs` with `grad_outputs` (undefined entries: ones for scalar
/// outputs, else Error(autograd)), accumulating into leaves' grad(). An iterative
/// topological walk (no recursion limit) over the nodes reachable from the outputs; the
/// graph's saved tensors are freed unless retain_graph; create_graph records the backward
/// pass itself (higher-order gradients).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Runs fn once the backward pass now running on this thread has finished walking the graph
/// (PyTorch's Engine::queue_callback; DDP finishes its gradient all-reduces here). Callbacks
/// run in the order queued, before backward() returns; an exception from one propagates out
/// of backward(). Error(autograd) when no backward pass is running.
void queue_callback(std::function<void()> fn);

/// Gradients of `outputs` with respect to `inputs` (which must require grad), returned
/// instead of accumulated into .grad(). allow_unused: an input not reached gets an undefined
/// tensor instead of Error(autograd). retain_graph defaults to create_graph.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

}  // namespace brrr::autograd

export namespace brrr {

/// Disables graph recording on this thread for its scope (RAII), like torch::NoGradGuard.
class NoGradGuard {
public:
  NoGradGuard() : previous_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

private:
  bool previous_;
};

/// Automatic mixed precision (PyTorch's autocast), per thread. While enabled, the ops of
/// PyTorch's CUDA lower-precision list (matmul, mm, bmm, addmm, baddbmm, linear, conv1d,
/// conv2d, conv_transpose2d, scaled_dot_product_attention) cast their f32 (and bf16/f16)
/// floating inputs to the autocast dtype, and those of its fp32 list (softmax, log_softmax,
/// layer_norm, group_norm, rms_norm, the losses, sum/prod/cumsum/cumprod without a dtype,
/// norms, exp/log and kin, pow, ...) cast bf16/f16 inputs to f32; f64 tensors and every other
/// op are left alone (mixed dtypes then promote as usual). The casts are recorded, so
/// gradients reach f32 parameters in f32. An autocast op runs its body with autocast off, and
/// the backward engine runs with it off, as PyTorch's does. Applies to CPU and CUDA tensors.
/// See docs/semantics.md ("Autocast").
namespace autocast {
/// Whether autocast is on for this thread.
bool is_enabled();
/// The lower-precision dtype of this thread's autocast (bf16 unless set).
DType dtype();
}  // namespace autocast

/// Turns autocast on (or off, `enabled` = false) for its scope (RAII, thread-local), with
/// `dtype` (bf16 or f16) as the lower precision, like `torch.autocast(device, dtype)`;
/// restores the previous state. Error(dtype) for another dtype.
class AutocastGuard {
public:
  explicit AutocastGuard(DType dtype = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

private:
  bool previous_enabled_;
  DType previous_dtype_;
};

/// Sets grad mode for its scope (RAII), restoring the previous mode.
class GradModeGuard {
public:
  explicit GradModeGuard(bool enabled) : previous_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(enabled); }
  ~GradModeGuard() { autograd::set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

private:
  bool previous_;
};

}  // namespace brrr

// Not exported: the leaves' accumulators and gradient summation, for this module's units.
namespace brrr::autograd {

/// The sink of a leaf's gradient: the node every path to a leaf that requires grad ends in
/// (gradient_edge(leaf).node, made on first use, held weakly by the leaf). apply() adds the
/// incoming gradient into leaf.grad() out of place; it is the one place where a leaf's
/// .grad() is written by backward, so post-accumulate hooks (DDP's bucketing) belong there.
class AccumulateGrad final : public Node {
public:
  explicit AccumulateGrad(const std::shared_ptr<TensorInternals::Impl>& leaf);
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;

private:
  std::weak_ptr<TensorInternals::Impl> leaf_;
};

/// a + b for summing gradients (equal shapes, one device; b converted to a's dtype): the
/// backend's add kernel, recorded under grad mode (create_graph) with the gradient passed
/// to both. The engine and AccumulateGrad sum with it, so the core needs no op of brrr.ops.
Tensor accumulate(const Tensor& a, const Tensor& b);

template <class In, class Out> void connect_edges(Node& node, const In& inputs, const Out& outputs) {
  node.next_edges.clear();
  node.next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) node.next_edges.push_back(gradient_edge(t));
  node.num_outputs = static_cast<std::uint32_t>(outputs.size());
}

template <class In, class Rule, std::size_t N>
void record_node(const char* name, const In& inputs, std::initializer_list<Tensor> outputs, const Tensor* saved,
                 Rule&& rule) {
  auto node = std::make_shared<RuleNode<std::decay_t<Rule>, N>>(name, std::forward<Rule>(rule));
  connect_edges(*node, inputs, outputs);
  std::uint32_t k = 0;
  for (const Tensor& t : outputs) t.set_grad_fn(node, k++);
  for (std::size_t i = 0; i < N; ++i) {
    bool is_output = false;
    for (const Tensor& out : outputs) is_output = is_output || saved[i].is_same(out);
    node->saved[i] = SavedTensor(saved[i], is_output);
  }
}

}  // namespace brrr::autograd

export namespace brrr::autograd {

template <class Rule, std::size_t N>
void record(const char* name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            const Tensor (&saved)[N], Rule rule) {
  record_node<std::initializer_list<Tensor>, Rule, N>(name, inputs, outputs, saved, std::move(rule));
}
template <class Rule>
void record(const char* name, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs,
            Rule rule) {
  record_node<std::initializer_list<Tensor>, Rule, 0>(name, inputs, outputs, nullptr, std::move(rule));
}
template <class Rule>
void record(const char* name, const std::vector<Tensor>& inputs, std::initializer_list<Tensor> outputs, Rule rule) {
  record_node<std::vector<Tensor>, Rule, 0>(name, inputs, outputs, nullptr, std::move(rule));
}

}  // namespace brrr::autograd
