// The convolution modules beyond Conv2d (nn/layers.cpp): ConvTranspose2d and Conv1d, with
// PyTorch's reset_parameters (kaiming_uniform(a = sqrt 5) weight, U(+-1/sqrt(fan_in)) bias).
module;
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

namespace {

std::string pair_str(const std::array<std::int64_t, 2>& a) {
  return "(" + std::to_string(a[0]) + ", " + std::to_string(a[1]) + ")";
}

// weight of `shape` ~ kaiming_uniform(a = sqrt 5) and bias [out] ~ U(+-1/sqrt(fan_in)).
void register_conv_parameters(ModuleImpl& m, const Shape& shape, std::int64_t out, bool bias) {
  Tensor& weight = m.register_parameter("weight", empty(shape));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias) {
    const std::int64_t fan_in = init::fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(m.register_parameter("bias", empty({out})), -bound, bound);
  }
}

}  // namespace

std::string detail::conv_padding_text(bool same, bool valid, const std::string& amounts) {
  if (same) return ", padding=same";
  if (valid) return ", padding=valid";
  return amounts.empty() ? std::string() : ", padding=" + amounts;
}

void detail::check_conv_options(const char* module, const std::string& padding_mode, bool same, bool strided) {
  if (padding_mode != "zeros" && padding_mode != "reflect" && padding_mode != "replicate" && padding_mode != "circular")
    throw Error(ErrorKind::value, std::string(module) + ": padding_mode must be \"zeros\", \"reflect\", " +
                                      "\"replicate\" or \"circular\", got \"" + padding_mode + "\"");
  if (same && strided)
    throw Error(ErrorKind::value, std::string(module) + ": padding \"same\" is not supported for strided convolutions");
}

namespace {

void check_channels(const char* op, std::int64_t in, std::int64_t out, std::int64_t groups) {
  if (in <= 0 || out <= 0 || groups <= 0 || in % groups != 0 || out % groups != 0)
    throw Error(ErrorKind::value, std::string(op) + ": in_channels (" + std::to_string(in) + ") and out_channels (" +
                                      std::to_string(out) + ") must be positive multiples of groups (" +
                                      std::to_string(groups) + ")");
}

class ConvTranspose2dImpl final : public ModuleImpl {
public:
  ConvTranspose2dImpl(std::int64_t in, std::int64_t out, std::array<std::int64_t, 2> k, ConvTranspose2dOptions o,
                      bool bias)
      : in_(in), out_(out), k_(k), o_(o), has_bias_(bias) {
    check_channels("ConvTranspose2d", in, out, o.groups);
    if (k[0] <= 0 || k[1] <= 0)
      throw Error(ErrorKind::value, "ConvTranspose2d: kernel_size " + pair_str(k) + " must be positive");
    register_conv_parameters(*this, {in, out / o.groups, k[0], k[1]}, out, bias);
  }
  Tensor forward(const Tensor& x) override {
    return conv_transpose2d(x, own_parameters()[0].second, has_bias_ ? own_parameters()[1].second : Tensor(), o_);
  }
  std::string name() const override {
    std::string s = "ConvTranspose2d(" + std::to_string(in_) + ", " + std::to_string(out_) +
                    ", kernel_size=" + pair_str(k_) + ", stride=" + pair_str(o_.stride);
    if (o_.padding != std::array<std::int64_t, 2>{0, 0}) s += ", padding=" + pair_str(o_.padding);
    if (o_.output_padding != std::array<std::int64_t, 2>{0, 0}) s += ", output_padding=" + pair_str(o_.output_padding);
    if (o_.dilation != std::array<std::int64_t, 2>{1, 1}) s += ", dilation=" + pair_str(o_.dilation);
    if (o_.groups != 1) s += ", groups=" + std::to_string(o_.groups);
    if (!has_bias_) s += ", bias=false";
    return s + ")";
  }

private:
  std::int64_t in_, out_;
  std::array<std::int64_t, 2> k_;
  ConvTranspose2dOptions o_;
  bool has_bias_;
};

class Conv1dImpl final : public ModuleImpl {
public:
  Conv1dImpl(std::int64_t in, std::int64_t out, std::int64_t k, Conv1dOptions o, bool bias)
      : in_(in), out_(out), k_(k), o_(o), has_bias_(bias) {
    check_channels("Conv1d", in, out, o.groups);
    if (k <= 0) throw Error(ErrorKind::value, "Conv1d: kernel_size " + std::to_string(k) + " must be positive");
    detail::check_conv_options("Conv1d", o.padding_mode, o.padding.kind == ConvPadding<1>::Kind::same, o.stride != 1);
    register_conv_parameters(*this, {out, in / o.groups, k}, out, bias);
  }
  Tensor forward(const Tensor& x) override {
    return conv1d(x, own_parameters()[0].second, has_bias_ ? own_parameters()[1].second : Tensor(), o_);
  }
  std::string name() const override {
    std::string s = "Conv1d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=(" +
                    std::to_string(k_) + ",), stride=(" + std::to_string(o_.stride) + ",)";
    s += detail::conv_padding_text(o_.padding.kind == ConvPadding<1>::Kind::same,
                                   o_.padding.kind == ConvPadding<1>::Kind::valid,
                                   o_.padding.kind == ConvPadding<1>::Kind::amounts && o_.padding[0] != 0
                                       ? "(" + std::to_string(o_.padding[0]) + ",)"
                                       : std::string());
    if (o_.dilation != 1) s += ", dilation=(" + std::to_string(o_.dilation) + ",)";
    if (o_.groups != 1) s += ", groups=" + std::to_string(o_.groups);
    if (!has_bias_) s += ", bias=false";
    if (o_.padding_mode != "zeros") s += ", padding_mode=" + o_.padding_mode;
    return s + ")";
  }

private:
  std::int64_t in_, out_, k_;
  Conv1dOptions o_;
  bool has_bias_;
};

}  // namespace

ConvTranspose2d::ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels,
                                 std::array<std::int64_t, 2> kernel_size, ConvTranspose2dOptions options, bool bias) {
  impl_ = std::make_shared<ConvTranspose2dImpl>(in_channels, out_channels, kernel_size, options, bias);
}
ConvTranspose2d::ConvTranspose2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
                                 ConvTranspose2dOptions options, bool bias)
    : ConvTranspose2d(in_channels, out_channels, std::array<std::int64_t, 2>{kernel_size, kernel_size}, options, bias) {}
Tensor ConvTranspose2d::weight() const { return detail::own_tensor(impl_, "weight"); }
Tensor ConvTranspose2d::bias() const { return detail::own_tensor(impl_, "bias"); }

Conv1d::Conv1d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size, Conv1dOptions options,
               bool bias) {
  impl_ = std::make_shared<Conv1dImpl>(in_channels, out_channels, kernel_size, options, bias);
}
Tensor Conv1d::weight() const { return detail::own_tensor(impl_, "weight"); }
Tensor Conv1d::bias() const { return detail::own_tensor(impl_, "bias"); }

}  // namespace brrr::nn
