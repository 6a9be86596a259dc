// unfold (im2col), fold (col2im) and conv2d = unfold + GEMM. unfold and fold are each
// other's adjoint, so each one's backward is the other and conv2d needs no backward of its
// own: matmul, view and add record the rest.
module;
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace ops_detail {

// A kernel larger than the padded input gives <= 0, never 1.
std::int64_t conv_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  std::int64_t span = in + 2 * p - d * (k - 1) - 1;
  return (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
}

backend::Window2d window(const Shape& x, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> d,
                         std::array<std::int64_t, 2> p, std::array<std::int64_t, 2> s, std::int64_t out_h,
                         std::int64_t out_w) {
  return {x[0], x[1], x[2], x[3], k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1], out_h, out_w};
}

}  // namespace ops_detail

namespace {

std::string pair_text(std::array<std::int64_t, 2> v) { return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")"; }

}  // namespace

// unfold and fold are each other's adjoint: each one's gradient is the other.
Tensor ops_detail::unfold_with_pad(const Tensor& x, const backend::Window2d& g, double pad_value) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty({g.n, g.c * g.kh * g.kw, g.out_h * g.out_w}, {.dtype = x.dtype(), .device = x.device()});
    if (out.numel() > 0)
      backend::backend_for(x.device()).im2col(backend::output(out, "unfold"), backend::input(x, "unfold"), g, pad_value);
  }
  if (autograd::any_requires_grad({x}))
    autograd::record("UnfoldBackward", {x}, {out},
                     [g](const autograd::Backward& c) { return autograd::Grads{fold_cols(c.grad(), g)}; });
  return out;
}

Tensor ops_detail::fold_cols(const Tensor& cols, const backend::Window2d& g) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = zeros({g.n, g.c, g.h, g.w}, {.dtype = cols.dtype(), .device = cols.device()});
    if (cols.numel() > 0)
      backend::backend_for(cols.device()).col2im(backend::output(out, "fold"), backend::input(cols, "fold"), g);
  }
  if (autograd::any_requires_grad({cols}))
    autograd::record("FoldBackward", {cols}, {out},
                     [g](const autograd::Backward& c) { return autograd::Grads{unfold_with_pad(c.grad(), g, 0.0)}; });
  return out;
}

namespace {

void check_window_args(const char* op, std::array<std::int64_t, 2> k, std::array<std::int64_t, 2> d,
                       std::array<std::int64_t, 2> p, std::array<std::int64_t, 2> s) {
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0 || d[i] <= 0 || s[i] <= 0 || p[i] < 0)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + pair_text(k) + ", dilation " + pair_text(d) +
                                        " and stride " + pair_text(s) + " must be positive and padding " + pair_text(p) +
                                        " non-negative");
  }
}

// [C, H, W] -> [1, C, H, W]; checks a 4-D floating input.
Tensor batched(const char* op, const Tensor& x, bool& unbatched) {
  require_defined(op, x);
  unbatched = x.dim() == 3;
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got " +
                                      describe(x));
  return unbatched ? x.unsqueeze(0) : x;
}

}  // namespace

Tensor unfold(const Tensor& x, std::array<std::int64_t, 2> kernel_size, std::array<std::int64_t, 2> dilation,
              std::array<std::int64_t, 2> padding, std::array<std::int64_t, 2> stride) {
  NvtxRange range("unfold");
  bool unbatched;
  Tensor x4 = batched("unfold", x, unbatched);
  check_window_args("unfold", kernel_size, dilation, padding, stride);
  std::int64_t oh = conv_out_size(x4.size(2), kernel_size[0], stride[0], padding[0], dilation[0]);
  std::int64_t ow = conv_out_size(x4.size(3), kernel_size[1], stride[1], padding[1], dilation[1]);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, "unfold: input " + describe(x) + " is smaller than the dilated kernel " +
                                      pair_text(kernel_size) + " with padding " + pair_text(padding));
  Tensor out = unfold_with_pad(x4, window(x4.shape(), kernel_size, dilation, padding, stride, oh, ow), 0.0);
  return unbatched ? out.squeeze(0) : out;
}

Tensor fold(const Tensor& cols, std::array<std::int64_t, 2> output_size, std::array<std::int64_t, 2> kernel_size,
            std::array<std::int64_t, 2> dilation, std::array<std::int64_t, 2> padding, std::array<std::int64_t, 2> stride) {
  NvtxRange range("fold");
  require_defined("fold", cols);
  check_window_args("fold", kernel_size, dilation, padding, stride);
  bool unbatched = cols.dim() == 2;
  if (cols.dim() != 2 && cols.dim() != 3)
    throw Error(ErrorKind::shape, "fold: expected a 2-D or 3-D input, got " + describe(cols));
  Tensor c = unbatched ? cols.unsqueeze(0) : cols;
  std::int64_t kk = kernel_size[0] * kernel_size[1];
  std::int64_t oh = conv_out_size(output_size[0], kernel_size[0], stride[0], padding[0], dilation[0]);
  std::int64_t ow = conv_out_size(output_size[1], kernel_size[1], stride[1], padding[1], dilation[1]);
  if (c.size(1) % kk != 0 || c.size(2) != oh * ow || oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, "fold: input " + describe(cols) + " does not match output_size " +
                                      pair_text(output_size) + ", kernel_size " + pair_text(kernel_size) + " (expected [N, C*" +
                                      std::to_string(kk) + ", " + std::to_string(oh * ow) + "])");
  Shape x_shape{c.size(0), c.size(1) / kk, output_size[0], output_size[1]};
  Tensor out = fold_cols(c, window(x_shape, kernel_size, dilation, padding, stride, oh, ow));
  return unbatched ? out.squeeze(0) : out;
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Conv2dOptions o) {
  BRRR_AUTOCAST(lower_precision, conv2d, input, weight, bias, o);
  NvtxRange range("conv2d");
  bool unbatched;
  Tensor x = batched("conv2d", input, unbatched);
  require_defined("conv2d", weight, "weight");
  common_device("conv2d", {input, weight, bias});
  if (!is_floating_point(x.dtype()) || weight.dtype() != x.dtype() || (bias.defined() && bias.dtype() != x.dtype()))
    throw Error(ErrorKind::dtype, "conv2d: input, weight and bias must share one floating dtype, got input " +
                                      describe(input) + ", weight " + describe(weight) +
                                      (bias.defined() ? ", bias " + describe(bias) : std::string()));
  if (weight.dim() != 4)
    throw Error(ErrorKind::shape, "conv2d: weight must be [out_channels, in_channels/groups, kh, kw], got " +
                                      describe(weight));
  std::int64_t groups = o.groups, C = x.size(1), O = weight.size(0);
  if (groups <= 0 || C % groups != 0 || O % groups != 0 || weight.size(1) * groups != C)
    throw Error(ErrorKind::shape, "conv2d: input " + describe(input) + " has " + std::to_string(C) +
                                      " channels, weight " + describe(weight) + " expects " +
                                      std::to_string(weight.size(1)) + " x groups (" + std::to_string(groups) +
                                      "); out_channels must divide by groups too");
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != O))
    throw Error(ErrorKind::shape, "conv2d: bias must be [" + std::to_string(O) + "], got " + describe(bias));
  std::array<std::int64_t, 2> k{weight.size(2), weight.size(3)};
  check_window_args("conv2d", k, o.dilation, o.padding, o.stride);
  std::int64_t oh = conv_out_size(x.size(2), k[0], o.stride[0], o.padding[0], o.dilation[0]);
  std::int64_t ow = conv_out_size(x.size(3), k[1], o.stride[1], o.padding[1], o.dilation[1]);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, "conv2d: input " + describe(input) + " is smaller than the dilated kernel " +
                                      pair_text(k) + " with padding " + pair_text(o.padding));
  std::int64_t N = x.size(0), Cg = C / groups, Og = O / groups;
  std::vector<Tensor> outs;
  for (std::int64_t g = 0; g < groups; ++g) {
    Tensor xg = groups == 1 ? x : x.narrow(1, g * Cg, Cg);
    Tensor wg = groups == 1 ? weight : weight.narrow(0, g * Og, Og);
    Tensor cols = unfold_with_pad(xg, window(xg.shape(), k, o.dilation, o.padding, o.stride, oh, ow), 0.0);
    // [Og, Cg*kh*kw] @ [N, Cg*kh*kw, L] -> [N, Og, L]
    outs.push_back(matmul(wg.reshape({Og, Cg * k[0] * k[1]}), cols));
  }
  Tensor out = (groups == 1 ? outs[0] : cat(outs, 1)).view({N, O, oh, ow});
  if (bias.defined()) out = add(out, bias.view({1, O, 1, 1}));
  return unbatched ? out.squeeze(0) : out;
}

}  // namespace brrr
