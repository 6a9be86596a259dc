// The activation modules of brrr.nn beyond ReLU/GELU/Tanh/Sigmoid (nn/layers.cpp): each is
// a parameterless module calling its brrr.ops function, printed as PyTorch prints it. The
// arguments are checked when the module is built, not at its first forward.
module;
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
module brrr.nn;
import brrr.tensor;
import brrr.ops;

namespace brrr::nn {

using detail::function_module;

LeakyReLU::LeakyReLU(double negative_slope) {
  impl_ = function_module([negative_slope](const Tensor& x) { return leaky_relu(x, negative_slope); },
                          "LeakyReLU(negative_slope=" + number_text(negative_slope) + ")");
}
ELU::ELU(double alpha) {
  impl_ = function_module([alpha](const Tensor& x) { return elu(x, alpha); }, "ELU(alpha=" + number_text(alpha) + ")");
}
SELU::SELU() { impl_ = function_module([](const Tensor& x) { return selu(x); }, "SELU()"); }
CELU::CELU(double alpha) {
  if (alpha == 0.0) throw Error::bad_value("CELU", "alpha", alpha, "non-zero");
  impl_ = function_module([alpha](const Tensor& x) { return celu(x, alpha); }, "CELU(alpha=" + number_text(alpha) + ")");
}
Softplus::Softplus(double beta, double threshold) {
  if (beta == 0.0) throw Error::bad_value("Softplus", "beta", beta, "non-zero");
  impl_ = function_module([beta, threshold](const Tensor& x) { return softplus(x, beta, threshold); },
                          "Softplus(beta=" + number_text(beta) + ", threshold=" + number_text(threshold) + ")");
}
Hardtanh::Hardtanh(double min_val, double max_val) {
  if (!(min_val <= max_val))
    throw Error(ErrorKind::value, "Hardtanh: min_val (" + number_text(min_val) + ") must not be greater than max_val (" +
                                      number_text(max_val) + ")");
  impl_ = function_module([min_val, max_val](const Tensor& x) { return hardtanh(x, min_val, max_val); },
                          "Hardtanh(min_val=" + number_text(min_val) + ", max_val=" + number_text(max_val) + ")");
}
ReLU6::ReLU6() { impl_ = function_module([](const Tensor& x) { return relu6(x); }, "ReLU6()"); }
Hardswish::Hardswish() { impl_ = function_module([](const Tensor& x) { return hardswish(x); }, "Hardswish()"); }
Hardsigmoid::Hardsigmoid() { impl_ = function_module([](const Tensor& x) { return hardsigmoid(x); }, "Hardsigmoid()"); }
Mish::Mish() { impl_ = function_module([](const Tensor& x) { return mish(x); }, "Mish()"); }
LogSigmoid::LogSigmoid() { impl_ = function_module([](const Tensor& x) { return logsigmoid(x); }, "LogSigmoid()"); }
Softsign::Softsign() { impl_ = function_module([](const Tensor& x) { return softsign(x); }, "Softsign()"); }
GLU::GLU(std::int64_t dim) {
  impl_ = function_module([dim](const Tensor& x) { return glu(x, dim); }, "GLU(dim=" + std::to_string(dim) + ")");
}

namespace {

class Dropout2dImpl final : public ModuleImpl {
public:
  explicit Dropout2dImpl(double p) : p_(p) {
    if (!(p >= 0.0 && p <= 1.0)) throw Error::bad_value("Dropout2d", "probability p", p, "in [0, 1]");
  }
  Tensor forward(const Tensor& x) override { return dropout2d(x, p_, training); }
  std::string name() const override { return "Dropout2d(p=" + number_text(p_) + ")"; }

private:
  double p_;
};

}  // namespace

Dropout2d::Dropout2d(double p) { impl_ = std::make_shared<Dropout2dImpl>(p); }

}  // namespace brrr::nn
