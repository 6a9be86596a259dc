// fused_mlp: a transformer's MLP, linear(gelu(linear(x, W1, b1), "tanh"), W2, b2), as two GEMMs
// with the activation in their epilogues (FlashAttention's fused_mlp_func, activation
// "gelu_approx"): the first GEMM writes gelu(h) and keeps the pre-activation h; in backward the
// GEMM that produces the hidden gradient, dh = (g W2) * gelu'(h), applies the derivative
// (backend GemmArgs::activation). Where the backend fuses an epilogue into the GEMM (cuBLASLt's
// GELU_AUX for bf16) one elementwise pass over the [rows, hidden] activations goes; elsewhere
// the backend runs the GEMM and then the elementwise kernel, the composite's work.
//
// One node for the whole MLP; saved: x, W1^T, h, gelu(h), W2^T (as the composite's linear,
// gelu and linear nodes save). Under create_graph the rule is recorded ops instead (h and the
// activation recomputed from the saved inputs, so second derivatives reach x and the weights).
// Under autocast (bf16/f16) the operands are cast as autocast's linear casts them and each
// gradient comes back in its input's dtype (linear_grads, f32 straight from the GEMMs).
module;
#include <array>
#include <cstdint>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

constexpr const char* op_name = "fused_mlp";

// The fused node applies: both weights 2-D (shapes checked by the caller), one device, and the
// dtypes one GEMM type (without autocast: one of f32/f64/bf16/f16 throughout; under autocast to
// `low`: each tensor f32 or `low`). Everything else takes the composite.
bool fusable(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2, DType low,
             bool autocasting) {
  for (const Tensor* t : {&x, &w1, &b1, &w2, &b2}) {
    if (!t->defined()) continue;
    if (is_wrapped_number(*t) || t->device() != x.device()) return false;
    if (autocasting ? t->dtype() != DType::f32 && t->dtype() != low : t->dtype() != x.dtype()) return false;
  }
  const DType d = autocasting ? low : x.dtype();
  return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16;
}

// Inputs: x [M, K], w1 [H, K], b1, w2 [N, H], b2. Saved: xb [M, K], w1t [K, H], h [M, H],
// a [M, H], w2t [H, N], b1 (the GEMM dtype; b1 for create_graph's recomputed h).
autograd::Grads mlp_rule(const autograd::Backward& c, const GradDtypes& to1, const GradDtypes& to2) {
  autograd::Grads r(5);
  const Tensor& g = c.grad();
  if (!g.defined()) return r;
  const Tensor &xb = c.saved(0), &w1t = c.saved(1), &w2t = c.saved(4);
  const bool first = c.needs(0) || c.needs(1) || c.needs(2);
  Tensor h = c.saved(2), a = c.saved(3), dh;
  if (autograd::is_grad_enabled()) {
    // create_graph: h and gelu(h) again as recorded ops of the inputs, the rule as ops.
    h = matmul(xb, w1t);
    if (c.saved(5).defined()) h = add(h, c.saved(5));
    a = gelu(h, "tanh");
    if (first) dh = unary_rule(backend::UnaryOp::gelu_tanh, matmul(g, w2t.t()), h);
  } else if (first) {
    dh = gemm_2d(g, w2t.t(), Tensor(), nullptr, backend::GemmOperand::b, op_name, false,
                 {backend::GemmActivation::gelu_tanh_backward, &h});
  }
  autograd::Grads second = linear_grads(g, a, w2t, {false, c.needs(3), c.needs(4)}, to2);
  r[3] = second[1].defined() ? second[1].t() : Tensor();  // W2's [N, H], not its transpose's
  r[4] = second[2];
  if (first) {
    autograd::Grads grads = linear_grads(dh, xb, w1t, {c.needs(0), c.needs(1), c.needs(2)}, to1);
    r[0] = grads[0];
    r[1] = grads[1].defined() ? grads[1].t() : Tensor();
    r[2] = grads[2];
  }
  return r;
}

void check_shapes(const Tensor& input, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
  require_defined(op_name, input);
  require_defined(op_name, w1, "fc_weight");
  require_defined(op_name, w2, "proj_weight");
  if (input.dim() < 1)
    throw Error(ErrorKind::shape, std::string(op_name) + ": input must have a feature dim, got " + describe(input));
  if (w1.dim() != 2 || w1.size(1) != input.size(-1))
    throw Error::shape_mismatch(op_name, input.shape(), w1.shape(),
                                "fc_weight must be [hidden, in] with input's last dim as in");
  if (w2.dim() != 2 || w2.size(1) != w1.size(0))
    throw Error::shape_mismatch(op_name, w1.shape(), w2.shape(),
                                "proj_weight must be [out, hidden] with fc_weight's hidden");
  if (b1.defined() && (b1.dim() != 1 || b1.size(0) != w1.size(0)))
    throw Error::shape_mismatch(op_name, w1.shape(), b1.shape(), "fc_bias must be [hidden]");
  if (b2.defined() && (b2.dim() != 1 || b2.size(0) != w2.size(0)))
    throw Error::shape_mismatch(op_name, w2.shape(), b2.shape(), "proj_bias must be [out]");
}

// Dtypes and devices, checked here so that an error names fused_mlp and all five tensors
// rather than the composite's matmul (which rejected an integer or a mixed-dtype input with
// only its own two operands in the message). One device; floating tensors of one dtype, where
// under autocast each tensor counts as the dtype autocast's linear casts it to (f32/bf16/f16:
// the autocast dtype; f64 stays f64), as PyTorch's linear demands.
void check_dtypes(const Tensor& input, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
                  bool autocasting, DType low) {
  (void)common_device(op_name, {input, w1, b1, w2, b2});
  const Tensor* tensors[] = {&input, &w1, &b1, &w2, &b2};
  const char* names[] = {"input", "fc_weight", "fc_bias", "proj_weight", "proj_bias"};
  for (std::size_t i = 0; i < 5; ++i)
    if (tensors[i]->defined()) require_floating(op_name, *tensors[i], names[i]);
  const auto effective = [&](const Tensor& t) { return autocasting && t.dtype() != DType::f64 ? low : t.dtype(); };
  bool one = true;
  for (const Tensor* t : tensors) one = one && (!t->defined() || effective(*t) == effective(input));
  if (one) return;
  std::string got;
  for (std::size_t i = 0; i < 5; ++i)
    if (tensors[i]->defined())
      got += std::string(got.empty() ? "" : ", ") + names[i] + " " + to_string(tensors[i]->dtype());
  const std::string cast = autocasting ? " (after autocast's casts to " + std::string(to_string(low)) + ")" : "";
  throw Error(ErrorKind::dtype, std::string(op_name) + ": expected one floating dtype" + cast + ", got " + got);
}

}  // namespace

Tensor fused_mlp(const Tensor& input, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                 const Tensor& proj_bias, const std::string& approximate) {
  NvtxRange range(op_name);
  check_shapes(input, fc_weight, fc_bias, proj_weight, proj_bias);
  if (approximate != "none" && approximate != "tanh")
    throw Error(ErrorKind::value,
                std::string(op_name) + ": approximate must be \"none\" or \"tanh\", got \"" + approximate + "\"");
  const bool autocasting =
      autocast::is_enabled() && (autocast::dtype() == DType::bf16 || autocast::dtype() == DType::f16);
  const DType low = autocasting ? autocast::dtype() : input.dtype();
  check_dtypes(input, fc_weight, fc_bias, proj_weight, proj_bias, autocasting, low);
  if (approximate != "tanh" || !fusable(input, fc_weight, fc_bias, proj_weight, proj_bias, low, autocasting))
    return linear(gelu(linear(input, fc_weight, fc_bias), approximate), proj_weight, proj_bias);

  AutocastGuard off(autocast::dtype(), false);  // the casts below are the autocast ones
  const std::int64_t out_features = proj_weight.size(0);
  std::int64_t rows = 1;  // (not reshape's -1: it cannot infer a size beside a 0 dim)
  for (std::int64_t d = 0; d + 1 < input.dim(); ++d) rows *= input.size(d);
  Tensor x = input.dim() == 2 ? input : input.reshape({rows, input.size(-1)});
  // Recorded casts (as autocast's own): a create_graph backward reaches x and the weights
  // through them.
  const auto cast = [low](const Tensor& t) { return !t.defined() || t.dtype() == low ? t : t.to(low); };
  const Tensor xb = cast(x), w1t = cast(fc_weight).t(), b1 = cast(fc_bias), w2t = cast(proj_weight).t(),
               b2 = cast(proj_bias);
  Tensor h;
  Tensor a = gemm_2d(xb, w1t, b1, nullptr, backend::GemmOperand::b, op_name, false,
                     {backend::GemmActivation::gelu_tanh, &h});
  Tensor y = gemm_2d(a, w2t, b2, nullptr, backend::GemmOperand::b, op_name);
  if (autograd::any_requires_grad({x, fc_weight, fc_bias, proj_weight, proj_bias})) {
    const auto bias_dtype = [low](const Tensor& b) { return b.defined() ? b.dtype() : low; };
    const GradDtypes to1{x.dtype(), fc_weight.dtype(), bias_dtype(fc_bias)};
    const GradDtypes to2{low, proj_weight.dtype(), bias_dtype(proj_bias)};
    autograd::record("FusedMlpBackward", {x, fc_weight, fc_bias, proj_weight, proj_bias}, {y},
                     {xb, w1t, h, a, w2t, b1},
                     [to1, to2](const autograd::Backward& c) { return mlp_rule(c, to1, to2); });
  }
  if (input.dim() == 2) return y;
  Shape shape(input.shape().begin(), input.shape().end() - 1);
  shape.push_back(out_features);
  return y.view(shape);
}

}  // namespace brrr
