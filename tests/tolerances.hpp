// The tolerances of every suite, in one table. A result is close to its reference when
// |got - want| <= atol + rtol * |want| (for products and sums, rtol times the sum of the terms'
// magnitudes, as the suites that say so compute it). A row names how the result was computed,
// which is what decides how far it may be from its reference; a suite picks the row of what it
// checks and never writes its own numbers. Include after tests/tensor/helpers.hpp (needs
// <optional> for CloseOptions, from `import brrr`).
#pragma once

namespace test {

struct Tol {
  double rtol = 0, atol = 0;
};

enum class Computed {
  /// One correctly rounded op in the dtype (add, sub, mul, div, sqrt, neg, abs, max, ...): an
  /// ulp (the kernels compute bf16/f16 in f32 and round once more). f16's atol covers its
  /// subnormals.
  rounded,
  /// libm's functions in the dtype's arithmetic type (exp, log, tanh, erf, gelu, ...) against
  /// a float64 reference: a few ulps, and an absolute floor for results out of a cancellation.
  math,
  /// The same functions on CUDA against the CPU: CUDA's and glibc's f32 functions differ by
  /// an ulp or two, which can flip the final rounding to 16 bits.
  math_parity,
  /// A result computed exactly (in double) and rounded once to the dtype, e.g. the CPU's mean
  /// (rtol = atol).
  rounded_once,
  /// Sums rounded to the dtype after every addition, as the CPU's scatter_add (rtol relative
  /// to 1 + |want|; f16's few-term sums stay exact).
  rounded_per_add,
  /// var/std: two passes in double over values rounded to the dtype (rtol = atol).
  variance,
  /// logsumexp: max, exp, sum and log in double (rtol = atol).
  log_sum_exp,
  /// Reductions and row ops (softmax, layer_norm, losses) the CPU computes in double and
  /// rounds once, against a float64 reference; also the CPU-GPU reduction parity (rtol).
  reduction,
  /// Longer f32 accumulations: CUDA's f32 sums and row ops against the CPU, optimizer steps,
  /// the edge-semantics cases on both devices.
  accumulated,
  /// Sums in any order (CUDA's atomics) against the CPU's sequential order.
  scatter,
  /// matmul, relative to the sum of |a||b| over the k terms: the CPU accumulates bf16/f16 in
  /// f32 and rounds once.
  gemm,
  /// cuBLAS against the float64 reference (f32 accumulation order differs).
  gemm_parity,
  /// cuBLAS with TF32 products (10-bit mantissas), f32 only.
  gemm_tf32,
  /// im2col + GEMM + reductions on CUDA against the CPU.
  conv_parity,
  /// Fused attention (scaled_dot_product_flash_attention, forward and gradients) against the
  /// float64 composite on the same rounded inputs. Here atol is relative to the largest |want|
  /// of the tensor (the suites multiply it in): the gradients come out of the cancellation
  /// dp - delta, so an element can be far smaller than the errors of its terms. f32: the log-
  /// sum-exp is kept in f32 (p = exp(s - lse) carries |lse| * 6e-8), and CUDA accumulates the
  /// S- and D-term sums in f32 (about S * 6e-8 of the sum of |terms| for S <= 256): 1e-4.
  /// bf16/f16: the output and the gradients rounded once (2^-9 and 2^-11 relative), delta =
  /// dO . O computed from the rounded output, and (tensor-core kernels) the P and dS tiles
  /// rounded to the dtype before their products, each an error of 2^-9 (2^-11) of one term of
  /// a sum: 8 ulps.
  attention,
  /// The fused attention of f32 on tensor cores with TF32 allowed, against the float64
  /// composite on the same f32 inputs: q, k, v, dO, P and dS rounded to TF32 (2^-11 relative)
  /// before their products, the inputs included (unlike the bf16/f16 rows, whose inputs are
  /// rounded before both paths): f16's error budget and 50 % for the inputs' rounding. atol
  /// relative to the largest |want|, as `attention`'s. f32 only.
  attention_tf32,
  /// fused_mlp (two GEMMs with GELU between, forward and gradients; either device) against
  /// the float64 composite on the same rounded inputs, atol relative to the largest |want| of
  /// the tensor (as attention's: the hidden gradient's products cancel). Each GEMM carries
  /// gemm's error relative to its sum of |terms|, which for these normalised operands is a few
  /// times the largest result; the chain has three in a row (dh, then dx or dW1), and in
  /// bf16/f16 the hidden activations are rounded on the way (the CPU rounds the pre-activation
  /// before GELU, cuBLASLt's epilogue does not).
  mlp,
  /// fused_mlp of f32 with TF32 allowed (cuBLAS's TF32 products, 2^-11 relative per operand)
  /// against the float64 composite: gemm_tf32's budget through the same chain. f32 only.
  mlp_tf32,
};

/// The row `how` for results in `d` (integers and bool: exact).
inline constexpr Tol tolerance(Computed how, brrr::DType d) {
  using brrr::DType;
  if (!brrr::is_floating_point(d)) return {};
  const bool f64 = d == DType::f64, f32 = d == DType::f32, bf16 = d == DType::bf16;
  switch (how) {
    case Computed::rounded:
      return f64 ? Tol{2.3e-16, 0} : f32 ? Tol{1.2e-7, 0} : bf16 ? Tol{7.9e-3, 0} : Tol{9.8e-4, 6e-8};
    case Computed::math:
      return f64 ? Tol{1e-13, 1e-14} : f32 ? Tol{3e-6, 1e-6} : bf16 ? Tol{1.6e-2, 1e-3} : Tol{2e-3, 1e-4};
    case Computed::math_parity:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{3e-6, 1e-5} : bf16 ? Tol{1.6e-2, 1e-3} : Tol{2e-3, 1e-4};
    case Computed::rounded_once:
      return f64 ? Tol{1e-14, 1e-14} : f32 ? Tol{1e-6, 1e-6} : bf16 ? Tol{8e-3, 8e-3} : Tol{1e-3, 1e-3};
    case Computed::rounded_per_add: return f32 ? Tol{1e-6, 0} : bf16 ? Tol{4e-2, 0} : Tol{};
    case Computed::variance: return f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-5};  // f32/f64 only
    case Computed::log_sum_exp: return f64 ? Tol{1e-13, 1e-13} : Tol{2e-6, 2e-6};  // f32/f64 only
    case Computed::reduction:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{1e-5, 1e-6} : bf16 ? Tol{1.6e-2, 1e-2} : Tol{2e-3, 2e-3};
    case Computed::accumulated:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{2e-5, 2e-6} : bf16 ? Tol{1.6e-2, 1e-2} : Tol{2e-3, 2e-3};
    case Computed::scatter:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{1e-5, 1e-5} : bf16 ? Tol{5e-2, 5e-2} : Tol{5e-3, 5e-3};
    case Computed::gemm:
      // f16: results in its subnormal range round to a multiple of 2^-24, so half of it is
      // the least absolute error there, whatever sum |a||b| is.
      return f64 ? Tol{1e-14, 0} : f32 ? Tol{2e-6, 0} : bf16 ? Tol{1e-2, 0} : Tol{2e-3, 0x1p-25};
    case Computed::gemm_parity:
      return f64 ? Tol{1e-13, 0} : f32 ? Tol{4e-6, 0} : bf16 ? Tol{1.6e-2, 0} : Tol{2e-3, 0x1p-25};
    case Computed::gemm_tf32: return f32 ? Tol{4e-3, 0} : tolerance(Computed::gemm_parity, d);
    case Computed::attention:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{1e-4, 1e-4} : bf16 ? Tol{1.6e-2, 1.6e-2} : Tol{4e-3, 4e-3};
    case Computed::attention_tf32: return f32 ? Tol{6e-3, 6e-3} : tolerance(Computed::attention, d);
    case Computed::mlp:
      return f64 ? Tol{1e-12, 1e-12} : f32 ? Tol{1e-4, 1e-4} : bf16 ? Tol{3e-2, 3e-2} : Tol{6e-3, 6e-3};
    case Computed::mlp_tf32: return f32 ? Tol{1e-2, 1e-2} : tolerance(Computed::mlp, d);
    case Computed::conv_parity:
      return f64 ? Tol{1e-11, 1e-11} : f32 ? Tol{1e-4, 1e-4} : bf16 ? Tol{3e-2, 3e-2} : Tol{1e-3, 1e-5};
  }
  return {};
}

/// The same row as assert_close's options.
inline brrr::testing::CloseOptions close_options(Computed how, brrr::DType d, bool equal_nan = false) {
  const Tol t = tolerance(how, d);
  return {.rtol = t.rtol, .atol = t.atol, .equal_nan = equal_nan};
}

}  // namespace test
