// CudaBackend::gemm: one cublasLtMatmul on the current stream, the epilogue (bias, bias
// gradient) fused into it; cublasGemmStridedBatchedEx plus a separate kernel where Lt has no
// kernel for the case.
//
// Row-major onto column-major. brrr's C[m, n] is row-major and contiguous; read as
// column-major memory it is C^T, an [n, m] matrix with leading dimension n. Since
//     C^T = (A B)^T = B^T A^T,
// we ask cuBLAS for  C^T[n, m] = op(X)[n, k] * op(Y)[k, m]  with X over B's memory and Y
// over A's memory, i.e. cuBLAS's (m, n, k) = (n, m, k) and its first operand is B.
//
// Transpose flags. A [rows, cols] operand with strides (rs, cs) (in elements):
//   * row-major (cs == 1): element (r, c) sits at r*rs + c. Read column-major with leading
//     dimension rs that memory is the [cols, rows] matrix M^T. So op = N gives M^T, with
//     ld = rs, which cuBLAS needs >= cols (the rows of the stored column-major matrix).
//   * column-major (rs == 1): element (r, c) sits at r + c*cs: column-major M itself with
//     ld = cs >= rows. op = T gives M^T.
// Both operands must enter transposed (we want B^T and A^T), so in either case:
//     row-major -> CUBLAS_OP_N, ld = row stride (>= cols);
//     col-major -> CUBLAS_OP_T, ld = col stride (>= rows).
// For X = B [k, n]: N needs ld >= n, T needs ld >= k; for Y = A [m, k]: N needs ld >= k,
// T needs ld >= m: exactly "the other stride at least the size it steps over", which the op
// layer (ops/matmul.cpp) guarantees, copying otherwise. Strides of size-1 dims are
// normalised here too. Batch strides pass through (0: the same matrix for every batch).
// cuBLASLt describes the stored matrix (before op): [cols, rows] for N, [rows, cols] for T.
//
// Epilogues under that mapping (cuBLASLt's D is our C^T, [n, m]):
//   * bias[j] added to C[i, j]: Lt's CUBLASLT_EPILOGUE_BIAS adds a vector of D's row count
//     (n) to every column of D, i.e. to every row of C.
//   * the sum over k of B ([n]): Lt's first operand is X = B, and CUBLASLT_EPILOGUE_BGRADA
//     writes sum_k op(X)[j, k] = sum_k B[k, j], D's row count long.
//   * the sum over k of A ([m]): Lt's second operand is Y = A, and CUBLASLT_EPILOGUE_BGRADB
//     writes sum_k op(Y)[k, i] = sum_k A[i, k], D's column count long.
//   * the activations: aux has D's layout (ld n); CUBLASLT_EPILOGUE_GELU_AUX(_BIAS) writes
//     the pre-activation there and GELU (cuBLASLt's is the tanh form) into D. Used for bf16
//     only, where it pays; everywhere else, and without a Lt kernel (aux's ld must be a
//     multiple of 8), gemm_activation_unfused: the product (and bias) into aux, then GELU
//     into C (the backward: the product into C, then C times GELU's derivative). Measured
//     on the H200 at the GPT's MLP (16384 x 384 -> 1536, docs/benchmarks.md):
//     bf16 GELU_AUX is one nvjet kernel, 49.5 us against 34.9 + 36.6 for the GEMM and our
//     GELU; bf16 DGELU runs an xmma kernel, 84.8 us against 34.8 + 47.5 (not used); for f32
//     (TF32) Lt runs both as a separate epilogue kernel after the GEMM, 80.6 and 212 us against
//     our kernels' 51.9 and 73.5 (not used); for f64 its GELU is 2e-10 off (not used).
//
// Algorithms. The first time a case is seen, cublasLtMatmulAlgoGetHeuristic picks one
// (heuristic #0) for its key: shapes, leading dimensions, batch strides, dtype, compute type,
// epilogue and the alignment of every pointer (the heuristic assumes 256-byte aligned buffers
// unless told otherwise, and reads the bias pointer's alignment from the pointer itself). The
// matmul descriptor, the layouts and the algorithm are kept per device under that key, so a
// steady-state step makes no heuristic query and creates no descriptor; only the bias pointer
// is set per call. One key always runs one algorithm (with the workspace it asks for): the same bits
// every run. A case Lt has no algorithm for (NOT_SUPPORTED, or no result) is remembered as
// such: with an epilogue it runs Lt without one, then the epilogue as a separate kernel
// (binary add, or reduce); without one, cublasGemmStridedBatchedEx. k == 0 and sizes past int
// take cuBLAS's path too. The cache holds at most max_plans keys (cleared when full).
// BRRR_GEMM_LOG=1 prints each new plan, whether Lt has a kernel for it, and its split-K (slices
// and cuBLASLt's reduction scheme). The heuristic may pick any reduction scheme: the GPT's weight
// gradients (k = 16384) take 3-5 slices summed by a separate kernel, and restricting it to
// in-place sums or to no split-K measured slower (docs/benchmarks.md).
//
// Tuning (opt-in, as PyTorch's TunableOp): with BRRR_GEMM_TUNE=1 (or =N, N candidates; 1 means
// 8) a new plan asks the heuristic for N candidates instead of one and times each on the
// call's own operands (one warm-up and 5 timed runs, C read, D and a bias gradient written to
// scratch memory), keeping the fastest for the key. The heuristic's first choice is often not
// the fastest for the GPT's shapes (4.9 against 4.6 ms a step of TF32 GEMMs, docs/benchmarks.md).
// The timing waits for events: host syncs, counted, once per new key (the first steps);
// skipped (heuristic #0 kept) under graph capture and under SyncPolicy::error. Which
// candidate wins can differ between runs, so the bits can too: off by default.
//
// f32_out: bf16/f16 A and B with an f32 C (and bias gradient), cuBLAS's mixed-precision
// case (CUDA_R_16BF/16F operands, CUDA_R_32F C, CUBLAS_COMPUTE_32F).
// Compute types: f32 -> CUBLAS_COMPUTE_32F (CUBLAS_COMPUTE_32F_FAST_TF32 when allow_tf32),
// f64 -> CUBLAS_COMPUTE_64F, bf16/f16 -> CUBLAS_COMPUTE_32F (f32 accumulation, f32 alpha and
// beta). One cuBLAS and one cuBLASLt handle per device, created on first use and never
// destroyed (destroying them at exit can outlive the CUDA context); calls on them are
// serialised by a mutex, and each call uses a workspace of its own for the current stream,
// allocated from brrr's caching allocator on that stream (one workspace shared by two streams
// would race), taken for the call, as large as the algorithm needs (Workspace); under
// capture, the graph's own.
module;
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/check.hpp"
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// What decides a cuBLASLt plan (see the top): every field of the descriptors, plus alignments.
using LtKey = std::array<std::int64_t, 19>;

struct LtKeyHash {
  std::size_t operator()(const LtKey& key) const noexcept {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    for (std::int64_t v : key) {
      h ^= static_cast<std::uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<std::size_t>(h);
  }
};

// The descriptors and the algorithm of one key; usable == false: Lt has no kernel for it.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t x = nullptr, y = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::size_t workspace = 0;  // the bytes `algo` needs
  bool usable = false;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {  // statuses ignored: nothing useful to do with them here
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (x) cublasLtMatrixLayoutDestroy(x);
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

constexpr std::size_t max_plans = 4096;

// BRRR_GEMM_LOG=1: one line on stderr per new plan (its key, and whether Lt has a kernel).
bool log_plans() {
  static const bool on = [] {
    const char* v = std::getenv("BRRR_GEMM_LOG");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

// BRRR_GEMM_TUNE: how many candidates a new plan times (0: off, the heuristic's first). Read
// for each new plan (rare), so a program may switch it with setenv between shapes.
int tune_candidates() {
  const char* v = std::getenv("BRRR_GEMM_TUNE");
  if (v == nullptr || v[0] == '\0') return 0;
  const int k = std::atoi(v);
  return k <= 0 ? 0 : k == 1 ? 8 : std::min(k, 64);
}

struct DeviceBlas {
  std::mutex mutex;
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  std::size_t workspace_bytes = 0;
  int major = 0;  // compute capability
  std::unordered_map<LtKey, std::unique_ptr<LtPlan>, LtKeyHash> plans;
};

DeviceBlas& device_blas(int device) {
  static std::mutex mutex;
  // Never destroyed: see the comment at the top.
  static auto* all = new std::unordered_map<int, std::unique_ptr<DeviceBlas>>;
  std::lock_guard lock(mutex);
  auto& entry = (*all)[device];
  if (!entry) entry = std::make_unique<DeviceBlas>();
  return *entry;
}

// An operand of cuBLAS (see the derivation at the top): its flag and leading dimension.
struct BlasOperand {
  cublasOperation_t op;
  std::int64_t ld;
};

BlasOperand blas_operand(const char* name, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  std::int64_t r = rows > 1 ? rows : 1, c = cols > 1 ? cols : 1;
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= c)) return {CUBLAS_OP_N, rows <= 1 ? c : rs};
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= r)) return {CUBLAS_OP_T, cols <= 1 ? r : cs};
  throw Error(ErrorKind::value, std::string("gemm: operand ") + name + " [" + std::to_string(rows) + ", " +
                                    std::to_string(cols) + "] with strides (" + std::to_string(rs) + ", " +
                                    std::to_string(cs) + ") is neither row- nor column-major");
}

bool fits_int(std::int64_t v) { return v >= 0 && v <= INT_MAX; }

// The largest power of two (at most 256) dividing the address of every batch's matrix (the
// address and the batch stride in bytes): what the heuristic may assume of that operand.
std::int64_t alignment(const void* p, std::int64_t batch = 1, std::int64_t batch_stride_bytes = 0) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(p);
  if (batch > 1) bits |= static_cast<std::uint64_t>(batch_stride_bytes);
  if (bits == 0) return 256;
  return std::min<std::int64_t>(256, static_cast<std::int64_t>(bits & (~bits + 1)));
}

// Called with blas.mutex held.
void ensure_handle(DeviceBlas& blas, int device) {
  if (blas.handle) return;
  BRRR_CUBLAS_CHECK(cublasCreate(&blas.handle));
  BRRR_CUBLAS_CHECK(cublasLtCreate(&blas.lt));
  BRRR_CUDA_CHECK(cudaDeviceGetAttribute(&blas.major, cudaDevAttrComputeCapabilityMajor, device));
  // cuBLAS's recommended workspace: 32 MiB on Hopper and later, 4 MiB before.
  blas.workspace_bytes = (blas.major >= 9 ? 32u : 4u) << 20;
}

// The workspace of a call on `stream` (used with blas.mutex held): taken from the stream's
// pool for the call, only the bytes the chosen algorithm needs (get(n); often none), and
// released once the call is enqueued (stream-ordered: the next product on that stream gets the
// same block back, with no CUDA call). Nothing is held between products, so the memory that
// the caller's peak counts is what the products at that moment use (a workspace of 32 MiB
// kept for good by each stream cost the GPT's TF32 step 32 MiB of peak, more than PyTorch's).
// Under a graph capture: one of the graph's own, of blas.workspace_bytes (cuBLAS must not
// allocate while capturing, and a replay on another stream must not share eager work's one).
struct Workspace {
  DeviceBlas& blas;
  int device;
  const StreamPtr& stream;
  void* fixed = nullptr;
  Storage held;

  Workspace(DeviceBlas& b, int d, const StreamPtr& s) : blas(b), device(d), stream(s) {
    if (capture_underway(device)) fixed = capture_blas_workspace(device, *stream, blas.workspace_bytes);
  }
  // A workspace of at least `bytes` (<= blas.workspace_bytes), of size() bytes (none: nullptr
  // and 0; a pointer and its size always go together, as cuBLAS checks).
  void* get(std::size_t bytes) {
    if (fixed) return fixed;
    if (held.nbytes() < bytes) held = allocate_device(bytes, device, stream);
    return held.data();
  }
  std::size_t size() const { return fixed ? blas.workspace_bytes : held.nbytes(); }
};

// The epilogues with an aux matrix (GemmArgs::aux): the GELU pre-activation written.
bool uses_aux(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

// One GEMM's types (see the top): A and B's, C's (out), alpha/beta's, the accumulation's.
struct GemmTypes {
  cudaDataType type = CUDA_R_32F, out = CUDA_R_32F, scale = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
};

GemmTypes gemm_types(const GemmArgs& g) {
  const bool half = g.dtype == DType::bf16 || g.dtype == DType::f16;
  if (g.f32_out && (!half || g.bias != nullptr))
    throw Error(ErrorKind::dtype, std::string("gemm: an f32 result of ") + to_string(g.dtype) +
                                      " operands is for bf16/f16 operands without a bias");
  switch (g.dtype) {
    case DType::f32:
      return {CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, g.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F};
    case DType::f64: return {CUDA_R_64F, CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F};
    case DType::bf16: return {CUDA_R_16BF, g.f32_out ? CUDA_R_32F : CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::f16: return {CUDA_R_16F, g.f32_out ? CUDA_R_32F : CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F};
    case DType::i32: case DType::i64: case DType::boolean: break;
  }
  throw Error(ErrorKind::dtype, std::string("gemm: unsupported dtype ") + to_string(g.dtype));
}

// C's dtype (and the bias gradient's).
DType out_dtype(const GemmArgs& g) { return g.f32_out ? DType::f32 : g.dtype; }

// Everything of one call that the Lt and cuBLAS paths share.
struct Call {
  const GemmArgs& g;
  GemmTypes types;
  BlasOperand x, y;  // X over B's memory, Y over A's memory
  const void* alpha;
  const void* beta;
};

// cuBLASLt's stored [rows, cols] of an operand over our [R, C] matrix (see the top).
cublasLtMatrixLayout_t lt_layout(cudaDataType type, const BlasOperand& o, std::int64_t R, std::int64_t C,
                                 std::int64_t batch, std::int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  const bool n = o.op == CUBLAS_OP_N;
  BRRR_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(n ? C : R),
                                               static_cast<std::uint64_t>(n ? R : C), o.ld));
  if (batch > 1) {
    const int count = static_cast<int>(batch);
    BRRR_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    BRRR_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                       &batch_stride, sizeof(batch_stride)));
  }
  return layout;
}

// Times `count` heuristic candidates on the call's operands (see Tuning at the top) and
// returns the index of the fastest, with its time and heuristic #0's in ms; -1 when none ran.
// The bias-pointer attribute is left at the scratch vector: lt_matmul sets it per call.
int fastest_candidate(DeviceBlas& blas, const Call& call, LtPlan& plan, cublasLtEpilogue_t epilogue,
                      const void* vector, const cublasLtMatmulHeuristicResult_t* results, int count, void* workspace,
                      const StreamPtr& stream, float& best_ms, float& first_ms) {
  const GemmArgs& g = call.g;
  const auto raw = static_cast<cudaStream_t>(stream->handle);
  const std::size_t out_size = itemsize(out_dtype(g));
  Storage d = allocate_device(static_cast<std::size_t>(g.batch * g.m * g.n) * out_size, g.device, stream);
  Storage v;
  if (epilogue == CUBLASLT_EPILOGUE_BGRADA || epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    v = allocate_device(static_cast<std::size_t>(epilogue == CUBLASLT_EPILOGUE_BGRADA ? g.n : g.m) * out_size,
                        g.device, stream);
    vector = v.data();
  }
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
                                                     sizeof(vector)));
  Storage aux;  // the pre-activation a GELU_AUX epilogue writes
  if (uses_aux(epilogue)) {
    aux = allocate_device(static_cast<std::size_t>(g.m * g.n) * out_size, g.device, stream);
    void* p = aux.data();
    BRRR_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof(p)));
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  BRRR_CUDA_CHECK(cudaEventCreate(&start));
  struct EventGuard {
    cudaEvent_t& a;
    cudaEvent_t& b;
    ~EventGuard() {  // statuses ignored: nothing useful to do with them here
      if (a) cudaEventDestroy(a);
      if (b) cudaEventDestroy(b);
    }
  } events{start, stop};
  BRRR_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int reps = 5;
  int best = -1;
  best_ms = first_ms = -1;
  for (int i = 0; i < count; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS || results[i].workspaceSize > blas.workspace_bytes) continue;
    auto run = [&] {
      return cublasLtMatmul(blas.lt, plan.desc, call.alpha, g.b, plan.x, g.a, plan.y, call.beta, g.c, plan.c, d.data(),
                            plan.c, &results[i].algo, workspace, blas.workspace_bytes, raw);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // refused at launch: not a candidate
    BRRR_CUDA_CHECK(cudaEventRecord(start, raw));
    bool ok = true;
    for (int r = 0; r < reps && ok; ++r) ok = run() == CUBLAS_STATUS_SUCCESS;
    BRRR_CUDA_CHECK(cudaEventRecord(stop, raw));
    synchronize_event(stop, g.device, "gemm tuning (BRRR_GEMM_TUNE)");
    float ms = 0;
    BRRR_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= reps;
    if (!ok) continue;
    if (i == 0) first_ms = ms;
    if (best < 0 || ms < best_ms) best = i, best_ms = ms;
  }
  return best;
}

// The plan of `key`, made (descriptors + heuristic query, and with BRRR_GEMM_TUNE the timing
// of candidates) on first use. `vector` is the epilogue's bias or bias-gradient pointer
// (nullptr for none). Called with blas.mutex held.
LtPlan& lt_plan(DeviceBlas& blas, const Call& call, cublasLtEpilogue_t epilogue, const void* vector,
                Workspace& workspace, const StreamPtr& stream) {
  const GemmArgs& g = call.g;
  const std::int64_t size = static_cast<std::int64_t>(itemsize(g.dtype));
  const std::int64_t out_size = static_cast<std::int64_t>(itemsize(out_dtype(g)));
  const LtKey key = {static_cast<std::int64_t>(g.dtype),
                     static_cast<std::int64_t>(call.types.compute),
                     static_cast<std::int64_t>(call.x.op),
                     static_cast<std::int64_t>(call.y.op),
                     g.m,
                     g.n,
                     g.k,
                     call.x.ld,
                     call.y.ld,
                     g.batch,
                     g.b_batch_stride,
                     g.a_batch_stride,
                     static_cast<std::int64_t>(epilogue),
                     alignment(g.b, g.batch, g.b_batch_stride * size),
                     alignment(g.a, g.batch, g.a_batch_stride * size),
                     alignment(g.c, g.batch, g.m * g.n * out_size),
                     alignment(vector),
                     static_cast<std::int64_t>(call.types.out),
                     uses_aux(epilogue) ? alignment(g.aux) : 0};
  auto found = blas.plans.find(key);
  if (found != blas.plans.end()) return *found->second;
  if (blas.plans.size() >= max_plans) blas.plans.clear();  // descriptors are host-side: safe to drop
  auto plan = std::make_unique<LtPlan>();
  const GemmTypes& t = call.types;
  BRRR_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, t.compute, t.scale));
  BRRR_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &call.x.op, sizeof(call.x.op)));
  BRRR_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &call.y.op, sizeof(call.y.op)));
  BRRR_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
    const std::int32_t bias_type = t.out;  // the bias gradient's is C's (f32_out: f32)
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                     sizeof(bias_type)));
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
                                                     sizeof(vector)));
  }
  if (uses_aux(epilogue)) {
    const std::int64_t aux_ld = g.n;
    const std::int32_t aux_type = t.out;
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                     sizeof(aux_ld)));
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE,
                                                     &aux_type, sizeof(aux_type)));
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                                     sizeof(g.aux)));
  }
  plan->x = lt_layout(t.type, call.x, g.k, g.n, g.batch, g.b_batch_stride);
  plan->y = lt_layout(t.type, call.y, g.m, g.k, g.batch, g.a_batch_stride);
  plan->c = lt_layout(t.out, BlasOperand{CUBLAS_OP_N, g.n}, g.m, g.n, g.batch, g.m * g.n);

  cublasLtMatmulPreference_t preference = nullptr;
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  struct PreferenceGuard {
    cublasLtMatmulPreference_t p;
    ~PreferenceGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } preference_guard{preference};
  const std::uint64_t workspace_limit = blas.workspace_bytes;
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_limit, sizeof(workspace_limit)));
  const std::uint32_t align_x = static_cast<std::uint32_t>(key[13]), align_y = static_cast<std::uint32_t>(key[14]),
                      align_c = static_cast<std::uint32_t>(key[15]);
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                         &align_x, sizeof(align_x)));
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                         &align_y, sizeof(align_y)));
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                         &align_c, sizeof(align_c)));
  BRRR_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                         &align_c, sizeof(align_c)));
  const int candidates = tune_candidates();
  const bool tune = candidates > 0 && !capture_underway(g.device) && !capturing_on_this_thread() &&
                    sync_policy() != SyncPolicy::error;
  std::array<cublasLtMatmulHeuristicResult_t, 64> results{};
  int count = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(blas.lt, plan->desc, plan->x, plan->y, plan->c, plan->c, preference,
                                     tune ? candidates : 1, results.data(), &count);
  int chosen = 0;
  float best_ms = -1, first_ms = -1;
  if (status == CUBLAS_STATUS_SUCCESS && count > 1 && tune) {
    const int fastest = fastest_candidate(blas, call, *plan, epilogue, vector, results.data(), count,
                                          workspace.get(blas.workspace_bytes), stream, best_ms, first_ms);
    if (fastest > 0) chosen = fastest;
  }
  if (status == CUBLAS_STATUS_SUCCESS && count > 0 && results[chosen].state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = results[chosen].algo;
    plan->workspace = results[chosen].workspaceSize;
    plan->usable = true;
  } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED &&
             status != CUBLAS_STATUS_INVALID_VALUE && status != CUBLAS_STATUS_ARCH_MISMATCH) {
    BRRR_CUBLAS_CHECK(status);  // a real error, not "no kernel for this case"
  }
  if (log_plans()) {
    std::uint32_t splits = 1, scheme = 0;
    if (plan->usable) {
      BRRR_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits,
                                                             sizeof(splits), nullptr));
      BRRR_CUBLAS_CHECK(cublasLtMatmulAlgoConfigGetAttribute(&plan->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                             &scheme, sizeof(scheme), nullptr));
    }
    std::fprintf(stderr,
                 "brrr gemm plan: %s%s compute %d, C [%lld, %lld], k %lld, batch %lld, A %s ld %lld, B %s ld %lld, "
                 "epilogue %d, alignment A/B/C/vector %lld/%lld/%lld/%lld -> %s (status %d, %d results; "
                 "candidate %d, %.4f ms against the first's %.4f; split-K %u, reduction scheme %u)\n",
                 to_string(g.dtype), g.f32_out ? " (f32 C)" : "", static_cast<int>(t.compute), static_cast<long long>(g.m),
                 static_cast<long long>(g.n), static_cast<long long>(g.k), static_cast<long long>(g.batch),
                 call.y.op == CUBLAS_OP_N ? "N" : "T", static_cast<long long>(call.y.ld),
                 call.x.op == CUBLAS_OP_N ? "N" : "T", static_cast<long long>(call.x.ld), static_cast<int>(epilogue),
                 static_cast<long long>(key[14]), static_cast<long long>(key[13]), static_cast<long long>(key[15]),
                 static_cast<long long>(key[16]), plan->usable ? "cuBLASLt" : "no Lt kernel", static_cast<int>(status),
                 count, chosen, static_cast<double>(best_ms), static_cast<double>(first_ms), splits, scheme);
  }
  return *blas.plans.emplace(key, std::move(plan)).first->second;
}

// C (and the epilogue) by cuBLASLt; false when Lt has no kernel for the case (nothing enqueued).
// Called with blas.mutex held.
bool lt_matmul(DeviceBlas& blas, const Call& call, cublasLtEpilogue_t epilogue, const void* vector,
               Workspace& workspace, const StreamPtr& stream_ptr) {
  LtPlan& plan = lt_plan(blas, call, epilogue, vector, workspace, stream_ptr);
  const auto stream = static_cast<cudaStream_t>(stream_ptr->handle);
  if (!plan.usable) return false;
  const GemmArgs& g = call.g;
  if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector,
                                                     sizeof(vector)));
  if (uses_aux(epilogue))
    BRRR_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux,
                                                     sizeof(g.aux)));
  void* ws = workspace.get(plan.workspace);  // (before size(), which it may change)
  const cublasStatus_t status = cublasLtMatmul(blas.lt, plan.desc, call.alpha, g.b, plan.x, g.a, plan.y, call.beta,
                                               g.c, plan.c, g.c, plan.c, &plan.algo, ws, workspace.size(), stream);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) {  // refused before launching: cuBLAS's path instead
    plan.usable = false;
    return false;
  }
  BRRR_CUBLAS_CHECK(status);
  return true;
}

// C by cublasGemmStridedBatchedEx (k == 0 included: C = beta C). Called with blas.mutex held.
void blas_gemm(DeviceBlas& blas, const Call& call, Workspace& workspace, cudaStream_t stream) {
  const GemmArgs& g = call.g;
  BRRR_CUBLAS_CHECK(cublasSetStream(blas.handle, stream));
  void* ws = workspace.get(blas.workspace_bytes);
  BRRR_CUBLAS_CHECK(cublasSetWorkspace(blas.handle, ws, workspace.size()));
  const std::int64_t ldc = g.n;
  const long long stride_x = g.b_batch_stride, stride_y = g.a_batch_stride, stride_c = g.m * g.n;
  const cudaDataType type = call.types.type;
  const bool small = fits_int(g.n) && fits_int(g.m) && fits_int(g.k) && fits_int(call.x.ld) &&
                     fits_int(call.y.ld) && fits_int(ldc) && fits_int(g.batch);
  if (small) {
    BRRR_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas.handle, call.x.op, call.y.op, static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k),
        call.alpha, g.b, type, static_cast<int>(call.x.ld), stride_x, g.a, type, static_cast<int>(call.y.ld),
        stride_y, call.beta, g.c, call.types.out, static_cast<int>(ldc), stride_c, static_cast<int>(g.batch),
        call.types.compute, CUBLAS_GEMM_DEFAULT));
  } else {  // the 64-bit API for sizes past INT_MAX
    BRRR_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(blas.handle, call.x.op, call.y.op, g.n, g.m, g.k, call.alpha,
                                                    g.b, type, call.x.ld, stride_x, g.a, type, call.y.ld, stride_y,
                                                    call.beta, g.c, call.types.out, ldc, stride_c, g.batch,
                                                    call.types.compute, CUBLAS_GEMM_DEFAULT));
  }
}

// A strided operand over device memory for the separate epilogue kernels.
Operand operand(void* data, DType dtype, int device, std::initializer_list<std::int64_t> sizes,
                std::initializer_list<std::int64_t> strides) {
  Operand o;
  o.data = data;
  o.dtype = dtype;
  o.device = device;
  o.ndim = static_cast<int>(sizes.size());
  o.numel = 1;
  int d = 0;
  for (std::int64_t s : sizes) o.sizes[d++] = s, o.numel *= s;
  d = 0;
  for (std::int64_t s : strides) o.strides[d++] = s;
  o.op = "gemm";
  return o;
}

// BRRR_GEMM_KMAJOR=0 turns kmajor_copies off (on otherwise). Read once.
bool kmajor_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRRR_GEMM_KMAJOR");
    return v == nullptr || v[0] == '\0' || v[0] != '0';
  }();
  return on;
}

// BRRR_GEMM_LT=0: products without an epilogue go to cublasGemmEx, not cuBLASLt (a
// diagnostic: the two pick kernels by different heuristics). Read once.
bool lt_default_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("BRRR_GEMM_LT");
    return v == nullptr || v[0] == '\0' || v[0] != '0';
  }();
  return on;
}

// TF32 on Hopper: wgmma reads 32-bit operands from shared memory K-major only (PTX ISA,
// "wgmma.mma_async": the transpose flags are for 16-bit types), so cuBLASLt runs a product
// with a K-strided operand on older kernels. B of x W with W [k, n] row-major (linear's input
// gradient, dY W) is one. A small such operand, at most an eighth of the other's elements,
// is copied K-major first (a weight: a few microseconds; the backend's copy, whose transpose
// path moves 32 x 32 tiles through shared memory); a large one is left as it
// is, which keeps the weight gradients' dY^T X as cuBLAS runs it. `g` then points at the
// copies, which live in `b_copy`, `a_copy` (stream-ordered, so freed safely after the product
// is enqueued). Called with blas.mutex held.
void kmajor_copies(CudaBackend& backend, DeviceBlas& blas, GemmArgs& g, const StreamPtr& stream, Storage& b_copy,
                   Storage& a_copy) {
  if (g.dtype != DType::f32 || !g.allow_tf32 || g.f32_out || g.batch != 1 || blas.major < 9 || g.k <= 1 ||
      !kmajor_enabled())
    return;
  const std::int64_t a_numel = g.m * g.k, b_numel = g.k * g.n;
  if (g.n > 1 && g.b_row_stride != 1 && 8 * b_numel <= a_numel) {  // B [k, n] into column-major
    b_copy = allocate_device(static_cast<std::size_t>(b_numel) * sizeof(float), g.device, stream);
    auto* dst = static_cast<float*>(b_copy.data());
    const auto* src = static_cast<const float*>(g.b);
    backend.copy(operand(dst, DType::f32, g.device, {g.k, g.n}, {1, g.k}),
                 operand(const_cast<float*>(src), DType::f32, g.device, {g.k, g.n}, {g.b_row_stride, g.b_col_stride}));
    g.b = dst, g.b_row_stride = 1, g.b_col_stride = g.k;
  }
  if (g.m > 1 && g.a_col_stride != 1 && 8 * a_numel <= b_numel) {  // A [m, k] into row-major
    a_copy = allocate_device(static_cast<std::size_t>(a_numel) * sizeof(float), g.device, stream);
    auto* dst = static_cast<float*>(a_copy.data());
    const auto* src = static_cast<const float*>(g.a);
    backend.copy(operand(dst, DType::f32, g.device, {g.m, g.k}, {g.k, 1}),
                 operand(const_cast<float*>(src), DType::f32, g.device, {g.m, g.k}, {g.a_row_stride, g.a_col_stride}));
    g.a = dst, g.a_row_stride = g.k, g.a_col_stride = 1;
  }
}

}  // namespace

void blas_prepare(int device) {
  DeviceGuard guard(device);
  DeviceBlas& blas = device_blas(device);
  std::lock_guard lock(blas.mutex);
  ensure_handle(blas, device);
}

void CudaBackend::gemm(const GemmArgs& g) {
  check_gemm_activation(g);
  // Lt's GELU epilogues only where they pay (see the top): GELU_AUX for bf16.
  const bool lt_activation = g.activation == GemmActivation::gelu_tanh && g.dtype == DType::bf16 && g.batch > 0 &&
                             g.m > 0 && g.n > 0 && g.k > 0;
  if (g.activation != GemmActivation::none && !lt_activation) return gemm_activation_unfused(*this, g);
  if (g.bias != nullptr && g.bias_grad != nullptr)
    throw Error(ErrorKind::value, "gemm: a bias and a bias gradient cannot be asked of one product");
  if ((g.bias != nullptr || g.bias_grad != nullptr) && g.batch != 1)
    throw Error(ErrorKind::value, "gemm: the bias epilogues need batch 1, got " + std::to_string(g.batch));
  if (g.bias_grad != nullptr && g.alpha != 1)
    throw Error(ErrorKind::value, "gemm: the bias-gradient epilogue needs alpha 1, got " + std::to_string(g.alpha));
  const bool product = g.batch > 0 && g.m > 0 && g.n > 0;
  if (!product && g.bias_grad == nullptr) return;
  const GemmTypes types = gemm_types(g);
  float alpha32 = static_cast<float>(g.alpha), beta32 = static_cast<float>(g.beta);
  double alpha64 = g.alpha, beta64 = g.beta;
  const bool f64 = g.dtype == DType::f64;

  DeviceGuard device_guard(g.device);
  StreamPtr stream = current_stream(g.device);
  auto raw_stream = static_cast<cudaStream_t>(stream->handle);

  bool epilogue_done = false, unfused = false;
  if (product) {
    if (g.k == 0 && g.beta == 0) {  // an empty sum: C = 0 (all-zero bits in every float type)
      BRRR_CUDA_CHECK(
          cudaMemsetAsync(g.c, 0, static_cast<std::size_t>(g.batch * g.m * g.n) * itemsize(out_dtype(g)), raw_stream));
    } else {
      DeviceBlas& blas = device_blas(g.device);
      std::lock_guard lock(blas.mutex);
      ensure_handle(blas, g.device);
      GemmArgs kg = g;
      Storage b_copy, a_copy;
      kmajor_copies(*this, blas, kg, stream, b_copy, a_copy);
      // X over B's memory ([k, n]), Y over A's memory ([m, k]): C^T = op(X) op(Y).
      const Call call{kg,
                      types,
                      blas_operand("b", kg.k, kg.n, kg.b_row_stride, kg.b_col_stride),
                      blas_operand("a", kg.m, kg.k, kg.a_row_stride, kg.a_col_stride),
                      f64 ? static_cast<const void*>(&alpha64) : &alpha32,
                      f64 ? static_cast<const void*>(&beta64) : &beta32};
      Workspace workspace(blas, g.device, stream);
      const bool lt_sizes = g.k > 0 && fits_int(g.batch) && fits_int(g.m) && fits_int(g.n) && fits_int(g.k);
      cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
      const void* vector = nullptr;
      if (lt_activation) {
        epilogue = g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        vector = g.bias;
      } else if (g.bias != nullptr) {
        epilogue = CUBLASLT_EPILOGUE_BIAS;
        vector = g.bias;
      } else if (g.bias_grad != nullptr) {
        epilogue = g.bias_grad_of == GemmOperand::b ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB;
        vector = g.bias_grad;
      }
      if (lt_sizes && epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        epilogue_done = lt_matmul(blas, call, epilogue, vector, workspace, stream);
      unfused = !epilogue_done && lt_activation;  // (after the lock: it calls gemm again)
      if (!epilogue_done && !unfused &&
          !(lt_sizes && lt_default_enabled() &&
            lt_matmul(blas, call, CUBLASLT_EPILOGUE_DEFAULT, nullptr, workspace, stream)))
        blas_gemm(blas, call, workspace, raw_stream);
    }
  }
  if (unfused) return gemm_activation_unfused(*this, g);
  if (epilogue_done) return;

  // The epilogue as a kernel of its own (Lt had none for the case, or there was no product).
  if (g.bias != nullptr) {  // C += bias, in place: [m, n] plus a row broadcast
    const Operand out = operand(g.c, g.dtype, g.device, {g.m, g.n}, {g.n, 1});
    const Operand row = operand(const_cast<void*>(g.bias), g.dtype, g.device, {g.m, g.n}, {0, 1});
    binary(BinaryOp::add, out, out, row);
  }
  if (g.bias_grad != nullptr) {
    const bool of_b = g.bias_grad_of == GemmOperand::b;
    const std::int64_t len = of_b ? g.n : g.m;
    if (len <= 0) return;
    const Operand dst = operand(g.bias_grad, out_dtype(g), g.device, {len}, {1});
    if (g.k == 0) return fill(dst, 0.0);
    // reduce accumulates bf16/f16 in f32 and rounds once into an output of their dtype.
    if (of_b) {  // B [k, n] summed over dim 0
      const Operand in = operand(const_cast<void*>(g.b), g.dtype, g.device, {g.k, g.n}, {g.b_row_stride, g.b_col_stride});
      reduce(ReduceOp::sum, operand(g.bias_grad, out_dtype(g), g.device, {1, g.n}, {g.n, 1}), in, 1u, nullptr);
    } else {  // A [m, k] summed over dim 1
      const Operand in = operand(const_cast<void*>(g.a), g.dtype, g.device, {g.m, g.k}, {g.a_row_stride, g.a_col_stride});
      reduce(ReduceOp::sum, operand(g.bias_grad, out_dtype(g), g.device, {g.m, 1}, {1, 1}), in, 2u, nullptr);
    }
  }
}

}  // namespace brrr::backend
