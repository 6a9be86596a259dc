// 2-D pools as window reductions over unfold's columns: max_pool2d = max over each window
// (padding reads -inf, so it never wins), avg_pool2d = sum / divisor. Their gradients come
// from max/sum and unfold's backward (fold).
module;
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;


namespace {

std::string pair_text(std::array<std::int64_t, 2> v) { return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")"; }

// PyTorch's pooling_output_shape: with ceil_mode the size rounds up, but the last window
// must start inside the input or the left padding.
std::int64_t pool_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d,
                           bool ceil_mode) {
  std::int64_t span = in + 2 * p - d * (k - 1) - 1;
  std::int64_t num = span + (ceil_mode ? s - 1 : 0);
  std::int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;  // div_rtn: rounds toward -inf
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct Pool {
  Tensor x4;  // [N*C, 1, H, W]
  Shape batch;  // [N, C] or [C]
  backend::Window2d g;
  std::array<std::int64_t, 2> stride;
};

Pool prepare(const char* op, const Tensor& x, const Pool2dOptions& o, bool use_dilation) {
  require_defined(op, x);
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got " +
                                      describe(x));
  require_floating(op, x);
  std::array<std::int64_t, 2> k = o.kernel_size, s = o.stride.value_or(o.kernel_size), p = o.padding;
  std::array<std::int64_t, 2> d = use_dilation ? o.dilation.values : std::array<std::int64_t, 2>{1, 1};
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0 || s[i] <= 0 || d[i] <= 0 || p[i] < 0)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + pair_text(k) + ", stride " + pair_text(s) +
                                        " and dilation must be positive, padding " + pair_text(p) + " non-negative");
    if (p[i] * 2 > k[i])
      throw Error(ErrorKind::value, std::string(op) + ": padding " + pair_text(p) +
                                        " must be at most half of kernel_size " + pair_text(k));
  }
  std::int64_t H = x.size(-2), W = x.size(-1);
  std::int64_t oh = pool_out_size(H, k[0], s[0], p[0], d[0], o.ceil_mode);
  std::int64_t ow = pool_out_size(W, k[1], s[1], p[1], d[1], o.ceil_mode);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(x) + " is too small for kernel_size " +
                                      pair_text(k) + " with padding " + pair_text(p));
  Pool pool;
  pool.batch = Shape(x.shape().begin(), x.shape().end() - 2);
  std::int64_t planes = 1;
  for (auto b : pool.batch) planes *= b;
  pool.x4 = x.reshape({planes, 1, H, W});
  pool.g = window(pool.x4.shape(), k, d, p, s, oh, ow);
  pool.stride = s;
  return pool;
}

Tensor finish(const Pool& pool, const Tensor& per_plane /* [planes, L] */) {
  Shape out = pool.batch;
  out.push_back(pool.g.out_h);
  out.push_back(pool.g.out_w);
  return per_plane.reshape(out);
}

}  // namespace

Tensor max_pool2d(const Tensor& x, Pool2dOptions options) {
  NvtxRange range("max_pool2d");
  Pool pool = prepare("max_pool2d", x, options, true);
  Tensor cols = unfold_with_pad(pool.x4, pool.g, -std::numeric_limits<double>::infinity());  // [planes, kh*kw, L]
  return finish(pool, max(cols, 1).values);
}

Tensor max_pool2d(const Tensor& x, std::int64_t kernel_size) {
  return max_pool2d(x, Pool2dOptions{.kernel_size = kernel_size});
}

Tensor avg_pool2d(const Tensor& x, std::int64_t kernel_size) {
  return avg_pool2d(x, Pool2dOptions{.kernel_size = kernel_size});
}

Tensor avg_pool2d(const Tensor& x, Pool2dOptions options) {
  NvtxRange range("avg_pool2d");
  if (options.dilation != std::array<std::int64_t, 2>{1, 1})
    throw Error(ErrorKind::value, "avg_pool2d: dilation is not supported (as in PyTorch)");
  Pool pool = prepare("avg_pool2d", x, options, false);
  Tensor sums = sum(unfold_with_pad(pool.x4, pool.g, 0.0), {1});  // [planes, L]
  // The divisor of each window, computed on the device from a ones image: cells inside the
  // padded bounds (count_include_pad) or inside the input only.
  Tensor divisor;
  {
    NoGradGuard no_grad;
    const backend::Window2d& g = pool.g;
    TensorOptions o{.dtype = x.dtype(), .device = x.device()};
    if (options.count_include_pad) {
      Tensor padded = ones({1, 1, g.h + 2 * g.ph, g.w + 2 * g.pw}, o);
      backend::Window2d gp = g;
      gp.n = 1;
      gp.h += 2 * g.ph;
      gp.w += 2 * g.pw;
      gp.ph = gp.pw = 0;
      divisor = sum(unfold_with_pad(padded, gp, 0.0), {1});
    } else {
      backend::Window2d g1 = g;
      g1.n = 1;
      divisor = sum(unfold_with_pad(ones({1, 1, g.h, g.w}, o), g1, 0.0), {1});
    }
  }
  return finish(pool, div(sums, divisor));
}

Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size_arg) {
  const std::array<std::int64_t, 2>& output_size = output_size_arg;
  NvtxRange range("adaptive_avg_pool2d");
  require_defined("adaptive_avg_pool2d", x);
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(ErrorKind::shape, "adaptive_avg_pool2d: expected a 3-D or 4-D input, got " + describe(x));
  std::int64_t H = x.size(-2), W = x.size(-1), oh = output_size[0], ow = output_size[1];
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::value, "adaptive_avg_pool2d: output_size " + pair_text(output_size) + " must be positive");
  if (H % oh == 0 && W % ow == 0)  // uniform bins: one avg_pool2d
    return avg_pool2d(x, {.kernel_size = {H / oh, W / ow}});
  // Bin i covers [floor(i H / oh), ceil((i + 1) H / oh)): one mean per bin.
  std::vector<Tensor> rows;
  for (std::int64_t i = 0; i < oh; ++i) {
    std::int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
    std::vector<Tensor> cells;
    for (std::int64_t j = 0; j < ow; ++j) {
      std::int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
      cells.push_back(mean(x.slice(-2, h0, h1).slice(-1, w0, w1), {-2, -1}));
    }
    rows.push_back(stack(cells, -1));
  }
  return stack(rows, -2);
}

}  // namespace brrr
