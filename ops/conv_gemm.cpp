// The CPU convolution path of conv2d and conv_transpose2d (and so conv1d): three products
// over chunks of samples, each made of the backend's im2col / col2im (split over the intra-op
// pool, ops/cpu/im2col.cpp) and GEMM (OpenBLAS, ops/cpu/gemm.cpp):
//   forward       out[n] = W [O, C*kh*kw] @ cols[n] (+ b 1^T: a rank-1 GEMM writes the bias
//                 first, the main GEMM adds to it with beta = 1), one batched GEMM per chunk
//   input grad    dcols[n] = W^T @ g[n], then col2im sums dcols back into the input's cells
//   weight grad   dW += g[n] [O, L] @ cols[n]^T [L, C*kh*kw], accumulated by GEMM (beta = 1)
//                 into one [O, C*kh*kw] buffer, sample after sample: no per-sample copies, and
//                 the same summation order whatever the thread count
// A chunk holds as many samples as keep its columns under `chunk_elements` (at least one),
// so the temporaries stay bounded whatever the batch. The composite forms (recorded ops:
// unfold/fold + matmul) serve create_graph, where the gradients must themselves be
// differentiable, and the CUDA backend's conv2d (ops/conv.cpp).
module;
#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

namespace brrr {

using namespace ops_detail;

namespace {

// Elements of one chunk's columns: 4 MiB of f32, L2/L3-sized on the build machine.
constexpr std::int64_t chunk_elements = std::int64_t{1} << 20;

struct Geometry {
  backend::Window2d win;  // over the whole input: c = all channels
  std::int64_t groups, out_channels;
  std::int64_t cg() const { return win.c / groups; }
  std::int64_t og() const { return out_channels / groups; }
  std::int64_t ckk() const { return cg() * win.kh * win.kw; }  // columns' rows per group
  std::int64_t rows() const { return win.c * win.kh * win.kw; }
  std::int64_t positions() const { return win.out_h * win.out_w; }
  std::int64_t chunk() const {
    return std::clamp<std::int64_t>(chunk_elements / std::max<std::int64_t>(1, rows() * positions()), 1,
                                    std::max<std::int64_t>(win.n, 1));
  }
};

// A GEMM operand: a tensor's data with (batch, row, col) strides in elements.
struct Operand3 {
  const Tensor& t;
  std::int64_t batch, row, col;
};

// c [batch, m, n] (contiguous from its data pointer) = a @ b + beta c, on the CPU backend.
void gemm(const Tensor& c, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, Operand3 a, Operand3 b,
          double beta) {
  constexpr const char* op = "conv2d";
  backend::GemmArgs g;
  g.dtype = c.dtype();
  g.device = -1;
  g.batch = batch;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = backend::input_data(a.t, op);
  g.a_batch_stride = a.batch;
  g.a_row_stride = a.row;
  g.a_col_stride = a.col;
  g.b = backend::input_data(b.t, op);
  g.b_batch_stride = b.batch;
  g.b_row_stride = b.row;
  g.b_col_stride = b.col;
  g.c = backend::output_data(c, op);
  g.beta = beta;
  backend::backend_for(c.device()).gemm(g);
}

backend::Window2d chunk_window(backend::Window2d w, std::int64_t n) {
  w.n = n;
  return w;
}

// Sample i, group gi of a [N, X, ...] tensor: X split into `groups` blocks of `size`.
Tensor block(const Tensor& t, std::int64_t i, std::int64_t gi, std::int64_t size) {
  return t.narrow(0, i, 1).narrow(1, gi * size, size);
}

}  // namespace

Tensor ops_detail::conv2d_gemm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       const backend::Window2d& win, std::int64_t groups) {
  NoGradGuard no_grad;
  const Geometry geo{win, groups, weight.size(0)};
  const std::int64_t O = geo.out_channels, Og = geo.og(), ckk = geo.ckk(), L = geo.positions(), R = geo.rows();
  const TensorOptions like{.dtype = x.dtype(), .device = x.device()};
  Tensor out = empty({win.n, O, win.out_h, win.out_w}, like);
  if (out.numel() == 0) return out;
  if (ckk == 0) {  // no input channels: the output is the bias (or 0)
    out.fill_(0.0);
    return bias.defined() ? add(out, bias.view({1, O, 1, 1})) : out;
  }
  const Tensor w = weight.contiguous();
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const Tensor ones_row = b.defined() ? ones({L}, like) : Tensor();
  const std::int64_t nb = geo.chunk();
  Tensor cols = empty({nb, R, L}, like);
  auto& be = backend::backend_for(x.device());
  for (std::int64_t n0 = 0; n0 < win.n; n0 += nb) {
    const std::int64_t cn = std::min(nb, win.n - n0);
    const Tensor cc = cols.narrow(0, 0, cn), oc = out.narrow(0, n0, cn);
    be.im2col(backend::output(cc, "conv2d"), backend::input(x.narrow(0, n0, cn), "conv2d"), chunk_window(win, cn), 0.0);
    const double beta = b.defined() ? 1.0 : 0.0;
    if (groups == 1) {
      if (b.defined()) gemm(oc, cn, O, L, 1, {b, 0, 1, 1}, {ones_row, 0, L, 1}, 0.0);
      gemm(oc, cn, O, L, ckk, {w, 0, ckk, 1}, {cc, R * L, L, 1}, beta);
      continue;
    }
    for (std::int64_t i = 0; i < cn; ++i)
      for (std::int64_t gi = 0; gi < groups; ++gi) {
        const Tensor og = block(oc, i, gi, Og);
        if (b.defined()) gemm(og, 1, Og, L, 1, {b.narrow(0, gi * Og, Og), 0, 1, 1}, {ones_row, 0, L, 1}, 0.0);
        gemm(og, 1, Og, L, ckk, {w.narrow(0, gi * Og, Og), 0, ckk, 1}, {block(cc, i, gi, ckk), 0, L, 1}, beta);
      }
  }
  return out;
}

Tensor ops_detail::conv2d_gemm_input_grad(const Tensor& grad_out, const Tensor& weight, const backend::Window2d& win,
                                          std::int64_t groups) {
  NoGradGuard no_grad;
  const Geometry geo{win, groups, weight.size(0)};
  const std::int64_t O = geo.out_channels, Og = geo.og(), ckk = geo.ckk(), L = geo.positions(), R = geo.rows();
  const TensorOptions like{.dtype = grad_out.dtype(), .device = grad_out.device()};
  if (win.n * win.c * win.h * win.w == 0 || L == 0 || O == 0) return zeros({win.n, win.c, win.h, win.w}, like);
  Tensor gx = empty({win.n, win.c, win.h, win.w}, like);  // each chunk's col2im writes all of its cells
  const Tensor w = weight.contiguous(), g = grad_out.contiguous();
  const std::int64_t nb = geo.chunk();
  Tensor dcols = empty({nb, R, L}, like);
  auto& be = backend::backend_for(g.device());
  for (std::int64_t n0 = 0; n0 < win.n; n0 += nb) {
    const std::int64_t cn = std::min(nb, win.n - n0);
    const Tensor dc = dcols.narrow(0, 0, cn), gc = g.narrow(0, n0, cn);
    if (groups == 1) {
      gemm(dc, cn, ckk, L, O, {w, 0, 1, ckk}, {gc, O * L, L, 1}, 0.0);  // W^T: the transpose is a flag
    } else {
      for (std::int64_t i = 0; i < cn; ++i)
        for (std::int64_t gi = 0; gi < groups; ++gi)
          gemm(block(dc, i, gi, ckk), 1, ckk, L, Og, {w.narrow(0, gi * Og, Og), 0, 1, ckk}, {block(gc, i, gi, Og), 0, L, 1},
               0.0);
    }
    be.col2im(backend::output(gx.narrow(0, n0, cn), "conv2d"), backend::input(dc, "conv2d"), chunk_window(win, cn));
  }
  return gx;
}

Tensor ops_detail::conv2d_gemm_weight_grad(const Tensor& grad_out, const Tensor& x, const backend::Window2d& win,
                                           std::int64_t groups, const Shape& weight_shape) {
  NoGradGuard no_grad;
  const Geometry geo{win, groups, weight_shape[0]};
  const std::int64_t O = geo.out_channels, Og = geo.og(), ckk = geo.ckk(), L = geo.positions(), R = geo.rows();
  const TensorOptions like{.dtype = grad_out.dtype(), .device = grad_out.device()};
  if (win.n == 0 || L == 0 || O == 0 || ckk == 0) return zeros(weight_shape, like);
  Tensor gw = empty({O, ckk}, like);
  const Tensor g = grad_out.contiguous();
  const std::int64_t nb = geo.chunk();
  Tensor cols = empty({nb, R, L}, like);
  auto& be = backend::backend_for(g.device());
  double beta = 0.0;  // the first product writes, the others accumulate
  for (std::int64_t n0 = 0; n0 < win.n; n0 += nb) {
    const std::int64_t cn = std::min(nb, win.n - n0);
    const Tensor cc = cols.narrow(0, 0, cn);
    be.im2col(backend::output(cc, "conv2d"), backend::input(x.narrow(0, n0, cn), "conv2d"), chunk_window(win, cn), 0.0);
    for (std::int64_t i = 0; i < cn; ++i) {
      for (std::int64_t gi = 0; gi < groups; ++gi)  // cols^T [L, ckk]: the transpose is a flag
        gemm(gw.narrow(0, gi * Og, Og), 1, Og, ckk, L, {block(g, n0 + i, gi, Og), 0, L, 1},
             {block(cc, i, gi, ckk), 0, 1, L}, beta);
      beta = 1.0;
    }
  }
  return gw.view(weight_shape);
}

Tensor ops_detail::conv2d_composite_input_grad(const Tensor& grad_out, const Tensor& weight,
                                               const backend::Window2d& win, std::int64_t groups) {
  const Geometry geo{win, groups, weight.size(0)};
  const std::int64_t N = win.n, Og = geo.og(), ckk = geo.ckk(), L = geo.positions();
  backend::Window2d wg = win;
  wg.c = geo.cg();
  Tensor g = grad_out.reshape({N, geo.out_channels, L});
  std::vector<Tensor> parts;
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    Tensor w = weight.narrow(0, gi * Og, Og).reshape({Og, ckk});
    parts.push_back(fold_cols(matmul(w.t(), g.narrow(1, gi * Og, Og)), wg));  // [ckk, Og] @ [N, Og, L]
  }
  return groups == 1 ? parts[0] : cat(parts, 1);
}

Tensor ops_detail::conv2d_composite_weight_grad(const Tensor& grad_out, const Tensor& x, const backend::Window2d& win,
                                                std::int64_t groups, const Shape& weight_shape) {
  const Geometry geo{win, groups, weight_shape[0]};
  const std::int64_t N = win.n, Og = geo.og(), Cg = geo.cg(), L = geo.positions();
  backend::Window2d wg = win;
  wg.c = Cg;
  Tensor g = grad_out.reshape({N, geo.out_channels, L});
  std::vector<Tensor> parts;
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    Tensor cols = unfold_with_pad(x.narrow(1, gi * Cg, Cg), wg, 0.0);  // [N, ckk, L]
    parts.push_back(sum(matmul(g.narrow(1, gi * Og, Og), cols.transpose(1, 2)), 0));
  }
  return (groups == 1 ? parts[0] : cat(parts, 0)).view(weight_shape);
}

Tensor ops_detail::conv_bias_grad(const Tensor& grad_out) {
  // Over positions (rows of the contiguous [N*O, L]) then over the batch (columns of [N, O]):
  // both are the vectorised pairwise sums of ops/cpu/reduce.cpp.
  const std::int64_t N = grad_out.size(0), O = grad_out.size(1);
  return sum(sum(grad_out.reshape({N, O, -1}), 2), 0);
}

}  // namespace brrr
