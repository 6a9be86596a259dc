// fused_mlp against the float64 composite (linear, gelu "tanh", linear on the CPU), shared by
// the CPU suite (ops_fused_mlp) and the GPU one (gpu_fused_mlp). Include after
// tests/tensor/helpers.hpp and tests/tolerances.hpp; needs <random>, <string>, <vector>.
#pragma once

namespace test {

struct MlpCase {
  Shape lead;  ///< input's leading dims ([rows] or [batch, time])
  std::int64_t in = 8, hidden = 16, out = 8;
  bool fc_bias = true, proj_bias = true;
  DType dtype = DType::f32;                 ///< the tensors' dtype (f32 with autocast)
  std::optional<DType> autocast;            ///< run under AutocastGuard(*autocast)
  bool tf32 = false;
};

/// The largest |got - want| of a tensor over its largest |want| (1 when want is all zero and
/// got is not; NaN anywhere counts as infinity).
inline double relative_to_max(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = values(got), w = values(want);
  REQUIRE(g.size() == w.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) || std::isnan(w[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return scale > 0 ? worst / scale : worst > 0 ? 1.0 : 0.0;
}

/// Runs fused_mlp on `device` for case `c` with random inputs and upstream gradient, and
/// checks the output and the five gradients (their dtypes and shapes, their values against the
/// f64 composite on the same rounded inputs, within the `mlp` row).
inline void check_fused_mlp(const MlpCase& c, Device device, std::mt19937_64& rng) {
  Shape xs = c.lead;
  xs.push_back(c.in);
  std::int64_t rows = 1;
  for (std::int64_t d : c.lead) rows *= d;
  Shape ys = c.lead;
  ys.push_back(c.out);
  const auto make_in = [&](Shape shape, double scale) {
    Tensor t = Tensor::from_vector(normal_values(rng, numel_of(shape), scale), shape).to(c.dtype);
    return t;  // rounded to the dtype once; the reference starts from these values
  };
  Tensor x = make_in(xs, 1.0);
  Tensor w1 = make_in({c.hidden, c.in}, 1.0 / std::sqrt(static_cast<double>(c.in)));
  Tensor b1 = c.fc_bias ? make_in({c.hidden}, 0.3) : Tensor();
  Tensor w2 = make_in({c.out, c.hidden}, 1.0 / std::sqrt(static_cast<double>(c.hidden)));
  Tensor b2 = c.proj_bias ? make_in({c.out}, 0.3) : Tensor();
  const DType y_dtype = c.autocast ? *c.autocast : c.dtype;
  Tensor g = Tensor::from_vector(normal_values(rng, numel_of(ys)), ys).to(y_dtype);
  std::vector<Tensor> leaves{x, w1, b1, w2, b2};

  // The f64 reference: the composite on the CPU.
  std::vector<Tensor> ref;
  Tensor ref_y;
  {
    std::vector<Tensor> l;
    for (const Tensor& t : leaves) l.push_back(t.defined() ? t.to(DType::f64).clone().requires_grad_() : Tensor());
    ref_y = linear(gelu(linear(l[0], l[1], l[2]), "tanh"), l[3], l[4]);
    ref_y.backward(g.to(DType::f64));
    for (const Tensor& t : l) ref.push_back(t.defined() ? t.grad() : Tensor());
  }

  std::vector<Tensor> on;
  for (const Tensor& t : leaves) on.push_back(t.defined() ? t.to(device).clone().requires_grad_() : Tensor());
  const bool tf32_before = allow_tf32();
  set_allow_tf32(c.tf32);
  Tensor y;
  {
    std::optional<AutocastGuard> ac;
    if (c.autocast) ac.emplace(*c.autocast);
    y = fused_mlp(on[0], on[1], on[2], on[3], on[4]);
  }
  CHECK(y.dtype() == y_dtype);
  CHECK(y.shape() == ys);
  y.backward(g.to(device));
  set_allow_tf32(tf32_before);

  const Tol tol = tolerance(c.tf32 ? Computed::mlp_tf32 : Computed::mlp, y_dtype);
  const char* names[] = {"input", "fc_weight", "fc_bias", "proj_weight", "proj_bias"};
  INFO("dtype ", to_string(c.dtype), c.autocast ? " under autocast" : "", c.tf32 ? " (TF32)" : "", ", rows ", rows,
       ", in ", c.in, ", hidden ", c.hidden, ", out ", c.out, ", biases ", c.fc_bias, "/", c.proj_bias);
  {
    INFO("output");
    CHECK(relative_to_max(y.to(Device::cpu()), ref_y) <= tol.atol);
  }
  for (std::size_t i = 0; i < on.size(); ++i) {
    if (!on[i].defined()) continue;
    INFO("gradient of ", names[i]);
    const Tensor got = on[i].grad();
    REQUIRE(got.defined());
    CHECK(got.dtype() == on[i].dtype());
    CHECK(got.shape() == on[i].shape());
    CHECK(relative_to_max(got.to(Device::cpu()), ref[i]) <= tol.atol);
  }
}

}  // namespace test
