// CPU kernels of the row ops: softmax / log_softmax, layer_norm (and its backward) and the
// fused cross entropy over the last dim of a contiguous [rows, cols] operand. The CPU backend is the reference
// the CUDA kernels are tested against, so rows are computed in double (max, sum of exp,
// mean, two-pass biased variance, log-sum-exp) and rounded once to the output dtype; f32
// softmax computes in f32 with a pairwise sum, as the CUDA kernel's accumulate_t does,
// vectorised for the CPU's capability (ops/cpu/isa/kernels.hpp). Rows
// are split over the intra-op pool. Semantics as PyTorch: a row of all
// -inf gives NaN (exp(-inf - -inf)), +inf or NaN in a row makes the whole row NaN.
module;
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>
#include "backend/contract.hpp"
#include "ops/cpu/isa/kernels.hpp"
#include "ops/cpu/loops.hpp"
#include "ops/random_transform.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

std::int64_t cols_of(const Operand& o) { return o.ndim == 0 ? 1 : o.sizes[o.ndim - 1]; }

[[noreturn]] void not_floating(const char* op, DType dtype) {
  throw Error(ErrorKind::dtype, std::string(op) + ": expected a floating-point tensor, got " + to_string(dtype));
}


std::int64_t target_at(const Operand& target, std::int64_t row) {
  return target.dtype == DType::i64 ? static_cast<const std::int64_t*>(target.data)[row]
                                    : static_cast<const std::int32_t*>(target.data)[row];
}

// Calls f(T*) for floating logits; Error(dtype) otherwise.
template <class F> void dispatch_logits(const char* op, DType dtype, F&& f) {
  dispatch(dtype, [&]<class T>(T* tag) {
    if constexpr (is_floating<T>) f(tag);
    else not_floating(op, dtype);
  });
}


// Rows per parallel chunk: about 16K elements of work.
std::int64_t row_grain(std::int64_t cols) { return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(cols, 1)); }

}  // namespace

void CpuBackend::softmax(const Operand& out, const Operand& in, bool log) {
  const std::int64_t cols = cols_of(in);
  if (cols == 0 || in.numel == 0) return;
  const std::int64_t rows = in.numel / cols;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_floating<T>) {
      not_floating(log ? "log_softmax" : "softmax", in.dtype);
    } else if constexpr (std::is_same_v<T, float>) {
      // f32 in f32 (the CUDA kernel's accumulate_t), by the kernel of the CPU's capability
      // (ops/cpu/isa/kernels.inc: max, exp_f32 fused with a pairwise sum, one scaling pass).
      const auto* x = static_cast<const float*>(in.data);
      auto* y = static_cast<float*>(out.data);
      const auto softmax_rows = isa().softmax_f32;
      cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
        softmax_rows(x + r0 * cols, y + r0 * cols, r1 - r0, cols, log);
      });
    } else {
      const auto* x = static_cast<const T*>(in.data);
      auto* y = static_cast<T*>(out.data);
      cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          const auto* xr = x + r * cols;
          auto* yr = y + r * cols;
          double m = -std::numeric_limits<double>::infinity();
          for (std::int64_t c = 0; c < cols; ++c) m = std::fmax(m, static_cast<double>(load<T>(xr[c])));
          double s = 0;
          for (std::int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(load<T>(xr[c])) - m);
          if (log) {
            const double ls = std::log(s);
            for (std::int64_t c = 0; c < cols; ++c) yr[c] = narrow_to<T>(static_cast<double>(load<T>(xr[c])) - m - ls);
          } else {
            for (std::int64_t c = 0; c < cols; ++c)
              yr[c] = narrow_to<T>(std::exp(static_cast<double>(load<T>(xr[c])) - m) / s);
          }
        }
      });
    }
  });
}

void CpuBackend::layer_norm(const Operand& out, const Operand& mean, const Operand& rstd, const Operand& in,
                            const Operand* weight, const Operand* bias, double eps) {
  const std::int64_t cols = cols_of(in);
  if (cols == 0 || in.numel == 0) return;
  const std::int64_t rows = in.numel / cols;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_floating<T>) {
      not_floating("layer_norm", in.dtype);
    } else {
      // mean/rstd: f64 for f64 inputs, f32 otherwise (the backend contract).
      using Stat = accumulate_t<T>;
      const auto* x = static_cast<const T*>(in.data);
      auto* y = static_cast<T*>(out.data);
      auto* mo = static_cast<Stat*>(mean.data);
      auto* ro = static_cast<Stat*>(rstd.data);
      const auto* w = weight ? static_cast<const T*>(weight->data) : nullptr;
      const auto* b = bias ? static_cast<const T*>(bias->data) : nullptr;
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto* xr = x + r * cols;
        auto* yr = y + r * cols;
        double s = 0;
        for (std::int64_t c = 0; c < cols; ++c) s += static_cast<double>(load<T>(xr[c]));
        const double mu = s / static_cast<double>(cols);
        double sq = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          double d = static_cast<double>(load<T>(xr[c])) - mu;
          sq += d * d;
        }
        const double rs = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
        mo[r] = static_cast<Stat>(mu);
        ro[r] = static_cast<Stat>(rs);
        for (std::int64_t c = 0; c < cols; ++c) {
          double v = (static_cast<double>(load<T>(xr[c])) - mu) * rs;
          if (w) v *= static_cast<double>(load<T>(w[c]));
          if (b) v += static_cast<double>(load<T>(b[c]));
          yr[c] = narrow_to<T>(v);
        }
      }
    }
  });
}

// layer_norm's dweight[c] = sum_r g[r, c] xhat(r, c) and dbias[c] = sum_r g[r, c] (either may
// be nullptr), each column summed over the rows in order in double and rounded once: columns
// in blocks of 64 split over the pool, each block walking every row (contiguous runs of g and
// x). Shared by layer_norm's and dropout_add_layer_norm's backward.
namespace {
template <class G, class A, class XHat>
void layer_norm_column_sums(A* dw, A* db, const G* g, const XHat& xhat, std::int64_t rows, std::int64_t cols) {
  constexpr std::int64_t block = 64;
  const std::int64_t blocks = (cols + block - 1) / block;
  cpu::parallel_for(blocks, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(rows * block, 1)),
                    [&](std::int64_t b0, std::int64_t b1) {
    double sw[block], sb[block];
    for (std::int64_t bk = b0; bk < b1; ++bk) {
      const std::int64_t c0 = bk * block, c1 = std::min(cols, c0 + block);
      for (std::int64_t c = c0; c < c1; ++c) sw[c - c0] = sb[c - c0] = 0;
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = c0; c < c1; ++c) {
          const double gv = static_cast<double>(load<G>(g[r * cols + c]));
          sw[c - c0] += gv * xhat(r, c);
          sb[c - c0] += gv;
        }
      for (std::int64_t c = c0; c < c1; ++c) {
        if (dw) dw[c] = static_cast<A>(sw[c - c0]);
        if (db) db[c] = static_cast<A>(sb[c - c0]);
      }
    }
  });
}
}  // namespace

// dx per row (rows split over the intra-op pool) and dweight/dbias per column (columns split
// over the pool, each column summed over the rows in order), in double, rounded once: the
// result does not depend on the thread count.
void CpuBackend::layer_norm_backward(const Operand* dx, const Operand* dweight, const Operand* dbias,
                                     const Operand& grad, const Operand& in, const Operand& mean,
                                     const Operand& rstd, const Operand* weight) {
  const std::int64_t cols = cols_of(in);
  if (cols == 0 || in.numel == 0) return;
  const std::int64_t rows = in.numel / cols;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_floating<T>) {
      not_floating("layer_norm backward", in.dtype);
    } else {
      using A = accumulate_t<T>;  // mean, rstd, weight, dweight, dbias
      const auto* x = static_cast<const T*>(in.data);
      const auto* g = static_cast<const T*>(grad.data);
      const auto* mu = static_cast<const A*>(mean.data);
      const auto* rs = static_cast<const A*>(rstd.data);
      const auto* w = weight ? static_cast<const A*>(weight->data) : nullptr;
      auto xhat = [&](std::int64_t r, std::int64_t c) {
        return (static_cast<double>(load<T>(x[r * cols + c])) - static_cast<double>(mu[r])) * static_cast<double>(rs[r]);
      };
      if (dx) {
        auto* out = static_cast<T*>(dx->data);
        cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
          for (std::int64_t r = r0; r < r1; ++r) {
            double s1 = 0, s2 = 0;
            for (std::int64_t c = 0; c < cols; ++c) {
              double gw = static_cast<double>(load<T>(g[r * cols + c]));
              if (w) gw *= static_cast<double>(w[c]);
              s1 += gw;
              s2 += gw * xhat(r, c);
            }
            const double a = s1 / static_cast<double>(cols), b = s2 / static_cast<double>(cols);
            const double rr = static_cast<double>(rs[r]);
            for (std::int64_t c = 0; c < cols; ++c) {
              double gw = static_cast<double>(load<T>(g[r * cols + c]));
              if (w) gw *= static_cast<double>(w[c]);
              out[r * cols + c] = narrow_to<T>(rr * ((gw - a) - xhat(r, c) * b));
            }
          }
        });
      }
      if (dweight || dbias)
        layer_norm_column_sums(dweight ? static_cast<A*>(dweight->data) : nullptr,
                               dbias ? static_cast<A*>(dbias->data) : nullptr, g, xhat, rows, cols);
    }
  });
}

// --- dropout_add_layer_norm (ops/layer_norm.cpp) --------------------------------------
// The reference: each step rounded where the composite (dropout, add, layer_norm, to) rounds,
// the row statistics and gradients in double as layer_norm's.

namespace {

// Calls f((T0*)nullptr, (TS*)nullptr) for x0's dtype T0 and the sum's TS (T0, or f32 for bf16/f16).
template <class F> void dispatch_fused(const char* op, DType x0, DType sum, F&& f) {
  dispatch(x0, [&]<class T0>(T0*) {
    if constexpr (!is_floating<T0>) {
      not_floating(op, x0);
    } else if (sum == x0) {
      f(static_cast<T0*>(nullptr), static_cast<T0*>(nullptr));
    } else if constexpr (sizeof(T0) == 2) {
      if (sum != DType::f32)
        throw Error(ErrorKind::dtype, std::string(op) + ": the sum's dtype must be x0's or f32, got " + to_string(sum));
      f(static_cast<T0*>(nullptr), static_cast<float*>(nullptr));
    } else {
      throw Error(ErrorKind::dtype, std::string(op) + ": the sum's dtype must be x0's, got " + to_string(sum));
    }
  });
}

}  // namespace

void CpuBackend::dropout_add_layer_norm(const Operand& out, const Operand& sum, const Operand* mask,
                                        const Operand& mean, const Operand& rstd, const Operand& x0,
                                        const Operand* residual, const Operand* weight, const Operand* bias,
                                        double eps, const AttentionDropout& d) {
  namespace rt = random_transform;
  const std::int64_t cols = cols_of(x0);
  if (cols == 0 || x0.numel == 0) return;
  if (d.p > 0 && d.seed_offset)
    throw Error(ErrorKind::device, "dropout_add_layer_norm: a CUDA graph's dropout state on the CPU");
  const std::int64_t rows = x0.numel / cols;
  dispatch_fused("dropout_add_layer_norm", x0.dtype, sum.dtype, [&]<class T0, class TS>(T0*, TS*) {
    using Stat = accumulate_t<TS>;
    constexpr std::int64_t words_per = std::is_same_v<T0, double> ? 2 : 1;
    const bool drop = d.p > 0;
    const T0 keep = narrow_to<T0>(drop ? 1.0 / (1.0 - d.p) : 1.0), zero = narrow_to<T0>(0.0);
    const float p32 = static_cast<float>(d.p);
    const auto* x = static_cast<const T0*>(x0.data);
    const auto* res = residual ? static_cast<const TS*>(residual->data) : nullptr;
    const auto* w = weight ? static_cast<const TS*>(weight->data) : nullptr;
    const auto* b = bias ? static_cast<const TS*>(bias->data) : nullptr;
    auto* y = static_cast<T0*>(out.data);
    auto* sm = static_cast<TS*>(sum.data);
    auto* m = mask ? static_cast<bool*>(mask->data) : nullptr;
    auto* mo = static_cast<Stat*>(mean.data);
    auto* ro = static_cast<Stat*>(rstd.data);
    cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
      std::vector<std::uint32_t> words(drop ? static_cast<std::size_t>(cols * words_per) : 0);
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t e0 = r * cols;
        if (drop)
          rt::philox_words(d.seed, d.offset + static_cast<std::uint64_t>(e0 * words_per), words.data(),
                           static_cast<std::uint64_t>(cols * words_per));
        double s = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          const std::int64_t e = e0 + c;
          T0 t = x[e];
          if (drop) {
            const std::size_t k = static_cast<std::size_t>(c);
            bool kept;
            if constexpr (std::is_same_v<T0, double>) kept = rt::uniform53(words[2 * k], words[2 * k + 1]) >= d.p;
            else kept = rt::uniform_bits(words[k], 24) >= p32;
            m[e] = kept;
            t = narrow_to<T0>(load<T0>(x[e]) * load<T0>(kept ? keep : zero));
          }
          sm[e] = res ? narrow_to<TS>(static_cast<double>(load<T0>(t)) + static_cast<double>(load<TS>(res[e])))
                      : narrow_to<TS>(load<T0>(t));
          s += static_cast<double>(load<TS>(sm[e]));
        }
        const double mu = s / static_cast<double>(cols);
        double sq = 0;
        for (std::int64_t c = 0; c < cols; ++c) {
          const double dv = static_cast<double>(load<TS>(sm[e0 + c])) - mu;
          sq += dv * dv;
        }
        const double rs = 1.0 / std::sqrt(sq / static_cast<double>(cols) + eps);
        mo[r] = static_cast<Stat>(mu);
        ro[r] = static_cast<Stat>(rs);
        for (std::int64_t c = 0; c < cols; ++c) {
          double v = (static_cast<double>(load<TS>(sm[e0 + c])) - mu) * rs;
          if (w) v *= static_cast<double>(load<TS>(w[c]));
          if (b) v += static_cast<double>(load<TS>(b[c]));
          y[e0 + c] = narrow_to<T0>(load<TS>(narrow_to<TS>(v)));  // layer_norm's output, then to(x0's dtype)
        }
      }
    });
  });
}

void CpuBackend::dropout_add_layer_norm_backward(const Operand* dx0, const Operand* dresidual, const Operand* dweight,
                                                 const Operand* dbias, const Operand& grad_out,
                                                 const Operand* grad_sum, const Operand& sum, const Operand& mean,
                                                 const Operand& rstd, const Operand* weight, const Operand* mask,
                                                 double p) {
  const std::int64_t cols = cols_of(sum);
  if (cols == 0 || sum.numel == 0) return;
  const std::int64_t rows = sum.numel / cols;
  dispatch_fused("dropout_add_layer_norm backward", grad_out.dtype, sum.dtype, [&]<class T0, class TS>(T0*, TS*) {
    using A = accumulate_t<TS>;
    const T0 keep = narrow_to<T0>(mask ? 1.0 / (1.0 - p) : 1.0), zero = narrow_to<T0>(0.0);
    const auto* x = static_cast<const TS*>(sum.data);
    const auto* g = static_cast<const T0*>(grad_out.data);
    const auto* gs = grad_sum ? static_cast<const TS*>(grad_sum->data) : nullptr;
    const auto* mu = static_cast<const A*>(mean.data);
    const auto* rs = static_cast<const A*>(rstd.data);
    const auto* w = weight ? static_cast<const A*>(weight->data) : nullptr;
    const auto* m = mask ? static_cast<const bool*>(mask->data) : nullptr;
    auto xhat = [&](std::int64_t r, std::int64_t c) {
      return (static_cast<double>(load<TS>(x[r * cols + c])) - static_cast<double>(mu[r])) * static_cast<double>(rs[r]);
    };
    if (dx0 || dresidual) {
      auto* o0 = dx0 ? static_cast<T0*>(dx0->data) : nullptr;
      auto* orr = dresidual ? static_cast<TS*>(dresidual->data) : nullptr;
      cpu::parallel_for(rows, row_grain(cols), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          double s1 = 0, s2 = 0;
          for (std::int64_t c = 0; c < cols; ++c) {
            double gw = static_cast<double>(load<T0>(g[r * cols + c]));
            if (w) gw *= static_cast<double>(w[c]);
            s1 += gw;
            s2 += gw * xhat(r, c);
          }
          const double a = s1 / static_cast<double>(cols), bb = s2 / static_cast<double>(cols);
          const double rr = static_cast<double>(rs[r]);
          for (std::int64_t c = 0; c < cols; ++c) {
            const std::int64_t e = r * cols + c;
            double gw = static_cast<double>(load<T0>(g[e]));
            if (w) gw *= static_cast<double>(w[c]);
            TS ds = narrow_to<TS>(rr * ((gw - a) - xhat(r, c) * bb));  // layer_norm's dx
            if (gs) ds = narrow_to<TS>(static_cast<double>(load<TS>(ds)) + static_cast<double>(load<TS>(gs[e])));
            if (orr) orr[e] = ds;
            if (o0) {
              const T0 gt = narrow_to<T0>(load<TS>(ds));
              o0[e] = m ? narrow_to<T0>(load<T0>(gt) * load<T0>(m[e] ? keep : zero)) : gt;
            }
          }
        }
      });
    }
    if (dweight || dbias)
      layer_norm_column_sums(dweight ? static_cast<A*>(dweight->data) : nullptr,
                             dbias ? static_cast<A*>(dbias->data) : nullptr, g, xhat, rows, cols);
  });
}

// --- fused cross entropy (ops/loss.cpp) ------------------------------------------------

void CpuBackend::cross_entropy_forward(const Operand& out, const Operand& lse, const Operand& logits,
                                       const Operand& target, std::int64_t ignore_index, double label_smoothing) {
  const std::int64_t rows = target.numel, cols = rows == 0 ? 0 : logits.numel / rows;
  dispatch_logits("cross_entropy", logits.dtype, [&]<class T>(T*) {
    using A = accumulate_t<T>;  // f64 for f64 logits, f32 otherwise (the contract)
    const auto* x = static_cast<const T*>(logits.data);
    auto* o = static_cast<A*>(out.data);
    auto* l = static_cast<A*>(lse.data);
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto* xr = x + r * cols;
      double m = -std::numeric_limits<double>::infinity(), sx = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double v = static_cast<double>(load<T>(xr[c]));
        m = std::fmax(m, v);
        sx += v;
      }
      double s = 0;
      for (std::int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(load<T>(xr[c])) - m);
      const double row_lse = m + std::log(s);
      const std::int64_t t = target_at(target, r);
      double loss = 0, weight = 0;
      if (t != ignore_index) {
        if (t < 0 || t >= cols)
          throw Error(ErrorKind::index, "cross_entropy: target " + std::to_string(t) + " is out of bounds for " +
                                            std::to_string(cols) + " classes");
        loss = (1 - label_smoothing) * (row_lse - static_cast<double>(load<T>(xr[t])));
        // Only with smoothing: a -inf logit makes the mean infinite, and 0 * inf is NaN.
        if (label_smoothing != 0) loss += label_smoothing * (row_lse - sx / static_cast<double>(cols));
        weight = 1;
      }
      o[r] = static_cast<A>(loss);
      o[rows + r] = static_cast<A>(weight);
      l[r] = static_cast<A>(row_lse);
    }
  });
}

void CpuBackend::cross_entropy_backward(const Operand& grad_logits, const Operand& logits, const Operand& lse,
                                        const Operand& target, const Operand& grad, bool per_row,
                                        const Operand* count, std::int64_t ignore_index, double label_smoothing) {
  const std::int64_t rows = target.numel, cols = rows == 0 ? 0 : logits.numel / rows;
  if (rows == 0 || cols == 0) return;  // nothing to write (and no grad[0] to read)
  dispatch_logits("cross_entropy backward", logits.dtype, [&]<class T>(T*) {
    using A = accumulate_t<T>;  // f64 for f64 logits, f32 otherwise (the contract)
    const auto* x = static_cast<const T*>(logits.data);
    auto* gx = static_cast<T*>(grad_logits.data);
    const auto* l = static_cast<const A*>(lse.data);
    const auto* g = static_cast<const A*>(grad.data);
    // count 0 means every row is ignored: no row uses the scale then.
    const double scale_all = count ? static_cast<double>(g[0]) / static_cast<double>(static_cast<const A*>(count->data)[0])
                                   : static_cast<double>(g[0]);
    const double off = label_smoothing / static_cast<double>(cols);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t t = target_at(target, r);
      const bool valid = t != ignore_index && t >= 0 && t < cols;
      const double scale = !valid ? 0.0 : per_row ? static_cast<double>(g[r]) : scale_all;
      for (std::int64_t c = 0; c < cols; ++c) {
        double v = 0;
        if (valid)
          v = scale * (std::exp(static_cast<double>(load<T>(x[r * cols + c])) - static_cast<double>(l[r])) -
                       (c == t ? 1 - label_smoothing : 0.0) - off);
        gx[r * cols + c] = narrow_to<T>(v);
      }
    }
  });
}

}  // namespace brrr::backend
