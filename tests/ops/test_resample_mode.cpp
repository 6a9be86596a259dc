// interpolate (every mode: nearest, nearest-exact, linear, bilinear, bicubic, trilinear, area on
// 3-D, 4-D and 5-D inputs), nn::Upsample, mode, poisson and the in-place scatter family on the
// CPU: values and gradients against PyTorch (fixtures of
// tests/ops/make_resample_mode_fixtures.py, non-contiguous inputs, ties, -0.0, NaN/inf), gradcheck, the in-place rules (version
// counter, leaves, views), the errors, and poisson's determinism (a function of seed, offset
// and element) and statistics (mean, variance and the probabilities of small counts within
// six standard errors, at a fixed seed and at a fresh one).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/fixture_replay.hpp"
#include "tests/ops/gradient_check.hpp"

namespace {

using In = std::vector<Tensor>;
using V = std::vector<double>;

const io::TensorMap& fixtures() {
  static const io::TensorMap map = io::load_safetensors(std::string(BRRR_TEST_DATA) + "/resample_mode.safetensors");
  return map;
}
void replay(const std::string& name, const test::CaseFn& f, DType dtype = DType::f64, double tol = 1e-12) {
  test::replay_from(fixtures(), name, f, dtype, tol, tol);
}

Tensor bilinear(const Tensor& x, std::vector<std::int64_t> size, bool ac) {
  return interpolate(x, {.size = std::move(size), .mode = "bilinear", .align_corners = ac});
}

}  // namespace

TEST_CASE("interpolate against PyTorch: nearest, linear, bilinear, area; size, scale_factor, align_corners") {
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 2e-6;
    replay("nearest_size_up", [](const In& x) { return interpolate(x[0], {.size = {7, 9}}); }, dt, tol);
    replay("nearest_size_down", [](const In& x) { return interpolate(x[0], {.size = {3, 2}}); }, dt, tol);
    replay("nearest_scale_2_2", [](const In& x) { return interpolate(x[0], {.scale_factor = {2.2}}); }, dt, tol);
    replay("nearest_scale_1_7", [](const In& x) { return interpolate(x[0], {.scale_factor = {1.7, 0.6}}); }, dt, tol);
    replay("nearest_recompute", [](const In& x) {
      return interpolate(x[0], {.scale_factor = {1.7, 0.6}, .recompute_scale_factor = true});
    }, dt, tol);
    replay("nearest_3d_scale", [](const In& x) { return interpolate(x[0], {.scale_factor = {1.5}}); }, dt, tol);
    replay("nearest_3d_size", [](const In& x) { return interpolate(x[0], {.size = {4}}); }, dt, tol);
    replay("nearest_noncontig", [](const In& x) { return interpolate(x[0].permute({0, 1, 3, 2}), {.size = {6, 5}}); },
           dt, tol);
    replay("nearest_nan", [](const In& x) { return interpolate(x[0], {.size = {3, 3}}); }, dt, tol);
    for (bool ac : {false, true}) {
      const std::string s = ac ? "ac" : "noac";
      replay("bilinear_size_up_" + s, [ac](const In& x) { return bilinear(x[0], {7, 9}, ac); }, dt, tol);
      replay("bilinear_size_down_" + s, [ac](const In& x) { return bilinear(x[0], {3, 2}, ac); }, dt, tol);
      replay("bilinear_scale_" + s, [ac](const In& x) {
        return interpolate(x[0], {.scale_factor = {1.7, 0.6}, .mode = "bilinear", .align_corners = ac});
      }, dt, tol);
      replay("bilinear_to_1_" + s, [ac](const In& x) { return bilinear(x[0], {1, 3}, ac); }, dt, tol);
      replay("linear_size_" + s, [ac](const In& x) {
        return interpolate(x[0], {.size = {11}, .mode = "linear", .align_corners = ac});
      }, dt, tol);
      replay("linear_scale_" + s, [ac](const In& x) {
        return interpolate(x[0], {.scale_factor = {2.5}, .mode = "linear", .align_corners = ac});
      }, dt, tol);
    }
    replay("bilinear_recompute", [](const In& x) {
      return interpolate(x[0], {.scale_factor = {1.7, 0.6}, .mode = "bilinear", .recompute_scale_factor = true});
    }, dt, tol);
    replay("bilinear_noncontig", [](const In& x) { return bilinear(x[0].transpose(2, 3), {8, 6}, false); }, dt, tol);
    replay("linear_noncontig", [](const In& x) {
      return interpolate(x[0].slice(2, 0, 6, 2), {.size = {7}, .mode = "linear", .align_corners = true});
    }, dt, tol);
    replay("area_down", [](const In& x) { return interpolate(x[0], {.size = {3, 2}, .mode = "area"}); }, dt, tol);
    replay("area_up", [](const In& x) { return interpolate(x[0], {.size = {6, 8}, .mode = "area"}); }, dt, tol);
    replay("area_scale", [](const In& x) {
      return interpolate(x[0], {.scale_factor = {0.5, 0.7}, .mode = "area"});
    }, dt, tol);
    replay("area_3d", [](const In& x) { return interpolate(x[0], {.size = {4}, .mode = "area"}); }, dt, tol);
  }
  CHECK_BRRR_ERROR(interpolate(randn({1, 1, 4, 4}), {.size = {2, 2}, .mode = "area", .align_corners = false}),
                   ErrorKind::value, "align_corners");
}

TEST_CASE("interpolate against PyTorch: nearest-exact, bicubic, trilinear, 5-D nearest and area") {
  auto with = [](InterpolateOptions o) { return [o](const In& x) { return interpolate(x[0], o); }; };
  for (DType dt : {DType::f64, DType::f32}) {
    // f32: positions and weights in f32; bicubic sums 16 products with weights up to 1.2.
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    const std::string ne = "nearest-exact";
    replay("nearest_exact_size_up", with({.size = {7, 9}, .mode = ne}), dt, tol);
    replay("nearest_exact_size_down", with({.size = {3, 2}, .mode = ne}), dt, tol);
    replay("nearest_exact_scale_2_2", with({.scale_factor = {2.2}, .mode = ne}), dt, tol);
    replay("nearest_exact_scale_1_7", with({.scale_factor = {1.7, 0.6}, .mode = ne}), dt, tol);
    replay("nearest_exact_recompute", with({.scale_factor = {1.7, 0.6}, .mode = ne, .recompute_scale_factor = true}),
           dt, tol);
    replay("nearest_exact_to_1", with({.size = {1, 1}, .mode = ne}), dt, tol);
    replay("nearest_exact_3d", with({.scale_factor = {1.5}, .mode = ne}), dt, tol);
    replay("nearest_exact_3d_down", with({.size = {4}, .mode = ne}), dt, tol);
    replay("nearest_exact_5d_size", with({.size = {5, 3, 8}, .mode = ne}), dt, tol);
    replay("nearest_exact_5d_scale", with({.scale_factor = {1.5, 0.7, 2.3}, .mode = ne}), dt, tol);
    replay("nearest_5d_size", with({.size = {5, 3, 8}}), dt, tol);
    replay("nearest_5d_scale", with({.scale_factor = {1.5, 0.7, 2.3}}), dt, tol);
    replay("nearest_5d_double", with({.scale_factor = {2}}), dt, tol);
    for (bool ac : {false, true}) {
      const std::string s = ac ? "ac" : "noac";
      auto cubic = [&](std::vector<std::int64_t> size) {
        return with({.size = std::move(size), .mode = "bicubic", .align_corners = ac});
      };
      auto cubic_scale = [&](std::vector<double> scale) {
        return with({.scale_factor = std::move(scale), .mode = "bicubic", .align_corners = ac});
      };
      replay("bicubic_size_up_" + s, cubic({7, 9}), dt, tol);
      replay("bicubic_size_down_" + s, cubic({3, 2}), dt, tol);
      replay("bicubic_far_down_" + s, cubic({3, 4}), dt, tol);
      replay("bicubic_scale_" + s, cubic_scale({1.7, 0.6}), dt, tol);
      replay("bicubic_scale_2_5_" + s, cubic_scale({2.5}), dt, tol);
      replay("bicubic_to_1_" + s, cubic({1, 3}), dt, tol);
      replay("bicubic_from_1_" + s, cubic({3, 4}), dt, tol);
      replay("bicubic_row_" + s, cubic({4, 3}), dt, tol);
      auto tri = [&](std::vector<std::int64_t> size) {
        return with({.size = std::move(size), .mode = "trilinear", .align_corners = ac});
      };
      replay("trilinear_size_up_" + s, tri({5, 6, 9}), dt, tol);
      replay("trilinear_size_down_" + s, tri({2, 3, 2}), dt, tol);
      replay("trilinear_scale_" + s,
             with({.scale_factor = {1.5, 0.7, 2.3}, .mode = "trilinear", .align_corners = ac}), dt, tol);
      replay("trilinear_to_1_" + s, tri({1, 1, 2}), dt, tol);
      replay("trilinear_from_1_" + s, tri({3, 2, 4}), dt, tol);
    }
    replay("bicubic_same_size", with({.size = {4, 5}, .mode = "bicubic"}), dt, tol);
    replay("bicubic_recompute", with({.scale_factor = {1.7, 0.6}, .mode = "bicubic", .recompute_scale_factor = true}),
           dt, tol);
    replay("bicubic_noncontig", [](const In& x) {
      return interpolate(x[0].transpose(2, 3), {.size = {8, 6}, .mode = "bicubic"});
    }, dt, tol);
    // Values only: PyTorch's bicubic backward copies when the sizes match even where the
    // forward used a scale other than 1; brrr's backward is the forward's adjoint.
    replay("bicubic_same_size_scale", with({.scale_factor = {1.1}, .mode = "bicubic"}), dt, tol);
    replay("bilinear_same_size_scale", with({.scale_factor = {1.1, 0.9}, .mode = "bilinear"}), dt, tol);
    replay("trilinear_recompute",
           with({.scale_factor = {1.5, 0.7, 2.3}, .mode = "trilinear", .recompute_scale_factor = true}), dt, tol);
    replay("trilinear_noncontig", [](const In& x) {
      return interpolate(x[0].permute({0, 1, 4, 3, 2}), {.size = {4, 3, 5}, .mode = "trilinear"});
    }, dt, tol);
    replay("area_5d_down", with({.size = {2, 3, 2}, .mode = "area"}), dt, tol);
    replay("area_5d_up", with({.size = {4, 5, 3}, .mode = "area"}), dt, tol);
  }
}

TEST_CASE("interpolate: bicubic and trilinear gradcheck, second order, 16-bit dtypes, infinities") {
  std::mt19937_64 rng(17);
  for (bool ac : {false, true}) {
    test::check_gradients([ac](const In& i) {
      return In{interpolate(i[0], {.size = {7, 3}, .mode = "bicubic", .align_corners = ac})};
    }, {{1, 2, 4, 5}}, rng);
    test::check_gradients([ac](const In& i) {
      return In{interpolate(i[0], {.scale_factor = {1.6, 0.7}, .mode = "bicubic", .align_corners = ac})};
    }, {{2, 1, 3, 6}}, rng);
    test::check_gradients([ac](const In& i) {
      return In{interpolate(i[0], {.size = {4, 2, 5}, .mode = "trilinear", .align_corners = ac})};
    }, {{1, 2, 3, 4, 3}}, rng);
    test::check_gradients([ac](const In& i) {
      return In{interpolate(i[0], {.scale_factor = {1.5, 0.6, 2.2}, .mode = "trilinear", .align_corners = ac})};
    }, {{2, 1, 2, 5, 3}}, rng);
  }
  test::check_gradients([](const In& i) { return In{interpolate(i[0], {.size = {5, 2, 7}, .mode = "nearest-exact"})}; },
                        {{1, 2, 3, 4, 3}}, rng);
  test::check_gradients([](const In& i) { return In{interpolate(i[0], {.size = {3, 2, 4}, .mode = "area"})}; },
                        {{1, 2, 5, 4, 6}}, rng);
  // The bicubic adjoint records the forward as its backward: double backward.
  CHECK(autograd::gradcheck(
      [](const In& i) {
        GradModeGuard on(true);
        Tensor y = interpolate(i[0], {.size = {6, 7}, .mode = "bicubic"});
        return sum(mul(autograd::grad({sum(mul(y, y))}, {i[0]}, {}, true, true)[0], i[0]));
      },
      {randn({1, 1, 3, 4}, {.dtype = DType::f64})}));
  Tensor x4 = randn({2, 3, 5, 4}, {.dtype = DType::f64}), x5 = randn({2, 2, 3, 5, 4}, {.dtype = DType::f64});
  for (DType dt : {DType::bf16, DType::f16}) {
    // Within the input's rounding times the weights' absolute sum (<= 1.6 for bicubic).
    const double tol = dt == DType::bf16 ? 4e-2 : 6e-3;
    InterpolateOptions cubic{.size = {9, 7}, .mode = "bicubic"}, tri{.size = {5, 3, 7}, .mode = "trilinear"};
    CHECK(testing::allclose(interpolate(x4.to(dt), cubic).to(DType::f64), interpolate(x4, cubic),
                            {.rtol = tol, .atol = tol}));
    CHECK(testing::allclose(interpolate(x5.to(dt), tri).to(DType::f64), interpolate(x5, tri), {.rtol = tol, .atol = tol}));
  }
  // A 4-D input's missing depth is one tap of weight 1: infinities and NaN stay where they are.
  Tensor special = Tensor::from_vector(V{INFINITY, 1, 2, 3}, {1, 1, 1, 4});
  CHECK(test::values(interpolate(special, {.size = {1, 4}, .mode = "bilinear"})) == V{INFINITY, 1, 2, 3});
  CHECK(test::values(interpolate(special, {.size = {1, 4}, .mode = "nearest-exact"})) == V{INFINITY, 1, 2, 3});
  CHECK(interpolate(zeros({0, 2, 3, 4, 5}), {.size = {2, 2, 2}, .mode = "trilinear"}).shape() == Shape{0, 2, 2, 2, 2});
  nn::Upsample up({.size = {4, 6, 8}, .mode = "trilinear", .align_corners = true});
  CHECK(testing::allclose(up(x5), interpolate(x5, {.size = {4, 6, 8}, .mode = "trilinear", .align_corners = true})));
  CHECK(up.to_string() == "Upsample(size=(4, 6, 8), mode='trilinear', align_corners=true)");
}

TEST_CASE("interpolate: 16-bit dtypes, gradcheck, second order, zero batch, nn::Upsample") {
  Tensor x = randn({2, 3, 5, 4}, {.dtype = DType::f64});
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor want = bilinear(x, {9, 7}, false);
    Tensor got = bilinear(x.to(dt), {9, 7}, false);
    CHECK(got.dtype() == dt);
    // Computed in f32 from the rounded input, rounded once: within the input's rounding.
    const double tol = dt == DType::bf16 ? 1.6e-2 : 2e-3;
    CHECK(testing::allclose(got.to(DType::f64), want, {.rtol = tol, .atol = tol}));
  }
  std::mt19937_64 rng(5);
  for (bool ac : {false, true}) {
    test::check_gradients([ac](const In& i) { return In{bilinear(i[0], {7, 3}, ac)}; }, {{1, 2, 4, 5}}, rng);
    test::check_gradients([ac](const In& i) {
      return In{interpolate(i[0], {.scale_factor = {1.6}, .mode = "linear", .align_corners = ac})};
    }, {{2, 2, 5}}, rng);
  }
  test::check_gradients([](const In& i) { return In{interpolate(i[0], {.size = {5, 7}})}; }, {{1, 2, 3, 4}}, rng);
  test::check_gradients([](const In& i) { return In{interpolate(i[0], {.size = {2}})}; }, {{2, 1, 5}}, rng);
  // The adjoint records the forward as its backward: double backward matches finite
  // differences of the first gradient.
  CHECK(autograd::gradcheck(
      [](const In& i) {
        GradModeGuard on(true);
        Tensor y = bilinear(i[0], {6, 7}, false);
        return sum(mul(autograd::grad({sum(mul(y, y))}, {i[0]}, {}, true, true)[0], i[0]));
      },
      {randn({1, 1, 3, 4}, {.dtype = DType::f64})}));
  Tensor empty_batch = zeros({0, 3, 4, 4});
  CHECK(bilinear(empty_batch, {8, 8}, false).shape() == Shape{0, 3, 8, 8});

  nn::Upsample up({.scale_factor = {2}, .mode = "bilinear", .align_corners = true});
  Tensor y = up(x);
  CHECK(testing::allclose(y, interpolate(x, {.scale_factor = {2}, .mode = "bilinear", .align_corners = true})));
  CHECK(y.shape() == Shape{2, 3, 10, 8});
  CHECK(up.to_string() == "Upsample(scale_factor=2, mode='bilinear', align_corners=true)");
  nn::Upsample nearest({.size = {3, 4}});
  CHECK(nearest.to_string() == "Upsample(size=(3, 4), mode='nearest')");
}

TEST_CASE("interpolate errors name the op and the offending shapes and options") {
  Tensor x4 = randn({1, 2, 3, 4}), x3 = randn({1, 2, 3});
  Tensor x5 = randn({1, 2, 3, 4, 5});
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .mode = "lanczos"}), ErrorKind::value, "interpolate: mode",
                   "nearest-exact", "bicubic", "trilinear", "lanczos");
  CHECK_BRRR_ERROR(interpolate(x3, {.size = {2}, .mode = "bicubic"}), ErrorKind::shape, "interpolate",
                   "bicubic mode needs 4-D", "[1, 2, 3]");
  CHECK_BRRR_ERROR(interpolate(x5, {.size = {2, 2, 2}, .mode = "bicubic"}), ErrorKind::shape, "bicubic mode needs 4-D",
                   "[1, 2, 3, 4, 5]");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .mode = "trilinear"}), ErrorKind::shape,
                   "trilinear mode needs 5-D", "[1, 2, 3, 4]");
  CHECK_BRRR_ERROR(interpolate(x5, {.size = {2, 2, 2}, .mode = "bilinear"}), ErrorKind::shape, "bilinear mode needs 4-D");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .mode = "nearest-exact", .align_corners = true}), ErrorKind::value,
                   "align_corners", "nearest-exact");
  CHECK_BRRR_ERROR(interpolate(x5, {.size = {2, 2}, .mode = "trilinear"}), ErrorKind::shape,
                   "size must have 1 or 3 values", "[1, 2, 3, 4, 5]", "trilinear");
  CHECK_BRRR_ERROR(interpolate(x5, {.scale_factor = {2, 2}, .mode = "nearest"}), ErrorKind::shape,
                   "scale_factor must have 1 or 3 values");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2, 2}, .mode = "bicubic"}), ErrorKind::shape,
                   "size must have 1 or 2 values", "bicubic");
  CHECK_BRRR_ERROR(interpolate(randn({1, 1, 2, 2, 2, 2}), {.size = {2}}), ErrorKind::shape, "interpolate",
                   "[1, 1, 2, 2, 2, 2]");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .mode = "linear"}), ErrorKind::shape, "linear mode needs 3-D");
  CHECK_BRRR_ERROR(interpolate(x3, {.size = {2}, .mode = "bilinear"}), ErrorKind::shape, "bilinear mode needs 4-D");
  CHECK_BRRR_ERROR(interpolate(randn({2, 3}), {.size = {2}}), ErrorKind::shape, "[2, 3]");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .align_corners = false}), ErrorKind::value, "align_corners");
  CHECK_BRRR_ERROR(interpolate(x4, {}), ErrorKind::value, "either size or scale_factor");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .scale_factor = {2}}), ErrorKind::value, "only one of");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2, 2}}), ErrorKind::shape, "size must have 1 or 2 values");
  CHECK_BRRR_ERROR(interpolate(x4, {.scale_factor = {-1}}), ErrorKind::value, "scale_factor must be positive");
  CHECK_BRRR_ERROR(interpolate(x4, {.scale_factor = {0.1}}), ErrorKind::value, "greater than 0");
  // An output size past int64 is an error, not an undefined conversion of the double.
  CHECK_BRRR_ERROR(interpolate(x4, {.scale_factor = {1e30}}), ErrorKind::value, "scale_factor", "2^63", "[1, 2, 3, 4]");
  CHECK_BRRR_ERROR(interpolate(x4, {.scale_factor = {1, 0x1p62}}), ErrorKind::value, "spatial dim 1", "2^63");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {0, 2}}), ErrorKind::value, "greater than 0");
  CHECK_BRRR_ERROR(interpolate(x4, {.size = {2, 2}, .recompute_scale_factor = true}), ErrorKind::value,
                   "recompute_scale_factor");
  CHECK_BRRR_ERROR(interpolate(randint(0, 3, {1, 1, 2, 2}), {.size = {4, 4}}), ErrorKind::dtype, "interpolate");
}

TEST_CASE("mode against PyTorch: smallest most frequent value, its last position, gradients") {
  replay("mode_d1", [](const In& x) { return mode(x[0], 1).values; });
  replay("mode_d1_idx", [](const In& x) { return mode(x[0], 1).indices; });
  replay("mode_d0_keep", [](const In& x) { return mode(x[0], 0, true).values; });
  replay("mode_d0_idx", [](const In& x) { return mode(x[0], 0, true).indices; });
  replay("mode_noncontig_idx", [](const In& x) { return mode(x[0].t(), 1).indices; });
  test::replay_from(fixtures(), "mode_zero_sign", [](const In& x) { return mode(x[0], 0).values; }, DType::f64, 0, 0,
                    true);
  replay("mode_zero_sign_idx", [](const In& x) { return mode(x[0], 0).indices; });
  replay("mode_int_idx", [](const In& x) { return mode(x[0], 0).indices; });
  replay("mode_int", [](const In& x) { return mode(x[0], 0).values; });
  for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::boolean}) {
    Tensor x = Tensor::from_vector(V{2, 1, 1, 0, 2, 0, 1, 2}, {2, 4}).to(dt);
    auto [v, i] = mode(x, 1);
    CHECK(v.dtype() == dt);
    // Rows [2, 1, 1, 0] and [2, 0, 1, 2] (as bool: [1, 1, 1, 0] and [1, 0, 1, 1]).
    CHECK(test::values(v) == (dt == DType::boolean ? V{1, 1} : V{1, 2}));
    CHECK(test::values(i) == V{2, 3});
  }
  // NaNs count as one value (the largest); a single element; a 0-d input.
  const double nan = std::nan("");
  auto [nv, ni] = mode(Tensor::from_vector(V{nan, 1, nan, 2, 1, nan}), 0);
  CHECK(std::isnan(nv.item<double>()));
  CHECK(ni.item<std::int64_t>() == 5);
  CHECK(mode(Tensor::from_vector(V{4}), 0).indices.item<std::int64_t>() == 0);
  auto [sv, si] = mode(full({}, 3.0), 0);
  CHECK(sv.item<float>() == 3.0f);
  CHECK(si.dim() == 0);
  std::mt19937_64 rng(9);
  // Distinct values (gradcheck's normal inputs): the smallest wins; the gradient goes there.
  test::check_gradients([](const In& i) { return In{mode(i[0], 1).values}; }, {{3, 5}}, rng);
  CHECK_BRRR_ERROR(mode(zeros({2, 0}), 1), ErrorKind::value, "mode: cannot reduce dim 1 of size 0");
  CHECK_BRRR_ERROR(mode(zeros({2, 3}), 2), ErrorKind::index, "mode");
}

TEST_CASE("in-place scatter family against PyTorch, through a clone so gradients reach x") {
  const io::TensorMap& m = fixtures();
  const Tensor idx = m.at("masks/idx"), mask = m.at("masks/m");
  replay("scatter_", [idx](const In& x) { Tensor y = x[0].clone(); y.scatter_(0, idx, x[1]); return y; });
  replay("scatter_value_", [idx](const In& x) { Tensor y = x[0].clone(); y.scatter_(1, idx, 2.5); return y; });
  replay("scatter_add_", [idx](const In& x) { Tensor y = x[0].clone(); y.scatter_add_(0, idx, x[1]); return y; });
  replay("scatter_reduce_amax_", [idx](const In& x) {
    Tensor y = x[0].clone();
    y.scatter_reduce_(0, idx, x[1], "amax", false);
    return y;
  });
  replay("scatter_reduce_mean_", [idx](const In& x) {
    Tensor y = x[0].clone();
    y.scatter_reduce_(0, idx, x[1], "mean");
    return y;
  });
  const Tensor vi = Tensor::from_vector(std::vector<std::int64_t>{2, 0, 2});
  replay("index_add_", [vi](const In& x) { Tensor y = x[0].clone(); y.index_add_(1, vi, x[1], -1.5); return y; });
  replay("index_copy_", [](const In& x) {
    Tensor y = x[0].clone();
    y.index_copy_(0, Tensor::from_vector(std::vector<std::int64_t>{3, 1}), x[1]);
    return y;
  });
  replay("index_fill_", [](const In& x) {
    Tensor y = x[0].clone();
    y.index_fill_(1, Tensor::from_vector(std::vector<std::int64_t>{4, 0}), -7.0);
    return y;
  });
  replay("masked_fill_", [mask](const In& x) { Tensor y = x[0].clone(); y.masked_fill_(mask, 3.0); return y; });
  replay("masked_scatter_", [mask](const In& x) { Tensor y = x[0].clone(); y.masked_scatter_(mask, x[1]); return y; });
  replay("index_put_acc_", [](const In& x) {
    Tensor y = x[0].clone();
    y.index_put_({Tensor::from_vector(std::vector<std::int64_t>{0, 2, 0})}, x[1], true);
    return y;
  });
}

TEST_CASE("in-place scatter family: the in-place rules (same storage, version, leaves, views)") {
  Tensor x = zeros({3, 4});
  const Tensor idx = Tensor::from_vector(std::vector<std::int64_t>{0, 2}, {1, 2});
  const auto before = x.storage().version();
  const Tensor& r = scatter_(x, 1, idx, 5.0);
  CHECK(&r == &x);
  CHECK(x.storage().version() > before);
  CHECK(test::values(x.narrow(0, 0, 1)) == V{5, 0, 5, 0});
  // A view of a larger tensor writes through (no grad recorded).
  Tensor big = zeros({4, 4});
  Tensor col = big.t().narrow(0, 1, 1);  // column 1 of big, non-contiguous
  col.index_fill_(1, Tensor::from_vector(std::vector<std::int64_t>{3}), 2.0);
  CHECK(big.to_host<float>()[3 * 4 + 1] == 2.0f);
  Tensor m = gt(Tensor::from_vector(V{1, -1, 2}), 0.0);
  Tensor v = Tensor::from_vector(V{1, 2, 3});
  v.masked_fill_(m, -1.0);
  CHECK(test::values(v) == V{-1, 2, -1});
  v.masked_scatter_(logical_not(m), Tensor::from_vector(V{9, 8}));
  CHECK(test::values(v) == V{-1, 9, -1});
  Tensor a = zeros({5});
  a.index_add_(0, Tensor::from_vector(std::vector<std::int64_t>{1, 1, 4}), Tensor::from_vector(std::vector<float>{1, 2, 3}));
  CHECK(test::values(a) == V{0, 3, 0, 0, 3});
  a.index_copy_(0, Tensor::from_vector(std::vector<std::int64_t>{0}), Tensor::from_vector(std::vector<float>{7}));
  a.scatter_add_(0, Tensor::from_vector(std::vector<std::int64_t>{0}), Tensor::from_vector(std::vector<float>{1}));
  a.scatter_reduce_(0, Tensor::from_vector(std::vector<std::int64_t>{4, 4}), Tensor::from_vector(std::vector<float>{2, 5}),
                    "prod");
  CHECK(test::values(a) == V{8, 3, 0, 0, 30});

  // A leaf that requires grad is refused under grad mode; fine under NoGradGuard.
  Tensor leaf = zeros({3}, {.requires_grad = true});
  const Tensor i1 = Tensor::from_vector(std::vector<std::int64_t>{1});
  CHECK_BRRR_ERROR(leaf.index_fill_(0, i1, 1.0), ErrorKind::autograd, "index_fill_");
  CHECK_BRRR_ERROR(leaf.scatter_(0, i1, Tensor::from_vector(std::vector<float>{1})), ErrorKind::autograd, "scatter_");
  {
    NoGradGuard g;
    leaf.index_fill_(0, i1, 1.0);
  }
  CHECK(test::values(leaf) == V{0, 1, 0});
  // A tensor saved for backward and then updated in place: backward throws.
  Tensor w = randn({3}, {.requires_grad = true});
  Tensor h = mul(w, 2.0);
  Tensor saved_user = mul(h, h);  // saves h
  {
    NoGradGuard g;
    h.masked_fill_(gt(h, 100.0), 0.0);  // bumps h's version
  }
  CHECK_BRRR_ERROR(saved_user.sum().backward(), ErrorKind::autograd, "");
  // Recorded: a non-leaf takes the history; the gradient of src flows through.
  Tensor src = randn({2}, {.dtype = DType::f64, .requires_grad = true});
  Tensor base = mul(ones({4}, {.dtype = DType::f64, .requires_grad = true}), 3.0);
  base.index_copy_(0, Tensor::from_vector(std::vector<std::int64_t>{3, 0}), src);
  CHECK(static_cast<bool>(base.grad_fn()));
  sum(mul(base, Tensor::from_vector(V{1, 2, 3, 4}))).backward();
  CHECK(test::values(src.grad()) == V{4, 1});
  // Errors of the out-of-place op name the in-place one's checks.
  CHECK_BRRR_ERROR(zeros({3}).index_add_(0, i1, zeros({2})), ErrorKind::shape, "index_add");
  CHECK_BRRR_ERROR(zeros({3}, {.dtype = DType::i64}).masked_scatter_(gt(zeros({3}), 0.0), randn({3})), ErrorKind::dtype,
                   "masked_scatter");
}

namespace {
// |x - want| within 6 standard errors: a correct sampler fails this with probability ~2e-9.
void check_within(double x, double want, double standard_error, const std::string& what) {
  INFO(what, ": got ", x, ", expected ", want, " +- 6 * ", standard_error);
  CHECK(std::abs(x - want) <= 6 * standard_error);
}

void check_poisson_statistics(std::uint64_t seed) {
  INFO("seed = ", seed);
  manual_seed(seed);
  constexpr std::int64_t n = 200000;
  for (double lambda : {0.05, 0.7, 3.0, 9.99, 10.0, 27.5, 1000.0, 1e6}) {
    INFO("rate ", lambda);
    std::vector<double> s = test::values(poisson(full({n}, lambda, {.dtype = DType::f64})));
    double mean = 0, m2 = 0;
    for (double v : s) {
      CHECK(v == std::floor(v));
      CHECK(v >= 0);
      mean += v;
    }
    mean /= n;
    for (double v : s) m2 += (v - mean) * (v - mean);
    const double var = m2 / (n - 1);
    check_within(mean, lambda, std::sqrt(lambda / n), "mean");
    check_within(var, lambda, std::sqrt((lambda + 2 * lambda * lambda) / n), "variance");
    if (lambda <= 30) {  // the probabilities of the likeliest counts
      std::map<std::int64_t, double> freq;
      for (double v : s) freq[static_cast<std::int64_t>(v)] += 1.0 / n;
      for (std::int64_t k = 0; k < 60; ++k) {
        const double p = std::exp(k * std::log(lambda) - lambda - std::lgamma(k + 1.0));
        if (p < 1e-3) continue;
        check_within(freq[k], p, std::sqrt(p * (1 - p) / n), "P(X = " + std::to_string(k) + ")");
      }
    }
  }
}
}  // namespace

TEST_CASE("poisson: a function of (seed, offset, element); statistics; dtypes; errors") {
  Tensor rates = Tensor::from_vector(V{0, 0.5, 3, 9.5, 10, 50, 1e4, INFINITY}, {2, 4});
  manual_seed(7);
  Tensor a = poisson(rates);
  manual_seed(7);
  Tensor b = poisson(rates);
  CHECK(test::values(a) == test::values(b));
  CHECK(a.shape() == rates.shape());
  CHECK(a.dtype() == DType::f64);
  CHECK(!a.requires_grad());
  std::vector<double> av = test::values(a);
  CHECK(av[0] == 0);
  CHECK(av[7] == INFINITY);
  Tensor c = poisson(rates);  // the generator moved on
  CHECK(test::values(c) != av);
  // Element i depends only on its own words: a prefix of a larger draw is the smaller draw.
  manual_seed(7);
  Tensor wide = poisson(cat({rates.reshape({-1}), full({1000}, 4.0, {.dtype = DType::f64})}, 0));
  CHECK(test::values(wide.narrow(0, 0, 8)) == av);
  // Non-contiguous rates and other dtypes draw the same samples (converted).
  manual_seed(7);
  Tensor t = poisson(rates.t().contiguous().t());
  CHECK(test::values(t) == av);
  manual_seed(7);
  CHECK(test::values(poisson(rates.to(DType::f32))) == av);
  manual_seed(7);
  std::vector<double> bf = test::values(poisson(rates.to(DType::bf16)));
  CHECK(bf[1] == av[1]);
  CHECK(poisson(zeros({0, 3})).shape() == Shape{0, 3});
  CHECK_BRRR_ERROR(poisson(Tensor::from_vector(V{1, -0.5})), ErrorKind::value, "poisson: rates must be non-negative");
  CHECK_BRRR_ERROR(poisson(Tensor::from_vector(V{std::nan("")})), ErrorKind::value, "poisson");
  CHECK_BRRR_ERROR(poisson(randint(0, 3, {3})), ErrorKind::dtype, "poisson");
  CHECK_BRRR_ERROR(poisson(Tensor()), ErrorKind::value, "poisson");
}

TEST_CASE("poisson: mean, variance and small-count probabilities, fixed and fresh seeds") {
  check_poisson_statistics(12345);
  FRESH_SEED();
  check_poisson_statistics(seed_);
}
