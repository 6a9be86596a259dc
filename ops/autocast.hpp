// Autocast's casts for the op implementation units (the policy is documented at
// brrr::autocast in autograd/graph.cppm). Included inside the module purview of brrr.ops units,
// after `import brrr.tensor;`: it needs Tensor and includes no standard header.
//
// The op lists are PyTorch's (aten/src/ATen/autocast_mode.cpp): "lower_precision_fp" ops cast
// eligible inputs to the autocast dtype, "fp32" ops cast them to f32. An input is eligible
// when it is a defined floating tensor that is not f64 and not a wrapped number (PyTorch's
// is_eligible); everything else passes through unchanged.
#pragma once

namespace brrr::ops_detail {

enum class CastPolicy { lower_precision, fp32 };

inline Tensor autocast_arg(CastPolicy policy, const Tensor& t) {
  if (!t.defined() || !is_floating_point(t.dtype()) || t.dtype() == DType::f64 || is_wrapped_number(t)) return t;
  const DType target = policy == CastPolicy::fp32 ? DType::f32 : autocast::dtype();
  return t.dtype() == target ? t : t.to(target);
}
template <class T> const T& autocast_arg(CastPolicy, const T& x) { return x; }
// PyTorch casts every tensor argument, the class weights of the losses too.
inline CrossEntropyOptions autocast_arg(CastPolicy policy, const CrossEntropyOptions& o) {
  CrossEntropyOptions cast = o;
  cast.weight = autocast_arg(policy, o.weight);
  return cast;
}
inline SdpaOptions autocast_arg(CastPolicy policy, const SdpaOptions& o) {
  SdpaOptions cast = o;
  cast.attn_mask = autocast_arg(policy, o.attn_mask);  // a float mask (a bool one is not eligible)
  return cast;
}

}  // namespace brrr::ops_detail

/// In an op's body, first thing: under autocast, calls `fn` again with its tensor arguments
/// cast by `policy` (lower_precision or fp32) and autocast off for the call, and returns.
#define BRRR_AUTOCAST(policy, fn, ...) BRRR_AUTOCAST_IF(true, policy, fn, __VA_ARGS__)
/// As BRRR_AUTOCAST when `cond` also holds (fp32 ops with a dtype argument cast only without one).
#define BRRR_AUTOCAST_IF(cond, policy, fn, ...)                                                      \
  do {                                                                                               \
    if (::brrr::autocast::is_enabled() && (cond)) {                                                  \
      ::brrr::AutocastGuard brrr_autocast_off_(::brrr::autocast::dtype(), false);                    \
      return [&](const auto&... brrr_a) {                                                            \
        return fn(::brrr::ops_detail::autocast_arg(::brrr::ops_detail::CastPolicy::policy, brrr_a)...); \
      }(__VA_ARGS__);                                                                                \
    }                                                                                                \
  } while (false)
