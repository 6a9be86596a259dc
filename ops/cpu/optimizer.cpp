// CPU kernel of the fused optimizer updates (CpuBackend::optimizer_step): one loop per
// tensor, f32/f64 parameters computing in their own type and bf16/f16 parameters computing in
// float (state buffers have the parameter's dtype and are rounded to it once per step). The
// formulas and their order are those of ops/cuda/optimizer.cu (PyTorch's, see optim/):
//   SGD:   g = maximize ? -g : g; g += wd p; b = first ? g : mu b + (1 - dampening) g;
//          g = nesterov ? g + mu b : b; p -= lr g
//   Adam:  g = maximize ? -g : g; AdamW: p *= 1 - lr wd; Adam: g += wd p;
//          m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; amsgrad: vmax = max(vmax, v), v = vmax;
//          p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
module;
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include "backend/contract.hpp"
#include "ops/cpu/loops.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

using namespace cpu;

namespace {

template <class T> void sgd_tensor(const OptimizerStep& s, std::size_t k) {
  using A = compute_t<T>;
  auto* p = static_cast<T*>(s.params[k]);
  const auto* gp = static_cast<const T*>(s.grads[k]);
  auto* buf = static_cast<T*>(s.state1[k]);
  const A lr = static_cast<A>(s.lr), wd = static_cast<A>(s.weight_decay), mu = static_cast<A>(s.momentum);
  const A one_minus_damp = static_cast<A>(1.0 - s.dampening);
  const bool use_momentum = s.momentum != 0;
  if (use_momentum && buf == nullptr)
    throw Error(ErrorKind::value, "optimizer_step: SGD with momentum needs a momentum buffer per tensor");
  const std::int64_t n = s.numels[k];
  for (std::int64_t i = 0; i < n; ++i) {
    A g = load<T>(gp[i]);
    A x = load<T>(p[i]);
    if (s.maximize) g = -g;
    if (s.weight_decay != 0) g = g + wd * x;
    if (use_momentum) {
      A b = s.first_step ? g : mu * load<T>(buf[i]) + one_minus_damp * g;
      buf[i] = narrow_to<T>(b);
      g = s.nesterov ? g + mu * b : b;
    }
    p[i] = narrow_to<T>(x - lr * g);
  }
}

template <class T> void adam_tensor(const OptimizerStep& s, std::size_t k) {
  using A = compute_t<T>;
  auto* p = static_cast<T*>(s.params[k]);
  const auto* gp = static_cast<const T*>(s.grads[k]);
  auto* m_p = static_cast<T*>(s.state1[k]);
  auto* v_p = static_cast<T*>(s.state2[k]);
  auto* vmax_p = static_cast<T*>(s.state3[k]);
  if (m_p == nullptr || v_p == nullptr || (s.amsgrad && vmax_p == nullptr))
    throw Error(ErrorKind::value, "optimizer_step: Adam needs exp_avg, exp_avg_sq (and max_exp_avg_sq with "
                                  "amsgrad) buffers per tensor");
  const bool decoupled = s.kind == OptimizerKind::adamw;
  const A wd = static_cast<A>(s.weight_decay);
  const A decay = static_cast<A>(1.0 - s.lr * s.weight_decay);
  const A b1 = static_cast<A>(s.beta1), b2 = static_cast<A>(s.beta2);
  const A one_minus_b1 = static_cast<A>(1.0 - s.beta1), one_minus_b2 = static_cast<A>(1.0 - s.beta2);
  const A step_size = static_cast<A>(s.lr / s.bias_correction1);
  const A bc2_sqrt = static_cast<A>(std::sqrt(s.bias_correction2));
  const A eps = static_cast<A>(s.eps);
  const std::int64_t n = s.numels[k];
  for (std::int64_t i = 0; i < n; ++i) {
    A g = load<T>(gp[i]);
    A x = load<T>(p[i]);
    if (s.maximize) g = -g;
    if (decoupled) x = x * decay;
    else if (s.weight_decay != 0) g = g + wd * x;
    A m = b1 * load<T>(m_p[i]) + one_minus_b1 * g;
    A v = b2 * load<T>(v_p[i]) + one_minus_b2 * (g * g);
    m_p[i] = narrow_to<T>(m);
    v_p[i] = narrow_to<T>(v);
    if (s.amsgrad) {
      A vm = load<T>(vmax_p[i]);
      v = (vm > v || vm != vm) ? vm : v;  // NaN in either propagates (torch.maximum)
      vmax_p[i] = narrow_to<T>(v);
    }
    A denom = std::sqrt(v) / bc2_sqrt + eps;
    p[i] = narrow_to<T>(x - step_size * (m / denom));
  }
}

}  // namespace

void CpuBackend::optimizer_step(const OptimizerStep& s) {
  const std::size_t count = s.params.size();
  if (s.grads.size() != count || s.state1.size() != count || s.state2.size() != count || s.state3.size() != count ||
      s.numels.size() != count)
    throw Error(ErrorKind::value, "optimizer_step: inconsistent tensor lists");
  auto run = [&]<class T>(T*) {
    for (std::size_t k = 0; k < count; ++k) {
      switch (s.kind) {
        case OptimizerKind::sgd: sgd_tensor<T>(s, k); break;
        case OptimizerKind::adam:
        case OptimizerKind::adamw: adam_tensor<T>(s, k); break;
      }
    }
  };
  switch (s.dtype) {
    case DType::f32: return run(static_cast<float*>(nullptr));
    case DType::f64: return run(static_cast<double*>(nullptr));
    case DType::bf16: return run(static_cast<bfloat16*>(nullptr));
    case DType::f16: return run(static_cast<half*>(nullptr));
    case DType::i32:
    case DType::i64:
    case DType::boolean:
      throw Error(ErrorKind::dtype, std::string("optimizer_step: parameters of dtype ") + to_string(s.dtype) +
                                        " cannot be optimized (floating dtypes only)");
  }
}

// --- clip_grad_norm_'s multi-tensor kernels ----------------------------------------------

namespace {

// Calls f(T*) for the floating element type of `dtype`; Error(dtype) otherwise.
template <class F> void floating_list(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(static_cast<float*>(nullptr));
    case DType::f64: return f(static_cast<double*>(nullptr));
    case DType::bf16: return f(static_cast<bfloat16*>(nullptr));
    case DType::f16: return f(static_cast<half*>(nullptr));
    case DType::i32:
    case DType::i64:
    case DType::boolean:
      throw Error(ErrorKind::dtype, std::string(op) + ": expected floating tensors, got " + to_string(dtype));
  }
}

}  // namespace

// Each tensor summed (or its max taken) in order, in double: the reference of the CUDA
// kernels, and independent of the thread count (tensors are split over the pool whole).
void CpuBackend::multi_tensor_norm(const Operand& out, const MultiTensor& tensors, double norm_type) {
  const auto count = static_cast<std::int64_t>(tensors.data.size());
  auto* o = static_cast<float*>(out.data);
  const bool inf = std::isinf(norm_type);
  floating_list("multi_tensor_norm", tensors.dtype, [&]<class T>(T*) {
    cpu::parallel_for(count, 1, [&](std::int64_t k0, std::int64_t k1) {
      for (std::int64_t k = k0; k < k1; ++k) {
        const auto* x = static_cast<const T*>(tensors.data[static_cast<std::size_t>(k)]);
        const std::int64_t n = tensors.numels[static_cast<std::size_t>(k)];
        double acc = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const double v = std::fabs(static_cast<double>(load<T>(x[i])));
          if (inf) acc = (acc != acc || v > acc || v != v) ? (acc != acc ? acc : v) : acc;  // NaN sticks
          else if (norm_type == 2.0) acc += v * v;
          else if (norm_type == 1.0) acc += v;
          else acc += std::pow(v, norm_type);
        }
        o[k] = static_cast<float>(acc);
      }
    });
  });
}

void CpuBackend::multi_tensor_scale(const MultiTensor& tensors, const Operand& scale) {
  floating_list("multi_tensor_scale", tensors.dtype, [&]<class T>(T*) {
    using A = accumulate_t<T>;
    const A s = *static_cast<const A*>(scale.data);
    for (std::size_t k = 0; k < tensors.data.size(); ++k) {
      auto* x = static_cast<T*>(tensors.data[k]);
      cpu::parallel_for(tensors.numels[k], cpu::elementwise_grain, [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) x[i] = narrow_to<T>(static_cast<A>(load<T>(x[i])) * s);
      });
    }
  });
}

}  // namespace brrr::backend
