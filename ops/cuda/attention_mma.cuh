// The tensor-core (mma.sync) fused attention for bf16/f16, and f32 with TF32 products
// (ops/cuda/attention_mma.cu), called by attention_forward / attention_backward
// (ops/cuda/attention.cu) for those dtypes (f32 only when TF32 is allowed); the
// operands and results are the contract's (backend/contract.hpp), any D <= 128.
#pragma once
#include <cuda_runtime.h>

#include "ops/cuda/kernels.hpp"

namespace brrr::kernels {

/// attention_forward for bf16/f16/f32 q, k, v (f32 as TF32; cudaErrorInvalidValue for f64).
int attention_forward_mma(const Operand& out, const Operand& lse, const Operand& q, const Operand& k,
                          const Operand& v, double scale, bool causal, const AttentionDropout& dropout,
                          cudaStream_t stream);
/// attention_backward for bf16/f16/f32 (f32 as TF32): dq (which also writes delta = rowsum(dO o O) into the f32
/// workspace of B*H*L), then dk/dv. f32 with 32 < D <= 64, unless deterministic (the fused backward): delta
/// (and dq zeroed), then dk/dv, which adds dS K into dq with atomics.
int attention_backward_mma(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout,
                           const Operand& q, const Operand& k, const Operand& v, const Operand& out,
                           const Operand& lse, double scale, bool causal, const AttentionDropout& dropout,
                           bool deterministic, void* workspace, cudaStream_t stream);

}  // namespace brrr::kernels
