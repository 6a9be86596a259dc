// Replays the PyTorch fixtures of tests/ops/make_math_fixtures.py (math_more.safetensors):
// for each case NAME, NAME/x0.. are the inputs, NAME/out PyTorch's output and, for
// differentiable cases, NAME/up the upstream gradient and NAME/gi PyTorch's input gradients.
// Include after tests/tensor/helpers.hpp and `import brrr;`; needs <functional>, <map>.
#pragma once

namespace test {

using CaseFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// The fixture file's tensors (loaded once).
inline const io::TensorMap& math_fixtures() {
  static const io::TensorMap map = io::load_safetensors(std::string(BRRR_TEST_DATA) + "/math_more.safetensors");
  return map;
}

/// Close within atol + rtol |expected|; NaN matches NaN, infinities match exactly, and the
/// sign of zero when `signed_zero`.
inline void check_values(const std::vector<double>& got, const std::vector<double>& want, double rtol, double atol,
                         const std::string& what, bool signed_zero = false) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    INFO(what, " element ", i, ": got ", g, ", PyTorch ", w);
    if (std::isnan(w)) {
      CHECK(std::isnan(g));
    } else if (std::isinf(w)) {
      CHECK(g == w);
    } else {
      CHECK(std::abs(g - w) <= atol + rtol * std::abs(w));
      if (signed_zero && w == 0) CHECK(std::signbit(g) == std::signbit(w));
    }
  }
}

/// Runs case `name` of fixture map `m` through f on the CPU in `dtype` (floating inputs converted; f64 is the
/// fixture itself) and checks the output against PyTorch's, and, when the fixture has
/// gradients and dtype is f64, the gradients too.
inline void replay_from(const io::TensorMap& m, const std::string& name, const CaseFn& f, DType dtype = DType::f64,
                        double rtol = 1e-12, double atol = 1e-12, bool signed_zero = false) {
  INFO("case ", name, " in ", to_string(dtype));
  REQUIRE_MESSAGE(m.count(name + "/out"), "no fixture for " << name);
  std::vector<Tensor> inputs;
  for (int i = 0; m.count(name + "/x" + std::to_string(i)); ++i) {
    Tensor x = m.at(name + "/x" + std::to_string(i));
    if (is_floating_point(x.dtype())) x = x.to(dtype);
    inputs.push_back(x);
  }
  const bool grads = dtype == DType::f64 && m.count(name + "/up");
  if (grads)
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (m.count(name + "/g" + std::to_string(i))) inputs[i].requires_grad_();
  Tensor out = f(inputs);
  const Tensor& want = m.at(name + "/out");
  CHECK(out.shape() == want.shape());
  if (want.dtype() == DType::boolean || !is_floating_point(want.dtype())) CHECK(out.dtype() == want.dtype());
  check_values(values(out), values(want), rtol, atol, name + " output", signed_zero);
  if (!grads) return;
  autograd::backward({out}, {m.at(name + "/up")});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string key = name + "/g" + std::to_string(i);
    if (!m.count(key)) continue;
    Tensor g = inputs[i].grad();
    std::vector<double> want_g = values(m.at(key));
    std::vector<double> got_g = g.defined() ? values(g) : std::vector<double>(want_g.size(), 0.0);
    check_values(got_g, want_g, std::max(rtol, 1e-9), std::max(atol, 1e-10), key);
  }
}

/// replay_from on math_more.safetensors.
inline void replay(const std::string& name, const CaseFn& f, DType dtype = DType::f64, double rtol = 1e-12,
                   double atol = 1e-12, bool signed_zero = false) {
  replay_from(math_fixtures(), name, f, dtype, rtol, atol, signed_zero);
}

}  // namespace test
