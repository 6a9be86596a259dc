// interpolate (PyTorch's F.interpolate) for 3-D [N, C, W], 4-D [N, C, H, W] and 5-D
// [N, C, D, H, W] inputs: modes nearest (PyTorch's floor rule) and nearest-exact (any rank),
// linear (3-D), bilinear and bicubic (4-D), trilinear (5-D), with size or scale_factor and
// align_corners; area is adaptive average pooling (ops/pool.cpp). Every other mode is one
// kernel per direction on each backend over [N, C, D, H, W] (Backend::upsample /
// upsample_backward; index math in ops/interpolate_math.hpp): 3-D and 4-D inputs are views with
// D = H = 1 or D = 1, whose one-tap identity axes cost nothing. One kernel over three spatial
// dims rather than separable 2-D passes, so trilinear rounds exactly as PyTorch's single sum of
// eight taps. The forward and its adjoint record each other as backward, so gradients of any
// order exist.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/contract.hpp"  // Upsample
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

constexpr const char* op = "interpolate";

Tensor resample_adjoint(const Tensor& grad, const backend::Upsample& g, const Shape& in_shape);

// x [N, C, D, H, W] resampled to [N, C, od, oh, ow].
Tensor resample(const Tensor& x, const backend::Upsample& g, std::int64_t od, std::int64_t oh, std::int64_t ow) {
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor in = x.contiguous();
    out = empty({x.size(0), x.size(1), od, oh, ow}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0)
      backend::backend_for(x.device()).upsample(backend::output(out, op), backend::input(in, op), g);
  }
  if (autograd::any_requires_grad({x}))
    autograd::record("UpsampleBackward", {x}, {out}, [g = g, shape = x.shape()](const autograd::Backward& c) {
      return autograd::Grads{c.grad().defined() ? resample_adjoint(c.grad(), g, shape) : Tensor()};
    });
  return out;
}

// The adjoint of resample: grad [N, C, od, oh, ow] summed back into in_shape [N, C, D, H, W].
Tensor resample_adjoint(const Tensor& grad, const backend::Upsample& g, const Shape& in_shape) {
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
                     [g = g, od = grad.size(2), oh = grad.size(3), ow = grad.size(4)](const autograd::Backward& c) {
                       return autograd::Grads{c.grad().defined() ? resample(c.grad(), g, od, oh, ow) : Tensor()};
                     });
  return out;
}

// Area mode on [N, C, D, H, W]: adaptive average pooling is separable (a box mean is the mean
// over D of the means over H x W), so pool H, W as [N, C D, H, W], then D as the last dim.
Tensor area_3d(const Tensor& x, std::int64_t od, std::int64_t oh, std::int64_t ow) {
  const std::int64_t n = x.size(0), c = x.size(1), d = x.size(2);
  Tensor hw = adaptive_avg_pool2d(x.reshape({n, c * d, x.size(3), x.size(4)}), {oh, ow});  // [N, C D, oh, ow]
  Tensor last = hw.reshape({n, c, d, oh * ow}).transpose(2, 3).reshape({n, c * oh * ow, d});
  Tensor pooled = adaptive_avg_pool1d(last, od);  // [N, C oh ow, od]
  return pooled.reshape({n, c, oh * ow, od}).transpose(2, 3).reshape({n, c, od, oh, ow});
}

// The rank each mode needs (0: any of 3, 4, 5).
int mode_rank(const std::string& mode) {
  if (mode == "linear") return 3;
  if (mode == "bilinear" || mode == "bicubic") return 4;
  if (mode == "trilinear") return 5;
  return 0;
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
  const bool nearest = mode == "nearest" || mode == "nearest-exact";
  const bool interpolating = mode == "linear" || mode == "bilinear" || mode == "trilinear" || mode == "bicubic";
  if (!nearest && !interpolating && mode != "area")
    throw Error(ErrorKind::value, std::string(op) + ": mode must be \"nearest\", \"nearest-exact\", \"linear\" (3-D), "
                                      "\"bilinear\" or \"bicubic\" (4-D), \"trilinear\" (5-D) or \"area\", got \"" +
                                      mode + "\"");
  if (input.dim() < 3 || input.dim() > 5)
    throw Error(ErrorKind::shape, std::string(op) + ": input must be 3-D [N, C, W], 4-D [N, C, H, W] or 5-D "
                                      "[N, C, D, H, W], got " + describe(input));
  if (const int rank = mode_rank(mode); rank != 0 && input.dim() != rank)
    throw Error(ErrorKind::shape, std::string(op) + ": got " + std::to_string(input.dim()) + "-D input, but " + mode +
                                      " mode needs " + std::to_string(rank) + "-D input: " + describe(input));
  require_floating(op, input);
  if (!interpolating && options.align_corners.has_value())
    throw Error(ErrorKind::value, std::string(op) + ": align_corners can only be set with the interpolating modes "
                                      "(linear, bilinear, bicubic, trilinear), not with " + mode);
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
                                      " spatial dims of " + describe(input) + " in " + mode + " mode, got " +
                                      std::to_string(given));
  // Output sizes and user scales of D, H, W; the dims a 3-D or 4-D input lacks stay 1 -> 1.
  std::int64_t out_size[3] = {1, 1, 1};
  double scales[3] = {0, 0, 0};  // 0: none (the kernels use in / out)
  const std::size_t first = 3 - spatial;
  for (std::size_t d = 0; d < spatial; ++d) {
    const std::int64_t in = input.size(static_cast<std::int64_t>(d) + 2);
    if (has_size) {
      out_size[first + d] = options.size[given == 1 ? 0 : d];
    } else {
      const double s = options.scale_factor[given == 1 ? 0 : d];
      if (!(s > 0) || !std::isfinite(s))
        throw Error(ErrorKind::value, std::string(op) + ": scale_factor must be positive and finite, got " +
                                          list_text(options.scale_factor));
      const double out = std::floor(static_cast<double>(in) * s);  // PyTorch's rounding
      if (!(out < 0x1p63))  // a size past int64 (converting it would be undefined)
        throw Error(ErrorKind::value, std::string(op) + ": scale_factor " + list_text(options.scale_factor) +
                                          " makes spatial dim " + std::to_string(d) + " of " + describe(input) +
                                          " larger than 2^63");
      out_size[first + d] = static_cast<std::int64_t>(out);
      if (!options.recompute_scale_factor.value_or(false)) scales[first + d] = s;
    }
    if (in <= 0 || out_size[first + d] <= 0)
      throw Error(ErrorKind::value, std::string(op) + ": input and output sizes must be greater than 0, got input " +
                                        describe(input) + " and output spatial size " +
                                        std::to_string(out_size[first + d]) + " in spatial dim " + std::to_string(d));
  }
  if (mode == "area") {  // PyTorch's area mode is adaptive average pooling to the output size
    if (spatial == 1) return adaptive_avg_pool1d(input, out_size[2]);
    if (spatial == 2) return adaptive_avg_pool2d(input, {out_size[1], out_size[2]});
    return area_3d(input, out_size[0], out_size[1], out_size[2]);
  }
  backend::Upsample g;
  g.mode = mode == "nearest"         ? backend::UpsampleMode::nearest
           : mode == "nearest-exact" ? backend::UpsampleMode::nearest_exact
           : mode == "bicubic"       ? backend::UpsampleMode::cubic
                                     : backend::UpsampleMode::linear;
  g.align_corners = interpolating && options.align_corners.value_or(false);
  g.scale_factor_d = scales[0];
  g.scale_factor_h = scales[1];
  g.scale_factor_w = scales[2];
  Shape volume = {input.size(0), input.size(1), 1, 1, 1};
  for (std::size_t d = 0; d < spatial; ++d) volume[first + d + 2] = input.size(static_cast<std::int64_t>(d) + 2);
  Tensor out = resample(input.reshape(volume), g, out_size[0], out_size[1], out_size[2]);
  Shape result = {input.size(0), input.size(1)};
  for (std::size_t d = 0; d < spatial; ++d) result.push_back(out_size[first + d]);
  return out.reshape(result);
}

}  // namespace brrr
