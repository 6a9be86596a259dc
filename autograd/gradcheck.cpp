// gradcheck: analytic gradients (the engine) against central differences, in f64 on the CPU.
module;
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>
module brrr.autograd;
import brrr.tensor;
import brrr.ops;

namespace brrr::autograd {

namespace {

// Fixed pseudo-random projection weights in [0.5, 1.5) (a local LCG: gradcheck must not
// move the global generators), so a non-scalar output is reduced without symmetric
// cancellations. A single-element output keeps weight 1: the values reported on a mismatch
// are then the function's own derivatives.
Tensor projection(const Shape& shape) {
  std::int64_t n = checked_numel(shape, "gradcheck");
  if (n == 1) return ones(shape, {.dtype = DType::f64});
  std::vector<double> w(static_cast<std::size_t>(n));
  std::uint64_t state = 0x9E3779B97F4A7C15ull;
  for (double& v : w) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    v = 0.5 + static_cast<double>(state >> 11) * 0x1.0p-53;
  }
  return Tensor::from_vector(w, shape.empty() ? Shape{1} : shape).reshape(shape);
}

// One-element outputs are used as they are; others are reduced with the projection.
Tensor scalarize(const Tensor& out, const Tensor& weights) {
  Tensor o = out.dtype() == DType::f64 ? out : out.to(DType::f64);
  return o.numel() == 1 ? sum(o) : sum(mul(o, weights));
}

std::string index_text(std::int64_t flat, const Shape& shape) {
  Shape idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return to_string(idx);
}

}  // namespace

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs_in,
               GradcheckOptions options) {
  std::vector<Tensor> inputs;
  std::vector<std::size_t> checked;  // indices of floating inputs
  for (std::size_t i = 0; i < inputs_in.size(); ++i) {
    const Tensor& t = inputs_in[i];
    if (t.defined() && is_floating_point(t.dtype())) {
      Tensor x = t.detach().to(Device::cpu()).to(DType::f64).clone();
      x.requires_grad_(true);
      inputs.push_back(x);
      checked.push_back(i);
    } else {
      inputs.push_back(t.defined() ? t.to(Device::cpu()) : t);
    }
  }
  if (checked.empty()) throw Error(ErrorKind::autograd, "gradcheck: no floating-point input to check");

  Tensor out = f(inputs);
  if (!out.requires_grad())
    throw Error(ErrorKind::autograd, "gradcheck: the function's output does not require grad (no graph was recorded)");
  Tensor weights = projection(out.shape());
  Tensor y = scalarize(out, weights);
  std::vector<Tensor> wrt;
  for (std::size_t i : checked) wrt.push_back(inputs[i]);
  std::vector<Tensor> analytic = grad({y}, wrt, {}, false, false, /*allow_unused=*/true);

  NoGradGuard no_grad;
  for (std::size_t k = 0; k < checked.size(); ++k) {
    Tensor x = wrt[k];
    Tensor a = analytic[k].defined() ? analytic[k].to(DType::f64).contiguous() : zeros_like(x);
    std::vector<double> av = a.to_host<double>();
    auto* p = static_cast<double*>(x.data_ptr());  // a fresh contiguous f64 CPU leaf
    for (std::int64_t j = 0; j < x.numel(); ++j) {
      double saved = p[j];
      p[j] = saved + options.eps;
      double plus = scalarize(f(inputs), weights).item<double>();
      p[j] = saved - options.eps;
      double minus = scalarize(f(inputs), weights).item<double>();
      p[j] = saved;
      double numeric = (plus - minus) / (2 * options.eps);
      double analytic_j = av[static_cast<std::size_t>(j)];
      double tol = options.atol + options.rtol * std::fabs(numeric);
      if (!(std::fabs(analytic_j - numeric) <= tol)) {
        std::ostringstream msg;
        msg.precision(10);
        msg << "gradcheck: input " << checked[k] << " (shape " << to_string(x.shape()) << ") element "
            << index_text(j, x.shape()) << ": analytic " << analytic_j << " vs numeric " << numeric
            << " (|diff| " << std::fabs(analytic_j - numeric) << " > atol " << options.atol << " + rtol "
            << options.rtol << " * |numeric|)";
        throw Error(ErrorKind::autograd, msg.str());
      }
    }
  }
  return true;
}

}  // namespace brrr::autograd
