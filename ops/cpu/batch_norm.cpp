// CPU kernels of batch norm over contiguous [N, C, M] operands (ops/batch_norm.cpp): per
// channel statistics in double (two-pass biased variance), the normalisation, and the
// training-mode backward's reductions and input gradient. The CPU backend is the reference
// the CUDA kernels (ops/cuda/batch_norm.cu) are tested against, so everything is computed
// in double and rounded once.
module;
#include <cmath>
#include <cstdint>
#include <string>
#include "backend/contract.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

struct Ncm {
  std::int64_t n, c, m;
};
Ncm ncm_of(const Operand& o) { return {o.sizes[0], o.sizes[1], o.sizes[2]}; }

template <class F> void floating(const char* op, DType dtype, F&& f) {
  dispatch(dtype, [&]<class T>(T* tag) {
    if constexpr (is_floating<T>) f(tag);
    else throw Error(ErrorKind::dtype, std::string(op) + ": expected a floating-point tensor, got " + to_string(dtype));
  });
}

// f(i) for the flat index of every element of channel c.
template <class F> void for_channel(const Ncm& s, std::int64_t c, F&& f) {
  for (std::int64_t n = 0; n < s.n; ++n) {
    const std::int64_t base = (n * s.c + c) * s.m;
    for (std::int64_t k = 0; k < s.m; ++k) f(base + k);
  }
}

template <class T> double param(const Operand* p, std::int64_t c, double none) {
  return p ? widen(static_cast<const T*>(p->data)[c]) : none;
}

}  // namespace

void CpuBackend::batch_norm_stats(const Operand& mean, const Operand& invstd, const Operand& in, double eps,
                                  const Operand* running_mean, const Operand* running_var, double momentum) {
  const Ncm s = ncm_of(in);
  const double count = static_cast<double>(s.n * s.m);
  floating("batch_norm", in.dtype, [&]<class T>(T*) {
    using Stat = accumulate_t<T>;
    const auto* x = static_cast<const T*>(in.data);
    for (std::int64_t c = 0; c < s.c; ++c) {
      double sum = 0, sq = 0;
      for_channel(s, c, [&](std::int64_t i) { sum += widen(x[i]); });
      const double mu = sum / count;
      for_channel(s, c, [&](std::int64_t i) {
        const double d = widen(x[i]) - mu;
        sq += d * d;
      });
      const double var = sq / count;
      static_cast<Stat*>(mean.data)[c] = static_cast<Stat>(mu);
      static_cast<Stat*>(invstd.data)[c] = static_cast<Stat>(1.0 / std::sqrt(var + eps));
      if (running_mean) {
        Stat& r = static_cast<Stat*>(running_mean->data)[c];
        r = static_cast<Stat>((1 - momentum) * r + momentum * mu);
      }
      if (running_var) {
        Stat& r = static_cast<Stat*>(running_var->data)[c];
        r = static_cast<Stat>((1 - momentum) * r + momentum * (count > 1 ? sq / (count - 1) : var));
      }
    }
  });
}

void CpuBackend::batch_norm_elemt(const Operand& out, const Operand& in, const Operand& mean, const Operand& invstd,
                                  const Operand* weight, const Operand* bias) {
  const Ncm s = ncm_of(in);
  floating("batch_norm", in.dtype, [&]<class T>(T*) {
    using Stat = accumulate_t<T>;
    const auto* x = static_cast<const T*>(in.data);
    auto* y = static_cast<T*>(out.data);
    for (std::int64_t c = 0; c < s.c; ++c) {
      const double mu = static_cast<const Stat*>(mean.data)[c];
      const double scale = static_cast<const Stat*>(invstd.data)[c] * param<T>(weight, c, 1.0);
      const double shift = param<T>(bias, c, 0.0);
      for_channel(s, c, [&](std::int64_t i) { y[i] = narrow_to<T>((widen(x[i]) - mu) * scale + shift); });
    }
  });
}

void CpuBackend::batch_norm_backward_reduce(const Operand& sum_dy, const Operand& sum_dy_xmu, const Operand& grad,
                                            const Operand& in, const Operand& mean) {
  const Ncm s = ncm_of(in);
  floating("batch_norm backward", in.dtype, [&]<class T>(T*) {
    using Stat = accumulate_t<T>;
    const auto* x = static_cast<const T*>(in.data);
    const auto* g = static_cast<const T*>(grad.data);
    for (std::int64_t c = 0; c < s.c; ++c) {
      const double mu = static_cast<const Stat*>(mean.data)[c];
      double a = 0, b = 0;
      for_channel(s, c, [&](std::int64_t i) {
        a += widen(g[i]);
        b += widen(g[i]) * (widen(x[i]) - mu);
      });
      static_cast<Stat*>(sum_dy.data)[c] = static_cast<Stat>(a);
      static_cast<Stat*>(sum_dy_xmu.data)[c] = static_cast<Stat>(b);
    }
  });
}

void CpuBackend::batch_norm_backward_elemt(const Operand& grad_in, const Operand& grad, const Operand& in,
                                           const Operand& mean, const Operand& invstd, const Operand* weight,
                                           const Operand& sum_dy, const Operand& sum_dy_xmu) {
  const Ncm s = ncm_of(in);
  const double count = static_cast<double>(s.n * s.m);
  floating("batch_norm backward", in.dtype, [&]<class T>(T*) {
    using Stat = accumulate_t<T>;
    const auto* x = static_cast<const T*>(in.data);
    const auto* g = static_cast<const T*>(grad.data);
    auto* dx = static_cast<T*>(grad_in.data);
    for (std::int64_t c = 0; c < s.c; ++c) {
      const double mu = static_cast<const Stat*>(mean.data)[c];
      const double inv = static_cast<const Stat*>(invstd.data)[c];
      const double mean_dy = static_cast<const Stat*>(sum_dy.data)[c] / count;
      const double proj = static_cast<const Stat*>(sum_dy_xmu.data)[c] / count * inv * inv;
      const double scale = inv * param<T>(weight, c, 1.0);
      for_channel(s, c, [&](std::int64_t i) {
        dx[i] = narrow_to<T>((widen(g[i]) - mean_dy - (widen(x[i]) - mu) * proj) * scale);
      });
    }
  });
}

}  // namespace brrr::backend
