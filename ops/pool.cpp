// The pools. max_pool2d and adaptive_max_pool2d are one backend kernel (Backend::max_pool2d)
// that saves the argmax of each window; their gradient is Backend::max_pool2d_backward, which
// sums the output gradient into those cells, and its own gradient a gather at the same
// indices (so create_graph works). max_unpool2d is a scatter into zeros at the indices.
// avg_pool2d stays a window sum over unfold's columns divided per window; the 1-D pools are
// the 2-D ones over a height-1 view.
module;
#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/window_checks.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

using Pair = std::array<std::int64_t, 2>;

// (a, b) for the 2-D pools, b for the 1-D ones (their first dim is the height-1 view's).
std::string dims_text(Pair v, int spatial) {
  return spatial == 1 ? std::to_string(v[1]) : "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ")";
}

// PyTorch's pooling_output_shape: with ceil_mode the size rounds up, but the last window
// must start inside the input or the left padding.
// In 128 bits (sizes near 2^63 do not wrap), clamped to [-1, 2^63 - 1] (prepare refuses the top).
std::int64_t pool_out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d,
                           bool ceil_mode) {
  const __int128 span = __int128{in} + 2 * __int128{p} - __int128{d} * (__int128{k} - 1) - 1;
  const __int128 num = span + (ceil_mode ? s - 1 : 0);
  __int128 out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;  // div_rtn: rounds toward -inf
  if (ceil_mode && (out - 1) * s >= __int128{in} + p) --out;
  return out < 0 ? -1 : out > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(out);
}


// x as a 4-D [N, C, H, W] view: [C, H, W] gains N = 1, the 1-D pools' [N, C, L] / [C, L] gain
// H = 1 too. Checks rank and dtype.
Tensor as_4d(const char* op, const Tensor& x, int spatial) {
  require_defined(op, x);
  if (x.dim() != spatial + 1 && x.dim() != spatial + 2)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a " +
                                      (spatial == 2 ? "3-D [C, H, W] or 4-D [N, C, H, W]" : "2-D [C, L] or 3-D [N, C, L]") +
                                      " input, got " + describe(x));
  require_floating(op, x);
  Tensor t = spatial == 1 ? x.unsqueeze(-2) : x;
  return t.dim() == 3 ? t.unsqueeze(0) : t;
}

// x's shape with its last `spatial` dims replaced by the output's.
Shape result_shape(const Tensor& x, int spatial, std::int64_t oh, std::int64_t ow) {
  Shape s(x.shape().begin(), x.shape().end() - spatial);
  if (spatial == 2) s.push_back(oh);
  s.push_back(ow);
  return s;
}

struct Pool {
  Tensor x4;        // [N, C, H, W], any strides
  Shape out_shape;  // the result's shape (the input's batch dims)
  backend::Window2d g;
};

struct Window {
  Pair kernel, stride, padding, dilation;
  bool ceil_mode;
};

Pool prepare(const char* op, const Tensor& x, const Window& w, int spatial) {
  Tensor x4 = as_4d(op, x, spatial);
  const Pair &k = w.kernel, &s = w.stride, &p = w.padding, &d = w.dilation;
  for (int i = 0; i < 2; ++i) {
    if (k[i] <= 0 || s[i] <= 0 || d[i] <= 0 || p[i] < 0)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + dims_text(k, spatial) + ", stride " +
                                        dims_text(s, spatial) + " and dilation " + dims_text(d, spatial) +
                                        " must be positive, padding " + dims_text(p, spatial) + " non-negative");
    if (p[i] * 2 > k[i])
      throw Error(ErrorKind::value, std::string(op) + ": padding " + dims_text(p, spatial) +
                                        " must be at most half of kernel_size " + dims_text(k, spatial));
  }
  std::int64_t H = x4.size(2), W = x4.size(3);
  std::int64_t oh = pool_out_size(H, k[0], s[0], p[0], d[0], w.ceil_mode);
  std::int64_t ow = pool_out_size(W, k[1], s[1], p[1], d[1], w.ceil_mode);
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(x) + " is too small for kernel_size " +
                                      dims_text(k, spatial) + " with padding " + dims_text(p, spatial) +
                                      " and dilation " + dims_text(d, spatial));
  check_sweep_fits(op, {x4.size(0), x4.size(1), oh, ow, k[0], k[1]},
                   [&] { return "input " + describe(x) + " and kernel_size " + dims_text(k, spatial); });
  return {x4, result_shape(x, spatial, oh, ow), window(x4.shape(), k, d, p, s, oh, ow)};
}

Window window_of(const Pool2dOptions& o, bool use_dilation) {
  return {o.kernel_size, o.stride.value_or(o.kernel_size), o.padding,
          use_dilation ? o.dilation.values : Pair{1, 1}, o.ceil_mode};
}
Window window_of(const Pool1dOptions& o, bool use_dilation) {
  return {{1, o.kernel_size}, {1, o.stride.value_or(o.kernel_size)}, {0, o.padding},
          {1, use_dilation ? o.dilation : 1}, o.ceil_mode};
}

// grad_in [N, C, H, W] of max pooling from the output gradient [N, C, out_h, out_w] and the
// saved indices; recorded (its gradient gathers at the indices), so create_graph works.
Tensor max_pool_backward(const Tensor& grad, const Tensor& indices, const backend::Window2d& g, bool adaptive) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty({g.n, g.c, g.h, g.w}, {.dtype = grad.dtype(), .device = grad.device()});
    if (out.numel() > 0)
      backend::backend_for(grad.device())
          .max_pool2d_backward(backend::output(out, "max_pool2d_backward"), backend::input(grad, "max_pool2d_backward"),
                               backend::input(indices, "max_pool2d_backward"), g, adaptive);
  }
  if (autograd::any_requires_grad({grad}))
    autograd::record("MaxPool2DWithIndicesBackwardBackward", {grad}, {out}, {indices}, [g](const autograd::Backward& c) {
      Tensor cells = c.grad().reshape({g.n, g.c, g.h * g.w});
      Tensor at = c.saved(0).reshape({g.n, g.c, g.out_h * g.out_w});
      return autograd::Grads{gather(cells, 2, at).view({g.n, g.c, g.out_h, g.out_w})};
    });
  return out;
}

ValuesIndices run_max(const char* op, const Pool& pool, bool adaptive) {
  const backend::Window2d& g = pool.g;
  Tensor values, indices;
  {
    NoGradGuard no_grad;
    values = empty({g.n, g.c, g.out_h, g.out_w}, {.dtype = pool.x4.dtype(), .device = pool.x4.device()});
    indices = empty(values.shape(), {.dtype = DType::i64, .device = pool.x4.device()});
    if (values.numel() > 0)
      backend::backend_for(pool.x4.device())
          .max_pool2d(backend::output(values, op), backend::output(indices, op), backend::input(pool.x4, op), g,
                      adaptive);
  }
  if (autograd::any_requires_grad({pool.x4}))
    autograd::record("MaxPool2DWithIndicesBackward", {pool.x4}, {values}, {indices},
                     [g, adaptive](const autograd::Backward& c) {
                       return autograd::Grads{max_pool_backward(c.grad(), c.saved(0), g, adaptive)};
                     });
  Tensor flat_indices;
  {
    NoGradGuard no_grad;
    flat_indices = indices.view(pool.out_shape);
  }
  return {values.view(pool.out_shape), flat_indices};
}

ValuesIndices max_pool(const char* op, const Tensor& x, const Window& w, int spatial) {
  NvtxRange range(op);
  return run_max(op, prepare(op, x, w, spatial), false);
}

ValuesIndices adaptive_max_pool(const char* op, const Tensor& x, Pair size, int spatial) {
  NvtxRange range(op);
  Tensor x4 = as_4d(op, x, spatial);
  if (size[0] <= 0 || size[1] <= 0)
    throw Error(ErrorKind::value, std::string(op) + ": output_size " + dims_text(size, spatial) + " must be positive");
  if (x4.size(2) == 0 || x4.size(3) == 0)
    throw Error(ErrorKind::shape, std::string(op) + ": input " + describe(x) + " has an empty spatial dim");
  Pool pool{x4, result_shape(x, spatial, size[0], size[1]),
            window(x4.shape(), {1, 1}, {1, 1}, {0, 0}, {1, 1}, size[0], size[1])};
  return run_max(op, pool, true);
}

Tensor avg_pool(const char* op, const Tensor& x, const Window& w, bool count_include_pad,
                std::optional<std::int64_t> divisor_override, int spatial) {
  NvtxRange range(op);
  if (divisor_override && *divisor_override == 0)
    throw Error(ErrorKind::value, std::string(op) + ": divisor_override must be nonzero");
  Pool pool = prepare(op, x, w, spatial);
  const backend::Window2d& g = pool.g;
  Tensor cols = unfold_with_pad(pool.x4, g, 0.0);  // [N, C*kh*kw, L], contiguous
  Tensor sums = sum(cols.view({g.n * g.c, g.kh * g.kw, g.out_h * g.out_w}), {1});  // [planes, L]
  if (divisor_override) return div(sums, static_cast<double>(*divisor_override)).view(pool.out_shape);
  // The divisor of each window, computed on the device from a ones image: cells inside the
  // padded bounds (count_include_pad) or inside the input only.
  Tensor divisor;
  {
    NoGradGuard no_grad;
    TensorOptions o{.dtype = x.dtype(), .device = x.device()};
    backend::Window2d g1 = g;
    g1.n = g1.c = 1;
    if (count_include_pad) {
      g1.h += 2 * g.ph;
      g1.w += 2 * g.pw;
      g1.ph = g1.pw = 0;
    }
    divisor = sum(unfold_with_pad(ones({1, 1, g1.h, g1.w}, o), g1, 0.0), {1});  // [1, L]
  }
  return div(sums, divisor).view(pool.out_shape);
}

Tensor adaptive_avg_pool(const char* op, const Tensor& x, Pair output_size, int spatial) {
  NvtxRange range(op);
  Tensor x4 = as_4d(op, x, spatial);
  std::int64_t H = x4.size(2), W = x4.size(3), oh = output_size[0], ow = output_size[1];
  if (oh <= 0 || ow <= 0)
    throw Error(ErrorKind::value, std::string(op) + ": output_size " + dims_text(output_size, spatial) +
                                      " must be positive");
  Shape out_shape = result_shape(x, spatial, oh, ow);
  // The output is allocated before its oh * ow bins are visited one by one: a size that cannot
  // be (near 2^63) is an error at once, not a loop for ever.
  (void)checked_numel(out_shape, op);
  (void)empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  if (H % oh == 0 && W % ow == 0)  // uniform bins: one avg_pool2d
    return avg_pool2d(x4, {.kernel_size = {H / oh, W / ow}}).view(out_shape);
  // Bin i covers [floor(i H / oh), ceil((i + 1) H / oh)): one mean per bin.
  std::vector<Tensor> rows;
  for (std::int64_t i = 0; i < oh; ++i) {
    std::int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
    std::vector<Tensor> cells;
    for (std::int64_t j = 0; j < ow; ++j) {
      std::int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
      cells.push_back(mean(x4.slice(-2, h0, h1).slice(-1, w0, w1), {-2, -1}));
    }
    rows.push_back(stack(cells, -1));
  }
  return stack(rows, -2).view(out_shape);
}

}  // namespace

// --- max -------------------------------------------------------------------------------------

Tensor max_pool2d(const Tensor& x, Pool2dOptions options) {
  return max_pool("max_pool2d", x, window_of(options, true), 2).values;
}
Tensor max_pool2d(const Tensor& x, std::int64_t kernel_size) {
  return max_pool2d(x, Pool2dOptions{.kernel_size = kernel_size});
}
ValuesIndices max_pool2d_with_indices(const Tensor& x, Pool2dOptions options) {
  return max_pool("max_pool2d_with_indices", x, window_of(options, true), 2);
}
Tensor max_pool1d(const Tensor& x, Pool1dOptions options) {
  return max_pool("max_pool1d", x, window_of(options, true), 1).values;
}
Tensor max_pool1d(const Tensor& x, std::int64_t kernel_size) {
  return max_pool1d(x, Pool1dOptions{.kernel_size = kernel_size});
}
ValuesIndices max_pool1d_with_indices(const Tensor& x, Pool1dOptions options) {
  return max_pool("max_pool1d_with_indices", x, window_of(options, true), 1);
}

Tensor adaptive_max_pool2d(const Tensor& x, ExpandingArray<2> output_size) {
  return adaptive_max_pool("adaptive_max_pool2d", x, output_size, 2).values;
}
ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, ExpandingArray<2> output_size) {
  return adaptive_max_pool("adaptive_max_pool2d_with_indices", x, output_size, 2);
}
Tensor adaptive_max_pool1d(const Tensor& x, std::int64_t output_size) {
  return adaptive_max_pool("adaptive_max_pool1d", x, {1, output_size}, 1).values;
}
ValuesIndices adaptive_max_pool1d_with_indices(const Tensor& x, std::int64_t output_size) {
  return adaptive_max_pool("adaptive_max_pool1d_with_indices", x, {1, output_size}, 1);
}

// --- max_unpool2d ------------------------------------------------------------------------------

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, MaxUnpool2dOptions options) {
  const char* op = "max_unpool2d";
  NvtxRange range(op);
  require_defined(op, x);
  require_defined(op, indices, "indices");
  if (x.dim() != 3 && x.dim() != 4)
    throw Error(ErrorKind::shape, std::string(op) + ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got " +
                                      describe(x));
  require_floating(op, x);
  common_device(op, {x, indices});
  if (indices.dtype() != DType::i64) throw Error::dtype_not_supported(op, "indices must be i64", indices);
  if (indices.shape() != x.shape())
    throw Error(ErrorKind::shape, std::string(op) + ": indices " + describe(indices) + " must have the shape of input " +
                                      describe(x));
  const Pair k = options.kernel_size, s = options.stride.value_or(options.kernel_size), p = options.padding;
  for (int i = 0; i < 2; ++i)
    if (k[i] <= 0 || s[i] <= 0 || p[i] < 0)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + dims_text(k, 2) + " and stride " +
                                        dims_text(s, 2) + " must be positive, padding " + dims_text(p, 2) +
                                        " non-negative");
  const std::int64_t H = x.size(-2), W = x.size(-1);
  // (in - 1) s - 2 p + k, and the strict bounds fallback +- s below, must not wrap near 2^63.
  for (int i = 0; i < 2; ++i) {
    const __int128 f = (__int128{i == 0 ? H : W} - 1) * s[i] - 2 * __int128{p[i]} + k[i];
    if (f + s[i] > INT64_MAX || f - s[i] < INT64_MIN)
      throw Error(ErrorKind::value, std::string(op) + ": kernel_size " + dims_text(k, 2) + ", stride " + dims_text(s, 2) +
                                        " and padding " + dims_text(p, 2) + " of input " + describe(x) +
                                        " give an output size past 2^63");
  }
  const Pair fallback{(H - 1) * s[0] - 2 * p[0] + k[0], (W - 1) * s[1] - 2 * p[1] + k[1]};
  Pair size = fallback;
  const std::vector<std::int64_t>& os = options.output_size;
  if (!os.empty()) {
    if (os.size() != 2 && os.size() != 4)
      throw Error(ErrorKind::shape, std::string(op) + ": output_size must have 2 or 4 elements, got " +
                                        std::to_string(os.size()));
    size = {os[os.size() - 2], os[os.size() - 1]};
    for (int i = 0; i < 2; ++i)
      if (!(fallback[i] - s[i] < size[i] && size[i] < fallback[i] + s[i]))
        throw Error(ErrorKind::value, std::string(op) + ": output_size " + dims_text(size, 2) + " of input " +
                                          describe(x) + ": dim " + std::to_string(i) + " must lie strictly between " +
                                          std::to_string(fallback[i] - s[i]) + " and " +
                                          std::to_string(fallback[i] + s[i]));
  }
  if (size[0] <= 0 || size[1] <= 0)
    throw Error(ErrorKind::value, std::string(op) + ": output size " + dims_text(size, 2) + " of input " + describe(x) +
                                      " must be positive");
  Shape batch(x.shape().begin(), x.shape().end() - 2);
  std::int64_t planes = 1;
  for (std::int64_t b : batch) planes *= b;
  check_sweep_fits(op, {planes, size[0], size[1]},
                   [&] { return "output size " + dims_text(size, 2) + " of input " + describe(x); });
  Tensor x2 = x.reshape({planes, H * W});
  Tensor i2;
  Tensor out;
  {
    NoGradGuard no_grad;
    i2 = indices.reshape({planes, H * W});
    out = zeros({planes, size[0] * size[1]}, {.dtype = x.dtype(), .device = x.device()});
    if (x2.numel() > 0)
      backend::backend_for(x.device())
          .scatter_reduce(backend::ScatterOp::assign, backend::output(out, op), 1, backend::input(i2, op),
                          backend::input(x2, op), backend::CheckedOp::max_unpool2d);
  }
  if (autograd::any_requires_grad({x2}))
    autograd::record("MaxUnpool2DBackward", {x2}, {out}, {i2}, [](const autograd::Backward& c) {
      return autograd::Grads{gather(c.grad(), 1, c.saved(0))};
    });
  batch.push_back(size[0]);
  batch.push_back(size[1]);
  return out.view(batch);
}

// --- average -------------------------------------------------------------------------------------

Tensor avg_pool2d(const Tensor& x, Pool2dOptions options) {
  if (options.dilation != std::array<std::int64_t, 2>{1, 1})
    throw Error(ErrorKind::value, "avg_pool2d: dilation is not supported (as in PyTorch)");
  return avg_pool("avg_pool2d", x, window_of(options, false), options.count_include_pad, options.divisor_override, 2);
}
Tensor avg_pool2d(const Tensor& x, std::int64_t kernel_size) {
  return avg_pool2d(x, Pool2dOptions{.kernel_size = kernel_size});
}
Tensor avg_pool1d(const Tensor& x, Pool1dOptions options) {
  if (options.dilation != 1) throw Error(ErrorKind::value, "avg_pool1d: dilation is not supported (as in PyTorch)");
  return avg_pool("avg_pool1d", x, window_of(options, false), options.count_include_pad, std::nullopt, 1);
}
Tensor avg_pool1d(const Tensor& x, std::int64_t kernel_size) {
  return avg_pool1d(x, Pool1dOptions{.kernel_size = kernel_size});
}

Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size) {
  return adaptive_avg_pool("adaptive_avg_pool2d", x, output_size, 2);
}
Tensor adaptive_avg_pool1d(const Tensor& x, std::int64_t output_size) {
  return adaptive_avg_pool("adaptive_avg_pool1d", x, {1, output_size}, 1);
}

}  // namespace brrr
