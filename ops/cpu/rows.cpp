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
#include "backend/contract.hpp"
#include "ops/cpu/isa/kernels.hpp"
#include "ops/cpu/loops.hpp"
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
      if (dweight || dbias) {
        auto* dw = dweight ? static_cast<A*>(dweight->data) : nullptr;
        auto* db = dbias ? static_cast<A*>(dbias->data) : nullptr;
        // Columns in blocks of 64, each block walking every row (contiguous runs of x, grad).
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
                const double gv = static_cast<double>(load<T>(g[r * cols + c]));
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
    }
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
