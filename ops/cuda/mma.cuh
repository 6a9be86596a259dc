// Warp-level tensor-core building blocks for sm_80+ (inline PTX): mma.sync m16n8k16 with f32
// accumulators on bf16/f16 operands, m16n8k8 on TF32 operands (f32 rounded to 10-bit
// mantissas), ldmatrix (plain and .trans) from shared memory, cp.async
// global -> shared copies, and packing f32 pairs into 16-bit pairs. Fragment layouts: PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type" and "Warp-level matrix load
// instruction: ldmatrix"; ops/cuda/attention_mma.cu explains the ones it uses.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace brrr::kernels::mma {

/// d += a * b for one 16x8x16 tile: a = A (16x16, row-major) as 4 registers of 16-bit pairs,
/// b0, b1 = B (16x8, column-major), d = D (16x8, f32). T is __nv_bfloat16 or __half.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += a * b for one 16x8x8 tile of TF32 operands (f32 bit patterns rounded by to_tf32):
/// a = A (16x8, row-major): a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4);
/// b0 = B (k t, n g), b1 = B (k t+4, n g); d as mma_16816's (lane = 4 g + t).
__device__ __forceinline__ void mma_1688_tf32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                              std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// The f32 held in `bits` rounded to TF32 (nearest, ties away from zero: cvt.rna), as the bit
/// pattern mma_1688_tf32 takes. (The mma itself would drop the 13 low bits: a truncation.)
__device__ __forceinline__ std::uint32_t to_tf32(std::uint32_t bits) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(bits)));
  return r;
}
__device__ __forceinline__ std::uint32_t to_tf32(float x) { return to_tf32(__float_as_uint(x)); }

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// Four 8x8 matrices of 16-bit elements: lanes 8m .. 8m + 7 give the row addresses of matrix m
/// (16 bytes each), and r[m] of lane l holds row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1.
/// ("memory": the compiler must not move it across the stores and barriers that fill the tile.)
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

/// The same, transposed: r[m] of lane l holds rows 2 (l % 4) and 2 (l % 4) + 1 of column l / 4.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

/// 16 bytes global -> shared, asynchronously (both 16-byte aligned); zeros when !valid (the
/// source is then not read, but must still be a valid address).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}

/// 4 bytes global -> shared, asynchronously (both 4-byte aligned); zeros when !valid.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(valid ? 4 : 0)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// (lo, hi) rounded to nearest even into one register, lo in the low half (the element with
/// the smaller index in a fragment).
template <class T> __device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &v, 4);
  }
  return u;
}

/// The two 16-bit elements of a register as floats (low half first).
template <class T> __device__ __forceinline__ float2 unpack2(std::uint32_t u) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v;
    std::memcpy(&v, &u, 4);
    return __bfloat1622float2(v);
  } else {
    __half2 v;
    std::memcpy(&v, &u, 4);
    return __half22float2(v);
  }
}

/// 2^x (MUFU.EX2; 2 ulp; -inf gives +0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace brrr::kernels::mma
