// unfold (im2col), fold (col2im) and conv2d. unfold and fold are each other's adjoint, so
// each one's backward is the other. conv2d checks its arguments, resolves its padding ("same",
// "valid", amounts; padding_mode through pad), then runs on the CPU one node over the
// kernels of ops/conv_gemm.cpp, and on CUDA unfold + batched GEMM (matmul, view and add
// record the rest).
module;
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"
#include "ops/window_checks.hpp"

namespace brrr {

using namespace ops_detail;

namespace ops_detail {

// A kernel larger than the padded input gives <= 0, never 1.
// Computed in 128 bits (sizes near 2^63 do not wrap) and clamped to [-1, 2^63 - 1]: a count
// past int64 is refused by the caller's check of the sweep (check_sweep_fits).
std::int64_t conv_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  const __int128 span = __int128{in} + 2 * __int128{p} - __int128{d} * (__int128{k} - 1) - 1;
  const __int128 out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  return out < 0 ? -1 : out > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(out);
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
    // col2im writes every cell; zeros only when there are no columns to sum
    const TensorOptions o{.dtype = cols.dtype(), .device = cols.device()};
    out = cols.numel() > 0 ? empty({g.n, g.c, g.h, g.w}, o) : zeros({g.n, g.c, g.h, g.w}, o);
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
  check_sweep_fits("unfold", {x4.size(0), x4.size(1), kernel_size[0], kernel_size[1], oh, ow},
                   [&] {
                     return "input " + describe(x) + ", kernel_size " + pair_text(kernel_size) + " and padding " +
                            pair_text(padding);
                   });
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
  std::int64_t oh = conv_out_size(output_size[0], kernel_size[0], stride[0], padding[0], dilation[0]);
  std::int64_t ow = conv_out_size(output_size[1], kernel_size[1], stride[1], padding[1], dilation[1]);
  check_sweep_fits("fold", {c.size(0), kernel_size[0], kernel_size[1], oh, ow, output_size[0], output_size[1]},
                   [&] { return "output_size " + pair_text(output_size) + ", kernel_size " + pair_text(kernel_size) +
                                " and padding " + pair_text(padding); });
  std::int64_t kk = kernel_size[0] * kernel_size[1];
  if (c.size(1) % kk != 0 || c.size(2) != oh * ow || oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, "fold: input " + describe(cols) + " does not match output_size " +
                                      pair_text(output_size) + ", kernel_size " + pair_text(kernel_size) + " (expected [N, C*" +
                                      std::to_string(kk) + ", " + std::to_string(oh * ow) + "])");
  Shape x_shape{c.size(0), c.size(1) / kk, output_size[0], output_size[1]};
  Tensor out = fold_cols(c, window(x_shape, kernel_size, dilation, padding, stride, oh, ow));
  return unbatched ? out.squeeze(0) : out;
}

namespace {

// The padding of each spatial dim as (before, after), from amounts, "valid" or "same".
std::array<std::array<std::int64_t, 2>, 2> resolve_padding(const char* op, const ConvPadding<2>& p,
                                                           std::array<std::int64_t, 2> k, const Conv2dOptions& o) {
  std::array<std::array<std::int64_t, 2>, 2> r{};
  for (std::size_t i = 0; i < 2; ++i) {
    switch (p.kind) {
      case ConvPadding<2>::Kind::amounts: r[i] = {p[i], p[i]}; break;
      case ConvPadding<2>::Kind::valid: r[i] = {0, 0}; break;
      case ConvPadding<2>::Kind::same: {
        if (o.stride[0] != 1 || o.stride[1] != 1)
          throw Error(ErrorKind::value, std::string(op) + ": padding \"same\" needs stride 1, got stride " +
                                            pair_text(o.stride));
        const std::int64_t total = o.dilation[i] * (k[i] - 1);  // PyTorch: the odd one at the end
        r[i] = {total / 2, total - total / 2};
        break;
      }
    }
  }
  return r;
}

// The CPU conv2d: one node over the kernels of ops/conv_gemm.cpp.
Tensor conv2d_cpu(const Tensor& x, const Tensor& weight, const Tensor& bias, const backend::Window2d& win,
                  std::int64_t groups) {
  Tensor out = conv2d_gemm_forward(x, weight, bias, win, groups);
  if (autograd::any_requires_grad({x, weight, bias}))
    autograd::record("ConvolutionBackward", {x, weight, bias}, {out}, {x, weight},
                     [win, groups](const autograd::Backward& c) {
                       const Tensor& g = c.grad();
                       const Tensor x = c.saved(0), w = c.saved(1);
                       autograd::Grads r(3);
                       const bool recorded = autograd::is_grad_enabled();  // create_graph
                       if (c.needs(0))
                         r[0] = recorded ? conv2d_composite_input_grad(g, w, win, groups)
                                         : conv2d_gemm_input_grad(g, w, win, groups);
                       if (c.needs(1))
                         r[1] = recorded ? conv2d_composite_weight_grad(g, x, win, groups, w.shape())
                                         : conv2d_gemm_weight_grad(g, x, win, groups, w.shape());
                       if (c.needs(2)) r[2] = conv_bias_grad(g);
                       return r;
                     });
  return out;
}

// The CUDA conv2d: per group unfold + one batched GEMM (recorded ops: their rules are the
// backward).
Tensor conv2d_composite(const Tensor& x, const Tensor& weight, const Tensor& bias, const backend::Window2d& win,
                        std::int64_t groups) {
  const std::int64_t N = win.n, C = win.c, O = weight.size(0), Cg = C / groups, Og = O / groups;
  backend::Window2d wg = win;
  wg.c = Cg;
  std::vector<Tensor> outs;
  for (std::int64_t g = 0; g < groups; ++g) {
    Tensor xg = groups == 1 ? x : x.narrow(1, g * Cg, Cg);
    Tensor w = groups == 1 ? weight : weight.narrow(0, g * Og, Og);
    Tensor cols = unfold_with_pad(xg, wg, 0.0);
    // [Og, Cg*kh*kw] @ [N, Cg*kh*kw, L] -> [N, Og, L]
    outs.push_back(matmul(w.reshape({Og, Cg * win.kh * win.kw}), cols));
  }
  Tensor out = (groups == 1 ? outs[0] : cat(outs, 1)).view({N, O, win.out_h, win.out_w});
  return bias.defined() ? add(out, bias.view({1, O, 1, 1})) : out;
}

}  // namespace

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
  const std::string& mode = o.padding_mode;
  if (mode != "zeros" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw Error(ErrorKind::value, "conv2d: padding_mode must be \"zeros\", \"reflect\", \"replicate\" or " +
                                      std::string("\"circular\", got \"") + mode + "\"");
  std::array<std::int64_t, 2> k{weight.size(2), weight.size(3)};
  const std::array<std::int64_t, 2> padding_shown{o.padding[0], o.padding[1]};
  check_window_args("conv2d", k, o.dilation, o.padding.kind == ConvPadding<2>::Kind::amounts ? padding_shown
                                                                                            : std::array<std::int64_t, 2>{},
                    o.stride);
  auto pads = resolve_padding("conv2d", o.padding, k, o);
  if (mode != "zeros" && (pads[0][0] || pads[0][1] || pads[1][0] || pads[1][1])) {
    try {  // the padded input, as PyTorch's nn.Conv2d does for these modes
      x = pad(x, {pads[1][0], pads[1][1], pads[0][0], pads[0][1]}, mode);
    } catch (const Error& e) {
      throw Error(e.kind(), "conv2d (padding_mode \"" + mode + "\"): " + e.what());
    }
    pads = {};
  }
  auto out_size = [&](std::size_t i) {
    // floor((in + before + after - d (k - 1) - 1) / s) + 1, rounding toward -inf; in 128 bits
    // (no wrap near 2^63), clamped to [-1, 2^63 - 1] (check_sweep_fits refuses the top)
    const std::int64_t st = o.stride[i];
    const __int128 span = __int128{x.size(2 + static_cast<std::int64_t>(i))} + pads[i][0] + pads[i][1] -
                          __int128{o.dilation[i]} * (__int128{k[i]} - 1) - 1;
    const __int128 out = (span >= 0 ? span / st : -((-span + st - 1) / st)) + 1;
    return out < 0 ? std::int64_t{-1} : out > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(out);
  };
  const std::int64_t oh = out_size(0), ow = out_size(1);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, "conv2d: input " + describe(input) + " is smaller than the dilated kernel " +
                                      pair_text(k) + " with padding " + pair_text({pads[0][0], pads[1][0]}));
  check_sweep_fits("conv2d", {x.size(0), C, k[0], k[1], oh, ow},
                   [&] { return "input " + describe(input) + ", kernel " + pair_text(k) + ", padding " +
                                pair_text({pads[0][0], pads[1][0]}) + " and stride " + pair_text(o.stride); });
  const backend::Window2d win{x.size(0), C,         x.size(2),  x.size(3),     k[0],          k[1], o.stride[0],
                              o.stride[1], pads[0][0], pads[1][0], o.dilation[0], o.dilation[1], oh,   ow};
  Tensor out = x.device().is_cpu() ? conv2d_cpu(x, weight, bias, win, groups) : conv2d_composite(x, weight, bias, win, groups);
  return unbatched ? out.squeeze(0) : out;
}

}  // namespace brrr
