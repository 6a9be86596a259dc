// CPU kernels of the fused cross entropy (ops/loss.cpp). The reference for the CUDA kernels:
// every row in double (max, sum of exp, log-sum-exp), stored in the accumulation dtype.
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

template <class T> constexpr bool is_float_like =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;
// f64 for f64 logits, f32 otherwise (the backend contract).
template <class T> using loss_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

std::int64_t target_at(const Operand& target, std::int64_t row) {
  return target.dtype == DType::i64 ? static_cast<const std::int64_t*>(target.data)[row]
                                    : static_cast<const std::int32_t*>(target.data)[row];
}

// Calls f(T*) for floating logits; Error(dtype) otherwise.
template <class F> void dispatch_logits(const char* op, DType dtype, F&& f) {
  dispatch(dtype, [&]<class T>(T* tag) {
    if constexpr (is_float_like<T>) f(tag);
    else throw Error(ErrorKind::dtype, std::string(op) + ": expected floating-point logits, got " + to_string(dtype));
  });
}

}  // namespace

void CpuBackend::cross_entropy_forward(const Operand& out, const Operand& lse, const Operand& logits,
                                       const Operand& target, std::int64_t ignore_index, double label_smoothing) {
  const std::int64_t rows = target.numel, cols = rows == 0 ? 0 : logits.numel / rows;
  dispatch_logits("cross_entropy", logits.dtype, [&]<class T>(T*) {
    using A = loss_acc_t<T>;
    const auto* x = static_cast<const storage_t<T>*>(logits.data);
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
    using A = loss_acc_t<T>;
    const auto* x = static_cast<const storage_t<T>*>(logits.data);
    auto* gx = static_cast<storage_t<T>*>(grad_logits.data);
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
