// The layers of brrr.nn: each handle class creates its Impl (a ModuleImpl defined here) and
// stores it in impl_; forward() calls the differentiable ops of brrr.ops, so autograd needs
// nothing from this file. Default initialisations follow PyTorch's reset_parameters().
module;
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

std::string bool_str(bool b) { return b ? "true" : "false"; }

std::string pair_str(const std::array<std::int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// A registered parameter by name, or an undefined tensor.

// Layers read their parameters from the registered list at each forward (not from copies),
// so whatever sits there — a tied weight put in place through own_parameters() — is used.
class LayerImpl : public ModuleImpl {
protected:
  const Tensor& param(std::size_t i) { return own_parameters().at(i).second; }
};

// --- Linear ---------------------------------------------------------------------------------

class LinearImpl final : public LayerImpl {
public:
  LinearImpl(std::int64_t in, std::int64_t out, bool bias) : in_(in), out_(out), has_bias_(bias) {
    if (in < 0 || out < 0)
      throw Error(ErrorKind::value, "Linear: in_features and out_features must be >= 0, got " + std::to_string(in) +
                                        " and " + std::to_string(out));
    // PyTorch's reset_parameters: kaiming_uniform(a = sqrt 5) gives U(-1/sqrt(in), 1/sqrt(in)).
    init::kaiming_uniform_(register_parameter("weight", empty({out, in})), std::sqrt(5.0));
    if (bias) {
      double bound = in > 0 ? 1.0 / std::sqrt(static_cast<double>(in)) : 0.0;
      init::uniform_(register_parameter("bias", empty({out})), -bound, bound);
    }
  }
  Tensor forward(const Tensor& x) override {
    if (!x.defined()) throw Error(ErrorKind::value, "Linear: the input is undefined");
    if (x.dim() < 1 || x.size(-1) != in_)
      throw Error(ErrorKind::shape, "Linear: input " + to_string(x.shape()) + " must end in in_features = " +
                                        std::to_string(in_));
    // linear() (not matmul(x, weight.t())): under autocast it casts the weight itself, not
    // its transpose, so the weight's gradient comes back contiguous (no copy to accumulate).
    return linear(x, param(0), has_bias_ ? param(1) : Tensor());
  }
  std::string name() const override {
    return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
           ", bias=" + bool_str(has_bias_) + ")";
  }

private:
  std::int64_t in_, out_;
  bool has_bias_;
};

// --- Conv2d ---------------------------------------------------------------------------------

class Conv2dImpl final : public LayerImpl {
public:
  Conv2dImpl(std::int64_t in, std::int64_t out, std::array<std::int64_t, 2> k, Conv2dOptions o, bool bias)
      : in_(in), out_(out), k_(k), o_(o), has_bias_(bias) {
    if (in <= 0 || out <= 0 || k[0] <= 0 || k[1] <= 0 || o.groups <= 0)
      throw Error(ErrorKind::value, "Conv2d: in_channels (" + std::to_string(in) + "), out_channels (" +
                                        std::to_string(out) + "), kernel_size " + pair_str(k) + " and groups (" +
                                        std::to_string(o.groups) + ") must be > 0");
    if (in % o.groups != 0 || out % o.groups != 0)
      throw Error(ErrorKind::value, "Conv2d: in_channels (" + std::to_string(in) + ") and out_channels (" +
                                        std::to_string(out) + ") must be divisible by groups (" +
                                        std::to_string(o.groups) + ")");
    detail::check_conv_options("Conv2d", o.padding_mode, o.padding.kind == ConvPadding<2>::Kind::same,
                               o.stride[0] != 1 || o.stride[1] != 1);
    Tensor weight = register_parameter("weight", empty({out, in / o.groups, k[0], k[1]}));
    init::kaiming_uniform_(weight, std::sqrt(5.0));
    if (bias) {
      std::int64_t fan_in = init::fan_in_and_fan_out(weight).first;
      double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
      init::uniform_(register_parameter("bias", empty({out})), -bound, bound);
    }
  }
  Tensor forward(const Tensor& x) override { return conv2d(x, param(0), has_bias_ ? param(1) : Tensor(), o_); }
  std::string name() const override {
    std::string s = "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair_str(k_) +
                    ", stride=" + pair_str(o_.stride);
    s += detail::conv_padding_text(o_.padding.kind == ConvPadding<2>::Kind::same,
                                   o_.padding.kind == ConvPadding<2>::Kind::valid,
                                   o_.padding.kind == ConvPadding<2>::Kind::amounts &&
                                           o_.padding.amounts != ExpandingArray<2>(std::int64_t{0})
                                       ? pair_str(o_.padding.amounts)
                                       : std::string());
    if (o_.dilation != std::array<std::int64_t, 2>{1, 1}) s += ", dilation=" + pair_str(o_.dilation);
    if (o_.groups != 1) s += ", groups=" + std::to_string(o_.groups);
    if (!has_bias_) s += ", bias=false";
    if (o_.padding_mode != "zeros") s += ", padding_mode=" + o_.padding_mode;
    return s + ")";
  }

private:
  std::int64_t in_, out_;
  std::array<std::int64_t, 2> k_;
  Conv2dOptions o_;
  bool has_bias_;
};

// --- parameterless layers -------------------------------------------------------------------

class FlattenImpl final : public ModuleImpl {
public:
  FlattenImpl(std::int64_t start, std::int64_t end) : start_(start), end_(end) {}
  Tensor forward(const Tensor& x) override {
    if (!x.defined()) throw Error(ErrorKind::value, "Flatten: the input is undefined");
    return x.flatten(start_, end_);
  }
  std::string name() const override {
    return "Flatten(start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_) + ")";
  }

private:
  std::int64_t start_, end_;
};

class UpsampleImpl final : public ModuleImpl {
public:
  explicit UpsampleImpl(InterpolateOptions o) : o_(std::move(o)) {}
  Tensor forward(const Tensor& x) override { return interpolate(x, o_); }
  std::string name() const override {
    std::ostringstream s;
    s << "Upsample(";
    auto list = [&](const auto& v) {
      if (v.size() == 1) s << v[0];
      else {
        s << "(";
        for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
        s << ")";
      }
    };
    if (!o_.size.empty()) s << "size=", list(o_.size);
    else s << "scale_factor=", list(o_.scale_factor);
    s << ", mode='" << o_.mode << "'";
    if (o_.align_corners) s << ", align_corners=" << bool_str(*o_.align_corners);
    return s.str() + ")";
  }

private:
  InterpolateOptions o_;
};

// An elementwise activation: a function and a printed name.
class ActivationImpl final : public ModuleImpl {
public:
  ActivationImpl(std::function<Tensor(const Tensor&)> fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {}
  Tensor forward(const Tensor& x) override { return fn_(x); }
  std::string name() const override { return name_; }

private:
  std::function<Tensor(const Tensor&)> fn_;
  std::string name_;
};

class DropoutImpl final : public ModuleImpl {
public:
  explicit DropoutImpl(double p) : p_(p) {
    if (!(p >= 0.0 && p <= 1.0))
      throw Error::bad_value("Dropout", "probability p", p, "in [0, 1]");
  }
  Tensor forward(const Tensor& x) override { return dropout(x, p_, training); }
  std::string name() const override { return "Dropout(p=" + number_text(p_) + ")"; }

private:
  double p_;
};

// --- LayerNorm, Embedding -------------------------------------------------------------------

class LayerNormImpl final : public LayerImpl {
public:
  LayerNormImpl(Shape shape, double eps, bool affine) : shape_(std::move(shape)), eps_(eps), affine_(affine) {
    if (shape_.empty()) throw Error(ErrorKind::shape, "LayerNorm: normalized_shape must not be empty");
    for (auto s : shape_)
      if (s <= 0) throw Error(ErrorKind::shape, "LayerNorm: normalized_shape " + to_string(shape_) + " must be > 0");
    if (affine) {
      register_parameter("weight", ones(shape_));
      register_parameter("bias", zeros(shape_));
    }
  }
  Tensor forward(const Tensor& x) override {
    return affine_ ? layer_norm(x, shape_, param(0), param(1), eps_) : layer_norm(x, shape_, {}, {}, eps_);
  }
  std::string name() const override {
    std::string s = to_string(shape_);
    s = "(" + s.substr(1, s.size() - 2) + (shape_.size() == 1 ? ",)" : ")");
    return "LayerNorm(" + s + ", eps=" + number_text(eps_) + ", elementwise_affine=" + bool_str(affine_) + ")";
  }

private:
  Shape shape_;
  double eps_;
  bool affine_;
};

class EmbeddingImpl final : public LayerImpl {
public:
  EmbeddingImpl(std::int64_t num, std::int64_t dim, std::optional<std::int64_t> padding) : num_(num), dim_(dim) {
    if (num < 0 || dim < 0)
      throw Error(ErrorKind::value, "Embedding: num_embeddings and embedding_dim must be >= 0, got " +
                                        std::to_string(num) + " and " + std::to_string(dim));
    if (padding) {
      if (*padding < -num || *padding >= num)
        throw Error(ErrorKind::index, "Embedding: padding_idx " + std::to_string(*padding) +
                                          " is out of range for num_embeddings " + std::to_string(num));
      padding_ = *padding < 0 ? *padding + num : *padding;
    }
    Tensor weight = register_parameter("weight", empty({num, dim}));
    init::normal_(weight);
    if (padding_) {
      NoGradGuard no_grad;
      weight.select(0, *padding_).fill_(0.0);
    }
  }
  Tensor forward(const Tensor& indices) override { return embedding(param(0), indices, padding_); }
  std::string name() const override {
    std::string s = "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_);
    if (padding_) s += ", padding_idx=" + std::to_string(*padding_);
    return s + ")";
  }

private:
  std::int64_t num_, dim_;
  std::optional<std::int64_t> padding_;
};

// --- containers -----------------------------------------------------------------------------

class SequentialImpl final : public ModuleImpl {
public:
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (const auto& [_, child] : own_children()) h = child->forward(h);
    return h;
  }
  std::string name() const override { return "Sequential"; }
};

class LambdaImpl final : public ModuleImpl {
public:
  LambdaImpl(std::function<Tensor(const Tensor&)> fn, std::string name) : fn_(std::move(fn)), name_(std::move(name)) {
    if (!fn_) throw Error(ErrorKind::value, "Lambda: the function is empty");
  }
  Tensor forward(const Tensor& x) override { return fn_(x); }
  std::string name() const override { return name_; }

private:
  std::function<Tensor(const Tensor&)> fn_;
  std::string name_;
};

}  // namespace

std::shared_ptr<ModuleImpl> detail::function_module(std::function<Tensor(const Tensor&)> fn, std::string name) {
  return std::make_shared<ActivationImpl>(std::move(fn), std::move(name));
}

// --- handles --------------------------------------------------------------------------------

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias) {
  impl_ = std::make_shared<LinearImpl>(in_features, out_features, bias);
}
Tensor Linear::weight() const { return detail::own_tensor(impl_, "weight"); }
Tensor Linear::bias() const { return detail::own_tensor(impl_, "bias"); }

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::array<std::int64_t, 2> kernel_size,
               Conv2dOptions options, bool bias) {
  impl_ = std::make_shared<Conv2dImpl>(in_channels, out_channels, kernel_size, options, bias);
}
Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv2dOptions options,
               bool bias)
    : Conv2d(in_channels, out_channels, std::array<std::int64_t, 2>{kernel_size, kernel_size}, options, bias) {}
Tensor Conv2d::weight() const { return detail::own_tensor(impl_, "weight"); }
Tensor Conv2d::bias() const { return detail::own_tensor(impl_, "bias"); }

Upsample::Upsample(InterpolateOptions options) { impl_ = std::make_shared<UpsampleImpl>(std::move(options)); }

Flatten::Flatten(std::int64_t start_dim, std::int64_t end_dim) {
  impl_ = std::make_shared<FlattenImpl>(start_dim, end_dim);
}

ReLU::ReLU() {
  impl_ = std::make_shared<ActivationImpl>([](const Tensor& x) { return relu(x); }, "ReLU()");
}
GELU::GELU(std::string approximate) {
  if (approximate != "none" && approximate != "tanh")
    throw Error(ErrorKind::value, "GELU: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
  std::string shown = approximate == "none" ? "GELU(approximate='none')" : "GELU(approximate='tanh')";
  impl_ = std::make_shared<ActivationImpl>([approximate](const Tensor& x) { return gelu(x, approximate); }, shown);
}
Tanh::Tanh() {
  impl_ = std::make_shared<ActivationImpl>([](const Tensor& x) { return tanh(x); }, "Tanh()");
}
Sigmoid::Sigmoid() {
  impl_ = std::make_shared<ActivationImpl>([](const Tensor& x) { return sigmoid(x); }, "Sigmoid()");
}

Dropout::Dropout(double p) { impl_ = std::make_shared<DropoutImpl>(p); }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine) {
  impl_ = std::make_shared<LayerNormImpl>(std::move(normalized_shape), eps, elementwise_affine);
}
Tensor LayerNorm::weight() const { return detail::own_tensor(impl_, "weight"); }
Tensor LayerNorm::bias() const { return detail::own_tensor(impl_, "bias"); }

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim, std::optional<std::int64_t> padding_idx) {
  impl_ = std::make_shared<EmbeddingImpl>(num_embeddings, embedding_dim, padding_idx);
}
Tensor Embedding::weight() const { return detail::own_tensor(impl_, "weight"); }

Sequential::Sequential() { impl_ = std::make_shared<SequentialImpl>(); }
Sequential::Sequential(std::initializer_list<Module> modules) : Sequential() {
  for (const Module& m : modules) push_back(m);
}
Sequential& Sequential::push_back(const Module& module) {
  if (!impl_) throw Error(ErrorKind::value, "Sequential::push_back: the Sequential handle is empty (moved from)");
  if (!module.defined()) throw Error(ErrorKind::value, "Sequential::push_back: the module handle is empty");
  impl_->register_module(std::to_string(impl_->own_children().size()), module.impl());
  return *this;
}
std::size_t Sequential::size() const { return impl_ ? impl_->own_children().size() : 0; }
Module Sequential::operator[](std::size_t index) const {
  if (!impl_) throw Error(ErrorKind::value, "Sequential: the handle is empty (moved from)");
  const auto& children = impl_->own_children();
  if (index >= children.size())
    throw Error(ErrorKind::index, "Sequential: index " + std::to_string(index) + " is out of range for " +
                                      std::to_string(children.size()) + " modules");
  return Module(children[index].second);
}

Lambda::Lambda(std::function<Tensor(const Tensor&)> fn, std::string name) {
  impl_ = std::make_shared<LambdaImpl>(std::move(fn), std::move(name));
}

}  // namespace brrr::nn

namespace brrr::nn::detail {

Tensor own_tensor(const std::shared_ptr<ModuleImpl>& impl, const std::string& name, bool buffer) {
  if (!impl) throw Error(ErrorKind::value, "nn: " + name + "() of an empty module handle (made from nullptr?)");
  for (const auto& [n, t] : buffer ? impl->own_buffers() : impl->own_parameters())
    if (n == name) return t;
  return {};
}

}  // namespace brrr::nn::detail
