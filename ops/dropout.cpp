// dropout (Srivastava et al. 2014, "inverted" form as in PyTorch): when training, each
// element is kept with probability 1 - p and scaled by 1 / (1 - p), so the expectation is
// unchanged; otherwise (or p == 0) the input itself is returned. The mask is
// rand(x.shape) >= p drawn from the device's seeded generator (f64 uniforms for f64 input,
// f32 uniforms for f32/bf16/f16 so that p is not rounded to 8 or 11 bits), and rand() is
// bit-identical on CPU and GPU: the same seed gives the same mask on both. out = x * noise
// with noise = mask / (1 - p) in x's dtype (PyTorch's _dropout_impl), so the gradient is
// g * noise (MulBackward). p == 1 gives x * 0 as PyTorch (zeros, NaN where x is NaN/inf).
module;
#include <cmath>
#include <string>
module brrr.ops;
import brrr.tensor;

namespace brrr {

using namespace ops_detail;

Tensor dropout(const Tensor& x, double p, bool training) {
  NvtxRange range("dropout");
  require_defined("dropout", x);
  if (!(p >= 0.0 && p <= 1.0)) throw Error::bad_value("dropout", "probability p", p, "in [0, 1]");
  if (!training || p == 0.0) return x;
  if (!is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("dropout", "expected a floating-point input", x);
  if (p == 1.0) return mul(x, 0.0);
  Tensor noise;
  {
    NoGradGuard no_grad;
    DType uniform = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor u = rand(x.shape(), {.dtype = uniform, .device = x.device()});
    Tensor keep = ge(u, p);
    noise = where(keep, full({}, 1.0 / (1.0 - p), {.dtype = x.dtype(), .device = x.device()}),
                  zeros({}, {.dtype = x.dtype(), .device = x.device()}));
  }
  return mul(x, noise);
}

}  // namespace brrr
