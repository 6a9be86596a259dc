// The CUDA kernels' launch functions: a plain header (no modules, no CUDA headers) shared by
// nvcc (.cu files) and the clang-built CUDA backend (ops/cuda/*_launch.cpp). The argument
// types are the contract's own (backend/contract.hpp). Every launch enqueues on `stream` (a
// cudaStream_t) and returns the cudaError_t of the launch as int.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/contract.hpp"

namespace brrr::kernels {

using backend::AttentionDropout;
using backend::BinaryOp;
using backend::Distribution;
using backend::MultiTensor;
using backend::Operand;
using backend::OptimizerStep;
using backend::ReduceOp;
using backend::ScanOp;
using backend::ScatterOp;
using backend::UnaryOp;
using backend::Window2d;

/// out[i] = value (converted to out's dtype).
int fill(const Operand& out, double value, void* stream);
/// dst[i] = convert(src[i]) for same-shape operands of any dtypes and strides.
int copy(const Operand& dst, const Operand& src, void* stream);
/// out (contiguous)[i] = start + i * step.
int arange(const Operand& out, double start, double step, void* stream);
/// The contract's dropout (ops/cuda/random.cu): contiguous out and in of one floating dtype,
/// a contiguous boolean mask; the Philox words computed in the kernel (graph-capturable
/// through d.seed_offset).
int dropout(const Operand& out, const Operand& mask, const Operand& in, const AttentionDropout& d, void* stream);
/// The contract's dropout_backward: contiguous grad_in and grad_out of one floating dtype, the
/// boolean mask dropout wrote.
int dropout_backward(const Operand& grad_in, const Operand& grad_out, const Operand& mask, double p, void* stream);
/// Turns Philox words into values (ops/random_transform.hpp); integers in [low, high). out
/// is contiguous.
int random_transform(const Operand& out, const std::uint32_t* words, Distribution dist, std::int64_t low,
                     std::int64_t high, void* stream);
/// The same values as cuRAND's Philox4x32-10 words at (seed, offset) followed by
/// random_transform, with seed = seed_offset[0] and offset = seed_offset[1] + extra read from
/// device memory when the kernel runs (ops/philox.hpp computes the words): the capturable
/// draw of a CUDA graph, whose replays rewrite seed_offset.
int random_capturable(const Operand& out, const std::uint64_t* seed_offset, std::uint64_t extra, Distribution dist,
                      std::int64_t low, std::int64_t high, void* stream);
/// dst[0] = a, dst[1] = b, enqueued on `stream` (a replay's generator state).
int store_u64_pair(std::uint64_t* dst, std::uint64_t a, std::uint64_t b, void* stream);

/// Elementwise ops (math: ops/elementwise_math.hpp). out and in share a shape; for binary, a
/// and b are already broadcast to out's shape and share a dtype; comparisons write bool.
/// lo/hi: clamp's bounds.
int unary(UnaryOp op, const Operand& out, const Operand& in, double lo, double hi, void* stream);
/// error_flag/error_code: where integer rounding divisions report a zero divisor (the
/// deferred device error; nullptr for other ops).
int binary(BinaryOp op, const Operand& out, const Operand& a, const Operand& b, int* error_flag, int error_code,
           void* stream);
int binary_scalar(BinaryOp op, const Operand& out, const Operand& a, double s, bool scalar_first, int* error_flag,
                  int error_code, void* stream);
int where(const Operand& out, const Operand& cond, const Operand& a, const Operand& b, void* stream);

}  // namespace brrr::kernels

// ---- Reductions (ops/cuda/reduce.cu) ----------------------------------------------------

namespace brrr::kernels {

/// Device workspace (bytes) that reduce() needs for these operands; 0 when none. A host-only
/// computation (no CUDA call that waits).
std::size_t reduce_workspace_bytes(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask,
                                   const Operand* indices, int device);
/// Reduces `in` over the dims set in dims_mask into `out` (same ndim, size 1 on reduced dims)
/// and, for max/min with a single reduced dim, the i64 index of the first extreme into
/// `indices`. out's dtype: sum -> the input's for floats (or f32 for bf16/f16 inputs),
/// i64 for integers and bool; max/min -> the input's. NaN propagates through max/min.
/// `workspace` holds at least reduce_workspace_bytes(...) bytes of device memory, usable in
/// stream order on `stream`. Returns a cudaError_t as int (cudaErrorInvalidValue for
/// operands that do not fit these rules).
int reduce(ReduceOp op, const Operand& out, const Operand& in, std::uint32_t dims_mask, const Operand* indices,
           void* workspace, std::size_t workspace_bytes, int device, void* stream);

}  // namespace brrr::kernels

// ---- Indexing: gather / scatter_add (ops/cuda/index.cu) ---------------------------------

namespace brrr::kernels {

/// out[p] = in[p with coordinate `dim` replaced by index[p]] for every position p of out
/// (index has out's shape, i32 or i64; in has out's ndim and dtype, sizes >= out's except
/// along dim). An index outside [0, in.sizes[dim]) is clamped into it and `error_code` is
/// stored into `*error_flag` (device-visible host memory, read after the next sync).
/// cudaErrorInvalidValue when in.sizes[dim] == 0 but out is not empty.
int gather(const Operand& out, const Operand& in, int dim, const Operand& index, int* error_flag, int error_code,
           void* stream);
/// out[p with coordinate `dim` replaced by index[p]] += src[p] for every position p of index
/// (src has index's shape and out's dtype; not bool), with atomics: the summation order of
/// duplicates varies from run to run for floating types. Out-of-range indices as in gather.
int scatter_add_atomic(const Operand& out, int dim, const Operand& index, const Operand& src, int* error_flag,
                       int error_code, void* stream);
/// Device workspace (bytes) that scatter_add_sorted needs for these operands. A host-only
/// computation (CUB's size query; nothing is launched or waited for) on the current device.
std::size_t scatter_add_sorted_workspace_bytes(const Operand& out, const Operand& index);
/// scatter_add in a fixed order, reproducible to the bit: the (destination, position) pairs
/// are sorted with cub::DeviceRadixSort (stable, so equal destinations keep position order),
/// then one thread per destination adds its sources in position order, rounding to out's
/// dtype after each addition exactly as the CPU backend's sequential loop does.
int scatter_add_sorted(const Operand& out, int dim, const Operand& index, const Operand& src, void* workspace,
                       std::size_t workspace_bytes, int* error_flag, int error_code, void* stream);
/// out[p with coordinate `dim` replaced by index[p]] = op(that, src[p]) for every position p
/// of index (ScatterOp: assign, prod, amax, amin; ops/scatter_math.hpp), operands as
/// scatter_add_atomic's (bool too). assign is a plain store (one of several sources wins);
/// the others a compare-and-swap loop on the element's aligned 32/64-bit word.
int scatter_reduce(ScatterOp op, const Operand& out, int dim, const Operand& index, const Operand& src,
                   int* error_flag, int error_code, void* stream);

}  // namespace brrr::kernels

// ---- Row ops: softmax, log_softmax, layer_norm (ops/cuda/rows.cu, layer_norm_backward.cu) --

namespace brrr::kernels {

/// Softmax (log_softmax when `log`) over each row of contiguous [rows, cols] `in` into
/// `out` (same dtype: f32/f64/bf16/f16; arithmetic in f32, f64 for f64). Rows of all -inf
/// and rows holding +inf or NaN give NaN (PyTorch). Returns a cudaError_t as int
/// (cudaErrorInvalidValue for an integer dtype).
int softmax_rows(void* out, const void* in, DType dtype, std::int64_t rows, std::int64_t cols, bool log,
                 void* stream);
/// Layer norm over each row of contiguous [rows, cols] `in`: out = (x - mean) * rstd * w + b
/// with the biased variance and rstd = 1 / sqrt(var + eps). `mean` and `rstd` ([rows]) are
/// f32 for f32/bf16/f16 inputs and f64 for f64; `weight`/`bias` ([cols], in's dtype) may be
/// nullptr. Returns a cudaError_t as int.
int layer_norm_rows(void* out, void* mean, void* rstd, const void* in, const void* weight, const void* bias,
                    DType dtype, std::int64_t rows, std::int64_t cols, double eps, void* stream);
/// Device workspace (bytes) of layer_norm_backward's column sums for [rows, cols] of `dtype`.
std::size_t layer_norm_backward_workspace_bytes(DType dtype, std::int64_t rows, std::int64_t cols);
/// The contract's layer_norm_backward (ops/cuda/layer_norm_backward.cu): dx ([rows, cols], x's
/// dtype), dweight and dbias ([cols], f32; f64 for f64) may each be nullptr; weight ([cols], f32;
/// f64 for f64) may be nullptr; `workspace` holds layer_norm_backward_workspace_bytes (unused
/// when neither dweight nor dbias is wanted). Two or three launches, no atomics.
int layer_norm_backward(void* dx, void* dweight, void* dbias, const void* dy, const void* x, const void* mean,
                        const void* rstd, const void* weight, DType dtype, std::int64_t rows, std::int64_t cols,
                        void* workspace, void* stream);

/// The contract's dropout_add_layer_norm (ops/cuda/rows.cu): one warp per row, cols % 4 == 0 and
/// cols <= 1024 (512 for f64); x0/out and residual/sum dtypes as the contract's. Returns
/// cudaErrorInvalidValue (nothing launched) outside those shapes or dtypes.
int dropout_add_layer_norm(const Operand& out, const Operand& sum, const Operand* mask, const Operand& mean,
                           const Operand& rstd, const Operand& x0, const Operand* residual, const Operand* weight,
                           const Operand* bias, double eps, const AttentionDropout& d, void* stream);
/// The contract's dropout_add_layer_norm_backward (ops/cuda/layer_norm_backward.cu), same shapes;
/// `workspace` holds layer_norm_backward_workspace_bytes(sum's dtype, rows, cols) when dweight
/// or dbias is wanted.
int dropout_add_layer_norm_backward(const Operand* dx0, const Operand* dresidual, const Operand* dweight,
                                    const Operand* dbias, const Operand& grad_out, const Operand* grad_sum,
                                    const Operand& sum, const Operand& mean, const Operand& rstd,
                                    const Operand* weight, const Operand* mask, double p, void* workspace,
                                    void* stream);

// ---- Batch norm over contiguous [N, C, M] (ops/cuda/batch_norm.cu) ----
// Statistics (mean, invstd, sum_dy, sum_dy_xmu: [C]) are f32 for f32/bf16/f16 data and f64
// for f64; weight/bias/running stats may be nullptr. Formulas as the contract's kernels.

/// Device workspace (bytes) of batch_norm_stats and batch_norm_backward_reduce over [n, c, m]
/// (the per-block partial results; each channel is split over several blocks).
std::size_t batch_norm_workspace_bytes(DType dtype, std::int64_t n, std::int64_t c, std::int64_t m);
/// mean[c], invstd[c] = 1/sqrt(var + eps) (biased variance: Welford per thread, Chan et al.'s
/// combination across threads and blocks in a fixed order); running stats updated with
/// `momentum` (unbiased variance) when given.
int batch_norm_stats(void* mean, void* invstd, const void* in, DType dtype, std::int64_t n, std::int64_t c,
                     std::int64_t m, double eps, void* running_mean, void* running_var, double momentum,
                     void* workspace, void* stream);
/// out = (in - mean[c]) invstd[c] weight[c] + bias[c].
int batch_norm_elemt(void* out, const void* in, const void* mean, const void* invstd, const void* weight,
                     const void* bias, DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* stream);
/// sum_dy[c] = sum grad, sum_dy_xmu[c] = sum grad (in - mean[c]).
int batch_norm_backward_reduce(void* sum_dy, void* sum_dy_xmu, const void* grad, const void* in, const void* mean,
                               DType dtype, std::int64_t n, std::int64_t c, std::int64_t m, void* workspace,
                               void* stream);
/// grad_in = (grad - sum_dy/count - (in - mean) invstd^2 sum_dy_xmu/count) invstd weight.
int batch_norm_backward_elemt(void* grad_in, const void* grad, const void* in, const void* mean, const void* invstd,
                              const void* weight, const void* sum_dy, const void* sum_dy_xmu, DType dtype,
                              std::int64_t n, std::int64_t c, std::int64_t m, void* stream);

// ---- Fused cross entropy (ops/cuda/cross_entropy.cu) ----

/// Per row of contiguous logits [rows, cols] (f32/f64/bf16/f16) and targets [rows] (i64 when
/// target_i64, else i32): out[row] = loss, out[rows + row] = weight (1, or 0 for an ignored
/// or out-of-range target), lse[row] = log-sum-exp; out and lse in the accumulation type
/// (f64 for f64, f32 otherwise). loss = (1 - e)(lse - x_t) + e (lse - mean_c x_c). A target
/// outside [0, cols) other than ignore_index stores error_code into *error_flag.
int cross_entropy_forward(void* out, void* lse, const void* logits, DType dtype, const void* target,
                          bool target_i64, std::int64_t rows, std::int64_t cols, std::int64_t ignore_index,
                          double label_smoothing, int* error_flag, int error_code, void* stream);
/// grad_logits[i, c] (logits' dtype) = s_i (exp(x - lse_i) - (1 - e) [c == t_i] - e / cols),
/// s_i = 0 for ignored or out-of-range targets, else grad[i] (per_row) or grad[0] / count[0]
/// (count may be nullptr: then grad[0]). grad, count and lse in the accumulation type.
int cross_entropy_backward(void* grad_logits, const void* logits, const void* lse, const void* target,
                           DType dtype, bool target_i64, const void* grad, bool per_row, const void* count,
                           std::int64_t rows, std::int64_t cols, std::int64_t ignore_index, double label_smoothing,
                           void* stream);

// ---- im2col / col2im (ops/cuda/im2col.cu) ----

/// out (contiguous [N, C*kh*kw, out_h*out_w]) from in ([N, C, H, W], any strides).
int im2col(const Operand& out, const Operand& in, const Window2d& g, double pad_value, void* stream);
/// out (contiguous [N, C, H, W]) = sum of the column entries that read each cell.
int col2im(const Operand& out, const Operand& col, const Window2d& g, void* stream);

// ---- max pooling (ops/cuda/pool.cu): Backend::max_pool2d / max_pool2d_backward's contract ----

/// out, indices (contiguous [N, C, out_h, out_w]) = each window's max and its flat index.
int max_pool2d(const Operand& out, const Operand& indices, const Operand& in, const Window2d& g, bool adaptive,
               void* stream);
/// grad_in (contiguous [N, C, H, W]) = the sum of grad_out over the outputs whose index names the cell.
int max_pool2d_backward(const Operand& grad_in, const Operand& grad_out, const Operand& indices, const Window2d& g,
                        bool adaptive, void* stream);

}  // namespace brrr::kernels

// ---- Optimizer updates: SGD, Adam, AdamW (ops/cuda/optimizer.cu) ------------------------

namespace brrr::kernels {

/// Updates the step's tensors (contiguous, one floating dtype) in place: params[k], grads[k]
/// and the state buffers (SGD: state1 = momentum, nullptr without momentum; Adam/AdamW:
/// state1 = exp_avg, state2 = exp_avg_sq, state3 = max_exp_avg_sq or nullptr without
/// amsgrad) of numels[k] elements each; the pointer lists are host memory, read before
/// returning. One multi-tensor launch per 48 tensors on `stream`; arithmetic in f32 (f64 for
/// f64). Returns a cudaError_t as int (cudaErrorInvalidValue for an integer dtype).
int optimizer_step(const OptimizerStep& step, void* stream);
/// Device workspace (bytes) of multi_tensor_norm over `tensors`.
std::size_t multi_tensor_norm_workspace_bytes(const MultiTensor& tensors);
/// The contract's multi_tensor_norm (ops/cuda/multi_tensor.cu): `out` f32 [count]; two launches
/// per 64 tensors, no atomics.
int multi_tensor_norm(void* out, const MultiTensor& tensors, double norm_type, void* workspace, void* stream);
/// The contract's multi_tensor_scale: `scale` one value of the accumulation dtype in device
/// memory; one launch per 64 tensors.
int multi_tensor_scale(const MultiTensor& tensors, const void* scale, void* stream);
/// Bytes of the device copy of an optimizer step's derived coefficients, and an enqueued
/// write of the coefficients of `step` (computed on the host as optimizer_step does) to `dst`.
/// A step whose device_coeffs points there reads them at run time (captured graphs).
std::size_t optimizer_coeffs_bytes();
int optimizer_write_coeffs(const OptimizerStep& step, void* dst, void* stream);

}  // namespace brrr::kernels

// ---- Scans, sort, searchsorted (ops/cuda/sort_scan.cu), topk (ops/cuda/topk.cu) ---------

namespace brrr::kernels {

/// Device workspace (bytes) of scan() over contiguous [rows, n] `in` (host-only arithmetic
/// and CUB size queries, no waiting).
std::size_t scan_workspace_bytes(ScanOp op, const Operand& in, bool with_indices);
/// The contract's scan: contiguous [rows, n] operands along the last dim.
int scan(ScanOp op, const Operand& out, const Operand& in, const Operand* indices, void* workspace, std::size_t bytes,
         void* stream);
/// Device workspace (bytes) of sort().
std::size_t sort_workspace_bytes(const Operand& in, bool descending);
/// The contract's sort: stable, NaN largest, contiguous [rows, n] along the last dim.
int sort(const Operand& values, const Operand& indices, const Operand& in, bool descending, void* workspace,
         std::size_t bytes, void* stream);
/// Device workspace (bytes) of topk() (host-only arithmetic and CUB size queries).
std::size_t topk_workspace_bytes(const Operand& in, std::int64_t k, bool largest);
/// The contract's topk (1 <= k <= n): contiguous [rows, n] `in`, [rows, k] values and indices.
int topk(const Operand& values, const Operand& indices, const Operand& in, std::int64_t k, bool largest,
         void* workspace, std::size_t bytes, void* stream);
/// The contract's searchsorted.
int searchsorted(const Operand& out, const Operand& sorted, const Operand& values, bool right, void* stream);

}  // namespace brrr::kernels

// ---- Fused attention (ops/cuda/attention.cu) ---------------------------------------------

namespace brrr::kernels {

/// The contract's attention_forward: 4-D [B, H, L|S, D] operands with last stride 1, D <= 128;
/// lse [B, H, L] contiguous in the accumulation dtype (f32; f64 for f64).
/// With dropout.p > 0 (AttentionDropout in backend/contract.hpp) the probabilities are dropped
/// with the words rand() would draw, computed in the kernel (no mask in memory). bf16/f16, and
/// f32 with allow_tf32, run on tensor cores (ops/cuda/attention_mma.cu); f32 otherwise and f64
/// on the SIMT kernels (ops/cuda/attention.cu).
int attention_forward(const Operand& out, const Operand& lse, const Operand& q, const Operand& k, const Operand& v,
                      double scale, bool causal, const AttentionDropout& dropout, bool allow_tf32, void* stream);
/// Device workspace (bytes) of attention_backward: one accumulator per query row.
std::size_t attention_backward_workspace_bytes(const Operand& q);
/// The contract's attention_backward (SIMT, f32/f64: three launches, delta, dq, dk/dv; tensor
/// cores, bf16/f16 and f32 with allow_tf32: two launches, dq with delta in its prologue, then
/// dk/dv, no atomics; but f32 with 32 < D <= 64 unless deterministic: delta (dq zeroed), then
/// dk/dv adding into dq with atomics; attention_mma.cu).
int attention_backward(const Operand& dq, const Operand& dk, const Operand& dv, const Operand& dout, const Operand& q,
                       const Operand& k, const Operand& v, const Operand& out, const Operand& lse, double scale,
                       bool causal, const AttentionDropout& dropout, bool allow_tf32, bool deterministic,
                       void* workspace, void* stream);

}  // namespace brrr::kernels

// ---- Interpolation (ops/cuda/interpolate.cu) and Poisson samples (ops/cuda/sampling.cu) ---

namespace brrr::kernels {

/// The contract's upsample: contiguous [N, C, D, H, W] in -> [N, C, OD, OH, OW] out, one floating dtype.
int upsample(const Operand& out, const Operand& in, const backend::Upsample& g, void* stream);
/// The contract's upsample_backward (f32/f64): atomic adds into the zeroed grad_in.
int upsample_backward(const Operand& grad_in, const Operand& grad_out, const backend::Upsample& g, void* stream);
/// The contract's poisson (contiguous operands); a negative or NaN rate writes NaN and stores
/// `error_code` into error_flag (the deferred device error).
int poisson(const Operand& out, const Operand& rates, std::uint64_t seed, std::uint64_t offset, int* error_flag,
            int error_code, void* stream);

}  // namespace brrr::kernels
