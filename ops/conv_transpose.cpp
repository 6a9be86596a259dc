// conv_transpose2d (the adjoint of conv2d in its input, PyTorch's F.conv_transpose2d) and
// conv1d. conv_transpose2d runs conv2d's input-gradient path forward: on the CPU the kernels
// of ops/conv_gemm.cpp under one node (its gradients are conv2d's forward and weight-gradient
// kernels); on CUDA per group one batched GEMM W_g^T [Cout_g*kh*kw, Cin_g] @ x_g
// [N, Cin_g, H*W] gives the columns, and fold (col2im) sums them into the output, whose conv2d
// sweep has H x W positions; matmul and fold record their own backward rules there. conv1d
// is conv2d over a height-1 image.
module;
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/contract.hpp"  // Window2d
module brrr.ops;
import brrr.tensor;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

std::string pair_text(std::array<std::int64_t, 2> v) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")";
}

void check_same_floating(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias) {
  if (!is_floating_point(input.dtype()) || weight.dtype() != input.dtype() || (bias.defined() && bias.dtype() != input.dtype()))
    throw Error(ErrorKind::dtype, std::string(op) + ": input, weight and bias must share one floating dtype, got input " +
                                      describe(input) + ", weight " + describe(weight) +
                                      (bias.defined() ? ", bias " + describe(bias) : std::string()));
}

}  // namespace

Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias, ConvTranspose2dOptions o) {
  BRRR_AUTOCAST(lower_precision, conv_transpose2d, input, weight, bias, o);
  constexpr const char* op = "conv_transpose2d";
  NvtxRange range(op);
  require_defined(op, input);
  require_defined(op, weight, "weight");
  common_device(op, {input, weight, bias});
  if (input.dim() != 3 && input.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got " +
                                      describe(input));
  check_same_floating(op, input, weight, bias);
  const bool unbatched = input.dim() == 3;
  Tensor x = unbatched ? input.unsqueeze(0) : input;
  if (weight.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": weight must be [in_channels, out_channels/groups, kh, kw], got " +
                                      describe(weight));
  const std::int64_t groups = o.groups, cin = x.size(1);
  if (groups <= 0 || weight.size(0) != cin || cin % groups != 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(input) + " has " + std::to_string(cin) +
                                      " channels; weight " + describe(weight) + " must have as many in dim 0, and they " +
                                      "must divide by groups (" + std::to_string(groups) + ")");
  const std::int64_t cout_g = weight.size(1), cout = cout_g * groups, cin_g = cin / groups;
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != cout))
    throw Error(ErrorKind::shape, std::string(op) + ": bias must be [" + std::to_string(cout) + "], got " + describe(bias));
  const std::array<std::int64_t, 2> k{weight.size(2), weight.size(3)};
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0 || o.stride[i] <= 0 || o.dilation[i] <= 0 || o.padding[i] < 0 || o.output_padding[i] < 0)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + pair_text(k) + ", stride " + pair_text(o.stride) +
                                        " and dilation " + pair_text(o.dilation) + " must be positive, padding " +
                                        pair_text(o.padding) + " and output_padding " + pair_text(o.output_padding) +
                                        " non-negative");
    if (o.output_padding[i] >= o.stride[i] && o.output_padding[i] >= o.dilation[i])
      throw Error(ErrorKind::value, std::string(op) + ": output_padding " + pair_text(o.output_padding) +
                                        " must be smaller than either stride " + pair_text(o.stride) + " or dilation " +
                                        pair_text(o.dilation));
  }
  const std::int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  // (in - 1) s - 2 p + d (k - 1) + output_padding + 1 in 128 bits: sizes near 2^63 must not wrap.
  auto out_size = [&](int i, std::int64_t in) {
    const __int128 out = (__int128{in} - 1) * o.stride[i] - 2 * __int128{o.padding[i]} +
                         __int128{o.dilation[i]} * (__int128{k[i]} - 1) + o.output_padding[i] + 1;
    if (out > INT64_MAX)
      throw Error(ErrorKind::value, std::string(op) + ": input " + describe(input) + " with kernel " + pair_text(k) +
                                        ", stride " + pair_text(o.stride) + " and dilation " + pair_text(o.dilation) +
                                        " gives an output size past 2^63");
    return out < 0 ? std::int64_t{-1} : static_cast<std::int64_t>(out);
  };
  const std::int64_t oh = out_size(0, h), ow = out_size(1, w);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(input) + " with kernel " + pair_text(k) +
                                      " and padding " + pair_text(o.padding) + " gives a non-positive output size (" +
                                      std::to_string(oh) + ", " + std::to_string(ow) + ")");
  // The sweep of the conv2d whose input gradient this is: h w positions of kh kw cells, and
  // the [N, Cout, oh, ow] output, must fit int64 (huge kernels, strides, dilations).
  for (auto f : {std::array<std::int64_t, 4>{n, cout_g * groups, oh, ow}, std::array<std::int64_t, 4>{n * h * w, cin, k[0], k[1]}}) {
    std::int64_t prod = 1;
    for (std::int64_t v : f)
      if (v != 0 && __builtin_mul_overflow(prod, v, &prod))
        throw Error(ErrorKind::value, std::string(op) + ": input " + describe(input) + " with kernel " + pair_text(k) +
                                          ", stride " + pair_text(o.stride) + " and dilation " + pair_text(o.dilation) +
                                          " gives more than 2^63 elements or window cells");
  }
  const std::int64_t kk = k[0] * k[1];
  // The conv2d over the [oh, ow] output whose input gradient this is: its sweep has h x w
  // positions (output_padding only adds rows/columns no window start reaches).
  const backend::Window2d g{n, cout_g, oh, ow, k[0], k[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1],
                            o.dilation[0], o.dilation[1], h, w};
  if (x.device().is_cpu()) {
    // That conv2d's kernels (ops/conv_gemm.cpp): its weight [Cin, Cout/groups, kh, kw] is this
    // op's, its input gradient is this op's output; so this op's input gradient is that
    // conv2d's forward and its weight gradient that conv2d's weight gradient with the roles
    // of input and output gradient exchanged.
    backend::Window2d full = g;
    full.c = cout;
    Tensor out = conv2d_gemm_input_grad(x, weight, full, groups);
    if (bias.defined()) {
      NoGradGuard no_grad;
      out = add(out, bias.view({1, cout, 1, 1}));
    }
    if (autograd::any_requires_grad({x, weight, bias}))
      autograd::record("ConvolutionBackward", {x, weight, bias}, {out}, {x, weight},
                       [full, groups](const autograd::Backward& c) {
                         const Tensor& gy = c.grad();
                         const Tensor xs = c.saved(0), ws = c.saved(1);
                         autograd::Grads r(3);
                         const bool recorded = autograd::is_grad_enabled();  // create_graph
                         if (c.needs(0))
                           r[0] = recorded ? conv2d(gy, ws, {}, {.stride = {full.sh, full.sw}, .padding = {full.ph, full.pw},
                                                                 .dilation = {full.dh, full.dw}, .groups = groups})
                                           : conv2d_gemm_forward(gy, ws, {}, full, groups);
                         if (c.needs(1))
                           r[1] = recorded ? conv2d_composite_weight_grad(xs, gy, full, groups, ws.shape())
                                           : conv2d_gemm_weight_grad(xs, gy, full, groups, ws.shape());
                         if (c.needs(2)) r[2] = conv_bias_grad(gy);
                         return r;
                       });
    return unbatched ? out.squeeze(0) : out;
  }
  std::vector<Tensor> outs;
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    Tensor xg = (groups == 1 ? x : x.narrow(1, gi * cin_g, cin_g)).reshape({n, cin_g, h * w});
    Tensor wg = (groups == 1 ? weight : weight.narrow(0, gi * cin_g, cin_g)).reshape({cin_g, cout_g * kk});
    // [Cout_g*kk, Cin_g] @ [N, Cin_g, H*W] -> [N, Cout_g*kk, H*W] (the transpose is a GEMM flag).
    outs.push_back(fold_cols(matmul(wg.t(), xg), g));
  }
  Tensor out = groups == 1 ? outs[0] : cat(outs, 1);
  if (bias.defined()) out = add(out, bias.view({1, cout, 1, 1}));
  return unbatched ? out.squeeze(0) : out;
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, Conv1dOptions o) {
  BRRR_AUTOCAST(lower_precision, conv1d, input, weight, bias, o);
  constexpr const char* op = "conv1d";
  NvtxRange range(op);
  require_defined(op, input);
  require_defined(op, weight, "weight");
  if (input.dim() != 2 && input.dim() != 3)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a 2-D [C, L] or 3-D [N, C, L] input, got " +
                                      describe(input));
  if (weight.dim() != 3)
    throw Error(ErrorKind::shape, std::string(op) + ": weight must be [out_channels, in_channels/groups, k], got " +
                                      describe(weight));
  if (o.padding.kind == ConvPadding<1>::Kind::same && o.stride != 1)
    throw Error(ErrorKind::value, std::string(op) + ": padding \"same\" needs stride 1, got stride " +
                                      std::to_string(o.stride));
  ConvPadding<2> padding{0, o.padding[0]};
  if (o.padding.kind == ConvPadding<1>::Kind::same) padding = ConvPadding<2>("same");
  if (o.padding.kind == ConvPadding<1>::Kind::valid) padding = ConvPadding<2>("valid");
  Tensor y;
  try {
    y = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
               {.stride = {1, o.stride}, .padding = padding, .dilation = {1, o.dilation}, .groups = o.groups,
                .padding_mode = o.padding_mode});
  } catch (const Error& e) {  // conv1d's own name on conv2d's checks
    std::string m = e.what();
    if (m.rfind("conv2d", 0) == 0) m = "conv1d" + m.substr(6);
    throw Error(e.kind(), m);
  }
  return y.squeeze(-2);
}

}  // namespace brrr
