// CPU kernels of the row ops: softmax / log_softmax and layer_norm over the last dim of a
// contiguous [rows, cols] operand. The CPU backend is the reference the CUDA kernels are
// tested against, so every row is computed in double (max, sum of exp, mean, two-pass
// biased variance) and rounded once to the output dtype. Semantics as PyTorch: a row of all
// -inf gives NaN (exp(-inf - -inf)), +inf or NaN in a row makes the whole row NaN.
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

std::int64_t cols_of(const Operand& o) { return o.ndim == 0 ? 1 : o.sizes[o.ndim - 1]; }

[[noreturn]] void not_floating(const char* op, DType dtype) {
  throw Error(ErrorKind::dtype, std::string(op) + ": expected a floating-point tensor, got " + to_string(dtype));
}

}  // namespace

void CpuBackend::softmax(const Operand& out, const Operand& in, bool log) {
  const std::int64_t cols = cols_of(in);
  if (cols == 0 || in.numel == 0) return;
  const std::int64_t rows = in.numel / cols;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_float_like<T>) {
      not_floating(log ? "log_softmax" : "softmax", in.dtype);
    } else {
      const auto* x = static_cast<const storage_t<T>*>(in.data);
      auto* y = static_cast<storage_t<T>*>(out.data);
      for (std::int64_t r = 0; r < rows; ++r) {
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
    }
  });
}

void CpuBackend::layer_norm(const Operand& out, const Operand& mean, const Operand& rstd, const Operand& in,
                            const Operand* weight, const Operand* bias, double eps) {
  const std::int64_t cols = cols_of(in);
  if (cols == 0 || in.numel == 0) return;
  const std::int64_t rows = in.numel / cols;
  dispatch(in.dtype, [&]<class T>(T*) {
    if constexpr (!is_float_like<T>) {
      not_floating("layer_norm", in.dtype);
    } else {
      // mean/rstd: f64 for f64 inputs, f32 otherwise (the backend contract).
      using Stat = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const auto* x = static_cast<const storage_t<T>*>(in.data);
      auto* y = static_cast<storage_t<T>*>(out.data);
      auto* mo = static_cast<Stat*>(mean.data);
      auto* ro = static_cast<Stat*>(rstd.data);
      const auto* w = weight ? static_cast<const storage_t<T>*>(weight->data) : nullptr;
      const auto* b = bias ? static_cast<const storage_t<T>*>(bias->data) : nullptr;
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

}  // namespace brrr::backend
