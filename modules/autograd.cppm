// brrr.autograd — gradient checking, over the op layer. The autograd core (graph nodes,
// saved tensors, grad mode, record(), the engine: autograd::backward and autograd::grad) is
// part of brrr.tensor (autograd/graph.cppm), since every tensor carries it.
module;
#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>
export module brrr.autograd;
import brrr.tensor;

export namespace brrr::autograd {

/// Options of gradcheck.
struct GradcheckOptions {
  double eps = 1e-6;   ///< central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

/// Checks f's analytic gradients against central differences (f(x+eps)-f(x-eps))/(2 eps)
/// in f64 on the CPU. `inputs` are converted to f64 CPU leaves requiring grad (integer
/// inputs are passed through untouched); f must return one tensor (reduced with a random
/// projection when not scalar). Throws Error(autograd) naming the input, element, both values
/// and the tolerance on mismatch; returns true otherwise.
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
               GradcheckOptions options = {});

// ---------------------------------------------------------------------------------------
// Custom autograd functions (LibTorch's torch::autograd::Function)
// ---------------------------------------------------------------------------------------

using tensor_list = std::vector<Tensor>;

/// A non-tensor value kept for backward in AutogradContext::saved_data (LibTorch's IValue,
/// reduced to what a backward needs): any copyable value, read back as the type stored.
class SavedValue {
public:
  SavedValue() = default;
  template <class T>
    requires(!std::is_same_v<std::decay_t<T>, SavedValue>)
  SavedValue(T&& value) : value_(std::forward<T>(value)) {}
  /// The value as T; Error(value) naming the types when it holds something else.
  template <class T> const T& get() const {
    if (const T* p = std::any_cast<T>(&value_)) return *p;
    throw Error(ErrorKind::value, std::string("saved_data: the value holds ") + value_.type().name() +
                                      ", not the type asked (" + typeid(T).name() + ")");
  }
  /// Numbers of any arithmetic type, widened; Error(value) for anything else.
  double toDouble() const { return number<double>(); }
  std::int64_t toInt() const { return number<std::int64_t>(); }
  bool toBool() const { return get<bool>(); }
  const Tensor& toTensor() const { return get<Tensor>(); }
  const std::string& toString() const { return get<std::string>(); }
  bool has_value() const { return value_.has_value(); }

private:
  template <class N> N number() const {
    if (auto p = std::any_cast<double>(&value_)) return static_cast<N>(*p);
    if (auto p = std::any_cast<float>(&value_)) return static_cast<N>(*p);
    if (auto p = std::any_cast<int>(&value_)) return static_cast<N>(*p);
    if (auto p = std::any_cast<long>(&value_)) return static_cast<N>(*p);
    if (auto p = std::any_cast<long long>(&value_)) return static_cast<N>(*p);
    if (auto p = std::any_cast<bool>(&value_)) return static_cast<N>(*p);
    throw Error(ErrorKind::value, std::string("saved_data: the value holds ") + value_.type().name() +
                                      ", not a number");
  }
  std::any value_;
};

/// What forward() and backward() of a Function share: tensors saved for backward (checked
/// against in-place changes like every saved tensor), non-tensor state, and which inputs
/// want a gradient.
class AutogradContext {
public:
  /// Keeps tensors (inputs or outputs of forward) for backward. Call it in forward.
  void save_for_backward(tensor_list tensors) { pending_ = std::move(tensors); }
  /// The saved tensors, in save_for_backward's order. Error(autograd) if one was modified in
  /// place after it was saved, or after a backward without retain_graph freed them.
  tensor_list get_saved_variables() const {
    tensor_list out;
    if (!node_) return pending_;  // still in forward
    for (const SavedTensor& s : saved_) out.push_back(s.unpack(*node_));
    return out;
  }
  /// Whether forward's argument `index` (counting every argument, tensor or not) wants a
  /// gradient: backward may skip the others (returning an undefined tensor for them).
  bool needs_input_grad(std::size_t index) const { return index < needs_.size() && needs_[index]; }
  /// Non-tensor state for backward: ctx->saved_data["k"] = 2.0; ...toDouble().
  std::map<std::string, SavedValue> saved_data;

  // For Function<T>::apply (not for user code).
  tensor_list pending_;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_;
  const Node* node_ = nullptr;
};

namespace function_detail {
template <class A> constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<A>, Tensor>;
template <class T> concept has_name = requires { T::name; };
template <class T> const char* node_name() {
  if constexpr (has_name<T>) {
    static const std::string n = std::string(T::name) + "Backward";
    return n.c_str();
  } else {
    return "FunctionBackward";
  }
}
inline tensor_list as_list(Tensor t) { return {std::move(t)}; }
inline tensor_list as_list(tensor_list t) { return t; }

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

/// The graph node of a Function<T> call: runs T::backward with the context.
template <class T> class FunctionNode final : public Node {
public:
  FunctionNode(std::shared_ptr<AutogradContext> ctx, std::vector<std::size_t> tensor_args, std::size_t num_args,
               std::vector<OutputMeta> outputs, std::vector<Shape> input_shapes)
      : Node(node_name<T>()), ctx_(std::move(ctx)), tensor_args_(std::move(tensor_args)), num_args_(num_args),
        outputs_(std::move(outputs)), input_shapes_(std::move(input_shapes)) {}

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    NvtxRange range(name_literal());
    // Undefined output gradients become zeros (LibTorch's materialize_grads default).
    for (std::size_t i = 0; i < grads.size() && i < outputs_.size(); ++i)
      if (!grads[i].defined())
        grads[i] = zeros(outputs_[i].shape, {.dtype = outputs_[i].dtype, .device = outputs_[i].device});
    ctx_->needs_.assign(num_args_, false);
    for (std::size_t j = 0; j < tensor_args_.size(); ++j)
      ctx_->needs_[tensor_args_[j]] = j < next_edges.size() && next_edges[j].defined();
    tensor_list returned = T::backward(ctx_.get(), std::move(grads));
    // One gradient per forward argument (LibTorch), or one per tensor argument.
    tensor_list out(tensor_args_.size());
    if (returned.size() == num_args_) {
      for (std::size_t j = 0; j < tensor_args_.size(); ++j) out[j] = returned[tensor_args_[j]];
    } else if (returned.size() == tensor_args_.size()) {
      out = std::move(returned);
    } else {
      throw Error(ErrorKind::autograd, name() + ": backward returned " + std::to_string(returned.size()) +
                                           " gradients; expected one per argument of forward (" +
                                           std::to_string(num_args_) + ") or per tensor argument (" +
                                           std::to_string(tensor_args_.size()) + ")");
    }
    for (std::size_t j = 0; j < out.size(); ++j)
      if (out[j].defined() && out[j].shape() != input_shapes_[j])
        throw Error(ErrorKind::autograd, name() + ": backward returned a gradient of shape " +
                                             to_string(out[j].shape()) + " for argument " +
                                             std::to_string(tensor_args_[j]) + " of shape " +
                                             to_string(input_shapes_[j]));
    return out;
  }
  void release_saved() override {
    for (SavedTensor& s : ctx_->saved_) s.reset();
  }

private:
  std::shared_ptr<AutogradContext> ctx_;
  std::vector<std::size_t> tensor_args_;
  std::size_t num_args_;
  std::vector<OutputMeta> outputs_;
  std::vector<Shape> input_shapes_;
};
}  // namespace function_detail

/// A differentiable op of your own, LibTorch's way:
///   struct Scale : autograd::Function<Scale> {
///     static Tensor forward(AutogradContext* ctx, const Tensor& x, double k) {
///       ctx->save_for_backward({x}); ctx->saved_data["k"] = k; return x * k;
///     }
///     static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
///       return {grads[0] * ctx->saved_data["k"].toDouble(), Tensor()};
///     }
///   };
///   Tensor y = Scale::apply(x, 2.0);
/// apply() runs forward under NoGradGuard (what it computes is not recorded) and, when grad
/// mode is on and a tensor argument requires grad, records one graph node (named
/// T::name + "Backward" when T has a static `name`, else "FunctionBackward") whose rule is
/// backward: it gets one gradient per output (zeros where an output got none) and returns
/// one per forward argument (undefined for non-tensors and for inputs that need none; one per
/// tensor argument is accepted too). With create_graph, backward's own ops are recorded, so
/// a backward written with Tensor ops can be differentiated again. forward returns a Tensor
/// or a tensor_list; non-floating outputs are not differentiable. Error(autograd) when
/// backward returns the wrong number of gradients or a gradient of the wrong shape.
template <class T> struct Function {
  template <class... Args> static auto apply(Args&&... args) {
    auto ctx = std::make_shared<AutogradContext>();
    tensor_list inputs;
    std::vector<std::size_t> positions;
    std::size_t k = 0;
    auto collect = [&](const auto& a) {
      if constexpr (function_detail::is_tensor_v<decltype(a)>) {
        inputs.push_back(a);
        positions.push_back(k);
      }
      ++k;
    };
    (collect(args), ...);
    const bool record = any_requires_grad(inputs);
    using Result = decltype(T::forward(ctx.get(), std::forward<Args>(args)...));
    Result result;
    {
      NoGradGuard no_grad;
      result = T::forward(ctx.get(), std::forward<Args>(args)...);
    }
    if (!record) return result;
    tensor_list outputs = function_detail::as_list(result);
    std::vector<function_detail::OutputMeta> meta;
    for (Tensor& o : outputs) {
      if (!o.defined()) throw Error(ErrorKind::autograd, std::string(function_detail::node_name<T>()) +
                                                             ": forward returned an undefined tensor");
      // An input returned as is gets a handle of its own: the node must not rewrite the
      // input's history.
      for (const Tensor& in : inputs)
        if (o.is_same(in)) o = o.detach();
      meta.push_back({o.shape(), o.dtype(), o.device()});
    }
    std::vector<Shape> input_shapes;
    for (const Tensor& in : inputs) input_shapes.push_back(in.shape());
    auto node = std::make_shared<function_detail::FunctionNode<T>>(ctx, positions, sizeof...(Args), meta,
                                                                   input_shapes);
    connect(node, inputs, outputs);
    for (const Tensor& o : outputs)
      if (!is_floating_point(o.dtype())) o.set_grad_fn(nullptr);
    // Saved tensors: an output is kept without a reference cycle (SavedTensor's rule).
    for (const Tensor& t : ctx->pending_) {
      bool is_output = false;
      for (const Tensor& o : outputs) is_output = is_output || (t.defined() && o.is_same(t));
      ctx->saved_.emplace_back(t, is_output);
    }
    ctx->pending_.clear();
    ctx->node_ = node.get();
    if constexpr (std::is_same_v<Result, Tensor>)
      return outputs[0];
    else
      return outputs;
  }
};

}  // namespace brrr::autograd
