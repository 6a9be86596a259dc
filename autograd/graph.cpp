// The autograd state every tensor carries (brrr.tensor:graph): grad mode, graph nodes and
// edges, saved tensors, the leaves' gradient accumulators and gradient summation. The
// engine that walks the graph is autograd/engine.cpp.
module;
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr {

namespace autograd {

namespace {
thread_local bool grad_enabled = true;
std::atomic<std::uint64_t> next_sequence_nr{0};
}  // namespace

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorInternals::Impl>& leaf)
    : Node("AccumulateGrad", AccumulatorTag{}), leaf_(leaf) {}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> grads) {
  auto leaf = leaf_.lock();
  if (!leaf || grads.empty() || !grads[0].defined()) return {};
  Tensor g = std::move(grads[0]);
  if (leaf->hooks && !leaf->hooks->grad.empty()) g = leaf->hooks->run(std::move(g), "a leaf's hook");
  if (g.shape() != leaf->layout.sizes)
    throw Error(ErrorKind::autograd, "AccumulateGrad: gradient of shape " + to_string(g.shape()) +
                                         " for a leaf of shape " + to_string(leaf->layout.sizes));
  if (leaf->grad.defined()) {
    leaf->grad = accumulate(leaf->grad, g);  // out of place: a new tensor owned by .grad() alone
  } else {
    // Store the incoming gradient only if nothing else can see or alias it (as PyTorch does):
    // a broadcast view, a tensor shared with another leaf's grad or held by the caller would
    // be changed by in-place updates of .grad() (optimizers, clipping). (`g` was moved out of
    // `grads`: one handle is ours.)
    bool exclusive = g.is_contiguous() && TensorInternals::ptr(g).use_count() <= 1 && g.storage().use_count() == 1;
    Tensor own = exclusive ? g : g.clone();
    leaf->grad = is_grad_enabled() ? own : own.detach();
  }
  if (leaf->hooks && !leaf->hooks->post_accumulate.empty()) {
    Tensor self = TensorInternals::wrap(leaf);
    auto hooks = leaf->hooks->post_accumulate;  // a hook may remove hooks
    for (auto& [id, fn] : hooks) fn(self);
  }
  return {};
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (a.device() != b.device())
    throw Error(ErrorKind::device, "backward: gradients " + describe(a) + " and " + describe(b) +
                                       " of one tensor are on different devices");
  if (a.shape() != b.shape())
    throw Error(ErrorKind::shape, "backward: gradients " + describe(a) + " and " + describe(b) +
                                      " of one tensor have different shapes");
  const Tensor bc = b.dtype() == a.dtype() ? b : b.to(a.dtype());
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty(a.shape(), {.dtype = a.dtype(), .device = a.device()});
    if (out.numel() > 0)
      backend::backend_for(a.device())
          .binary(backend::BinaryOp::add, backend::output(out, "backward"), backend::input(a, "backward"),
                  backend::input(bc, "backward"));
  }
  // d(a + b) = (g, g): the sum is differentiable when the backward pass is recorded.
  if (any_requires_grad({a, bc}))
    record("AccumulateBackward", {a, bc}, {out}, [](const Backward& ctx) { return Grads{ctx.grad(), ctx.grad()}; });
  return out;
}

Node::Node(const char* name) : sequence_nr(next_sequence_nr++), name_(name) {}
Node::Node(const char* name, AccumulatorTag) : sequence_nr(next_sequence_nr++), name_(name), accumulator_(true) {}


// A node owns the nodes of its inputs (next_edges), so the default destructor of the last
// node of a chain of N ops recurses N deep and overflows the stack for long chains (a 100000
// op chain needs ~8 MB). Instead the outermost ~Node on a thread collects the children in a
// list and releases them in a loop; the ~Node of a child released there finds the list and
// appends its own children instead of recursing.
namespace {
thread_local std::vector<std::shared_ptr<Node>>* pending_release = nullptr;
}

Node::~Node() {
  if (pending_release) {
    for (Edge& e : next_edges)
      if (e.node) pending_release->push_back(std::move(e.node));
    return;
  }
  std::vector<std::shared_ptr<Node>> list;
  for (Edge& e : next_edges)
    if (e.node) list.push_back(std::move(e.node));
  if (list.empty()) return;
  pending_release = &list;
  while (!list.empty()) {
    std::shared_ptr<Node> n = std::move(list.back());
    list.pop_back();
    n.reset();  // if this was the last owner, n's ~Node appends n's children to `list`
  }
  pending_release = nullptr;
}

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

Edge gradient_edge(const Tensor& t) {
  if (!t.defined()) return {};
  TensorInternals::Impl& i = TensorInternals::impl(t);
  if (i.grad_fn) return {i.grad_fn, i.output_nr};
  if (!i.requires_grad) return {};
  std::shared_ptr<Node> acc = i.accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(TensorInternals::ptr(t));
    i.accumulator = acc;
  }
  return {acc, 0};
}

namespace {
template <class In> bool requires_grad_of(const In& inputs) {
  if (!grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

template <class In, class Out> void connect_impl(const std::shared_ptr<Node>& node, const In& inputs, const Out& outputs) {
  connect_edges(*node, inputs, outputs);
  std::uint32_t k = 0;
  for (const Tensor& t : outputs) t.set_grad_fn(node, k++);
}
}  // namespace

bool any_requires_grad(std::initializer_list<Tensor> inputs) { return requires_grad_of(inputs); }
bool any_requires_grad(const std::vector<Tensor>& inputs) { return requires_grad_of(inputs); }

void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs, std::initializer_list<Tensor> outputs) {
  connect_impl(node, inputs, outputs);
}
void connect(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  connect_impl(node, inputs, outputs);
}

SavedTensor::SavedTensor(const Tensor& t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  version_ = t.storage().version();
  if (is_output) {
    // Keep the numbers, and only a weak link to the producing node: no cycle node -> output
    // -> node. unpack() reattaches it while the node is alive (it is, during its backward).
    grad_fn_ = t.grad_fn();
    output_nr_ = t.output_nr();
    data_ = t.detach();
  } else {
    data_ = t;
  }
}

Tensor SavedTensor::unpack(const Node& owner) const {
  if (owner.released)
    throw Error(ErrorKind::autograd, owner.name() + ": trying to backward through the graph a second time; its saved "
                                                    "tensors were freed (call backward with retain_graph = true)");
  if (!data_.defined()) return {};
  if (data_.storage().version() != version_)
    throw Error(ErrorKind::autograd,
                owner.name() + ": a tensor saved for backward (shape " + to_string(data_.shape()) + ", " +
                    to_string(data_.dtype()) + ") was modified in place: its version is " +
                    std::to_string(data_.storage().version()) + ", it was " + std::to_string(version_) +
                    " when saved. Use an out-of-place op, or clone() before modifying.");
  if (!is_output_) return data_;
  auto fn = grad_fn_.lock();
  if (!fn) return data_;
  Tensor t = data_.detach();
  t.set_grad_fn(fn, output_nr_);
  return t;
}

void SavedTensor::reset() {
  data_ = Tensor();
  grad_fn_.reset();
}

Tensor HookList::run(Tensor g, const char* what) const {
  auto hooks = grad;  // a hook may remove hooks
  for (auto& [id, fn] : hooks) {
    Tensor replaced = fn(g);
    if (!replaced.defined()) continue;
    if (replaced.shape() != g.shape())
      throw Error(ErrorKind::autograd, std::string(what) + " returned a gradient of shape " +
                                           to_string(replaced.shape()) + " for one of shape " + to_string(g.shape()));
    g = std::move(replaced);
  }
  return g;
}

void RemovableHandle::remove() {
  auto list = list_.lock();
  if (!list) return;
  std::erase_if(list->grad, [&](const auto& h) { return h.first == id_; });
  std::erase_if(list->post_accumulate, [&](const auto& h) { return h.first == id_; });
  list_.reset();
}

}  // namespace autograd

// --- autocast state ------------------------------------------------------------------------

namespace {
thread_local bool autocast_enabled = false;
thread_local DType autocast_dtype = DType::bf16;
}  // namespace

bool autocast::is_enabled() { return autocast_enabled; }
DType autocast::dtype() { return autocast_dtype; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(autocast_enabled), previous_dtype_(autocast_dtype) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    throw Error(ErrorKind::dtype, std::string("AutocastGuard: the lower-precision dtype must be bf16 or f16, got ") +
                                      to_string(dtype));
  autocast_enabled = enabled;
  autocast_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  autocast_enabled = previous_enabled_;
  autocast_dtype = previous_dtype_;
}

// --- Tensor's autograd members -----------------------------------------------------------

bool Tensor::requires_grad() const {
  const Impl& i = checked("requires_grad");
  return i.requires_grad || i.grad_fn != nullptr;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  Impl& i = const_cast<Impl&>(checked("requires_grad_"));
  if (requires_grad && !is_floating_point(i.dtype))
    throw Error(ErrorKind::dtype, std::string("requires_grad_: only floating-point tensors can require gradients, this "
                                              "one is ") + to_string(i.layout.sizes) + " " + to_string(i.dtype));
  if (i.grad_fn)
    throw Error(ErrorKind::autograd, "requires_grad_: only leaves can change requires_grad; this tensor was made by " +
                                         i.grad_fn->name() + " (use detach())");
  i.requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return checked("is_leaf").grad_fn == nullptr; }
Tensor Tensor::grad() const {
  const Impl& i = checked("grad");
  // PyTorch's UserWarning: reading .grad of a non-leaf gives nothing unless retain_grad() was
  // called; say it once per process, since it is almost always a mistake.
  if (i.grad_fn && !i.retains_grad && !i.grad.defined()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true))
      std::fprintf(stderr, "brrr: warning: grad() of a non-leaf tensor (made by %s) is undefined: backward fills "
                           "grad() only of leaves; call retain_grad() on it before backward to keep its gradient "
                           "(this warning is shown once)\n", i.grad_fn->name().c_str());
  }
  return i.grad;
}
void Tensor::set_grad(const Tensor& grad) const {
  Impl& i = const_cast<Impl&>(checked("set_grad"));
  if (grad.defined() && grad.shape() != i.layout.sizes)
    throw Error(ErrorKind::shape, "set_grad: gradient of shape " + to_string(grad.shape()) + " for a tensor of shape " +
                                      to_string(i.layout.sizes));
  i.grad = grad;
}
const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const { return checked("grad_fn").grad_fn; }
std::uint32_t Tensor::output_nr() const { return checked("output_nr").output_nr; }

void Tensor::set_grad_fn(std::shared_ptr<autograd::Node> fn, std::uint32_t output_nr) const {
  Impl& i = const_cast<Impl&>(checked("set_grad_fn"));
  i.grad_fn = std::move(fn);
  i.output_nr = output_nr;
  i.requires_grad = false;
}

void Tensor::set_data(const Tensor& other) const {
  Impl& i = const_cast<Impl&>(checked("set_data"));
  if (!other.defined()) throw Error(ErrorKind::value, "set_data: the new data is an undefined tensor");
  if (i.grad_fn)
    throw Error(ErrorKind::autograd, "set_data: only leaves can have their data replaced (this tensor was made by " +
                                         i.grad_fn->name() + ")");
  const Impl& o = *other.impl_;
  if (i.requires_grad && !is_floating_point(o.dtype))
    throw Error(ErrorKind::dtype, std::string("set_data: a tensor that requires grad cannot hold ") + to_string(o.dtype));
  i.storage = o.storage;
  i.layout = o.layout;
  i.dtype = o.dtype;
  if (i.grad.defined() && (i.grad.device() != o.storage.device() || i.grad.dtype() != o.dtype)) i.grad = Tensor();
}

autograd::RemovableHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) const {
  Impl& i = const_cast<Impl&>(checked("register_hook"));
  if (!i.requires_grad && !i.grad_fn)
    throw Error(ErrorKind::autograd, "register_hook: the tensor (" + describe(*this) +
                                         ") does not require grad, so no gradient will reach a hook");
  std::shared_ptr<autograd::HookList> list;
  if (i.grad_fn) {  // a non-leaf: the hook runs on its grad_fn's output slot
    auto& slots = i.grad_fn->output_hooks;
    if (slots.size() < i.grad_fn->num_outputs) slots.resize(i.grad_fn->num_outputs);
    auto& slot = slots[i.output_nr];
    if (!slot) slot = std::make_shared<autograd::HookList>();
    list = slot;
  } else {
    if (!i.hooks) i.hooks = std::make_shared<autograd::HookList>();
    list = i.hooks;
  }
  std::uint64_t id = list->next_id++;
  list->grad.emplace_back(id, std::move(fn));
  return autograd::RemovableHandle(list, id);
}

autograd::RemovableHandle Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  Impl& i = const_cast<Impl&>(checked("register_post_accumulate_grad_hook"));
  if (i.grad_fn || !i.requires_grad)
    throw Error(ErrorKind::autograd, std::string("register_post_accumulate_grad_hook: only leaves that require grad "
                                                 "accumulate gradients; this tensor (") +
                                         describe(*this) + ") is " +
                                         (i.grad_fn ? "made by " + i.grad_fn->name() : std::string("a leaf without requires_grad")));
  if (!i.hooks) i.hooks = std::make_shared<autograd::HookList>();
  std::uint64_t id = i.hooks->next_id++;
  i.hooks->post_accumulate.emplace_back(id, std::move(fn));
  return autograd::RemovableHandle(i.hooks, id);
}

void Tensor::retain_grad() const {
  Impl& i = const_cast<Impl&>(checked("retain_grad"));
  if (!i.requires_grad && !i.grad_fn)
    throw Error(ErrorKind::autograd, "retain_grad: the tensor (" + describe(*this) + ") does not require grad");
  if (!i.grad_fn || i.retains_grad) return;  // leaves keep their gradient anyway
  i.retains_grad = true;
  std::weak_ptr<Impl> self = impl_;
  register_hook([self](const Tensor& g) {
    if (auto s = self.lock()) s->grad = s->grad.defined() ? autograd::accumulate(s->grad, g) : g.detach().clone();
    return Tensor();
  });
}

bool Tensor::retains_grad() const {
  const Impl& i = checked("retains_grad");
  return i.grad_fn ? i.retains_grad : i.requires_grad;
}

Tensor Tensor::detach() const {
  const Impl& i = checked("detach");
  auto impl = std::make_shared<Impl>();
  impl->storage = i.storage;
  impl->layout = i.layout;
  impl->dtype = i.dtype;
  return Tensor(std::move(impl));
}

}  // namespace brrr
