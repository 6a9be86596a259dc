// Shape ops and linear algebra on the CPU against PyTorch (fixtures of
// tests/ops/make_shape_linalg_fixtures.py): repeat, tile, repeat_interleave, roll, diagonal,
// diag, trace, movedim, unflatten, take_along_dim, mm/bmm/addmm/baddbmm, addcmul/addcdiv,
// outer, linear, tensordot, einsum (matmul, batched, trace, diagonal, sums, implicit output,
// three operands, attention scores, bilinear, ellipses with broadcasting), prod (with zeros), matrix_norm, cdist —
// values and input gradients; then views, splits, meshgrid and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/fixture_replay.hpp"

namespace {
using test::replay;
using In = std::vector<Tensor>;
using V = std::vector<double>;
}  // namespace

TEST_CASE("shape ops against PyTorch, values and gradients") {
  replay("repeat", [](const In& x) { return repeat(x[0], {2, 1, 3}); });
  replay("tile", [](const In& x) { return tile(x[0], {2}); });
  replay("repeat_interleave", [](const In& x) { return repeat_interleave(x[0], 2, 1); });
  replay("repeat_interleave_flat", [](const In& x) { return repeat_interleave(x[0], 3); });
  replay("repeat_interleave_tensor", [](const In& x) {
    return repeat_interleave(x[0], Tensor::from_vector(std::vector<std::int64_t>{1, 0, 3}), 0);
  });
  replay("roll", [](const In& x) { return roll(x[0], {1, -2}, {0, 1}); });
  replay("roll_flat", [](const In& x) { return roll(x[0], {5}); });
  replay("diagonal", [](const In& x) { return diagonal(x[0]); });
  replay("diagonal_off1", [](const In& x) { return diagonal(x[0], 1); });
  replay("diagonal_offm2", [](const In& x) { return diagonal(x[0], -2); });
  replay("diagonal_3d", [](const In& x) { return diagonal(x[0], 0, 0, 2); });
  replay("diag_embed", [](const In& x) { return diag(x[0], 1); });
  replay("diag_embed_neg", [](const In& x) { return diag(x[0], -2); });
  replay("trace", [](const In& x) { return trace(x[0]); });
  replay("movedim", [](const In& x) { return movedim(x[0], 0, 2); });
  replay("unflatten", [](const In& x) { return unflatten(x[0], 1, {2, -1}); });
  replay("take_along_dim", [](const In& x) {
    return take_along_dim(x[0], Tensor::from_vector(std::vector<std::int64_t>{0, 2, 1}, {3, 1}), 1);
  });
}

TEST_CASE("linear algebra against PyTorch, values and gradients") {
  replay("mm", [](const In& x) { return mm(x[0], x[1]); });
  replay("bmm", [](const In& x) { return bmm(x[0], x[1]); });
  replay("addmm", [](const In& x) { return addmm(x[0], x[1], x[2], 0.5, 2.0); });
  replay("baddbmm", [](const In& x) { return baddbmm(x[0], x[1], x[2], -1.0, 0.5); });
  replay("addcmul", [](const In& x) { return addcmul(x[0], x[1], x[2], 0.3); });
  replay("addcdiv", [](const In& x) { return addcdiv(x[0], x[1], x[2], -2.0); });
  replay("outer", [](const In& x) { return outer(x[0], x[1]); });
  replay("linear", [](const In& x) { return linear(x[0], x[1], x[2]); });
  replay("tensordot2", [](const In& x) { return tensordot(x[0], x[1], 2); });
  replay("tensordot_dims", [](const In& x) { return tensordot(x[0], x[1], {0, 2}, {2, 0}); });
  const std::map<std::string, std::string> eqs = {
      {"einsum_mm", "ij,jk->ik"},           {"einsum_bmm", "bij,bjk->bik"},   {"einsum_trace", "ii->"},
      {"einsum_diag", "ii->i"},             {"einsum_sum", "ijk->j"},         {"einsum_outer", "i,j->ij"},
      {"einsum_implicit", "ij,jk"},         {"einsum_transpose", "ij->ji"},   {"einsum_three", "ij,jk,kl->il"},
      {"einsum_attn", "bhqd,bhkd->bhqk"},   {"einsum_bilinear", "bn,anm,bm->ba"},
      {"einsum_ell_bmm", "...ij,...jk"},    {"einsum_ell_sum", "...ij->ij"},  {"einsum_ell_move", "i...->...i"},
      {"einsum_ell_diag", "...ii->...i"},   {"einsum_ell_dot", "b...,b...->b"}, {"einsum_ell_mid", "i...j,j->...i"}};
  for (const auto& [name, eq] : eqs) replay(name, [eq](const In& x) { return einsum(eq, x); }, DType::f64, 1e-11, 1e-12);
  replay("prod_d1", [](const In& x) { return prod(x[0], 1); });
  replay("prod_zero", [](const In& x) { return prod(x[0], 1); });
  replay("prod_all", [](const In& x) { return prod(x[0]); });
  replay("matrix_norm_fro", [](const In& x) { return matrix_norm(x[0]); });
  replay("matrix_norm_1", [](const In& x) { return matrix_norm(x[0], 1.0); });
  replay("matrix_norm_inf", [](const In& x) { return matrix_norm(x[0], INFINITY); });
  replay("cdist", [](const In& x) { return cdist(x[0], x[1]); });
  replay("cdist_p1", [](const In& x) { return cdist(x[0], x[1], 1.0); });
}

TEST_CASE("splits, meshgrid, unbind and errors") {
  Tensor x = Tensor::from_vector(test::iota(7));
  std::vector<Tensor> parts = tensor_split(x, 3);
  REQUIRE(parts.size() == 3);
  CHECK(test::values(parts[0]) == V{0, 1, 2});
  CHECK(test::values(parts[2]) == V{5, 6});
  parts = tensor_split(x, std::vector<std::int64_t>{2, 5, 9});
  REQUIRE(parts.size() == 4);
  CHECK(test::values(parts[1]) == V{2, 3, 4});
  CHECK(parts[3].numel() == 0);
  std::vector<Tensor> g = meshgrid({Tensor::from_vector(V{1, 2, 3}), Tensor::from_vector(V{4, 5})}, "xy");
  CHECK(g[0].shape() == Shape{2, 3});
  CHECK(test::values(g[0]) == V{1, 2, 3, 1, 2, 3});
  CHECK(test::values(g[1]) == V{4, 4, 4, 5, 5, 5});
  g = meshgrid({Tensor::from_vector(V{1, 2, 3}), Tensor::from_vector(V{4, 5})});
  CHECK(g[0].shape() == Shape{3, 2});
  CHECK(unbind(zeros({3, 2}), 1).size() == 2);
  CHECK(prod(test::make(DType::i32, {2, 3, 4})).dtype() == DType::i64);
  CHECK(prod(zeros({2, 0}), 1).to_host<float>() == std::vector<float>{1, 1});
  CHECK_BRRR_ERROR(mm(zeros({2}), zeros({2, 2})), ErrorKind::shape, "mm");
  CHECK_BRRR_ERROR(einsum("ij,jk->ik", {zeros({2, 3})}), ErrorKind::value, "einsum");
  CHECK_BRRR_ERROR(einsum("ij,jk->ik", {zeros({2, 3}), zeros({4, 2})}), ErrorKind::shape, "einsum");
  CHECK_BRRR_ERROR(einsum("...i...->i", {zeros({2, 3})}), ErrorKind::value, "more than one ellipsis");
  CHECK_BRRR_ERROR(einsum("...ij,...jk", {zeros({2, 3, 4}), zeros({5, 4, 6})}), ErrorKind::shape, "broadcast");
  CHECK_BRRR_ERROR(einsum("...ijk", {zeros({2, 3})}), ErrorKind::shape, "fewer than the letters");
  CHECK(einsum("...ij->...ji", {zeros({2, 3})}).shape() == Shape{3, 2});  // an empty ellipsis
  CHECK(einsum("ij->...ij", {zeros({2, 3})}).shape() == Shape{2, 3});     // "..." in the output only
  CHECK_BRRR_ERROR(einsum("ij->k", {zeros({2, 3})}), ErrorKind::value, "einsum");
  CHECK_BRRR_ERROR(repeat(zeros({2, 3}), {2}), ErrorKind::shape, "repeat");
  CHECK_BRRR_ERROR(unflatten(zeros({2, 6}), 1, {4, -1}), ErrorKind::shape, "unflatten");
  CHECK_BRRR_ERROR(matrix_norm(zeros({2, 2}), "spectral"), ErrorKind::value, "matrix_norm");
  CHECK_BRRR_ERROR(tensordot(zeros({2, 3}), zeros({4, 3}), {1}, {0}), ErrorKind::shape, "tensordot");
  // A repeated letter takes a diagonal: its dims must agree (PyTorch: "the sizes don't match").
  CHECK_BRRR_ERROR(einsum("ii->i", {zeros({2, 3})}), ErrorKind::shape, "einsum", "'i'", "2 and 3");
  CHECK_BRRR_ERROR(einsum("iji,j->j", {zeros({2, 4, 3}), zeros({4})}), ErrorKind::shape, "einsum", "2 and 3");
  CHECK(einsum("ii->i", {zeros({3, 3})}).shape() == Shape{3});
  // Repeats and offsets near 2^63 are errors, not sizes that wrap (signed overflow).
  const std::int64_t huge = std::int64_t{1} << 62;
  CHECK_BRRR_ERROR(repeat(zeros({2, 3}), {huge, huge}), ErrorKind::value, "repeat", "2^63");
  CHECK_BRRR_ERROR(repeat(zeros({0, 3}), {1, huge}), ErrorKind::value, "repeat", "2^63");
  CHECK_BRRR_ERROR(repeat_interleave(zeros({3}), huge), ErrorKind::value, "repeat_interleave", "2^63");
  CHECK_BRRR_ERROR(diag(zeros({2}), huge), ErrorKind::value, "diag", "4611686018427387904");
  CHECK_BRRR_ERROR(diag(zeros({2}), INT64_MIN), ErrorKind::value, "diag");
  CHECK_BRRR_ERROR(diag(zeros({2}), std::int64_t{1} << 32), ErrorKind::value, "diag");
  CHECK(diagonal(zeros({2, 3}), -huge).shape() == Shape{0});
  CHECK(diagonal(zeros({2, 3}), INT64_MIN).shape() == Shape{0});
  CHECK(diagonal(zeros({2, 3}), INT64_MAX).shape() == Shape{0});
  CHECK(diag(zeros({2, 3}), INT64_MIN).shape() == Shape{0});
}
