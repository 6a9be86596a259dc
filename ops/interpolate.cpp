// interpolate (PyTorch's F.interpolate) for 3-D [N, C, W] and 4-D [N, C, H, W] inputs: modes
// nearest (PyTorch's floor rule, not nearest-exact), linear and bilinear, with size or
// scale_factor and align_corners; area is adaptive average pooling (ops/pool.cpp). One kernel per direction on each backend
// (Backend::upsample / upsample_backward; index math in ops/interpolate_math.hpp): the
// forward and its adjoint record each other as backward, so gradients of any order exist.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/contract.hpp"  // Upsample2d
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

constexpr const char* op = "interpolate";

Tensor resample_adjoint(const Tensor& grad, const backend::Upsample2d& g, const Shape& in_shape);

// x [N, C, H, W] resampled to [N, C, oh, ow].
Tensor resample(const Tensor& x, const backend::Upsample2d& g, std::int64_t oh, std::int64_t ow) {
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor in = x.contiguous();
    out = empty({x.size(0), x.size(1), oh, ow}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0)
      backend::backend_for(x.device()).upsample(backend::output(out, op), backend::input(in, op), g);
  }
  if (autograd::any_requires_grad({x}))
    autograd::record("UpsampleBackward", {x}, {out}, [g = g, shape = x.shape()](const autograd::Backward& c) {
      return autograd::Grads{c.grad().defined() ? resample_adjoint(c.grad(), g, shape) : Tensor()};
    });
  return out;
}

// The adjoint of resample: grad [N, C, oh, ow] summed back into in_shape [N, C, H, W].
Tensor resample_adjoint(const Tensor& grad, const backend::Upsample2d& g, const Shape& in_shape) {
  Tensor out;
  {
    NoGradGuard no_grad;
    const DType acc = grad.dtype() == DType::f64 ? DType::f64 : DType::f32;  // bf16/f16 sum in f32
    Tensor go = grad.to(acc).contiguous();
    Tensor gi = zeros(in_shape, {.dtype = acc, .device = grad.device()});
    if (go.numel() > 0 && gi.numel() > 0)
      backend::backend_for(grad.device()).upsample_backward(backend::output(gi, op), backend::input(go, op), g);
    out = gi.to(grad.dtype());
  }
  if (autograd::any_requires_grad({grad}))
    autograd::record("UpsampleBackwardBackward", {grad}, {out},
                     [g = g, oh = grad.size(2), ow = grad.size(3)](const autograd::Backward& c) {
                       return autograd::Grads{c.grad().defined() ? resample(c.grad(), g, oh, ow) : Tensor()};
                     });
  return out;
}

std::string list_text(const std::vector<double>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::string t = std::to_string(v[i]);
    s += (i ? ", " : "") + t;
  }
  return s + ")";
}

}  // namespace

Tensor interpolate(const Tensor& input, const InterpolateOptions& options) {
  NvtxRange range(op);
  require_defined(op, input);
  const std::string& mode = options.mode;
  if (mode != "nearest" && mode != "linear" && mode != "bilinear" && mode != "area")
    throw Error(ErrorKind::value, std::string(op) + ": mode must be \"nearest\", \"linear\" (3-D), \"bilinear\" "
                                      "(4-D) or \"area\", got \"" + mode + "\"");
  if (input.dim() != 3 && input.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": input must be 3-D [N, C, W] or 4-D [N, C, H, W], got " +
                                      describe(input));
  if (mode == "linear" && input.dim() != 3)
    throw Error(ErrorKind::shape, std::string(op) + ": got " + std::to_string(input.dim()) +
                                      "-D input, but linear mode needs 3-D input: " + describe(input));
  if (mode == "bilinear" && input.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": got " + std::to_string(input.dim()) +
                                      "-D input, but bilinear mode needs 4-D input: " + describe(input));
  require_floating(op, input);
  const bool linear = mode == "linear" || mode == "bilinear";
  if (!linear && options.align_corners.has_value())
    throw Error(ErrorKind::value, std::string(op) + ": align_corners can only be set with the interpolating modes "
                                      "(linear, bilinear), not with " + mode);
  const bool has_size = !options.size.empty(), has_scale = !options.scale_factor.empty();
  if (has_size == has_scale)
    throw Error(ErrorKind::value, std::string(op) + (has_size ? ": only one of size or scale_factor may be given"
                                                              : ": either size or scale_factor must be given"));
  if (has_size && options.recompute_scale_factor.value_or(false))
    throw Error(ErrorKind::value, std::string(op) + ": recompute_scale_factor is not meaningful with an explicit size");
  const std::size_t spatial = static_cast<std::size_t>(input.dim() - 2);
  const std::size_t given = has_size ? options.size.size() : options.scale_factor.size();
  if (given != 1 && given != spatial)
    throw Error(ErrorKind::shape, std::string(op) + ": " + (has_size ? "size" : "scale_factor") + " must have 1 or " +
                                      std::to_string(spatial) + " values for the " + std::to_string(spatial) +
                                      " spatial dims of " + describe(input) + ", got " + std::to_string(given));
  std::vector<std::int64_t> out_size(spatial);
  std::vector<double> scales(spatial, 0.0);  // 0: none (the kernels use in / out)
  for (std::size_t d = 0; d < spatial; ++d) {
    const std::int64_t in = input.size(static_cast<std::int64_t>(d) + 2);
    if (has_size) {
      out_size[d] = options.size[given == 1 ? 0 : d];
    } else {
      const double s = options.scale_factor[given == 1 ? 0 : d];
      if (!(s > 0) || !std::isfinite(s))
        throw Error(ErrorKind::value, std::string(op) + ": scale_factor must be positive and finite, got " +
                                          list_text(options.scale_factor));
      out_size[d] = static_cast<std::int64_t>(std::floor(static_cast<double>(in) * s));  // PyTorch's rounding
      if (!options.recompute_scale_factor.value_or(false)) scales[d] = s;
    }
    if (in <= 0 || out_size[d] <= 0)
      throw Error(ErrorKind::value, std::string(op) + ": input and output sizes must be greater than 0, got input " +
                                        describe(input) + " and output spatial size " +
                                        std::to_string(out_size[d]) + " in spatial dim " + std::to_string(d));
  }
  if (mode == "area") {  // PyTorch's area mode is adaptive average pooling to the output size
    if (spatial == 1) return adaptive_avg_pool1d(input, out_size[0]);
    return adaptive_avg_pool2d(input, {out_size[0], out_size[1]});
  }
  backend::Upsample2d g;
  g.mode = linear ? backend::UpsampleMode::linear : backend::UpsampleMode::nearest;
  g.align_corners = linear && options.align_corners.value_or(false);
  if (spatial == 1) {
    g.scale_factor_w = scales[0];
    Tensor out = resample(input.unsqueeze(2), g, 1, out_size[0]);
    return out.squeeze(2);
  }
  g.scale_factor_h = scales[0];
  g.scale_factor_w = scales[1];
  return resample(input, g, out_size[0], out_size[1]);
}

}  // namespace brrr
