// pad (PyTorch's F.pad: constant, reflect, replicate, circular) and pixel_shuffle /
// pixel_unshuffle (Shi et al. 2016, "Real-Time Single Image and Video Super-Resolution Using
// an Efficient Sub-Pixel Convolutional Neural Network"). Compositions of views, cat and
// expand, so their gradients are those ops': padding's gradient sums back into the borders
// it copied (reflect, replicate, circular) and drops the constant's.
module;
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
module brrr.ops;
import brrr.tensor;

namespace brrr {

using namespace ops_detail;

namespace {

std::string list_text(const std::vector<std::int64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

// x padded along dim by `before` / `after` elements (either may be negative in constant
// mode: a crop).
Tensor pad_dim(const Tensor& x, std::int64_t dim, std::int64_t before, std::int64_t after, std::string_view mode,
               double value) {
  const std::int64_t n = x.size(dim);
  if (mode == "constant") {
    Tensor core = x.narrow(dim, before < 0 ? -before : 0, n - (before < 0 ? -before : 0) - (after < 0 ? -after : 0));
    std::vector<Tensor> parts;
    auto block = [&](std::int64_t len) {
      Shape s = core.shape();
      s[static_cast<std::size_t>(dim)] = len;
      return full(s, value, {.dtype = x.dtype(), .device = x.device()});
    };
    if (before > 0) parts.push_back(block(before));
    parts.push_back(core);
    if (after > 0) parts.push_back(block(after));
    return parts.size() == 1 ? core : cat(parts, dim);
  }
  std::vector<Tensor> parts;
  if (mode == "circular") {
    if (before > 0) parts.push_back(x.narrow(dim, n - before, before));
    parts.push_back(x);
    if (after > 0) parts.push_back(x.narrow(dim, 0, after));
  } else if (mode == "replicate") {
    auto edge = [&](std::int64_t at, std::int64_t len) {
      Shape s = x.shape();
      s[static_cast<std::size_t>(dim)] = len;
      return x.narrow(dim, at, 1).expand(s);
    };
    if (before > 0) parts.push_back(edge(0, before));
    parts.push_back(x);
    if (after > 0) parts.push_back(edge(n - 1, after));
  } else {  // reflect: x[before], ..., x[1] | x | x[n-2], ..., x[n-1-after]
    for (std::int64_t i = before; i >= 1; --i) parts.push_back(x.narrow(dim, i, 1));
    parts.push_back(x);
    for (std::int64_t i = 1; i <= after; ++i) parts.push_back(x.narrow(dim, n - 1 - i, 1));
  }
  return parts.size() == 1 ? x : cat(parts, dim);
}

}  // namespace

Tensor pad(const Tensor& input, const std::vector<std::int64_t>& padding, std::string_view mode, double value) {
  constexpr const char* op = "pad";
  NvtxRange range(op);
  require_defined(op, input);
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw Error(ErrorKind::value, std::string(op) + ": mode must be \"constant\", \"reflect\", \"replicate\" or " +
                                      "\"circular\", got \"" + std::string(mode) + "\"");
  const std::int64_t dims = static_cast<std::int64_t>(padding.size()) / 2;
  if (padding.size() % 2 != 0 || dims > input.dim())
    throw Error(ErrorKind::shape, std::string(op) + ": padding " + list_text(padding) +
                                      " must have an even length of at most 2 * the input's dims, input " + describe(input));
  if (mode != "constant" && dims > input.dim() - 1)
    throw Error(ErrorKind::shape, std::string(op) + ": " + std::string(mode) + " mode pads at most the last " +
                                      std::to_string(input.dim() - 1) + " dims of input " + describe(input) +
                                      " (the first is the batch or channel dim), got padding " + list_text(padding));
  Tensor y = input;
  for (std::int64_t k = 0; k < dims; ++k) {
    const std::int64_t dim = input.dim() - 1 - k;
    const std::int64_t before = padding[static_cast<std::size_t>(2 * k)], after = padding[static_cast<std::size_t>(2 * k + 1)];
    const std::int64_t n = y.size(dim);
    const std::string where = std::string(op) + ": padding " + list_text(padding) + " of dim " + std::to_string(dim) +
                              " (size " + std::to_string(n) + ") in " + std::string(mode) + " mode";
    if (mode == "constant") {
      // Checked sums: amounts near +-2^63 must not wrap (or negate INT64_MIN) into a size.
      std::int64_t size = 0;
      if (__builtin_add_overflow(n, before, &size) || __builtin_add_overflow(size, after, &size))
        throw Error(ErrorKind::value, where + " gives a size past 2^63");
      if (size < 0 || (before < 0 && before < -n) || (after < 0 && after < -n))
        throw Error(ErrorKind::shape, where + " gives a negative size");
    } else if (before < 0 || after < 0) {
      throw Error(ErrorKind::value, where + " must be non-negative");
    } else if (mode == "reflect" && (before >= n || after >= n)) {
      throw Error(ErrorKind::value, where + " must be smaller than the dim");
    } else if (mode == "circular" && (before > n || after > n)) {
      throw Error(ErrorKind::value, where + " must be at most the dim's size");
    } else if (mode == "replicate" && n == 0 && (before > 0 || after > 0)) {
      throw Error(ErrorKind::value, where + ": an empty dim has nothing to replicate");
    }
    if (before != 0 || after != 0) y = pad_dim(y, dim, before, after, mode, value);
  }
  return y;
}

Tensor pixel_shuffle(const Tensor& input, std::int64_t upscale_factor) {
  constexpr const char* op = "pixel_shuffle";
  NvtxRange range(op);
  require_defined(op, input);
  const std::int64_t r = upscale_factor, nd = input.dim();
  // r^2, H r and W r checked: a huge r must not wrap (C = 0 divides by any r^2).
  std::int64_t r2 = 0, hr = 0, wr = 0;
  if (nd < 3 || r <= 0 || __builtin_mul_overflow(r, r, &r2) || input.size(-3) % r2 != 0)
    throw Error(ErrorKind::shape, std::string(op) + ": expected an input [*, C * r^2, H, W] with r = upscale_factor = " +
                                      std::to_string(r) + " > 0, got " + describe(input));
  if (__builtin_mul_overflow(input.size(-2), r, &hr) || __builtin_mul_overflow(input.size(-1), r, &wr))
    throw Error(ErrorKind::value, std::string(op) + ": upscale_factor " + std::to_string(r) + " makes " +
                                      describe(input) + "'s H r or W r pass 2^63");
  Shape batch(input.shape().begin(), input.shape().end() - 3);
  const std::int64_t c = input.size(-3) / r2, h = input.size(-2), w = input.size(-1);
  Shape split = batch;
  split.insert(split.end(), {c, r, r, h, w});
  Shape perm;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(batch.size()); ++i) perm.push_back(i);
  const std::int64_t b = static_cast<std::int64_t>(batch.size());
  perm.insert(perm.end(), {b, b + 3, b + 1, b + 4, b + 2});  // C, H, r, W, r
  Shape out = batch;
  out.insert(out.end(), {c, hr, wr});
  return input.reshape(split).permute(perm).reshape(out);
}

Tensor pixel_unshuffle(const Tensor& input, std::int64_t downscale_factor) {
  constexpr const char* op = "pixel_unshuffle";
  NvtxRange range(op);
  require_defined(op, input);
  const std::int64_t r = downscale_factor, nd = input.dim();
  if (nd < 3 || r <= 0 || input.size(-2) % r != 0 || input.size(-1) % r != 0)
    throw Error(ErrorKind::shape, std::string(op) + ": expected an input [*, C, H, W] with H and W divisible by " +
                                      "downscale_factor = " + std::to_string(r) + " > 0, got " + describe(input));
  Shape batch(input.shape().begin(), input.shape().end() - 3);
  const std::int64_t c = input.size(-3), h = input.size(-2) / r, w = input.size(-1) / r;
  std::int64_t crr = 0;  // C r^2, checked: an empty input divides by any r
  if (__builtin_mul_overflow(c, r, &crr) || __builtin_mul_overflow(crr, r, &crr))
    throw Error(ErrorKind::value, std::string(op) + ": downscale_factor " + std::to_string(r) + " makes " +
                                      describe(input) + "'s C r^2 pass 2^63");
  Shape split = batch;
  split.insert(split.end(), {c, h, r, w, r});
  Shape perm;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(batch.size()); ++i) perm.push_back(i);
  const std::int64_t b = static_cast<std::int64_t>(batch.size());
  perm.insert(perm.end(), {b, b + 2, b + 4, b + 1, b + 3});  // C, r, r, H, W
  Shape out = batch;
  out.insert(out.end(), {crr, h, w});
  return input.reshape(split).permute(perm).reshape(out);
}

}  // namespace brrr
