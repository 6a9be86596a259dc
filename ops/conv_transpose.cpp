// conv_transpose2d (the adjoint of conv2d in its input, PyTorch's F.conv_transpose2d) and
// conv1d. conv_transpose2d runs conv2d's input-gradient path forward: per group one batched
// GEMM W_g^T [Cout_g*kh*kw, Cin_g] @ x_g [N, Cin_g, H*W] gives the columns, and fold
// (col2im) sums them into the output, whose conv2d sweep has H x W positions. matmul and fold
// record their own backward rules (fold's adjoint is unfold, so the input gradient is a
// conv2d of the output gradient), so the op needs none of its own. conv1d is conv2d over a
// height-1 image.
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
  const std::int64_t oh = (h - 1) * o.stride[0] - 2 * o.padding[0] + o.dilation[0] * (k[0] - 1) + o.output_padding[0] + 1;
  const std::int64_t ow = (w - 1) * o.stride[1] - 2 * o.padding[1] + o.dilation[1] * (k[1] - 1) + o.output_padding[1] + 1;
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(input) + " with kernel " + pair_text(k) +
                                      " and padding " + pair_text(o.padding) + " gives a non-positive output size (" +
                                      std::to_string(oh) + ", " + std::to_string(ow) + ")");
  const std::int64_t kk = k[0] * k[1];
  // The conv2d over the [oh, ow] output whose input gradient this is: its sweep has h x w
  // positions (output_padding only adds rows/columns no window start reaches).
  const backend::Window2d g{n, cout_g, oh, ow, k[0], k[1], o.stride[0], o.stride[1], o.padding[0], o.padding[1],
                            o.dilation[0], o.dilation[1], h, w};
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
  Tensor y = conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                    {.stride = {1, o.stride}, .padding = {0, o.padding}, .dilation = {1, o.dilation}, .groups = o.groups});
  return y.squeeze(-2);
}

}  // namespace brrr
