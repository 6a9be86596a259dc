// Gradient clipping by the joint norm of all gradients (PyTorch's
// torch.nn.utils.clip_grad_norm_), entirely on the device: the norm and the scale factor
// stay tensors on the gradients' device, so clipping never makes the host wait. The
// contiguous gradients of each dtype take two multi-tensor kernels (their norms, then their
// scaling by the factor, which the kernel reads from device memory), as PyTorch's
// _foreach_norm / _foreach_mul_; the others (expanded views, shared storage) take ops.
module;
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>
module brrr.optim;
import brrr.tensor;
import brrr.ops;
import brrr.backend;

namespace brrr::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  if (!inf_norm && !(std::isfinite(norm_type) && norm_type > 0))
    throw Error::bad_value("clip_grad_norm_", "norm_type", norm_type, "a positive number or infinity");
  if (std::isnan(max_norm) || max_norm < 0) throw Error::bad_value("clip_grad_norm_", "max_norm", max_norm, ">= 0");
  NoGradGuard no_grad;

  // The parameters with a gradient, and their common device.
  std::vector<std::size_t> with_grad;
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      throw Error(ErrorKind::value, "clip_grad_norm_: parameter " + std::to_string(i) + " is an undefined tensor");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (!is_floating_point(g.dtype()))
      throw Error(ErrorKind::dtype, "clip_grad_norm_: gradient of parameter " + std::to_string(i) + " has dtype " +
                                        to_string(g.dtype()) + "; expected a floating dtype");
    if (!grads.empty() && g.device() != grads.front().device())
      throw Error(ErrorKind::device, "clip_grad_norm_: gradients on " + grads.front().device().str() + " and " +
                                         g.device().str() + " (parameter " + std::to_string(i) +
                                         "); all gradients must be on one device");
    with_grad.push_back(i);
    grads.push_back(g);
  }
  if (grads.empty()) {
    Device dev = params.empty() ? Device::cpu() : params.front().device();
    return zeros({}, {.dtype = DType::f32, .device = dev});
  }

  const Device dev = grads.front().device();
  const char* op = "clip_grad_norm_";
  auto group_of = [&](std::map<DType, backend::MultiTensor>& groups, DType dtype) -> backend::MultiTensor& {
    backend::MultiTensor& m = groups[dtype];
    m.dtype = dtype;
    m.device = dev.is_cuda() ? dev.index() : -1;
    return m;
  };

  // Per-gradient norms (to the power p for finite p) in f32: the contiguous gradients of each
  // dtype by one multi-tensor kernel, the others with ops; then one joint norm.
  std::vector<Tensor> parts;
  std::map<DType, backend::MultiTensor> norm_groups;
  for (const Tensor& g0 : grads) {
    if (g0.numel() == 0) continue;  // adds 0 (and 0 is no maximum of absolute values)
    if (g0.is_contiguous()) {
      backend::MultiTensor& m = group_of(norm_groups, g0.dtype());
      m.data.push_back(const_cast<void*>(backend::input_data(g0, op)));
      m.numels.push_back(g0.numel());
      continue;
    }
    // bf16/f16 squares would round to 8/11 bits: compute in f32 (f64 stays f64).
    Tensor g = g0.dtype() == DType::bf16 || g0.dtype() == DType::f16 ? g0.to(DType::f32) : g0;
    Tensor part;
    if (inf_norm) part = max(abs(g));
    else if (norm_type == 2.0) part = sum(mul(g, g));
    else if (norm_type == 1.0) part = sum(abs(g));
    else part = sum(pow(abs(g), norm_type));
    parts.push_back((part.dtype() == DType::f32 ? part : part.to(DType::f32)).reshape({1}));
  }
  for (auto& [dtype, m] : norm_groups) {
    Tensor out = empty({static_cast<std::int64_t>(m.data.size())}, {.dtype = DType::f32, .device = dev});
    backend::backend_for(dev).multi_tensor_norm(backend::output(out, op), m, norm_type);
    parts.push_back(out);
  }
  Tensor total;
  if (parts.empty()) {
    total = zeros({}, {.dtype = DType::f32, .device = dev});
  } else {
    Tensor stacked = parts.size() == 1 ? parts.front() : cat(parts);
    if (inf_norm) total = max(stacked);
    else if (norm_type == 2.0) total = sqrt(sum(stacked));
    else if (norm_type == 1.0) total = sum(stacked);
    else total = pow(sum(stacked), 1.0 / norm_type);
  }

  // coef = min(1, max_norm / (total + 1e-6)), a 0-d device tensor.
  Tensor coef = clamp_max(div(Scalar(max_norm), add(total, Scalar(1e-6))), 1.0);

  // Scale in place where that is safe, by one multi-tensor kernel per dtype (computing in f32,
  // f64 for f64). A gradient that is an expanded view (stride 0, as sum()'s backward leaves
  // it) or that shares its storage with another gradient of this list (add()'s backward hands
  // one tensor to both inputs) would be scaled more than once through the alias: such
  // gradients are replaced by a scaled copy instead.
  std::map<DType, backend::MultiTensor> scale_groups;
  std::vector<Tensor> in_place;
  for (std::size_t k = 0; k < grads.size(); ++k) {
    const Tensor& g = grads[k];
    bool aliased = !g.is_contiguous();
    for (std::size_t j = 0; j < grads.size() && !aliased; ++j)
      aliased = j != k && grads[j].storage().is_same(g.storage());
    if (aliased) {
      params[with_grad[k]].set_grad(mul(g, coef.to(g.dtype())));
    } else if (g.numel() > 0) {
      backend::MultiTensor& m = group_of(scale_groups, g.dtype());
      m.data.push_back(backend::output_data(g, op));
      m.numels.push_back(g.numel());
      in_place.push_back(g);
    }
  }
  for (auto& [dtype, m] : scale_groups) {
    Tensor scale = coef.to(dtype == DType::f64 ? DType::f64 : DType::f32);
    backend::backend_for(dev).multi_tensor_scale(m, backend::input(scale, op));
  }
  for (const Tensor& g : in_place) g.storage().bump_version();  // written in place
  return total;
}

}  // namespace brrr::optim
