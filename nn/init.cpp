// nn::init — in-place initialisation with torch.nn.init's formulas (Glorot & Bengio 2010 for
// xavier_*, He et al. 2015 for kaiming_*). Values are drawn with rand()/randn() on the
// tensor's own device (f64 draws for f64 tensors, f32 draws otherwise, so that bf16/f16
// weights are rounded once, at the end), scaled with out-of-place ops and written with
// copy_ under NoGradGuard: the seeded generators give the same words on CPU and GPU, so the
// same seed gives the same weights on both.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn::init {

namespace {

void require_tensor(const char* op, const Tensor& t) {
  if (!t.defined()) throw Error(ErrorKind::value, std::string("init::") + op + ": the tensor is undefined");
}

void require_floating(const char* op, const Tensor& t) {
  require_tensor(op, t);
  if (!is_floating_point(t.dtype()))
    throw Error::dtype_not_supported(std::string("init::") + op, "needs a floating tensor", t);
}

TensorOptions draw_options(const Tensor& t) {
  return {.dtype = t.dtype() == DType::f64 ? DType::f64 : DType::f32, .device = t.device()};
}

// Writes `values` into t in place, without recording.
void assign(const Tensor& t, const Tensor& values) {
  Tensor dst = t;
  dst.copy_(values);
}

std::int64_t fan(const char* op, const Tensor& t, const std::string& mode) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  if (mode == "fan_in") return fan_in;
  if (mode == "fan_out") return fan_out;
  throw Error(ErrorKind::value, std::string("init::") + op + ": mode must be \"fan_in\" or \"fan_out\", got \"" +
                                    mode + "\"");
}

}  // namespace

std::pair<std::int64_t, std::int64_t> fan_in_and_fan_out(const Tensor& t) {
  require_tensor("fan_in_and_fan_out", t);
  if (t.dim() < 2)
    throw Error(ErrorKind::shape, "init::fan_in_and_fan_out: fan in and fan out need a tensor with at least 2 dims, "
                                  "got " + to_string(t.shape()));
  std::int64_t receptive = 1;
  for (std::int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" ||
      nonlinearity == "conv3d" || nonlinearity == "conv_transpose1d" || nonlinearity == "conv_transpose2d" ||
      nonlinearity == "conv_transpose3d" || nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  throw Error(ErrorKind::value, "init::calculate_gain: unsupported nonlinearity \"" + nonlinearity + "\"");
}

void uniform_(const Tensor& t, double low, double high) {
  require_floating("uniform_", t);
  if (!(low <= high))
    throw Error(ErrorKind::value, "init::uniform_: low (" + number_text(low) + ") must be <= high (" +
                                      number_text(high) + ")");
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor u = rand(t.shape(), draw_options(t));
  assign(t, add(mul(u, high - low), low));
}

void normal_(const Tensor& t, double mean, double std) {
  require_floating("normal_", t);
  if (!(std >= 0)) throw Error::bad_value("init::normal_", "std", std, ">= 0");
  if (t.numel() == 0) return;
  NoGradGuard no_grad;
  Tensor z = randn(t.shape(), draw_options(t));
  assign(t, add(mul(z, std), mean));
}

void constant_(const Tensor& t, double value) {
  require_tensor("constant_", t);
  NoGradGuard no_grad;
  Tensor dst = t;
  dst.fill_(value);
}

void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

void xavier_uniform_(const Tensor& t, double gain) {
  require_floating("xavier_uniform_", t);
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  if (t.numel() == 0) return;
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform_(t, -a, a);
}

void xavier_normal_(const Tensor& t, double gain) {
  require_floating("xavier_normal_", t);
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  if (t.numel() == 0) return;
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

void kaiming_uniform_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  require_floating("kaiming_uniform_", t);
  std::int64_t f = fan("kaiming_uniform_", t, mode);
  double gain = calculate_gain(nonlinearity, a);
  if (t.numel() == 0) return;  // PyTorch: a no-op on zero-element tensors
  double bound = std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(f));
  uniform_(t, -bound, bound);
}

void kaiming_normal_(const Tensor& t, double a, const std::string& mode, const std::string& nonlinearity) {
  require_floating("kaiming_normal_", t);
  std::int64_t f = fan("kaiming_normal_", t, mode);
  double gain = calculate_gain(nonlinearity, a);
  if (t.numel() == 0) return;
  normal_(t, 0.0, gain / std::sqrt(static_cast<double>(f)));
}

}  // namespace brrr::nn::init
