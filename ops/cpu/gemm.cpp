// CpuBackend::gemm: C[b] = alpha * A[b] @ B[b] + beta * C[b]: f32 (and the f32 product of
// bf16/f16) with oneDNN's dnnl_sgemm, f64 with OpenBLAS's cblas_dgemm (oneDNN has no f64 GEMM).
// Both pick their kernels from the CPU at run time (oneDNN JIT-compiles them for the ISA it
// finds, AVX2 / AVX-512 / AMX; Debian's OpenBLAS is built with DYNAMIC_ARCH), so one binary
// runs the machine's best kernel (docs/architecture.md has the comparisons that chose them).
// Neither threads itself: brrr's pool (ops/cpu/parallel.cpp) splits C into row (or column)
// blocks, one single-threaded call each, so GEMM shares the one intra-op pool.
// A and B are passed in place as row-major or transposed operands with their leading
// dimension, whichever their strides are; an operand that is neither (broadcast rows, say)
// is gathered into a dense matrix first. f32 and f64 multiply in their own type; bf16 and
// f16 are widened to f32, multiplied there and rounded once when stored (as cuBLAS does
// with CUBLAS_COMPUTE_32F), or stored in f32 unrounded (f32_out). Batch strides may be 0 (a
// broadcast operand).
// Epilogues: a bias is written into C first and the product added to it (beta = 1), or, when
// the caller's beta keeps C, added after it; bf16/f16 add it before their one rounding. A bias
// gradient is a sum over k of A or B in double, in a fixed order, after the product.
module;
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>  // dnnl_status2str
#include <strings.h>  // strcasecmp

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>
#include "backend/contract.hpp"
#include "ops/cpu/isa/kernels.hpp"  // cpu::supported

// OpenBLAS's own switch of kernel table, exported by its DYNAMIC_ARCH builds only (weak: a
// build against another OpenBLAS links, and the core fix below does nothing).
extern "C" {
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
// Stops OpenBLAS's server threads (its pthread builds; its own fork handler calls it too).
// Weak: a build without it links and keeps them.
int blas_thread_shutdown_(void) __attribute__((weak));
// The OpenMP runtime Debian's oneDNN is built on (libgomp, linked by CMakeLists.txt); declared
// here rather than through <omp.h>, which clang would pair with its own libomp.
void omp_set_num_threads(int);
int omp_get_max_threads(void);
}
module brrr.backend;
import brrr.tensor;

namespace brrr::backend {

namespace {

// Below this many multiply-adds per block, splitting costs more than it saves.
constexpr std::int64_t min_block_macs = std::int64_t{1} << 20;

// OpenBLAS 0.3.21 (Debian 12's) picks its kernels from the CPU's family and model, and a CPU
// newer than it gets its fallback, the Prescott (SSE3) kernels: on the build machine, an
// Intel Xeon of model 207 (Emerald Rapids) with AVX-512, GEMM ran 2-20x slower than with
// its SkylakeX kernels (docs/benchmarks.md, 2026-12-02). When it fell back so, and nobody
// chose a core (OPENBLAS_CORETYPE), its selection runs again with the core our own feature
// check says the CPU runs: SkylakeX (AVX-512 F/DQ/BW/VL) or Haswell (AVX2 + FMA). Done by a
// static initialiser, before main and so before any thread of ours or any BLAS call.
void choose_openblas_core() {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || std::getenv("OPENBLAS_CORETYPE")) return;
  const char* core = openblas_get_corename();
  if (core == nullptr || strcasecmp(core, "Prescott") != 0) return;
  const char* want = cpu::supported(cpu::Capability::avx512) ? "SkylakeX"
                     : cpu::supported(cpu::Capability::avx2) ? "Haswell"
                                                             : nullptr;
  if (want == nullptr) return;
  setenv("OPENBLAS_CORETYPE", want, 0);
  gotoblas_dynamic_quit();  // forgets the table, so that init chooses again (from the variable)
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}
const bool openblas_core_chosen = (choose_openblas_core(), true);

// brrr calls OpenBLAS on one thread at a time (its pool splits the product), so OpenBLAS's own
// threads are never given work. Its pthread build starts them when it is loaded (cores - 1 of
// them), and each spins in sched_yield for 2^28 TSC ticks (~0.1 s) before it sleeps: on the
// 2-vCPU build machine that spinner took the second core from the pool's worker for a
// process's first ~0.1 s, so a 2-thread GEMM timed then ran at one thread's speed or slower
// (0.8-0.9 ms against 0.45, from process to process; docs/benchmarks.md, issue 18). They are
// stopped here, after the count is set to 1: openblas_set_num_threads starts them again when
// they are stopped, and so would a threaded call, neither of which brrr makes; that restart
// is OpenBLAS's own after a fork, so a program that threads OpenBLAS itself still can.
void use_one_openblas_thread() {
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_) blas_thread_shutdown_();
}
const bool openblas_one_thread = (use_one_openblas_thread(), true);

// A [rows, cols] operand as cblas and dnnl_sgemm take it: row-major (NoTrans) or transposed, leading dim.
template <class T> struct MatrixView {
  const T* data;
  CBLAS_TRANSPOSE trans;
  std::int64_t ld;
  const T* row(std::int64_t r) const { return trans == CblasNoTrans ? data + r * ld : data + r; }
  const T* col(std::int64_t c) const { return trans == CblasNoTrans ? data + c : data + c * ld; }
};

template <class T>
MatrixView<T> view(const T* p, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs,
                   std::vector<T>& dense) {
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) return {p, CblasNoTrans, rows == 1 ? std::max<std::int64_t>(cols, 1) : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) return {p, CblasTrans, cols == 1 ? std::max<std::int64_t>(rows, 1) : cs};
  dense.resize(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) dense[r * cols + c] = p[r * rs + c * cs];
  return {dense.data(), CblasNoTrans, std::max<std::int64_t>(cols, 1)};
}

// Debian's oneDNN threads with OpenMP, whose thread count belongs to the calling thread: for
// each call the thread's count is set to 1, so oneDNN runs on that thread alone and never
// creates an OpenMP team (the pool is the only source of threads), then given back, so a
// program's own OpenMP regions (g++ -fopenmp shares this libgomp) keep their thread count.
class OneOmpThread {
 public:
  OneOmpThread() : previous_(omp_get_max_threads()) {
    if (previous_ != 1) omp_set_num_threads(1);
  }
  ~OneOmpThread() {
    if (previous_ != 1) omp_set_num_threads(previous_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int previous_;
};

// Error(out_of_memory) or Error(value) naming the oneDNN call `what` (and `detail`) unless st is success.
void check_dnnl(dnnl_status_t st, const char* what, const std::string& detail = "") {
  if (st != dnnl_success)
    throw Error(st == dnnl_out_of_memory ? ErrorKind::out_of_memory : ErrorKind::value,
                std::string("gemm: oneDNN's ") + what + " failed (" + dnnl_status2str(st) + ")" + detail);
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const OneOmpThread one_thread;
  // Row-major, as cblas with CblasRowMajor; beta == 0 writes C without reading it (NaN in C
  // does not survive), as BLAS does.
  const dnnl_status_t st = dnnl_sgemm(ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', m, n, k, alpha,
                                      a, lda, b, ldb, beta, c, ldc);
  if (st != dnnl_success)
    check_dnnl(st, "dnnl_sgemm", " for m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
                                     std::to_string(k) + ", lda " + std::to_string(lda) + ", ldb " +
                                     std::to_string(ldb) + ", ldc " + std::to_string(ldc));
}

// Small, narrow f32 products (n <= 16 columns of C, below the split threshold) run oneDNN's
// matmul primitive (its brgemm kernels) rather than dnnl_sgemm, whose kernels do poorly with
// so few columns: at the MLP's 128x256x10 it took 9.5 µs against 13.2 (NN and NT alike), and
// the whole 2-thread GEMM row ~20 % less. Wider small products gained 0-8 % in isolation
// (one lost 10 %) and the CNN step with them all on the primitive ran ~5 % slower, so they
// stay on dnnl_sgemm (docs/benchmarks.md, issue 18). A primitive is compiled per shape, so
// each thread keeps its own, with the memory objects whose pointers are set per call.
// Products below the split threshold are never split, so which kernel computes one does not
// depend on the thread count.
struct SmallKey {
  std::int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb, accumulate;
  bool operator==(const SmallKey&) const = default;
};
struct SmallKeyHash {
  std::size_t operator()(const SmallKey& key) const {
    std::size_t h = 0;
    for (std::int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc,
                           std::int64_t{key.ta} | std::int64_t{key.tb} << 1 | std::int64_t{key.accumulate} << 2})
      h = h * 1000003u ^ std::hash<std::int64_t>{}(v);
    return h;
  }
};
// One compiled product; prim stays null when oneDNN has no primitive for it (dnnl_sgemm runs).
struct SmallPlan {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  SmallPlan() = default;
  SmallPlan(const SmallPlan&) = delete;
  SmallPlan& operator=(const SmallPlan&) = delete;
  ~SmallPlan() {
    for (dnnl_memory_t m : {a, b, c})
      if (m) dnnl_memory_destroy(m);
    if (prim) dnnl_primitive_destroy(prim);
  }
};
struct SmallMatmuls {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  std::unordered_map<SmallKey, std::unique_ptr<SmallPlan>, SmallKeyHash> plans;
  ~SmallMatmuls() {
    plans.clear();
    if (stream) dnnl_stream_destroy(stream);
    if (engine) dnnl_engine_destroy(engine);
  }
};
thread_local SmallMatmuls small_matmuls;

std::unique_ptr<SmallPlan> make_small_plan(dnnl_engine_t engine, const SmallKey& key) {
  auto plan = std::make_unique<SmallPlan>();
  dnnl_memory_desc_t a_md, b_md, c_md;
  const dnnl_dims_t a_dims = {key.m, key.k}, b_dims = {key.k, key.n}, c_dims = {key.m, key.n};
  const dnnl_dims_t a_strides = {key.ta ? 1 : key.lda, key.ta ? key.lda : 1};
  const dnnl_dims_t b_strides = {key.tb ? 1 : key.ldb, key.tb ? key.ldb : 1};
  const dnnl_dims_t c_strides = {key.ldc, 1};
  check_dnnl(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_f32, a_strides), "memory_desc_init_by_strides");
  check_dnnl(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_f32, b_strides), "memory_desc_init_by_strides");
  check_dnnl(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides), "memory_desc_init_by_strides");
  dnnl_matmul_desc_t desc;
  check_dnnl(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  check_dnnl(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
  std::unique_ptr<std::remove_pointer_t<dnnl_primitive_attr_t>, dnnl_status_t (*)(dnnl_primitive_attr_t)> attr_owner(
      attr, dnnl_primitive_attr_destroy);
  if (key.accumulate) {  // C += A B: a sum post-op
    dnnl_post_ops_t ops = nullptr;
    check_dnnl(dnnl_post_ops_create(&ops), "post_ops_create");
    const dnnl_status_t st = dnnl_post_ops_append_sum(ops, 1.0f);
    const dnnl_status_t st2 = st == dnnl_success ? dnnl_primitive_attr_set_post_ops(attr, ops) : st;
    dnnl_post_ops_destroy(ops);
    check_dnnl(st2, "post_ops_append_sum");
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, engine, nullptr);
  if (st == dnnl_unimplemented) return plan;  // no primitive for this layout: dnnl_sgemm
  check_dnnl(st, "primitive_desc_create");
  const dnnl_status_t created = dnnl_primitive_create(&plan->prim, pd);
  dnnl_primitive_desc_destroy(pd);
  check_dnnl(created, "primitive_create");
  check_dnnl(dnnl_memory_create(&plan->a, &a_md, engine, DNNL_MEMORY_NONE), "memory_create");
  check_dnnl(dnnl_memory_create(&plan->b, &b_md, engine, DNNL_MEMORY_NONE), "memory_create");
  check_dnnl(dnnl_memory_create(&plan->c, &c_md, engine, DNNL_MEMORY_NONE), "memory_create");
  return plan;
}

// C = A B (beta 0) or C += A B (beta 1) through a thread's cached primitive; false when that
// does not apply (another alpha or beta, no primitive), and the caller runs dnnl_sgemm.
bool small_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                std::int64_t ldc) {
  if (alpha != 1 || (beta != 0 && beta != 1)) return false;
  const OneOmpThread one_thread;  // also while compiling: oneDNN sizes its blocking for the threads it sees
  SmallMatmuls& s = small_matmuls;
  if (s.engine == nullptr) {
    check_dnnl(dnnl_engine_create(&s.engine, dnnl_cpu, 0), "engine_create");
    check_dnnl(dnnl_stream_create(&s.stream, s.engine, dnnl_stream_default_flags), "stream_create");
  }
  const SmallKey key{m, n, k, lda, ldb, ldc, ta != CblasNoTrans, tb != CblasNoTrans, beta != 0};
  auto it = s.plans.find(key);
  if (it == s.plans.end()) {
    if (s.plans.size() >= 256) s.plans.clear();  // many shapes (varying sizes): start over
    it = s.plans.emplace(key, make_small_plan(s.engine, key)).first;
  }
  const SmallPlan& plan = *it->second;
  if (plan.prim == nullptr) return false;
  check_dnnl(dnnl_memory_set_data_handle(plan.a, const_cast<float*>(a)), "memory_set_data_handle");
  check_dnnl(dnnl_memory_set_data_handle(plan.b, const_cast<float*>(b)), "memory_set_data_handle");
  check_dnnl(dnnl_memory_set_data_handle(plan.c, c), "memory_set_data_handle");
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, plan.a}, {DNNL_ARG_WEIGHTS, plan.b}, {DNNL_ARG_DST, plan.c}};
  check_dnnl(dnnl_primitive_execute(plan.prim, s.stream, 3, args), "primitive_execute");
  check_dnnl(dnnl_stream_wait(s.stream), "stream_wait");
  return true;
}
bool small_gemm(CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, std::int64_t, std::int64_t, std::int64_t, double, const double*,
                std::int64_t, const double*, std::int64_t, double, double*, std::int64_t) {
  return false;  // f64: OpenBLAS
}

void blas_gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
               const double* a, std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// One product C = alpha A B + beta C (C [m, n] contiguous), split over the pool.
template <class T>
void product(const MatrixView<T>& A, const MatrixView<T>& B, T* C, std::int64_t m, std::int64_t n, std::int64_t k,
             T alpha, T beta, bool split) {
  if (k == 0) {  // a BLAS would leave C alone for beta == 0; the contract makes it beta * C
    for (std::int64_t i = 0; i < m * n; ++i) C[i] = beta == 0 ? T(0) : beta * C[i];
    return;
  }
  std::int64_t macs = std::max<std::int64_t>(1, n * k);
  if (!split || m * n * k < 2 * min_block_macs) {
    if (m * n * k >= 2 * min_block_macs || n > 16 ||  // small_gemm's domain (above it)
        !small_gemm(A.trans, B.trans, m, n, k, alpha, A.data, A.ld, B.data, B.ld, beta, C, n))
      blas_gemm(A.trans, B.trans, m, n, k, alpha, A.data, A.ld, B.data, B.ld, beta, C, n);
  } else if (m >= n) {  // blocks of rows of C
    cpu::parallel_for(m, std::max<std::int64_t>(1, min_block_macs / macs), [&](std::int64_t r0, std::int64_t r1) {
      blas_gemm(A.trans, B.trans, r1 - r0, n, k, alpha, A.row(r0), A.ld, B.data, B.ld, beta, C + r0 * n, n);
    });
  } else {  // blocks of columns of C
    cpu::parallel_for(n, std::max<std::int64_t>(1, min_block_macs / std::max<std::int64_t>(1, m * k)),
                      [&](std::int64_t c0, std::int64_t c1) {
                        blas_gemm(A.trans, B.trans, m, c1 - c0, k, alpha, A.data, A.ld, B.col(c0), B.ld, beta, C + c0, n);
                      });
  }
}

// f32 / f64: dnnl_sgemm / cblas_dgemm straight on the operands.
template <class T> void gemm_native(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  const T* bias = static_cast<const T*>(g.bias);
  T* c = static_cast<T*>(g.c);
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  auto one = [&](std::int64_t i, bool split) {
    std::vector<T> da, db;
    auto A = view(a + i * g.a_batch_stride, g.m, g.k, g.a_row_stride, g.a_col_stride, da);
    auto B = view(b + i * g.b_batch_stride, g.k, g.n, g.b_row_stride, g.b_col_stride, db);
    T* ci = c + i * g.m * g.n;
    if (bias != nullptr && g.beta == 0) {  // C = bias broadcast, then C += alpha A B
      for (std::int64_t r = 0; r < g.m; ++r) std::copy(bias, bias + g.n, ci + r * g.n);
      product(A, B, ci, g.m, g.n, g.k, alpha, T(1), split);
      return;
    }
    product(A, B, ci, g.m, g.n, g.k, alpha, beta, split);
    if (bias != nullptr)
      for (std::int64_t r = 0; r < g.m; ++r)
        for (std::int64_t j = 0; j < g.n; ++j) ci[r * g.n + j] += bias[j];
  };
  // Many products: one per chunk of the batch; few: split each one.
  if (g.batch >= 2 * get_num_threads()) {
    cpu::parallel_for(g.batch, std::max<std::int64_t>(1, min_block_macs / std::max<std::int64_t>(1, g.m * g.n * g.k)),
                      [&](std::int64_t b0, std::int64_t b1) {
                        for (std::int64_t i = b0; i < b1; ++i) one(i, false);
                      });
  } else {
    for (std::int64_t i = 0; i < g.batch; ++i) one(i, true);
  }
}

// bf16 / f16: widen to f32, multiply, round once.
template <class T>
std::vector<float> widen(const T* p, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs) {
  std::vector<float> m(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t col = 0; col < cols; ++col) m[r * cols + col] = static_cast<float>(p[r * rs + col * cs]);
  return m;
}

// O: T, or float for f32_out (stored unrounded).
template <class T, class O = T> void gemm_widened(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  const T* bias = static_cast<const T*>(g.bias);
  O* c = static_cast<O*>(g.c);
  const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
  std::vector<float> C(static_cast<std::size_t>(g.m * g.n));
  for (std::int64_t i = 0; i < g.batch; ++i) {
    auto A = widen(a + i * g.a_batch_stride, g.m, g.k, g.a_row_stride, g.a_col_stride);
    auto B = widen(b + i * g.b_batch_stride, g.k, g.n, g.b_row_stride, g.b_col_stride);
    product(MatrixView<float>{A.data(), CblasNoTrans, std::max<std::int64_t>(g.k, 1)},
            MatrixView<float>{B.data(), CblasNoTrans, std::max<std::int64_t>(g.n, 1)}, C.data(), g.m, g.n, g.k, 1.0f,
            0.0f, true);
    O* ci = c + i * g.m * g.n;
    for (std::int64_t j = 0; j < g.m * g.n; ++j) {
      float v = alpha * C[j];
      if (g.beta != 0) v += beta * static_cast<float>(ci[j]);
      if (bias != nullptr) v += static_cast<float>(bias[j % g.n]);
      ci[j] = O(v);
    }
  }
}

// An element as double and back (bf16/f16 convert through float only).
template <class T> double to_double(T v) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<double>(v);
  else return static_cast<double>(static_cast<float>(v));
}
template <class T> T from_double(double v) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(v);
  else return T(static_cast<float>(v));
}

// out[i] = sum over q < k of p[i * step + q * k_step], i < len, in double, rounded once; each
// sum in the order q = 0, 1, ... whatever the split over the pool.
template <class T, class O>
void sums_over_k(const T* p, std::int64_t len, std::int64_t k, std::int64_t step, std::int64_t k_step, O* out) {
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(1, k));
  cpu::parallel_for(len, grain, [&](std::int64_t i0, std::int64_t i1) {
    if (step <= k_step) {  // walk k outside, the sums' dim (the closer one) inside
      std::vector<double> acc(static_cast<std::size_t>(i1 - i0), 0.0);
      for (std::int64_t q = 0; q < k; ++q) {
        const T* row = p + q * k_step;
        for (std::int64_t i = i0; i < i1; ++i) acc[static_cast<std::size_t>(i - i0)] += to_double(row[i * step]);
      }
      for (std::int64_t i = i0; i < i1; ++i) out[i] = from_double<O>(acc[static_cast<std::size_t>(i - i0)]);
    } else {
      for (std::int64_t i = i0; i < i1; ++i) {
        double acc = 0;
        for (std::int64_t q = 0; q < k; ++q) acc += to_double(p[i * step + q * k_step]);
        out[i] = from_double<O>(acc);
      }
    }
  });
}

// The bias-gradient epilogue (batch 1): the sum over k of A ([m]) or B ([n]), into O.
template <class T, class O = T> void write_bias_grad(const GemmArgs& g) {
  O* out = static_cast<O*>(g.bias_grad);
  switch (g.bias_grad_of) {
    case GemmOperand::a:
      return sums_over_k(static_cast<const T*>(g.a), g.m, g.k, g.a_row_stride, g.a_col_stride, out);
    case GemmOperand::b:
      return sums_over_k(static_cast<const T*>(g.b), g.n, g.k, g.b_col_stride, g.b_row_stride, out);
  }
}

}  // namespace

void check_gemm_activation(const GemmArgs& g) {
  if (g.activation == GemmActivation::none) return;
  if ((g.aux == nullptr && g.m > 0 && g.n > 0) || g.batch != 1 || g.bias_grad != nullptr || g.f32_out ||
      g.alpha != 1 || g.beta != 0)
    throw Error(ErrorKind::value,
                "gemm: the activation epilogue needs aux, batch 1, alpha 1 and beta 0, and no bias gradient or f32 "
                "result");
  if (g.activation == GemmActivation::gelu_tanh_backward && g.bias != nullptr)
    throw Error(ErrorKind::value, "gemm: the gelu backward epilogue takes no bias");
}

void gemm_activation_unfused(Backend& be, const GemmArgs& g) {
  check_gemm_activation(g);
  GemmArgs product = g;
  product.activation = GemmActivation::none;
  product.aux = nullptr;
  if (g.activation == GemmActivation::gelu_tanh) product.c = g.aux;  // the pre-activation, bias included
  be.gemm(product);
  if (g.activation == GemmActivation::none || g.m <= 0 || g.n <= 0) return;
  Operand c, aux;
  for (Operand* o : {&c, &aux}) {
    o->dtype = g.dtype;
    o->device = g.device;
    o->ndim = 2;
    o->numel = g.m * g.n;
    o->sizes[0] = g.m;
    o->sizes[1] = g.n;
    o->strides[0] = g.n;
    o->strides[1] = 1;
    o->op = "gemm";
  }
  c.data = g.c;
  aux.data = g.aux;
  if (g.activation == GemmActivation::gelu_tanh) be.unary(UnaryOp::gelu_tanh, c, aux, 0.0, 0.0);
  else be.binary(BinaryOp::gelu_tanh_backward, c, c, aux);
}

void CpuBackend::gemm(const GemmArgs& args) {
  if (args.activation != GemmActivation::none) return gemm_activation_unfused(*this, args);
  if (args.bias != nullptr && args.bias_grad != nullptr)
    throw Error(ErrorKind::value, "gemm: a bias and a bias gradient cannot be asked of one product");
  if ((args.bias != nullptr || args.bias_grad != nullptr) && args.batch != 1)
    throw Error(ErrorKind::value, "gemm: the bias epilogues need batch 1, got " + std::to_string(args.batch));
  if (args.bias_grad != nullptr && args.alpha != 1)
    throw Error(ErrorKind::value, "gemm: the bias-gradient epilogue needs alpha 1, got " + std::to_string(args.alpha));
  if (args.f32_out && ((args.dtype != DType::bf16 && args.dtype != DType::f16) || args.bias != nullptr))
    throw Error(ErrorKind::dtype, std::string("gemm: an f32 result of ") + to_string(args.dtype) +
                                      " operands is for bf16/f16 operands without a bias");
  if (args.batch > 0 && args.m > 0 && args.n > 0) {
    constexpr std::int64_t int_max = std::numeric_limits<int>::max();  // cblas takes int dims (dgemm; f32 keeps the same limits)
    for (std::int64_t v : {args.m, args.n, args.k, std::abs(args.a_row_stride), std::abs(args.a_col_stride),
                           std::abs(args.b_row_stride), std::abs(args.b_col_stride)})
      if (v > int_max)
        throw Error(ErrorKind::shape,
                    "gemm: dimension or stride " + std::to_string(v) + " exceeds the CPU BLAS's int range");
    switch (args.dtype) {
      case DType::f32: gemm_native<float>(args); break;
      case DType::f64: gemm_native<double>(args); break;
      case DType::bf16: args.f32_out ? gemm_widened<bfloat16, float>(args) : gemm_widened<bfloat16>(args); break;
      case DType::f16: args.f32_out ? gemm_widened<half, float>(args) : gemm_widened<half>(args); break;
      case DType::i32: case DType::i64: case DType::boolean:
        throw Error(ErrorKind::dtype, std::string("gemm: unsupported dtype ") + to_string(args.dtype));
    }
  }
  // The bias gradient sums over k whether or not there is a product (an empty m or n of the
  // other operand leaves it whole).
  if (args.bias_grad == nullptr) return;
  switch (args.dtype) {
    case DType::f32: return write_bias_grad<float>(args);
    case DType::f64: return write_bias_grad<double>(args);
    case DType::bf16: return args.f32_out ? write_bias_grad<bfloat16, float>(args) : write_bias_grad<bfloat16>(args);
    case DType::f16: return args.f32_out ? write_bias_grad<half, float>(args) : write_bias_grad<half>(args);
    case DType::i32: case DType::i64: case DType::boolean:
      throw Error(ErrorKind::dtype, std::string("gemm: unsupported dtype ") + to_string(args.dtype));
  }
}

}  // namespace brrr::backend
