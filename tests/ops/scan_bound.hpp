// How far a floating-point cumsum / logcumsumexp may be from the exact scan, element by
// element, whatever the order of its additions (the CPU's sequential loop, CUB's tiled tree
// on CUDA). Used by the CPU scan suite and the GPU parity suite: each backend's result is
// checked against a float64 scan of the same inputs on the CPU, not against the other
// backend (a million-long f32 scan differs between two summation orders by far more than a
// fixed tolerance allows, and near a zero crossing by more than any relative one).
// Include after tests/tensor/helpers.hpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace test {

/// Unit roundoff of `d` (half an ulp of 1, relative).
inline double unit_roundoff(brrr::DType d) {
  using brrr::DType;
  switch (d) {
    case DType::f64: return 0x1p-53;
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0;
  }
}

enum class ScanKind { cumsum, logcumsumexp };

/// Checks `got` (any device, any floating dtype) against the float64 scan of `x` along `d`.
/// The bound at position k (1-based along d), with u_acc the accumulation type's unit
/// roundoff (f32 for f32/f16/bf16, f64 for f64: the CUDA kernels'; the CPU's double loop is
/// well within it) and u_out the output dtype's:
///   |got_k - ref_k| <= u_out |ref_k| + (1 + u_out) * 2 u_acc sqrt(k) m_k + denorm_min,
/// where u_acc m_k bounds what one rounding step of a scan of the first k elements can add,
/// in any order:
///  - cumsum: every partial sum is a difference of two prefix sums, so |partial| <= 2 M_k,
///    M_k = max_{j<=k} |ref_j| (the running magnitude), and m_k = 2 M_k;
///  - logcumsumexp: a partial is the log-sum-exp of a sub-range, between its largest element
///    and ref_k, so |partial| <= max_{i<=k} |x_i| + |ref_k|; one combine hi + log1p(exp(lo -
///    hi)) rounds a subtraction, an exp (CUDA expf: 2 ulp), a log1p and an add, <= 5.5 u_acc
///    (|partial| + 1), and passes earlier errors on with convex weights: m_k = 6 (max|x_i| +
///    |ref_k| + 1).
/// sqrt(k) is the probabilistic growth of k independent roundings (Higham & Mary, "A new
/// approach to probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019);
/// the factor 2 makes the bound also cover the deterministic worst case D u_acc m_k of an
/// order of depth D <= 2 sqrt(k): CUB's tiled scan on a long row has D ~ items per thread +
/// log2(threads) + k / tile (tiles of 1.5-4 K elements on sm_90, cub's
/// tuning_scan_by_key.cuh), ~530 <= 2048 at k = 2^20. Measured for an f32 sequential
/// cumsum of 2^20 normals (the worst order: k roundings per element): max |err| / (u sqrt(k)
/// M_k) = 0.56-0.67 over 4 seeds, against 4 allowed. An f32 *sequential* logcumsumexp is
/// the exception (tiny increments are swamped, with a bias: |err| / (u sqrt(k) (|y| + 1)) ~ 15
/// at 2^20), which is why the CPU backend accumulates floating scans in double.
/// Returns an empty string when every element is within its bound, else a description of
/// the worst one.
inline std::string scan_bound_violation(const brrr::Tensor& got, const brrr::Tensor& x, std::int64_t d,
                                        ScanKind kind) {
  using namespace brrr;
  NoGradGuard no_grad;
  const DType out = got.dtype();
  const double u_out = unit_roundoff(out), u_acc = out == DType::f64 ? 0x1p-53 : 0x1p-24;
  const double tiny = out == DType::f64 ? 0x1p-1074 : out == DType::f32 ? 0x1p-149 : out == DType::f16 ? 0x1p-24 : 0x1p-133;
  Tensor x64 = x.detach().to(Device::cpu()).to(DType::f64);
  if (x64.numel() == 0) return "";
  Tensor ref = kind == ScanKind::cumsum ? cumsum(x64, d) : logcumsumexp(x64, d);
  const std::int64_t n = x64.size(d);
  Shape along(static_cast<std::size_t>(x64.dim()), 1);
  along[static_cast<std::size_t>(d < 0 ? d + x64.dim() : d)] = n;
  Tensor k = arange(1.0, static_cast<double>(n) + 1.0, 1.0, {.dtype = DType::f64}).reshape(along);
  Tensor m = kind == ScanKind::cumsum ? mul(cummax(abs(ref), d).values, 2.0)
                                      : mul(add(add(cummax(abs(x64), d).values, abs(ref)), 1.0), 6.0);
  Tensor bound = add(add(mul(abs(ref), u_out), mul(mul(sqrt(k), m), (1 + u_out) * 2 * u_acc)), tiny);
  Tensor err = abs(sub(got.detach().to(Device::cpu()).to(DType::f64), ref));
  Tensor ratio = div(err, bound);  // NaN where got is NaN: reported below
  const double worst = max(ratio).item<double>();  // NaN when any is
  if (worst <= 1.0) return "";
  const std::int64_t at = argmax(nan_to_num(ratio, 1e300)).item<std::int64_t>();
  std::ostringstream s;
  s << "scan beyond its rounding-error bound: worst |got - ref| / bound = " << worst << " at flat index " << at
    << " (got " << got.detach().to(Device::cpu()).to(DType::f64).reshape({-1}).select(0, at).item<double>() << ", ref "
    << ref.reshape({-1}).select(0, at).item<double>() << ", bound " << bound.expand(ref.shape()).reshape({-1}).select(0, at).item<double>()
    << ")";
  return s.str();
}

}  // namespace test
