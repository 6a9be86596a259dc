// The singular value decomposition (torch.linalg.svd / svdvals), which matrix_norm's 2, -2 and
// "nuc" (ops/linalg.cpp) reduce. The factorisation is LAPACK's divide-and-conquer gesdd (from
// OpenBLAS), the routine PyTorch calls on the CPU, on the host, one matrix of the batch at a
// time in the input's dtype (f32: sgesdd, f64: dgesdd); a CUDA input is read back to the host
// and the factors are copied to the device (a counted host sync: cuSOLVER is not wired in
// yet). The gradient is written with tensor ops on the saved factors, so create_graph
// differentiates it again through this same node.
module;
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// LAPACK's Fortran entry points (OpenBLAS exports them; 32-bit integers, column-major; the
// trailing length is gfortran's hidden one of the character argument).
extern "C" {
void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
             const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info,
             std::size_t jobz_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             std::size_t jobz_len);
}
module brrr.ops;
import brrr.tensor;
import brrr.backend;

#include "ops/autocast.hpp"

namespace brrr {

using namespace ops_detail;

namespace {

void check_input(const char* op, const Tensor& a) {
  require_defined(op, a);
  if (a.dim() < 2) throw Error(ErrorKind::shape, std::string(op) + ": expected a matrix or a batch [..., m, n], got " + describe(a));
  if (a.dtype() != DType::f32 && a.dtype() != DType::f64)
    throw Error(ErrorKind::dtype, std::string(op) + ": expected f32 or f64, got " + describe(a));
}

void gesdd(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u, const int* ldu,
           float* vt, const int* ldvt, float* work, const int* lwork, int* iwork, int* info) {
  sgesdd_(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info, 1);
}
void gesdd(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
           const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info) {
  dgesdd_(jobz, m, n, a, lda, s, u, ldu, vt, ldvt, work, lwork, iwork, info, 1);
}

// Factors of every matrix of a contiguous [batch, m, n] host copy: S [batch, k] descending,
// and when `uv`, U [batch, m, ku] and Vh [batch, kv, n] row-major (ku = kv = k reduced, m and
// n full). A row-major m x n matrix is the column-major n x m Aᵀ = V S Uᵀ, so gesdd of Aᵀ
// writes Vh (row-major) where it puts its U and U where it puts its Vᵀ, with no transposes.
template <class T>
void factor(std::vector<T>& a, std::int64_t batch, std::int64_t m, std::int64_t n, bool uv, bool full,
            std::vector<T>& u, std::vector<T>& s, std::vector<T>& vh, const char* op) {
  // Before the factors are allocated: a full U of such a matrix would not fit anyway.
  if (m > INT_MAX / 8 || n > INT_MAX / 8)  // gesdd's workspace sizes are 32-bit integers too
    throw Error(ErrorKind::value, std::string(op) + ": a " + std::to_string(m) + "x" + std::to_string(n) +
                                      " matrix is too large for LAPACK's 32-bit sizes");
  const std::int64_t k = std::min(m, n), ku = full ? m : k, kv = full ? n : k;
  s.assign(static_cast<std::size_t>(batch * k), T(0));
  if (uv) {
    u.assign(static_cast<std::size_t>(batch * m * ku), T(0));
    vh.assign(static_cast<std::size_t>(batch * kv * n), T(0));
  }
  const char jobz = !uv ? 'N' : full ? 'A' : 'S';
  const int rows = static_cast<int>(n), cols = static_cast<int>(m);  // of the column-major Aᵀ
  const int lda = std::max(rows, 1), ldu = std::max(rows, 1), ldvt = std::max(static_cast<int>(ku), 1);
  std::vector<int> iwork(static_cast<std::size_t>(8 * std::max<std::int64_t>(k, 1)));
  std::vector<T> work;
  T dummy_vt = 0, dummy_u = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    T* ab = a.data() + b * m * n;
    for (std::int64_t i = 0; i < m * n; ++i)
      if (!std::isfinite(ab[i]))
        throw Error(ErrorKind::value, std::string(op) + ": the input holds a non-finite value (matrix " +
                                          std::to_string(b) + " of the batch)");
    if (k == 0) {  // empty: no singular values; full factors are identities
      for (std::int64_t i = 0; uv && full && i < m; ++i) u[static_cast<std::size_t>((b * m + i) * m + i)] = T(1);
      for (std::int64_t i = 0; uv && full && i < n; ++i) vh[static_cast<std::size_t>((b * n + i) * n + i)] = T(1);
      continue;
    }
    T* sb = s.data() + b * k;
    T* gu = uv ? vh.data() + b * kv * n : &dummy_vt;  // gesdd's U: Vh
    T* gvt = uv ? u.data() + b * m * ku : &dummy_u;   // gesdd's Vᵀ: U
    int info = 0;
    if (work.empty()) {  // the workspace query: the same for every matrix of the batch
      T size = 0;
      const int query = -1;
      gesdd(&jobz, &rows, &cols, ab, &lda, sb, gu, &ldu, gvt, &ldvt, &size, &query, iwork.data(), &info);
      if (info != 0)
        throw Error(ErrorKind::value, std::string(op) + ": LAPACK's gesdd refused its arguments (info " +
                                          std::to_string(info) + ")");
      work.resize(static_cast<std::size_t>(std::max<double>(static_cast<double>(size), 1.0)));
    }
    const int lwork = static_cast<int>(work.size());
    gesdd(&jobz, &rows, &cols, ab, &lda, sb, gu, &ldu, gvt, &ldvt, work.data(), &lwork, iwork.data(), &info);
    if (info != 0)
      throw Error(ErrorKind::value, std::string(op) + ": the SVD did not converge (matrix " + std::to_string(b) +
                                        " of the batch, " + std::to_string(m) + "x" + std::to_string(n) +
                                        "; LAPACK's gesdd info " + std::to_string(info) + ")");
  }
}

struct Factors {
  Tensor U, S, Vh;
};

// The factors of a [..., m, n], without autograd.
Factors compute(const Tensor& a, bool uv, bool full, const char* op) {
  NoGradGuard no_grad;
  const std::int64_t m = a.size(-2), n = a.size(-1), k = std::min(m, n);
  Shape batch_shape(a.shape().begin(), a.shape().end() - 2);
  std::int64_t batch = 1;
  for (std::int64_t d : batch_shape) batch *= d;
  auto with = [&](std::int64_t r, std::int64_t c) {
    Shape s = batch_shape;
    s.push_back(r);
    if (c >= 0) s.push_back(c);
    return s;
  };
  Factors f;
  auto run = [&]<class T>() {
    std::vector<T> host = a.contiguous().template to_host<T>(), u, s, vh;  // gesdd overwrites its input
    factor<T>(host, batch, m, n, uv, full, u, s, vh, op);
    f.S = Tensor::from_vector(s, with(k, -1)).to(a.device());
    if (uv) {
      f.U = Tensor::from_vector(u, with(m, full ? m : k)).to(a.device());
      f.Vh = Tensor::from_vector(vh, with(full ? n : k, n)).to(a.device());
    }
  };
  if (a.dtype() == DType::f64) run.template operator()<double>();
  else run.template operator()<float>();
  return f;
}

Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

// The gradient of A = U diag(S) Vh from those of the reduced factors (any may be undefined):
//   gA = U [ (skew(Uᵀ gU) S + S skew(Vᵀ gV)) / E + diag(gS) ] Vh
//        + (I - U Uᵀ) gU S⁻¹ Vh      (m > n)     + U S⁻¹ gVᵀ (I - V Vᵀ)     (m < n)
// with skew(X) = X - Xᵀ and E_ij = s_j² - s_i² (1 on the diagonal, whose numerator is 0).
// J. Townsend, "Differentiating the Singular Value Decomposition" (2016); the arrangement of
// PyTorch's svd_backward (FunctionsManual.cpp). Infinite where singular values repeat or, for
// gU / gVh of a non-square A, vanish: the factors are not differentiable there.
Tensor svd_backward(const Tensor& gU, const Tensor& gS, const Tensor& gVh, const Tensor& U, const Tensor& S,
                    const Tensor& Vh) {
  const std::int64_t m = U.size(-2), n = Vh.size(-1), k = S.size(-1);
  if (!gU.defined() && !gVh.defined()) return matmul(U * gS.unsqueeze(-2), Vh);
  const Tensor S2 = S * S;
  const Tensor E = S2.unsqueeze(-2) - S2.unsqueeze(-1) + eye(k, -1, {.dtype = S.dtype(), .device = S.device()});
  Tensor inner;
  auto add = [&inner](const Tensor& t) { inner = inner.defined() ? inner + t : t; };
  if (gU.defined()) {
    const Tensor UtgU = matmul(mT(U), gU);
    add((UtgU - mT(UtgU)) * S.unsqueeze(-2));
  }
  Tensor gV = gVh.defined() ? mT(gVh) : Tensor();
  if (gV.defined()) {
    const Tensor VtgV = matmul(Vh, gV);
    add(S.unsqueeze(-1) * (VtgV - mT(VtgV)));
  }
  Tensor g = inner / E;
  if (gS.defined()) g = g + gS.unsqueeze(-1) * eye(k, -1, {.dtype = S.dtype(), .device = S.device()});
  if (m > n && gU.defined()) {
    const Tensor gUSinv = gU / S.unsqueeze(-2);
    g = matmul(U, g) + gUSinv - matmul(U, matmul(mT(U), gUSinv));
    return matmul(g, Vh);
  }
  if (m < n && gV.defined()) {
    const Tensor gVSinvT = mT(gV / S.unsqueeze(-2));
    g = matmul(g, Vh) + gVSinvT - matmul(matmul(gVSinvT, mT(Vh)), Vh);
    return matmul(U, g);
  }
  return matmul(U, matmul(g, Vh));
}

}  // namespace

SVDResult linalg_svd(const Tensor& a, bool full_matrices) {
  BRRR_AUTOCAST(fp32, linalg_svd, a, full_matrices);
  NvtxRange range("linalg_svd");
  check_input("linalg_svd", a);
  Factors f = compute(a, true, full_matrices, "linalg_svd");
  if (autograd::any_requires_grad({a})) {
    const Tensor saved[] = {f.U, f.S, f.Vh};
    autograd::record("LinalgSvdBackward", {a}, {f.U, f.S, f.Vh}, saved,
                     [full_matrices](const autograd::Backward& b) {
                       Tensor U = b.saved(0), S = b.saved(1), Vh = b.saved(2), gU = b.grad(0), gVh = b.grad(2);
                       const std::int64_t k = S.size(-1);
                       if (full_matrices) {  // the columns past k are not unique: their gradients are ignored
                         U = U.narrow(-1, 0, k);
                         Vh = Vh.narrow(-2, 0, k);
                         if (gU.defined()) gU = gU.narrow(-1, 0, k);
                         if (gVh.defined()) gVh = gVh.narrow(-2, 0, k);
                       }
                       const Tensor& gS = b.grad(1);
                       if (!gU.defined() && !gS.defined() && !gVh.defined()) return autograd::Grads{Tensor()};
                       return autograd::Grads{svd_backward(gU, gS, gVh, U, S, Vh)};
                     });
  }
  return {f.U, f.S, f.Vh};
}

Tensor linalg_svdvals(const Tensor& a) {
  BRRR_AUTOCAST(fp32, linalg_svdvals, a);
  NvtxRange range("linalg_svdvals");
  check_input("linalg_svdvals", a);
  if (!autograd::any_requires_grad({a})) return compute(a, false, false, "linalg_svdvals").S;
  // The gradient needs the singular vectors: the reduced SVD's S, through its node.
  return linalg_svd(a, false).S;
}


}  // namespace brrr
