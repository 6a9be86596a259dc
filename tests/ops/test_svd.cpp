// linalg_svd / linalg_svdvals and matrix_norm 2, -2, "nuc": values and gradients against
// PyTorch (tests/ops/svd.safetensors from tests/ops/make_svd_fixtures.py) through functions
// that do not depend on the singular vectors' signs; the factors' own properties
// (orthonormality, reconstruction, order, full_matrices shapes); first- and second-order
// gradients against central differences; empty matrices and errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/fixture_replay.hpp"

namespace {

using In = std::vector<Tensor>;

const io::TensorMap& fixtures() {
  static const io::TensorMap map = io::load_safetensors(std::string(BRRR_TEST_DATA) + "/svd.safetensors");
  return map;
}

void replay(const std::string& name, const test::CaseFn& f) {
  test::replay_from(fixtures(), name, f, DType::f64, 1e-10, 1e-10);
  test::replay_from(fixtures(), name, f, DType::f32, 2e-4, 2e-4);
}

Tensor weights(const Tensor& like, double offset, double denominator) {
  return (arange(like.numel(), {.dtype = DType::f64}).to(like.dtype()) + offset).reshape(like.shape()) / denominator;
}

// make_svd_fixtures.py's squares(): sign-invariant in each singular vector.
Tensor squares(const Tensor& a, bool full = false) {
  SVDResult r = linalg_svd(a, full);
  const std::int64_t k = r.S.size(-1);
  Tensor U = r.U.narrow(-1, 0, k), Vh = r.Vh.narrow(-2, 0, k);
  return (U * U * weights(U, 0, static_cast<double>(U.numel()))).sum() +
         (Vh * Vh * weights(Vh, 0, static_cast<double>(Vh.numel()))).sum() + (r.S * weights(r.S, 1, 1)).sum();
}

Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

}  // namespace

TEST_CASE("linalg_svd and svdvals against PyTorch, values and gradients (f64 and f32)") {
  for (const char* tag : {"4x3", "3x5", "4x4", "2x3x4", "1x1"}) {
    const std::string t = tag;
    replay("svdvals_" + t, [](const In& x) { return linalg_svdvals(x[0]); });
    replay("svd_uvh_" + t, [](const In& x) {
      SVDResult r = linalg_svd(x[0], false);
      return matmul(r.U, r.Vh);
    });
    replay("svd_usvh_" + t, [](const In& x) {
      SVDResult r = linalg_svd(x[0], false);
      return matmul(r.U * r.S.unsqueeze(-2), r.Vh);
    });
    replay("svd_squares_" + t, [](const In& x) { return squares(x[0]); });
  }
  replay("svd_squares_full_5x3", [](const In& x) { return squares(x[0], true); });
  replay("svd_squares_full_2x3x4", [](const In& x) { return squares(x[0], true); });
}

TEST_CASE("matrix_norm 2, -2 and nuc against PyTorch, values and gradients") {
  replay("matrix_norm_2", [](const In& x) { return matrix_norm(x[0], 2.0); });
  replay("matrix_norm_m2", [](const In& x) { return matrix_norm(x[0], -2.0); });
  replay("matrix_norm_nuc", [](const In& x) { return matrix_norm(x[0], "nuc"); });
  replay("matrix_norm_2_dims", [](const In& x) { return matrix_norm(x[0], 2.0, {2, 0}); });
  replay("matrix_norm_nuc_keepdim", [](const In& x) { return matrix_norm(x[0], "nuc", {0, 2}, true); });
  replay("matrix_norm_m2_wide", [](const In& x) { return matrix_norm(x[0], -2.0); });
}

TEST_CASE("linalg_svd: orthonormal factors that rebuild A, descending S, full_matrices shapes") {
  FRESH_SEED();
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    for (Shape shape : {Shape{6, 4}, Shape{3, 7}, Shape{2, 5, 5}, Shape{2, 1, 4, 2}}) {
      INFO(to_string(dt), " ", describe(zeros(shape)));
      Tensor a = randn(shape, {.dtype = dt});
      const std::int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
      for (bool full : {false, true}) {
        SVDResult r = linalg_svd(a, full);
        Shape us = shape, ss = shape, vs = shape;
        us.back() = full ? m : k;
        ss.pop_back();
        ss.back() = k;
        vs[vs.size() - 2] = full ? n : k;
        CHECK(r.U.shape() == us);
        CHECK(r.S.shape() == ss);
        CHECK(r.Vh.shape() == vs);
        CHECK(r.U.dtype() == dt);
        const std::int64_t ku = r.U.size(-1), kv = r.Vh.size(-2);
        Tensor utu = matmul(mT(r.U), r.U), vvt = matmul(r.Vh, mT(r.Vh));
        testing::assert_close(utu, zeros_like(utu) + eye(ku, -1, {.dtype = dt}), {.rtol = 0, .atol = tol * 10});
        testing::assert_close(vvt, zeros_like(vvt) + eye(kv, -1, {.dtype = dt}), {.rtol = 0, .atol = tol * 10});
        Tensor rebuilt = matmul(r.U.narrow(-1, 0, k) * r.S.unsqueeze(-2), r.Vh.narrow(-2, 0, k));
        testing::assert_close(rebuilt, a, {.rtol = tol * 10, .atol = tol * 10});
        std::vector<double> s = test::values(r.S);
        for (std::size_t i = 0; i < s.size(); ++i) {
          CHECK(s[i] >= 0);
          if (i % static_cast<std::size_t>(k) != 0) CHECK(s[i] <= s[i - 1]);
        }
      }
      // svdvals asks gesdd for the values alone (another path through it, as in PyTorch): the
      // same values up to rounding.
      testing::assert_close(linalg_svdvals(a), linalg_svd(a, false).S, {.rtol = tol, .atol = tol});
    }
  }
}

TEST_CASE("linalg_svd: hand-computed factors of a diagonal and a rank-one matrix") {
  Tensor d = Tensor::from_vector(std::vector<double>{0, 3, -5, 0, 0, 0}, {3, 2});  // singular values 5, 3
  CHECK(test::values(linalg_svdvals(d)) == std::vector<double>{5, 3});
  CHECK(test::values(matrix_norm(d, "nuc")) == std::vector<double>{8});
  CHECK(test::values(matrix_norm(d, 2.0)) == std::vector<double>{5});
  CHECK(test::values(matrix_norm(d, -2.0)) == std::vector<double>{3});
  // [1 2; 2 4] = sqrt(25) u v^T: singular values 5, 0.
  Tensor r1 = Tensor::from_vector(std::vector<double>{1, 2, 2, 4}, {2, 2});
  std::vector<double> s = test::values(linalg_svdvals(r1));
  CHECK(s[0] == doctest::Approx(5).epsilon(1e-14));
  CHECK(std::abs(s[1]) < 1e-14);
}

TEST_CASE("linalg_svd: extreme magnitudes, one-row and one-column matrices, a batch of several") {
  FRESH_SEED();
  // LAPACK scales a matrix whose norm is near over- or underflow: the values scale with A.
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
    Tensor base = randn({5, 3}, {.dtype = DType::f64});
    const std::vector<double> ref = test::values(linalg_svdvals(base));
    for (double scale : {1e30, 1e-30}) {
      INFO(to_string(dt), " scale ", scale);
      std::vector<double> s = test::values(linalg_svdvals((base * scale).to(dt)));
      REQUIRE(s.size() == ref.size());
      for (std::size_t i = 0; i < s.size(); ++i) CHECK(s[i] / scale == doctest::Approx(ref[i]).epsilon(tol * 10));
    }
    // One row or one column: the single singular value is the vector's norm, the factors
    // rebuild it.
    for (Shape shape : {Shape{1, 6}, Shape{6, 1}}) {
      Tensor a = randn(shape, {.dtype = dt});
      SVDResult r = linalg_svd(a, false);
      const double norm = std::sqrt(test::values((a.to(DType::f64) * a.to(DType::f64)).sum())[0]);
      CHECK(test::values(r.S)[0] == doctest::Approx(norm).epsilon(tol * 10));
      testing::assert_close(matmul(r.U * r.S.unsqueeze(-2), r.Vh), a, {.rtol = tol * 10, .atol = tol * 10});
    }
  }
  // A batch: each matrix factored on its own (the workspace is sized once for the batch).
  Tensor batch = randn({4, 3, 5}, {.dtype = DType::f64});
  Tensor s = linalg_svdvals(batch);
  for (std::int64_t b = 0; b < 4; ++b)
    testing::assert_close(s.select(0, b), linalg_svdvals(batch.select(0, b)), {.rtol = 1e-14, .atol = 1e-14});
}

TEST_CASE("linalg_svd gradients against central differences, first and second order") {
  FRESH_SEED();
  auto x = [](Shape s) { return randn(s, {.dtype = DType::f64}); };
  CHECK(autograd::gradcheck([](const In& in) { return squares(in[0]); }, {x({5, 3})}));
  CHECK(autograd::gradcheck([](const In& in) { return squares(in[0]); }, {x({2, 3, 6})}));
  CHECK(autograd::gradcheck([](const In& in) { return squares(in[0], true); }, {x({4, 2})}));
  CHECK(autograd::gradcheck([](const In& in) { return linalg_svdvals(in[0]); }, {x({3, 4})}));
  CHECK(autograd::gradcheck([](const In& in) { return matrix_norm(in[0], "nuc", {0, 2}); }, {x({3, 2, 4})}));
  // Second order: the backward is tensor ops on the saved factors, differentiated again
  // through the same node.
  CHECK(autograd::gradcheck(
      [](const In& in) {
        GradModeGuard grad_mode(true);
        auto g = autograd::grad({squares(in[0])}, {in[0]}, {}, true, true);
        return g[0].flatten();
      },
      {x({4, 3})}));
  CHECK(autograd::gradcheck(
      [](const In& in) {
        GradModeGuard grad_mode(true);
        auto g = autograd::grad({matrix_norm(in[0], "nuc")}, {in[0]}, {}, true, true);
        return g[0].flatten();
      },
      {x({3, 3})}));
}

TEST_CASE("linalg_svd: empty matrices, and errors naming the op") {
  SVDResult r = linalg_svd(zeros({0, 3}, {.dtype = DType::f64}), true);
  CHECK(r.S.shape() == Shape{0});
  CHECK(test::values(r.Vh) == test::values(eye(3, -1, {.dtype = DType::f64})));
  CHECK(r.U.shape() == Shape{0, 0});
  CHECK(linalg_svd(zeros({2, 4, 0}), false).U.shape() == Shape{2, 4, 0});
  CHECK(test::values(matrix_norm(zeros({4, 0}), "nuc")) == std::vector<double>{0});

  CHECK_BRRR_ERROR(linalg_svd(zeros({3})), ErrorKind::shape, "linalg_svd");
  CHECK_BRRR_ERROR(linalg_svdvals(zeros({3, 3}, {.dtype = DType::i64})), ErrorKind::dtype, "linalg_svdvals");
  CHECK_BRRR_ERROR(linalg_svd(zeros({3, 3}, {.dtype = DType::bf16})), ErrorKind::dtype, "bf16");
  Tensor bad = Tensor::from_vector(std::vector<double>{1, NAN, 0, 1}, {2, 2});
  CHECK_BRRR_ERROR(linalg_svdvals(bad), ErrorKind::value, "non-finite");
  CHECK_BRRR_ERROR(matrix_norm(zeros({3, 3}), 3.0), ErrorKind::value, "matrix_norm");
  CHECK_BRRR_ERROR(matrix_norm(zeros({3, 3}), "spectral"), ErrorKind::value, "matrix_norm");
  CHECK_BRRR_ERROR(matrix_norm(zeros({3, 3}), "nuc", {1, -1}), ErrorKind::value, "matrix_norm");
  CHECK_BRRR_ERROR(matrix_norm(zeros({3, 3}, {.dtype = DType::i64}), 2.0), ErrorKind::dtype, "linalg_svdvals");
}
