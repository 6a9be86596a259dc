// brrr.nn — modules (layers with parameters), initialisation and state dicts. A module is a
// cheap handle (shared ownership) to its implementation, like a torch::nn::ModuleHolder:
// copying an nn::Linear copies the handle, and both see the same parameters.
module;
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <concepts>
#include <type_traits>
#include <utility>
#include <vector>
export module brrr.nn;
import brrr.tensor;
import brrr.ops;

export namespace brrr::nn {

/// Parameters and buffers by dotted name ("0.weight", "attn.qkv.bias"), sorted.
using StateDict = std::map<std::string, Tensor>;

class Module;

/// The state behind a module handle. Subclass it for a custom layer (LibTorch's
/// `struct NetImpl : torch::nn::Module`): register parameters, buffers and children in the
/// constructor and define forward(); wrap it in a ModuleHolder (BRRR_MODULE) for a handle
/// with `net->member` access.
class ModuleImpl {
public:
  virtual ~ModuleImpl() = default;
  /// The one-tensor computation that containers (Sequential) and Module::operator() call.
  /// The default throws Error(value). A module with several inputs or outputs defines its
  /// own forward(...) instead, called through its holder: net(a, b) or net->forward(a, b).
  virtual Tensor forward(const Tensor& input);
  /// A short description, e.g. "Linear(in_features=784, out_features=10, bias=true)". The
  /// default is the class's name without its namespace and an "Impl" suffix (NetImpl: "Net").
  virtual std::string name() const;

  /// Adds a parameter: a leaf that requires grad (floating dtypes). Returns it.
  Tensor& register_parameter(const std::string& name, Tensor tensor);
  /// Adds a buffer: state saved in the state dict but not trained (e.g. running stats).
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  /// Adds a child module (its parameters appear under "name."). Error(value) for an empty
  /// handle, a taken or dotted name, or the module itself.
  void register_module(const std::string& name, std::shared_ptr<ModuleImpl> child);
  /// The same for a handle (nn::Linear, a ModuleHolder, ...) or a shared_ptr of a custom
  /// Impl, returned so that it can be kept in a member:
  ///   fc1 = register_module("fc1", nn::Linear(784, 64));
  template <class M>
    requires std::derived_from<M, Module>
  M register_module(const std::string& name, M module) {
    register_module(name, module.impl());
    return module;
  }
  template <class T>
    requires(std::derived_from<T, ModuleImpl> && !std::is_same_v<T, ModuleImpl>)
  std::shared_ptr<T> register_module(const std::string& name, std::shared_ptr<T> module) {
    register_module(name, std::shared_ptr<ModuleImpl>(module));
    return module;
  }

  std::vector<std::pair<std::string, Tensor>>& own_parameters() { return parameters_; }
  std::vector<std::pair<std::string, Tensor>>& own_buffers() { return buffers_; }
  std::vector<std::pair<std::string, std::shared_ptr<ModuleImpl>>>& own_children() { return children_; }
  bool training = true;

private:
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<ModuleImpl>>> children_;
};

/// A handle to any module. Every concrete module (Linear, ReLU, Sequential, ...) converts
/// to it, so containers hold heterogeneous layers.
class Module {
public:
  Module() = default;
  explicit Module(std::shared_ptr<ModuleImpl> impl) : impl_(std::move(impl)) {}

  /// forward(input). Throws Error(value) on an empty handle.
  Tensor operator()(const Tensor& input) const;
  Tensor forward(const Tensor& input) const { return (*this)(input); }

  /// All parameters, depth-first in registration order (this module's first); a tensor
  /// registered under several names (tied weights) appears once, under its first name.
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  /// Direct children, in registration order.
  std::vector<std::pair<std::string, Module>> named_children() const;
  std::vector<Module> children() const;

  /// Training mode (dropout active) or evaluation mode; recursive. Returns *this.
  const Module& train(bool on = true) const;
  const Module& eval() const { return train(false); }
  bool is_training() const;

  /// Moves/converts every parameter and buffer in place (Tensor::set_data), so optimizers
  /// built before keep working. Gradients are dropped if they no longer match.
  const Module& to(Device device) const;
  /// Converts floating parameters and buffers to `dtype`.
  const Module& to(DType dtype) const;

  /// Parameters and buffers by dotted name (tied tensors under each of their names). The
  /// values are detached tensors sharing storage with the module: clone() them for a snapshot.
  StateDict state_dict() const;
  /// The keys load_state_dict(strict = false) did not match (PyTorch's _IncompatibleKeys).
  struct IncompatibleKeys {
    std::vector<std::string> missing_keys;     ///< the module's, absent from the state dict
    std::vector<std::string> unexpected_keys;  ///< the state dict's, not the module's
  };
  /// Copies values from `state` into the existing parameters/buffers in place (any device or
  /// dtype converts). strict: Error(value) listing missing and unexpected keys; otherwise the
  /// matching keys are loaded and the others returned. A shape mismatch is always
  /// Error(shape) naming the key and both shapes.
  IncompatibleKeys load_state_dict(const StateDict& state, bool strict = true) const;

  /// Sum of parameter numels (a tensor registered twice counts once).
  std::int64_t num_parameters() const;
  /// A tree of the modules' names, like print(model) in PyTorch.
  std::string to_string() const;

  /// Sets every parameter's gradient to none (set_to_none, PyTorch 2's default) or zeroes
  /// it in place.
  void zero_grad(bool set_to_none = true) const;
  /// Calls fn on every submodule, then on this module (PyTorch's order: children first,
  /// depth-first), e.g. for custom initialisation:
  ///   net.apply([](nn::Module& m) { if (m.type_name() == "Linear") ... });
  const Module& apply(const std::function<void(Module&)>& fn) const;
  /// Every module of the tree with its dotted name ("" for this one), this one first.
  std::vector<std::pair<std::string, Module>> named_modules() const;
  /// The module's kind: name() up to its first '(' ("Linear", "Sequential", "Net").
  std::string type_name() const;
  /// The implementation as T (nullptr when it is not a T): the typed way back from a Module
  /// to a custom Impl.
  template <class T> std::shared_ptr<T> as() const { return std::dynamic_pointer_cast<T>(impl_); }

  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<ModuleImpl>& impl() const { return impl_; }

protected:
  std::shared_ptr<ModuleImpl> impl_;
};

/// A typed handle to a custom module (LibTorch's ModuleHolder, made by TORCH_MODULE): owns a
/// shared Impl, gives `net->member` access to it, calls its forward with any arguments
/// (`net(a, b)`), and is a Module (parameters(), to(), state_dict(), containers). Spell it
/// `using Net = nn::ModuleHolder<NetImpl>;` or, with the header nn/module_holder.hpp,
/// `BRRR_MODULE(Net);`. Constructed from Impl's constructor arguments; `Net net{nullptr}` is
/// an empty handle (to be assigned later, e.g. by register_module).
template <class Impl> class ModuleHolder : public Module {
public:
  using ImplType = Impl;
  /// Default-constructs the Impl (when it can be).
  ModuleHolder()
    requires std::is_default_constructible_v<Impl>
      : Module(std::make_shared<Impl>()) {}
  /// An empty handle.
  ModuleHolder(std::nullptr_t) {}
  /// Wraps an existing Impl (shared, not copied).
  ModuleHolder(std::shared_ptr<Impl> impl) : Module(std::move(impl)) {}
  /// Impl(args...).
  template <class First, class... Rest>
    requires(!std::is_same_v<std::decay_t<First>, ModuleHolder> &&
             !std::is_same_v<std::decay_t<First>, std::nullptr_t> &&
             !std::is_same_v<std::decay_t<First>, std::shared_ptr<Impl>> &&
             std::is_constructible_v<Impl, First, Rest...>)
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : Module(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}

  /// The Impl; Error(value) on an empty handle.
  Impl* operator->() const { return get(); }
  Impl& operator*() const { return *get(); }
  Impl* get() const {
    if (!impl_) throw Error(ErrorKind::value, "ModuleHolder: the module handle is empty (made from nullptr?)");
    return static_cast<Impl*>(impl_.get());
  }
  std::shared_ptr<Impl> ptr() const { return std::static_pointer_cast<Impl>(impl_); }
  bool is_empty() const { return impl_ == nullptr; }
  /// Impl::forward(args...), whatever its arguments and result.
  template <class... Args> decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
  template <class... Args> decltype(auto) forward(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
};

/// Modules in a list, registered as children "0", "1", ... (their parameters appear under
/// those names), without a forward of its own: iterate it in yours.
class ModuleList : public Module {
public:
  ModuleList();
  ModuleList(std::initializer_list<Module> modules);
  /// Appends a module; Error(value) for an empty handle. Returns *this.
  ModuleList& push_back(const Module& module);
  /// Appends every module of `other`.
  ModuleList& extend(const ModuleList& other);
  std::size_t size() const;
  bool empty() const { return size() == 0; }
  /// Module `index`; Error(index) when out of range.
  Module operator[](std::size_t index) const;
  /// Module `index` as its Impl type T (Error(value) when it is not one).
  template <class T> std::shared_ptr<T> at(std::size_t index) const {
    auto p = (*this)[index].as<T>();
    if (!p) throw Error(ErrorKind::value, "ModuleList::at: module " + std::to_string(index) + " is not of the type asked");
    return p;
  }
  std::vector<Module>::const_iterator begin() const;
  std::vector<Module>::const_iterator end() const;

private:
  std::shared_ptr<std::vector<Module>> items_;  // the handles, shared by copies of this handle
};

/// Modules by name, in insertion order, registered as children under their keys.
class ModuleDict : public Module {
public:
  ModuleDict();
  ModuleDict(std::initializer_list<std::pair<std::string, Module>> modules);
  /// Adds `module` under `key` (Error(value) for a taken or dotted key, an empty handle).
  ModuleDict& insert(const std::string& key, const Module& module);
  /// The module under `key`; Error(index) naming it when absent.
  Module operator[](const std::string& key) const;
  bool contains(const std::string& key) const;
  std::size_t size() const;
  std::vector<std::string> keys() const;
  std::vector<Module> values() const;
  std::vector<std::pair<std::string, Module>> items() const;
};

/// Parameters in a list, registered as "0", "1", ... (leaves requiring grad, floating).
class ParameterList : public Module {
public:
  ParameterList();
  ParameterList(std::initializer_list<Tensor> parameters);
  /// Appends a parameter (detached if not a leaf, marked requires_grad). Returns *this.
  ParameterList& append(const Tensor& parameter);
  std::size_t size() const;
  /// Parameter `index`; Error(index) when out of range.
  Tensor operator[](std::size_t index) const;
};

// ---------------------------------------------------------------------------------------
// Initialisation (in place, under NoGradGuard, from the seeded generator of the tensor's
// device: the same seed gives the same weights on CPU and GPU). Formulas: Glorot & Bengio
// 2010 (xavier), He et al. 2015 (kaiming), as in torch.nn.init.
// ---------------------------------------------------------------------------------------

namespace init {
/// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (>= 2-D tensors).
std::pair<std::int64_t, std::int64_t> fan_in_and_fan_out(const Tensor& t);
/// Recommended gain: linear/sigmoid 1, tanh 5/3, relu sqrt(2), leaky_relu sqrt(2/(1+a^2)).
double calculate_gain(const std::string& nonlinearity, double param = 0.01);
void uniform_(const Tensor& t, double low = 0, double high = 1);
void normal_(const Tensor& t, double mean = 0, double std = 1);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);
/// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
void xavier_uniform_(const Tensor& t, double gain = 1);
/// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
void xavier_normal_(const Tensor& t, double gain = 1);
/// U(-b, b), b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a); mode "fan_in"
/// or "fan_out".
void kaiming_uniform_(const Tensor& t, double a = 0, const std::string& mode = "fan_in",
                      const std::string& nonlinearity = "leaky_relu");
/// N(0, std^2), std = gain / sqrt(fan).
void kaiming_normal_(const Tensor& t, double a = 0, const std::string& mode = "fan_in",
                     const std::string& nonlinearity = "leaky_relu");
}  // namespace init

// ---------------------------------------------------------------------------------------
// Layers. Each is a handle class; construct on the CPU (the seeded init is identical on
// every device), then .to(device).
// ---------------------------------------------------------------------------------------

/// y = x W^T + b: [..., in] -> [..., out]. W [out, in] ~ kaiming_uniform(a = sqrt 5), b ~
/// U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's defaults).
class Linear : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Linear layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Linear(Null) {}
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true);
  Tensor weight() const;
  Tensor bias() const;  ///< undefined when bias = false
};

/// 2-D convolution [N, C, H, W] -> [N, O, H', W'] (see brrr::conv2d). Weight
/// [O, C/groups, kh, kw] and bias initialised like PyTorch's Conv2d. Options as PyTorch's:
/// padding amounts or "same" / "valid", padding_mode "zeros" | "reflect" | "replicate" |
/// "circular" (the input padded by brrr::pad first); Error(value) at construction for another
/// mode or "same" with a stride.
class Conv2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Conv2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Conv2d(Null) {}
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::array<std::int64_t, 2> kernel_size,
         Conv2dOptions options = {}, bool bias = true);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv2dOptions options = {},
         bool bias = true);
  Tensor weight() const;
  Tensor bias() const;
};

/// 2-D transposed convolution [N, Cin, H, W] -> [N, Cout, H', W'] (see
/// brrr::conv_transpose2d). Weight [Cin, Cout/groups, kh, kw] ~ kaiming_uniform(a = sqrt 5)
/// and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = Cout/groups * kh * kw (PyTorch's).
class ConvTranspose2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::ConvTranspose2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> ConvTranspose2d(Null) {}
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, std::array<std::int64_t, 2> kernel_size,
                  ConvTranspose2dOptions options = {}, bool bias = true);
  ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
                  ConvTranspose2dOptions options = {}, bool bias = true);
  Tensor weight() const;
  Tensor bias() const;
};
/// 1-D convolution [N, C, L] -> [N, O, L'] (see brrr::conv1d); weight [O, C/groups, k]
/// initialised like Conv2d's; padding and padding_mode as Conv2d's.
class Conv1d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Conv1d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Conv1d(Null) {}
  Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv1dOptions options = {},
         bool bias = true);
  Tensor weight() const;
  Tensor bias() const;
};

/// brrr::max_pool2d with fixed options; forward_with_indices also returns the argmax indices
/// (PyTorch's return_indices), which MaxUnpool2d takes.
class MaxPool2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::MaxPool2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> MaxPool2d(Null) {}
  explicit MaxPool2d(Pool2dOptions options);
  explicit MaxPool2d(std::int64_t kernel_size);
  ValuesIndices forward_with_indices(const Tensor& input) const;
};
/// brrr::max_pool1d with fixed options.
class MaxPool1d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> MaxPool1d(Null) {}
  explicit MaxPool1d(Pool1dOptions options);
  explicit MaxPool1d(std::int64_t kernel_size);
  ValuesIndices forward_with_indices(const Tensor& input) const;
};
/// brrr::avg_pool2d with fixed options.
class AvgPool2d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AvgPool2d(Null) {}
  explicit AvgPool2d(Pool2dOptions options);
  explicit AvgPool2d(std::int64_t kernel_size);
};
/// brrr::avg_pool1d with fixed options.
class AvgPool1d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AvgPool1d(Null) {}
  explicit AvgPool1d(Pool1dOptions options);
  explicit AvgPool1d(std::int64_t kernel_size);
};
/// brrr::adaptive_avg_pool2d to a fixed output size.
class AdaptiveAvgPool2d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AdaptiveAvgPool2d(Null) {}
  explicit AdaptiveAvgPool2d(ExpandingArray<2> output_size);
};
/// brrr::adaptive_avg_pool1d to a fixed output size.
class AdaptiveAvgPool1d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AdaptiveAvgPool1d(Null) {}
  explicit AdaptiveAvgPool1d(std::int64_t output_size);
};
/// brrr::adaptive_max_pool2d to a fixed output size.
class AdaptiveMaxPool2d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AdaptiveMaxPool2d(Null) {}
  explicit AdaptiveMaxPool2d(ExpandingArray<2> output_size);
  ValuesIndices forward_with_indices(const Tensor& input) const;
};
/// brrr::adaptive_max_pool1d to a fixed output size.
class AdaptiveMaxPool1d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> AdaptiveMaxPool1d(Null) {}
  explicit AdaptiveMaxPool1d(std::int64_t output_size);
  ValuesIndices forward_with_indices(const Tensor& input) const;
};
/// brrr::max_unpool2d with fixed kernel, stride and padding: unpool(x, indices) or, for an
/// output size other than the default, unpool(x, indices, {H', W'}). It has no one-tensor
/// forward (a Sequential cannot hold it: Error(value) there).
class MaxUnpool2d : public Module {
public:
  template <std::same_as<std::nullptr_t> Null> MaxUnpool2d(Null) {}
  explicit MaxUnpool2d(MaxUnpool2dOptions options);
  explicit MaxUnpool2d(std::int64_t kernel_size);
  Tensor operator()(const Tensor& input, const Tensor& indices, std::vector<std::int64_t> output_size = {}) const;
  Tensor forward(const Tensor& input, const Tensor& indices, std::vector<std::int64_t> output_size = {}) const {
    return (*this)(input, indices, std::move(output_size));
  }
};

/// brrr::interpolate with fixed options (PyTorch's nn.Upsample: size or scale_factor, mode
/// nearest/nearest-exact/linear/bilinear/bicubic/trilinear/area, align_corners):
/// nn::Upsample({.scale_factor = {2}, .mode = "bilinear"}).
/// The options are checked at the first forward, against the input's rank, as PyTorch.
class Upsample : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Upsample layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Upsample(Null) {}
  explicit Upsample(InterpolateOptions options);
};

/// Flattens dims start..end (default: all but the batch dim).
class Flatten : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Flatten layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Flatten(Null) {}
  explicit Flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1);
};

class ReLU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::ReLU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> ReLU(Null) {}
  ReLU();
};
class GELU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::GELU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> GELU(Null) {}
  /// approximate: "none" (erf) or "tanh".
  explicit GELU(std::string approximate = "none");
};
class Tanh : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Tanh layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Tanh(Null) {}
  Tanh();
};
class Sigmoid : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Sigmoid layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Sigmoid(Null) {}
  Sigmoid();
};

/// The activations of brrr.ops as modules (nn/activations.cpp), with PyTorch's defaults.
class LeakyReLU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::LeakyReLU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> LeakyReLU(Null) {}
  explicit LeakyReLU(double negative_slope = 0.01);
};
class ELU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::ELU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> ELU(Null) {}
  explicit ELU(double alpha = 1.0);
};
class SELU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::SELU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> SELU(Null) {}
  SELU();
};
class CELU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::CELU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> CELU(Null) {}
  explicit CELU(double alpha = 1.0);  ///< alpha == 0: Error(value)
};
class Softplus : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Softplus layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Softplus(Null) {}
  explicit Softplus(double beta = 1.0, double threshold = 20.0);  ///< beta == 0: Error(value)
};
class Hardtanh : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Hardtanh layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Hardtanh(Null) {}
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);  ///< min_val > max_val: Error(value)
};
class ReLU6 : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::ReLU6 layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> ReLU6(Null) {}
  ReLU6();
};
class Hardswish : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Hardswish layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Hardswish(Null) {}
  Hardswish();
};
class Hardsigmoid : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Hardsigmoid layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Hardsigmoid(Null) {}
  Hardsigmoid();
};
class Mish : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Mish layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Mish(Null) {}
  Mish();
};
class LogSigmoid : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::LogSigmoid layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> LogSigmoid(Null) {}
  LogSigmoid();
};
class Softsign : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Softsign layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Softsign(Null) {}
  Softsign();
};
class GLU : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::GLU layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> GLU(Null) {}
  explicit GLU(std::int64_t dim = -1);
};
/// brrr::dropout2d with probability p in training mode; identity in eval mode.
class Dropout2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Dropout2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Dropout2d(Null) {}
  explicit Dropout2d(double p = 0.5);  ///< p outside [0, 1]: Error(value)
};

/// Dropout with probability p in training mode; identity in eval mode.
class Dropout : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Dropout layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Dropout(Null) {}
  explicit Dropout(double p = 0.5);
};

/// Layer norm over the trailing `normalized_shape` with learnable weight (ones) and bias
/// (zeros) when elementwise_affine.
class LayerNorm : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::LayerNorm layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> LayerNorm(Null) {}
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor weight() const;
  Tensor bias() const;
};

/// Options of the batch and instance norm modules (PyTorch's constructor arguments).
struct NormOptions {
  double eps = 1e-5;
  /// Running statistics' weight of the new batch; nullopt: the cumulative average
  /// (1 / num_batches_tracked, which reads the counter back: a host sync on CUDA).
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

/// Batch normalisation (brrr::batch_norm) with learnable weight (ones) and bias (zeros) when
/// affine, and buffers running_mean (zeros), running_var (ones) and num_batches_tracked (i64
/// 0-d) when track_running_stats: PyTorch's state_dict names. Training mode uses (and
/// updates) batch statistics; evaluation mode the running ones (batch statistics when not
/// tracked). BatchNorm1d takes [N, C] or [N, C, L], BatchNorm2d [N, C, H, W]; other ranks
/// and a channel count other than num_features are Error(shape).
class BatchNorm1d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::BatchNorm1d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> BatchNorm1d(Null) {}
  explicit BatchNorm1d(std::int64_t num_features, NormOptions options = {});
  Tensor weight() const;
  Tensor bias() const;
  Tensor running_mean() const;
  Tensor running_var() const;
  Tensor num_batches_tracked() const;
};
class BatchNorm2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::BatchNorm2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> BatchNorm2d(Null) {}
  explicit BatchNorm2d(std::int64_t num_features, NormOptions options = {});
  Tensor weight() const;
  Tensor bias() const;
  Tensor running_mean() const;
  Tensor running_var() const;
  Tensor num_batches_tracked() const;
};
/// Instance normalisation (brrr::instance_norm): PyTorch's defaults affine = false and
/// track_running_stats = false (pass NormOptions{.affine = false, ...} explicitly to
/// change one). InstanceNorm1d takes [N, C, L] (or unbatched [C, L]), InstanceNorm2d
/// [N, C, H, W] (or [C, H, W]).
class InstanceNorm1d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::InstanceNorm1d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> InstanceNorm1d(Null) {}
  explicit InstanceNorm1d(std::int64_t num_features,
                          NormOptions options = {.affine = false, .track_running_stats = false});
};
class InstanceNorm2d : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::InstanceNorm2d layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> InstanceNorm2d(Null) {}
  explicit InstanceNorm2d(std::int64_t num_features,
                          NormOptions options = {.affine = false, .track_running_stats = false});
};
/// Group normalisation (brrr::group_norm) with per-channel weight (ones) and bias (zeros)
/// when affine. num_channels not divisible by num_groups: Error(value).
class GroupNorm : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::GroupNorm layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> GroupNorm(Null) {}
  GroupNorm(std::int64_t num_groups, std::int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor weight() const;
  Tensor bias() const;
};
/// RMS normalisation (brrr::rms_norm) over the trailing normalized_shape with a weight
/// (ones) when elementwise_affine.
class RMSNorm : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::RMSNorm layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> RMSNorm(Null) {}
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true);
  Tensor weight() const;
};

/// A lookup table [num_embeddings, embedding_dim] ~ N(0, 1) (row padding_idx zeroed).
class Embedding : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Embedding layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Embedding(Null) {}
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim,
            std::optional<std::int64_t> padding_idx = std::nullopt);
  Tensor weight() const;
};

/// Causal multi-head self-attention (Vaswani et al. 2017) over [B, T, E]: one Linear to
/// q, k, v ([E] -> [3E]), softmax(q k^T / sqrt(E/heads) + causal mask) v per head, output
/// Linear. Position t attends to positions <= t. Dropout (training mode only) acts on the
/// attention weights. Children: "qkv" (Linear E -> 3E) and "proj" (Linear E -> E).
/// Error(value) unless embed_dim is a positive multiple of num_heads; Error(shape) for an
/// input that is not [B, T, embed_dim].
class CausalSelfAttention : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::CausalSelfAttention layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> CausalSelfAttention(Null) {}
  CausalSelfAttention(std::int64_t embed_dim, std::int64_t num_heads, double dropout = 0.0, bool bias = true);
};

/// Applies its modules in order.
class Sequential : public Module {
public:
  /// An empty handle, assigned later (LibTorch's `nn::Sequential layer{nullptr}`); a template so
  /// that a literal 0 still means a number.
  template <std::same_as<std::nullptr_t> Null> Sequential(Null) {}
  Sequential();
  Sequential(std::initializer_list<Module> modules);
  /// Appends a module (named by its index). Returns *this.
  Sequential& push_back(const Module& module);
  std::size_t size() const;
  Module operator[](std::size_t index) const;
};

/// A module from a function with no parameters, e.g. Lambda([](const Tensor& x) { ... }).
class Lambda : public Module {
public:
  explicit Lambda(std::function<Tensor(const Tensor&)> fn, std::string name = "Lambda");
};

/// Saves the module's state dict to a safetensors file (atomic: temp file + rename).
void save(const Module& module, const std::string& path);
/// Loads a safetensors file into the module (load_state_dict, strict).
void load(const Module& module, const std::string& path);

}  // namespace brrr::nn

// Not exported: shared by the implementation units of brrr.nn.
namespace brrr::nn::detail {
/// A parameterless module computing fn, printed as `name` (nn/layers.cpp).
std::shared_ptr<ModuleImpl> function_module(std::function<Tensor(const Tensor&)> fn, std::string name);
/// The module's own parameter (or buffer) `name`, undefined when it has none by that name;
/// Error(value) for an empty handle (nn/layers.cpp). The accessors weight(), bias(), ...
Tensor own_tensor(const std::shared_ptr<ModuleImpl>& impl, const std::string& name, bool buffer = false);
/// ", padding=same" / ", padding=valid" / ", padding=<amounts>" (empty amounts: nothing), as
/// PyTorch prints a conv module's padding (nn/conv.cpp).
std::string conv_padding_text(bool same, bool valid, const std::string& amounts);
/// Error(value) naming `module` for an unknown padding_mode or "same" with a stride (nn/conv.cpp).
void check_conv_options(const char* module, const std::string& padding_mode, bool same, bool strided);
}  // namespace brrr::nn::detail
