// interpolate, nn::Upsample, mode, poisson and the in-place scatter family on cuda:0 against
// the CPU on the same inputs: every mode (nearest, nearest-exact, linear, bilinear, bicubic,
// trilinear on 3-D, 4-D and 5-D inputs) with size / scale_factor / align_corners in every
// floating dtype, non-contiguous inputs, up- and downsampling, gradients (the CUDA backward
// adds with atomics: the scatter tolerance row); mode's values and indices equal to the CPU's
// (both sorts are stable); poisson's samples equal to the CPU's for the same seed, at every
// rate range, and a negative rate reported as the deferred device error. Without a CUDA
// device the suite exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

namespace {

using In = std::vector<Tensor>;
using test::gpu;

testing::CloseOptions tol(DType d) {
  switch (d) {
    case DType::bf16: return {.rtol = 1.6e-2, .atol = 1e-2};
    case DType::f16: return {.rtol = 2e-3, .atol = 2e-3};
    case DType::f32: return {.rtol = 1e-5, .atol = 1e-5};
    case DType::f64: return {.rtol = 1e-12, .atol = 1e-12};
    case DType::i32: case DType::i64: case DType::boolean: return {};
  }
  return {};
}

void parity(const std::string& what, const std::function<Tensor(const In&)>& f, const In& cpu_in, bool grads = false) {
  test::parity(what, f, cpu_in, grads, {}, tol);
}

}  // namespace

TEST_CASE("gpu interpolate: every mode, size or scale_factor, align_corners, dtype; forward and backward") {
  manual_seed(21);
  struct Case {
    const char* name;
    InterpolateOptions o;
    int rank;
  };
  const Case cases[] = {
      {"nearest up", {.size = {61, 97}}, 4},
      {"nearest down", {.size = {7, 5}}, 4},
      {"nearest scale 2.2", {.scale_factor = {2.2}}, 4},
      {"nearest scale (1.7, 0.6)", {.scale_factor = {1.7, 0.6}}, 4},
      {"bilinear up", {.size = {61, 97}, .mode = "bilinear"}, 4},
      {"bilinear up align", {.size = {61, 97}, .mode = "bilinear", .align_corners = true}, 4},
      {"bilinear down", {.size = {7, 5}, .mode = "bilinear"}, 4},
      {"bilinear scale", {.scale_factor = {1.7, 0.6}, .mode = "bilinear"}, 4},
      {"bilinear recompute", {.scale_factor = {1.7, 0.6}, .mode = "bilinear", .recompute_scale_factor = true}, 4},
      {"nearest 3-d", {.scale_factor = {2.5}}, 3},
      {"linear", {.size = {301}, .mode = "linear"}, 3},
      {"linear align", {.size = {301}, .mode = "linear", .align_corners = true}, 3},
      {"linear down", {.size = {13}, .mode = "linear"}, 3},
      {"nearest-exact up", {.size = {61, 97}, .mode = "nearest-exact"}, 4},
      {"nearest-exact down", {.size = {7, 5}, .mode = "nearest-exact"}, 4},
      {"nearest-exact scale (1.7, 0.6)", {.scale_factor = {1.7, 0.6}, .mode = "nearest-exact"}, 4},
      {"nearest-exact 3-d", {.scale_factor = {2.5}, .mode = "nearest-exact"}, 3},
      {"bicubic up", {.size = {41, 53}, .mode = "bicubic"}, 4},  // ~50 atomic adds per input gradient
      {"bicubic up align", {.size = {41, 53}, .mode = "bicubic", .align_corners = true}, 4},
      {"bicubic down", {.size = {7, 5}, .mode = "bicubic"}, 4},
      {"bicubic down align", {.size = {7, 5}, .mode = "bicubic", .align_corners = true}, 4},
      {"bicubic scale", {.scale_factor = {1.7, 0.6}, .mode = "bicubic"}, 4},
      {"bicubic to 1", {.size = {1, 3}, .mode = "bicubic"}, 4},
      {"trilinear up", {.size = {15, 19, 23}, .mode = "trilinear"}, 5},
      {"trilinear up align", {.size = {15, 19, 23}, .mode = "trilinear", .align_corners = true}, 5},
      {"trilinear down", {.size = {4, 5, 3}, .mode = "trilinear"}, 5},
      {"trilinear scale", {.scale_factor = {1.5, 0.7, 2.3}, .mode = "trilinear"}, 5},
      {"nearest 5-d", {.scale_factor = {1.5, 0.7, 2.3}}, 5},
      {"nearest-exact 5-d", {.size = {17, 5, 29}, .mode = "nearest-exact"}, 5},
      {"area 5-d", {.size = {4, 5, 3}, .mode = "area"}, 5},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (const Case& c : cases) {
      const Shape shape = c.rank == 3 ? Shape{3, 5, 101} : c.rank == 4 ? Shape{3, 5, 23, 31} : Shape{2, 3, 9, 11, 13};
      Tensor x = randn(shape, {.dtype = DType::f64}).to(dt);
      const bool grads = dt == DType::f32 || dt == DType::f64;
      auto f = [o = c.o](const In& i) { return interpolate(i[0], o); };
      parity(std::string(c.name) + " " + to_string(dt), f, {x}, grads);
      auto ft = [o = c.o](const In& i) { return interpolate(i[0].transpose(-1, -2), o); };
      parity(std::string(c.name) + " non-contiguous " + to_string(dt), ft, {x}, grads);
    }
  // A large input (more elements than one grid's threads: the grid-stride loop).
  parity("bilinear large", [](const In& i) { return interpolate(i[0], {.scale_factor = {2}, .mode = "bilinear"}); },
         {randn({8, 64, 128, 128})});
  parity("bicubic large", [](const In& i) { return interpolate(i[0], {.scale_factor = {2}, .mode = "bicubic"}); },
         {randn({8, 64, 128, 128})});
  parity("trilinear large", [](const In& i) { return interpolate(i[0], {.scale_factor = {2}, .mode = "trilinear"}); },
         {randn({2, 16, 32, 64, 64})});
  nn::Upsample up({.scale_factor = {2}, .mode = "bilinear", .align_corners = true});
  Tensor x = randn({2, 3, 8, 8});
  test::check_parity(up(x.to(gpu())), up(x), "nn::Upsample", tol(DType::f32));
}

TEST_CASE("gpu mode: values and indices equal to the CPU's") {
  manual_seed(22);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean})
    for (std::int64_t d : {0, 1}) {
      Tensor x = randint(0, 5, {257, 129}).to(dt);
      parity(std::string("mode values ") + to_string(dt) + " dim " + std::to_string(d), [d](const In& i) { return mode(i[0], d).values; },
             {x});
      parity(std::string("mode indices ") + to_string(dt) + " dim " + std::to_string(d),
             [d](const In& i) { return mode(i[0], d, true).indices; }, {x});
    }
  const double nan = std::nan("");
  Tensor special = Tensor::from_vector(std::vector<double>{nan, 1, -0.0, 0.0, nan, 1, 2, -0.0, 0.0}, {1, 9});
  parity("mode NaN / -0.0", [](const In& i) { return mode(i[0], 1).indices; }, {special});
  parity("mode gradient", [](const In& i) { return mode(i[0], 1).values; }, {randn({64, 33}, {.dtype = DType::f64})}, true);
}

TEST_CASE("gpu in-place scatter family: GPU equals CPU") {
  manual_seed(23);
  // Distinct rows per column: where sources collide, scatter_'s winner is any one on CUDA.
  Tensor idx = argsort(rand({6, 7}), 0).narrow(0, 0, 4).contiguous();
  Tensor src = randn({4, 7});
  Tensor mask = gt(randn({6, 7}), 0.0);
  Tensor vi = Tensor::from_vector(std::vector<std::int64_t>{5, 0, 3});
  auto on = [](const Tensor& t, const Tensor& like) { return t.to(like.device()); };
  parity("scatter_", [&](const In& i) { Tensor y = i[0].clone(); y.scatter_(0, on(idx, y), on(src, y)); return y; },
         {randn({6, 7})});
  parity("scatter_ value", [&](const In& i) { Tensor y = i[0].clone(); y.scatter_(0, on(idx, y), 1.5); return y; },
         {randn({6, 7})});
  parity("scatter_add_", [&](const In& i) {
    Tensor y = i[0].clone();
    y.scatter_add_(0, on(idx, y), on(Tensor::from_vector(std::vector<float>(28, 0.5f), {4, 7}), y));
    return y;
  }, {randint(-4, 5, {6, 7}).to(DType::f32)});
  parity("scatter_reduce_ amax", [&](const In& i) {
    Tensor y = i[0].clone();
    y.scatter_reduce_(0, on(idx, y), on(src, y), "amax", false);
    return y;
  }, {randn({6, 7})});
  parity("index_add_", [&](const In& i) { Tensor y = i[0].clone(); y.index_add_(0, on(vi, y), i[1], 2); return y; },
         {randint(-4, 5, {6, 7}).to(DType::f32), randint(-4, 5, {3, 7}).to(DType::f32)});
  parity("index_copy_", [&](const In& i) { Tensor y = i[0].clone(); y.index_copy_(0, on(vi, y), i[1]); return y; },
         {randn({6, 7}), randn({3, 7})}, true);
  parity("index_fill_", [&](const In& i) { Tensor y = i[0].clone(); y.index_fill_(1, on(vi, y), -2.0); return y; },
         {randn({6, 7})}, true);
  parity("masked_fill_", [&](const In& i) { Tensor y = i[0].clone(); y.masked_fill_(on(mask, y), 4.0); return y; },
         {randn({6, 7})}, true);
  parity("masked_scatter_", [&](const In& i) { Tensor y = i[0].clone(); y.masked_scatter_(on(mask, y), i[1]); return y; },
         {randn({6, 7}), randn({42})}, true);
}

TEST_CASE("gpu poisson: the CPU's samples for the same seed; negative rates are a deferred device error") {
  for (DType dt : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    // Every range: zero, inversion (< 10), PTRS (>= 10) up to huge rates, +inf.
    Tensor rates = mul(rand({1 << 20}, {.dtype = DType::f64}), 30.0);
    rates = cat({rates, Tensor::from_vector(std::vector<double>{0, 1e-9, 9.999999, 10, 1e5, 1e12, INFINITY})}, 0).to(dt);
    manual_seed(31);
    Tensor c = poisson(rates);
    manual_seed(31);
    Tensor g = poisson(rates.to(gpu()));
    INFO(to_string(dt));
    CHECK(g.device() == gpu());
    CHECK(g.dtype() == dt);
    std::vector<double> cv = test::values(c), gv = test::values(g.to(Device::cpu()));
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < cv.size(); ++i) differ += cv[i] != gv[i];
    CHECK(differ == 0);
    // The generator advanced the same way on both devices.
    Tensor next_gpu = rand({4}, {.device = gpu()}).to(Device::cpu());
    manual_seed(31);
    (void)poisson(zeros({rates.numel()}));
    CHECK(test::values(next_gpu) == test::values(rand({4})));
  }
  cuda::synchronize();
  Tensor bad = Tensor::from_vector(std::vector<float>{1, -2, 3}).to(gpu());
  Tensor s = poisson(bad);
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::value, "poisson", "cuda:0");
  std::vector<float> sv = s.to_host<float>();
  CHECK(std::isnan(sv[1]));
  CHECK_NOTHROW(cuda::synchronize());
}
