// The CPU kernel tables of ops/cpu/isa/kernels.hpp: kernels.inc compiled once per
// capability through clang's target attribute (a function-level ISA, so the rest of this
// file and every inline function it calls outside kernels.inc stay baseline: nothing built
// for AVX-512 can be picked by the linker for baseline code), and the run-time choice.
// This file is compiled with -ffp-contract=off (CMakeLists.txt): no level fuses a * b + c,
// so all levels give the same bits.
#include "ops/cpu/isa/kernels.hpp"

#include <math.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ops/cpu/loops.hpp"  // exp_f32
#include "ops/random_transform.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
// glibc's vector math library (libmvec, linked by CMakeLists.txt): log and cos of 4 / 8
// doubles, the AVX2 ("d") and AVX-512 ("e") variants of the x86-64 vector function ABI.
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_log(__m256d);
extern "C" __attribute__((target("avx2"))) __m256d _ZGVdN4v_cos(__m256d);
extern "C" __attribute__((target("avx512f"))) __m512d _ZGVeN8v_log(__m512d);
extern "C" __attribute__((target("avx512f"))) __m512d _ZGVeN8v_cos(__m512d);
#endif

namespace brrr::backend::cpu {

namespace rt = random_transform;

namespace baseline {
#include "ops/cpu/isa/kernels.inc"

void normal_f64(const std::uint32_t* w, double* z, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) z[i] = rt::normal(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
}
}  // namespace baseline

#if defined(__x86_64__)
// Box-Muller as random_transform::normal, `lanes` elements at a time: the uniforms in
// plain loops (they vectorise), log and cos by libmvec, the tail by the scalar function.
#define BRRR_NORMAL_F64(LANES, VEC, LOADU, STOREU, SET1, MUL, SQRT, LOG, COS)                         \
  void normal_f64(const std::uint32_t* w, double* z, std::int64_t n) {                                \
    std::int64_t i = 0;                                                                               \
    for (; i + LANES <= n; i += LANES) {                                                              \
      double u1[LANES], u2[LANES];                                                                    \
      for (int j = 0; j < LANES; ++j) {                                                               \
        const std::uint32_t* e = w + 4 * (i + j);                                                     \
        u1[j] = 1.0 - rt::uniform53(e[0], e[1]);                                                      \
        u2[j] = 6.283185307179586476925286766559 * rt::uniform53(e[2], e[3]);                         \
      }                                                                                               \
      const VEC r = MUL(SQRT(MUL(SET1(-2.0), LOG(LOADU(u1)))), COS(LOADU(u2)));                        \
      STOREU(z + i, r);                                                                               \
    }                                                                                                 \
    for (; i < n; ++i) z[i] = rt::normal(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);         \
  }
#endif

#if defined(__x86_64__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
namespace avx2 {
#include "ops/cpu/isa/kernels.inc"
BRRR_NORMAL_F64(4, __m256d, _mm256_loadu_pd, _mm256_storeu_pd, _mm256_set1_pd, _mm256_mul_pd, _mm256_sqrt_pd,
                _ZGVdN4v_log, _ZGVdN4v_cos)
}
#pragma clang attribute pop

#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl"))), \
                             apply_to = function)
namespace avx512 {
#include "ops/cpu/isa/kernels.inc"
BRRR_NORMAL_F64(8, __m512d, _mm512_loadu_pd, _mm512_storeu_pd, _mm512_set1_pd, _mm512_mul_pd, _mm512_sqrt_pd,
                _ZGVeN8v_log, _ZGVeN8v_cos)
}
#pragma clang attribute pop
#undef BRRR_NORMAL_F64
#else  // other architectures: the baseline build only, under every name
namespace avx2 = baseline;
namespace avx512 = baseline;
#endif

namespace {

constexpr IsaKernels tables[] = {
    {Capability::baseline, "baseline", baseline::exp_array_f32, baseline::softmax_f32, baseline::sum_f32,
     baseline::sum_f64, baseline::philox_blocks, baseline::normal_f64},
    {Capability::avx2, "avx2", avx2::exp_array_f32, avx2::softmax_f32, avx2::sum_f32, avx2::sum_f64,
     avx2::philox_blocks, avx2::normal_f64},
    {Capability::avx512, "avx512", avx512::exp_array_f32, avx512::softmax_f32, avx512::sum_f32, avx512::sum_f64,
     avx512::philox_blocks, avx512::normal_f64},
};

const IsaKernels& choose() {
  Capability best = Capability::baseline;
  for (Capability c : {Capability::avx2, Capability::avx512})
    if (supported(c)) best = c;
  if (const char* env = std::getenv("BRRR_CPU_CAPABILITY")) {
    for (const IsaKernels& t : tables)
      if (std::strcmp(env, t.name) == 0 && supported(t.capability) && t.capability < best) best = t.capability;
  }
  return kernels_for(best);
}

}  // namespace

bool supported(Capability c) {
#if defined(__x86_64__)
  __builtin_cpu_init();  // idempotent; needed if the first call comes before constructors ran
  switch (c) {
    case Capability::baseline: return true;
    case Capability::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Capability::avx512:
      return supported(Capability::avx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
#else
  return c == Capability::baseline;
#endif
}

const IsaKernels& kernels_for(Capability c) { return tables[static_cast<int>(c)]; }

const IsaKernels& isa() {
  static const IsaKernels& chosen = choose();
  return chosen;
}

}  // namespace brrr::backend::cpu
