// The CPU kernels compiled for several x86-64 levels and chosen once at run time from the
// CPU's features (as ATen's CPU capability dispatch): baseline x86-64 (SSE2), AVX2 + FMA
// (x86-64-v3) and AVX-512 (F, DQ, BW, VL). Plain header, no module: included by the module
// units of ops/cpu/ in their global fragment and by the one TU that defines the kernels
// (ops/cpu/isa/kernels.cpp). Every level computes the same operations in the same order,
// without contracting a * b + c into an FMA (exp's and the normals' FMAs are explicit,
// one rounding at every level), so results are bitwise the same on every CPU; only their
// speed differs (tests/ops/test_cpu_isa.cpp checks it).
#pragma once
#include <cstdint>

namespace brrr::backend::cpu {

/// A CPU capability: the ISA level a kernel table was compiled for.
enum class Capability { baseline, avx2, avx512 };

/// The kernels of one capability, on contiguous arrays.
struct IsaKernels {
  Capability capability;
  const char* name;  // "baseline", "avx2", "avx512" (also the BRRR_CPU_CAPABILITY values)
  /// y[i] = exp(x[i]) for i < n, exp_f32's bits (ops/cpu/loops.hpp: within 1 ulp). y may be x.
  void (*exp_f32)(const float* x, float* y, std::int64_t n);
  /// softmax (or log_softmax) of each of `rows` rows of `cols` floats at x into y (distinct
  /// arrays): max, exp_f32(x - max) into y with a fused pairwise sum, then one scaling
  /// pass ((x - max) - log(sum) for log). A row of -inf, or one holding +inf or NaN, is NaN.
  void (*softmax_f32)(const float* x, float* y, std::int64_t rows, std::int64_t cols, bool log);
  /// Pairwise sum of n values (pairwise_sum's order: error O(log n) ulps).
  float (*sum_f32)(const float* x, std::int64_t n);
  double (*sum_f64)(const double* x, std::int64_t n);
  /// cuRAND's Philox4x32-10 words of blocks first .. first + n - 1 under `seed` (4 words
  /// per block into words[0 .. 4n)): random_transform::philox_words of whole blocks.
  void (*philox_blocks)(std::uint64_t seed, std::uint64_t first, std::uint32_t* words, std::int64_t n);
  /// Standard normals, `pairs` Box-Muller pairs: z[2i], z[2i + 1] =
  /// random_transform::normal_pair_f32(words[2i], words[2i + 1]), and for f64
  /// normal_pair_f64(words[4i .. 4i + 3]). Our own log and sin/cos with explicit roundings
  /// and FMAs (ops/normal_math.hpp): every capability gives the same bits, and so does the GPU.
  void (*normal_f32)(const std::uint32_t* words, float* z, std::int64_t pairs);
  void (*normal_f64)(const std::uint32_t* words, double* z, std::int64_t pairs);
  /// One output row of max_pool2d with a 2x2 window, stride 2, no padding, dilation 1, f32:
  /// input rows r0 and r1 (contiguous), `ow` maxima into out and their flat argmaxes into idx
  /// (the first window's top-left cell is `base`, input rows `w` apart), PyTorch's NaN rule.
  void (*max_pool2x2_f32)(const float* r0, const float* r1, float* out, std::int64_t* idx, std::int64_t ow,
                          std::int64_t base, std::int64_t w);
};

/// Whether this CPU (and its OS) can run kernels of capability c.
bool supported(Capability c);

/// The table of capability c (compiled in every build; calling it needs supported(c)).
const IsaKernels& kernels_for(Capability c);

/// The table in use: the best supported capability, or the one BRRR_CPU_CAPABILITY names
/// (baseline, avx2, avx512) when the CPU supports it; chosen at the first call.
const IsaKernels& isa();

}  // namespace brrr::backend::cpu
