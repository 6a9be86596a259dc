// matmul with NumPy/PyTorch semantics, over the backend's strided-batched GEMM.
//
// Forward: 1-D operands get a dim prepended (a) or appended (b); the batch dims broadcast;
// each operand is handed to the backend as (batch stride, row stride, col stride) without a
// copy whenever one of its two inner strides is 1 and the other one at least the size it
// steps over (a row-major matrix or a transposed view: cuBLAS expresses both with its
// transpose flags), and its broadcast batch dims collapse into one stride (0 for a broadcast
// operand). Otherwise the operand is made contiguous first. When b has no batch dims, a's
// batch and row dims fold into one big GEMM where a's strides allow it.
// Backward: grad_a = g @ b^T, grad_b = a^T @ g (summed over broadcast batch dims), written
// with ops so that create_graph records them; grad_b = (g^T a)^T when b is a transposed
// contiguous matrix, so a Linear weight's gradient arrives contiguous.
// linear_2d (addmm and linear with a bias): x @ w + bias as one GEMM with the bias in its
// epilogue; its backward computes the weight's gradient and the bias's (the sum of g over
// rows) in one GEMM too, by the bias-gradient epilogue of the backend contract.
module;
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

std::atomic<bool> tf32_allowed{false};

bool is_gemm_dtype(DType d) {
  switch (d) {
    case DType::f32: case DType::f64: case DType::bf16: case DType::f16: return true;
    case DType::i32: case DType::i64: case DType::boolean: return false;
  }
  return false;
}

// The shapes of a matmul once 1-D operands are promoted to matrices.
struct Plan {
  Shape batch;      // broadcast batch dims
  std::int64_t m = 0, k = 0, n = 0;
  Shape a_full;     // a as a (batched) matrix: [..., m, k]
  Shape b_full;     // [..., k, n]
  Shape out_shape;  // the result, with the promoted dims removed again
};

Plan make_plan(const Tensor& a, const Tensor& b) {
  require_defined("matmul", a, "first operand");
  require_defined("matmul", b, "second operand");
  common_device("matmul", {a, b});
  for (const Tensor* t : {&a, &b})
    if (!is_gemm_dtype(t->dtype()))
      throw Error(ErrorKind::dtype, "matmul: expected floating-point tensors (f32, f64, bf16, f16), got " +
                                        describe(a) + " and " + describe(b));
  if (a.dtype() != b.dtype())
    throw Error(ErrorKind::dtype, "matmul: expected both operands to have the same dtype, got " + describe(a) +
                                      " and " + describe(b) + " (convert one with .to(dtype))");
  if (a.dim() == 0 || b.dim() == 0)
    throw Error(ErrorKind::shape, "matmul: both operands need at least 1 dim, got shapes " + to_string(a.shape()) +
                                      " and " + to_string(b.shape()));
  Plan p;
  p.a_full = a.shape();
  if (a.dim() == 1) p.a_full.insert(p.a_full.begin(), 1);
  p.b_full = b.shape();
  if (b.dim() == 1) p.b_full.push_back(1);
  std::int64_t ka = p.a_full.back(), kb = p.b_full[p.b_full.size() - 2];
  if (ka != kb)
    throw Error::shape_mismatch("matmul", a.shape(), b.shape(),
                                "cannot be multiplied (" + std::to_string(ka) + " != " + std::to_string(kb) + ")");
  p.m = p.a_full[p.a_full.size() - 2];
  p.k = ka;
  p.n = p.b_full.back();
  Shape a_batch(p.a_full.begin(), p.a_full.end() - 2), b_batch(p.b_full.begin(), p.b_full.end() - 2);
  try {
    p.batch = broadcast_shapes(a_batch, b_batch, "matmul");
  } catch (const Error&) {
    throw Error(ErrorKind::shape, "matmul: the batch dims of shapes " + to_string(a.shape()) + " and " +
                                      to_string(b.shape()) + " cannot be broadcast (" + to_string(a_batch) + " vs " +
                                      to_string(b_batch) + ")");
  }
  p.out_shape = p.batch;
  if (a.dim() > 1) p.out_shape.push_back(p.m);
  if (b.dim() > 1) p.out_shape.push_back(p.n);
  return p;
}

// Strides (row, col) of a [rows, cols] matrix as a GEMM operand: one of them 1 and the other
// at least the size it steps over (so it is a valid leading dimension), or nullopt. Strides of
// size-1 dims never matter and are normalised. Sizes here are >= 1.
std::optional<std::pair<std::int64_t, std::int64_t>> matrix_strides(std::int64_t rows, std::int64_t cols,
                                                                     std::int64_t rs, std::int64_t cs) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) return std::pair{rows == 1 ? cols : rs, std::int64_t(1)};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) return std::pair{std::int64_t(1), cols == 1 ? rows : cs};
  return std::nullopt;
}

// The one stride that walks dims [0, ndims) of (sizes, strides) in row-major order, if one
// does (0 when they are all broadcast or all of size 1).
std::optional<std::int64_t> single_stride(const Shape& sizes, const Shape& strides, std::size_t ndims) {
  std::int64_t stride = 0, span = 1;
  bool have = false;
  for (std::size_t d = ndims; d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (!have) {
      stride = strides[d];
      have = true;
    } else if (strides[d] != stride * span) {
      return std::nullopt;
    }
    span *= sizes[d];
  }
  return stride;
}

// One GEMM operand: the tensor that owns the numbers and its three strides.
struct Operand {
  Tensor t;
  std::int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
};

// `t` broadcast to batch + [rows, cols], as a GEMM operand (copied only when its strides
// cannot be expressed).
Operand gemm_operand(Tensor t, const Shape& batch, std::int64_t rows, std::int64_t cols) {
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  t = t.expand(full);
  std::size_t nb = batch.size();
  auto inner = matrix_strides(rows, cols, t.stride(-2), t.stride(-1));
  auto outer = single_stride(t.shape(), t.strides(), nb);
  if (!inner || !outer) {
    t = t.contiguous();
    inner = std::pair{cols, std::int64_t(1)};
    outer = rows * cols;
  }
  return {t, *outer, inner->first, inner->second};
}

Tensor matmul_forward(const Tensor& a, const Tensor& b, const Plan& p) {
  NoGradGuard no_grad;
  Device dev = a.device();
  Shape full = p.batch;
  full.push_back(p.m);
  full.push_back(p.n);
  Tensor out = empty(full, {.dtype = a.dtype(), .device = dev});
  if (out.numel() == 0) return out.view(p.out_shape);
  if (p.k == 0) {  // an empty sum
    out.fill_(0);
    return out.view(p.out_shape);
  }
  Tensor A = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor B = b.dim() == 1 ? b.unsqueeze(-1) : b;
  std::int64_t batch = 1;
  for (auto s : p.batch) batch *= s;

  backend::GemmArgs args;
  args.dtype = a.dtype();
  args.device = dev.is_cuda() ? dev.index() : -1;
  args.allow_tf32 = tf32_allowed.load(std::memory_order_relaxed);
  args.c = backend::output_data(out, "matmul");
  args.k = p.k;
  args.n = p.n;

  // b without batch dims: a's batch and row dims may fold into one [batch * m, k] matrix,
  // one large GEMM instead of `batch` small ones.
  bool folded = false;
  if (B.dim() == 2 && batch > 1 && (A.stride(-1) == 1 || p.k == 1)) {
    auto rows = single_stride(A.shape(), A.strides(), A.shape().size() - 1);
    if (rows && *rows >= p.k) {
      Operand ob = gemm_operand(B, {}, p.k, p.n);
      args.batch = 1;
      args.m = batch * p.m;
      args.a = backend::input_data(A, "matmul");
      args.a_batch_stride = 0;
      args.a_row_stride = *rows;
      args.a_col_stride = 1;
      args.b = backend::input_data(ob.t, "matmul");
      args.b_batch_stride = 0;
      args.b_row_stride = ob.row_stride;
      args.b_col_stride = ob.col_stride;
      backend::backend_for(dev).gemm(args);
      folded = true;
    }
  }
  if (!folded) {
    Operand oa = gemm_operand(A, p.batch, p.m, p.k);
    Operand ob = gemm_operand(B, p.batch, p.k, p.n);
    args.batch = batch;
    args.m = p.m;
    args.a = backend::input_data(oa.t, "matmul");
    args.a_batch_stride = oa.batch_stride;
    args.a_row_stride = oa.row_stride;
    args.a_col_stride = oa.col_stride;
    args.b = backend::input_data(ob.t, "matmul");
    args.b_batch_stride = ob.batch_stride;
    args.b_row_stride = ob.row_stride;
    args.b_col_stride = ob.col_stride;
    backend::backend_for(dev).gemm(args);
  }
  return out.view(p.out_shape);
}

// grad_a = g @ b^T, grad_b = a^T @ g, summed over the broadcast batch dims and reshaped to
// the operands' (1-D operands included).
autograd::Grads matmul_rule(const autograd::Backward& c, const Plan& p, const Tensor& a, const Tensor& b) {
  Tensor A = a.dim() == 1 ? a.unsqueeze(0) : a;   // [..., m, k]
  Tensor B = b.dim() == 1 ? b.unsqueeze(-1) : b;  // [..., k, n]
  Shape full = p.batch;
  full.push_back(p.m);
  full.push_back(p.n);
  Tensor g = c.grad().shape() == full ? c.grad() : c.grad().reshape(full);  // [batch..., m, n]
  Tensor ga, gb;
  if (c.needs(0)) {
    Tensor r = matmul(g, B.transpose(-1, -2));  // [batch..., m, k]
    if (r.shape() != p.a_full) r = sum_to_size(r, p.a_full);
    ga = r.shape() == a.shape() ? r : r.reshape(a.shape());
  }
  if (c.needs(1)) {
    Tensor r;
    if (B.dim() == 2 && B.size(0) > 1 && B.size(1) > 1 && B.stride(0) == 1 && B.stride(1) == B.size(0)) {
      // B is the transpose of a contiguous [n, k] tensor (Linear's weight.t()): compute that
      // tensor's gradient, g^T A, contiguous and return its transpose, so the gradient that
      // reaches the weight through the t() view is contiguous (no copy when accumulated).
      r = matmul(g.reshape({-1, p.n}).t(), A.reshape({-1, p.k})).t();  // [k, n]
    } else if (B.dim() == 2 && g.dim() > 2) {
      // sum over the batch of A[i]^T g[i] = (A's rows stacked)^T (g's rows stacked).
      r = matmul(A.reshape({-1, p.k}).t(), g.reshape({-1, p.n}));  // [k, n]
    } else {
      r = matmul(A.transpose(-1, -2), g);  // [batch..., k, n]
      if (r.shape() != p.b_full) r = sum_to_size(r, p.b_full);
    }
    gb = r.shape() == b.shape() ? r : r.reshape(b.shape());
  }
  return {ga, gb};
}

}  // namespace

Tensor ops_detail::gemm_2d(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor* bias_grad,
                           backend::GemmOperand of, const char* op, bool f32_out, const ActivationEpilogue& act,
                           bool side) {
  NoGradGuard no_grad;
  const Device dev = a.device();
  const std::int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const DType out_dtype = f32_out ? DType::f32 : a.dtype();
  Tensor out = empty({m, n}, {.dtype = out_dtype, .device = dev});
  if (bias_grad != nullptr)
    *bias_grad = empty({of == backend::GemmOperand::a ? m : n}, {.dtype = out_dtype, .device = dev});
  // The results come from the current stream's pool (above); the rest runs on the side stream.
  std::optional<backend::SideWork> work;
  if (side && dev.is_cuda()) work.emplace(dev.index());
  Operand oa = gemm_operand(a, {}, m, k);
  Operand ob = gemm_operand(b, {}, k, n);
  backend::GemmArgs args;
  args.dtype = a.dtype();
  args.device = dev.is_cuda() ? dev.index() : -1;
  args.allow_tf32 = tf32_allowed.load(std::memory_order_relaxed);
  args.f32_out = f32_out;
  args.m = m;
  args.n = n;
  args.k = k;
  args.a = backend::input_data(oa.t, op);
  args.a_row_stride = oa.row_stride;
  args.a_col_stride = oa.col_stride;
  args.b = backend::input_data(ob.t, op);
  args.b_row_stride = ob.row_stride;
  args.b_col_stride = ob.col_stride;
  Tensor bias_c;
  if (bias.defined()) {
    bias_c = bias.contiguous();
    args.bias = backend::input_data(bias_c, op);
  }
  if (bias_grad != nullptr) {
    args.bias_grad = backend::output_data(*bias_grad, op);
    args.bias_grad_of = of;
  }
  if (act.kind != backend::GemmActivation::none) {
    if (act.kind == backend::GemmActivation::gelu_tanh) *act.aux = empty({m, n}, {.dtype = out_dtype, .device = dev});
    args.activation = act.kind;
    args.aux = act.kind == backend::GemmActivation::gelu_tanh
                   ? backend::output_data(*act.aux, op)
                   : const_cast<void*>(backend::input_data(*act.aux, op));
  }
  args.c = backend::output_data(out, op);
  backend::backend_for(dev).gemm(args);
  if (work) {
    work->reads(oa.t.storage());
    work->reads(ob.t.storage());
    work->writes(out.storage());
    if (bias_grad != nullptr) work->writes(bias_grad->storage());
  }
  return out;
}

autograd::Grads ops_detail::linear_grads(const Tensor& g, const Tensor& x, const Tensor& w,
                                         const std::array<bool, 3>& needs, const GradDtypes& to) {
  autograd::Grads r(3);
  if (!g.defined()) return r;
  const auto as = [](Tensor t, DType d) { return t.defined() && t.dtype() != d ? t.to(d) : t; };
  // w the transpose of a contiguous [n, k] (linear's weight.t()): compute that tensor's
  // gradient g^T x, contiguous, and return its transpose (as matmul's rule does).
  const bool w_transposed = w.size(0) > 1 && w.size(1) > 1 && w.stride(0) == 1 && w.stride(1) == w.size(0);
  if (!autograd::is_grad_enabled()) {
    const bool low = g.dtype() == DType::bf16 || g.dtype() == DType::f16;
    if (needs[0]) r[0] = as(gemm_2d(g, w.t(), Tensor(), nullptr, backend::GemmOperand::b, "linear",
                                      low && to.x == DType::f32), to.x);
    if (needs[1]) {
      const bool f32 = low && to.w == DType::f32;
      Tensor db;
      Tensor* want_db = needs[2] ? &db : nullptr;
      const bool side = g.device().is_cuda() && backend::side_work_enabled();
      r[1] = w_transposed ? gemm_2d(g.t(), x, Tensor(), want_db, backend::GemmOperand::a, "linear", f32, {}, side).t()
                          : gemm_2d(x.t(), g, Tensor(), want_db, backend::GemmOperand::b, "linear", f32, {}, side);
      r[1] = as(r[1], to.w);
      r[2] = as(db, to.bias);
    }
    if (needs[2] && !r[2].defined()) r[2] = as(sum(g, {0}), to.bias);
    return r;
  }
  if (needs[0]) r[0] = as(matmul(g, w.t()), to.x);
  if (needs[1]) r[1] = as(w_transposed ? matmul(g.t(), x).t() : matmul(x.t(), g), to.w);
  if (needs[2]) r[2] = as(sum(g, {0}), to.bias);
  return r;
}

namespace {

autograd::Grads linear_rule(const autograd::Backward& c, const Tensor& x, const Tensor& w, const GradDtypes& to) {
  return linear_grads(c.grad(), x, w, {c.needs(0), c.needs(1), c.needs(2)}, to);
}

}  // namespace

Tensor ops_detail::linear_2d(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor out = gemm_2d(x, w, bias, nullptr, backend::GemmOperand::b, "linear");
  if (autograd::any_requires_grad({x, w, bias})) {
    const GradDtypes to{x.dtype(), w.dtype(), x.dtype()};
    autograd::record("AddmmBackward", {x, w, bias}, {out}, {x, w}, [to](const autograd::Backward& c) {
      return linear_rule(c, c.saved(0), c.saved(1), to);
    });
  }
  return out;
}

Tensor ops_detail::linear_autocast(const Tensor& x, const Tensor& weight, const Tensor& bias, DType low) {
  // The casts are recorded (as autocast's own): the node below does not go through them, but a
  // create_graph backward that uses the saved casts reaches x and weight through them.
  const auto cast = [low](const Tensor& t) { return !t.defined() || t.dtype() == low ? t : t.to(low); };
  const Tensor xb = cast(x), wt = cast(weight).t(), bb = cast(bias);
  Tensor out = gemm_2d(xb, wt, bb, nullptr, backend::GemmOperand::b, "linear");
  if (autograd::any_requires_grad({x, weight, bias})) {
    const GradDtypes to{x.dtype(), weight.dtype(), bias.defined() ? bias.dtype() : low};
    autograd::record("AddmmBackward", {x, weight, bias}, {out}, {xb, wt}, [to](const autograd::Backward& c) {
      autograd::Grads r = linear_rule(c, c.saved(0), c.saved(1), to);
      if (r[1].defined()) r[1] = r[1].t();  // the gradient of weight [N, K], not of its transpose
      return r;
    });
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  BRRR_AUTOCAST(lower_precision, matmul, a, b);
  NvtxRange range("matmul");
  Plan p = make_plan(a, b);
  Tensor out = matmul_forward(a, b, p);
  if (autograd::any_requires_grad({a, b}))
    autograd::record("MatmulBackward", {a, b}, {out}, {a, b}, [p = std::move(p)](const autograd::Backward& c) {
      return matmul_rule(c, p, c.saved(0), c.saved(1));
    });
  return out;
}

void set_allow_tf32(bool allow) { tf32_allowed.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_allowed.load(std::memory_order_relaxed); }

}  // namespace brrr
