// dropout (Srivastava et al. 2014, "inverted" form as in PyTorch): when training, each
// element is kept with probability 1 - p and scaled by 1 / (1 - p), so the expectation is
// unchanged; otherwise (or p == 0) the input itself is returned. The mask is
// rand(x.shape) >= p drawn from the device's seeded generator (f64 uniforms for f64 input,
// f32 uniforms for f32/bf16/f16 so that p is not rounded to 8 or 11 bits), and rand() is
// bit-identical on CPU and GPU: the same seed gives the same mask on both. out = x * noise
// with noise = mask / (1 - p) in x's dtype (PyTorch's _dropout_impl), so the gradient is
// g * noise; dropout computes it in one fused kernel (the uniforms drawn inside it) and keeps
// the boolean mask for backward (one byte per element, as PyTorch's native_dropout), whose
// kernel multiplies by the same noise. p == 1 gives x * 0 as PyTorch (zeros, NaN where x is
// NaN/inf).
// dropout2d draws the same noise once per channel.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

DType ops_detail::dropout_uniform_dtype(DType dtype) { return dtype == DType::f64 ? DType::f64 : DType::f32; }

namespace {

// The inverted-dropout noise of a boolean keep mask: 1 / (1 - p) where kept, else 0, in dtype.
Tensor noise_of_mask(const Tensor& kept, double p, DType dtype) {
  const TensorOptions o{.dtype = dtype, .device = kept.device()};
  return where(kept, full({}, 1.0 / (1.0 - p), o), zeros({}, o));
}

}  // namespace

Tensor ops_detail::dropout_noise_from(const Tensor& u, double p, DType dtype) {
  NoGradGuard no_grad;
  return noise_of_mask(ge(u, p), p, dtype);
}

Tensor ops_detail::dropout_noise(const Tensor& x, const Shape& shape, double p) {
  NoGradGuard no_grad;
  Tensor u = rand(shape, {.dtype = dropout_uniform_dtype(x.dtype()), .device = x.device()});
  return dropout_noise_from(u, p, x.dtype());
}

backend::AttentionDropout ops_detail::draw_dropout(double p, DType dtype, Device dev, std::int64_t numel) {
  backend::AttentionDropout d;
  d.p = p;
  const std::uint64_t words = backend::random_words(backend::Distribution::uniform, dropout_uniform_dtype(dtype), numel);
  if (dev.is_cuda() && backend::capture_underway(dev.index())) {
    const backend::CaptureRandomState at = backend::capture_random_words(dev.index(), words);
    d.seed_offset = at.seed_offset;
    d.offset = at.extra;
  } else {
    backend::GeneratorState& gen = backend::generator(dev);
    d.seed = gen.seed;
    d.offset = gen.offset;
    gen.offset += words;
  }
  return d;
}

// One fused kernel (backend dropout: the uniforms drawn in the kernel, the mask written for
// backward) computing exactly x * dropout_noise(x, x.shape(), p): the same words, the same
// noise and products, one pass instead of rand, ge, where and mul.
Tensor dropout(const Tensor& x, double p, bool training) {
  NvtxRange range("dropout");
  require_defined("dropout", x);
  if (!(p >= 0.0 && p <= 1.0)) throw Error::bad_value("dropout", "probability p", p, "in [0, 1]");
  if (!training || p == 0.0) return x;
  if (!is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("dropout", "expected a floating-point input", x);
  if (p == 1.0) return mul(x, 0.0);
  Tensor out, mask;
  {
    NoGradGuard no_grad;
    Tensor xc = x.contiguous();
    out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    mask = empty(x.shape(), {.dtype = DType::boolean, .device = x.device()});
    if (x.numel() > 0)
      backend::backend_for(x.device())
          .dropout(backend::output(out, "dropout"), backend::output(mask, "dropout"), backend::input(xc, "dropout"),
                   draw_dropout(p, x.dtype(), x.device(), x.numel()));
  }
  // d out / dx = noise: g * noise in one kernel, or as recorded ops under create_graph.
  if (autograd::any_requires_grad({x}))
    autograd::record("DropoutBackward", {x}, {out}, {mask}, [p, dtype = x.dtype()](const autograd::Backward& c) {
      const Tensor& m = c.saved(0);
      const Tensor& g = c.grad();
      if (autograd::is_grad_enabled() || g.dtype() != dtype) return autograd::Grads{mul(g, noise_of_mask(m, p, dtype))};
      Tensor gc = g.contiguous();
      Tensor gi = empty(gc.shape(), {.dtype = gc.dtype(), .device = gc.device()});
      if (gc.numel() > 0)
        backend::backend_for(gc.device())
            .dropout_backward(backend::output(gi, "dropout backward"), backend::input(gc, "dropout backward"),
                              backend::input(m, "dropout backward"), p);
      return autograd::Grads{gi};
    });
  return out;
}

// One draw per channel: the noise is [N, C, 1, 1] (or [C, 1, 1]) and broadcasts over H, W.
Tensor dropout2d(const Tensor& x, double p, bool training) {
  NvtxRange range("dropout2d");
  require_defined("dropout2d", x);
  if (!(p >= 0.0 && p <= 1.0)) throw Error::bad_value("dropout2d", "probability p", p, "in [0, 1]");
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(ErrorKind::shape, "dropout2d: expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got " + describe(x));
  if (!training || p == 0.0) return x;
  if (!is_floating_point(x.dtype()))
    throw Error::dtype_not_supported("dropout2d", "expected a floating-point input", x);
  if (p == 1.0) return mul(x, 0.0);
  Shape channels = x.shape();
  channels[channels.size() - 1] = channels[channels.size() - 2] = 1;
  return mul(x, dropout_noise(x, channels, p));
}

}  // namespace brrr
