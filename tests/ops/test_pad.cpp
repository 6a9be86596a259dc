// pad (constant with value and cropping, reflect, replicate, circular; 1-D and 2-D) and
// pixel_shuffle / pixel_unshuffle on the CPU against PyTorch fixtures (outputs and input
// gradients, f64 and f32), gradcheck, the round trip and the errors.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/torch_fixtures.hpp"

using namespace brrr;
using namespace test;

TEST_CASE("pad and pixel_shuffle match PyTorch (f64, f32)") {
  for (std::string mode : {"constant", "reflect", "replicate", "circular"}) {
    INFO(mode);
    FixtureFn f2 = [mode](const std::vector<Tensor>& in) { return pad(in[0], {2, 1, 3, 2}, mode, 1.5); };
    FixtureFn f1 = [mode](const std::vector<Tensor>& in) { return pad(in[0], {3, 2}, mode); };
    for (DType dt : {DType::f64, DType::f32}) {
      testing::CloseOptions tol{.rtol = dt == DType::f64 ? 1e-12 : 1e-6, .atol = dt == DType::f64 ? 1e-12 : 1e-6};
      replay("convs.safetensors", "pad_" + mode, f2, dt, Device::cpu(), tol);
      replay("convs.safetensors", "pad1d_" + mode, f1, dt, Device::cpu(), tol);
    }
  }
  replay("convs.safetensors", "pad_crop",
         [](const std::vector<Tensor>& in) { return pad(in[0], {-1, 2, 0, -2, 1, 1}, "constant", -2.0); });
  replay("convs.safetensors", "pixel_shuffle", [](const std::vector<Tensor>& in) { return pixel_shuffle(in[0], 2); });
  replay("convs.safetensors", "pixel_unshuffle", [](const std::vector<Tensor>& in) { return pixel_unshuffle(in[0], 3); });
}

TEST_CASE("pad, pixel_shuffle: gradcheck, round trip, errors") {
  FRESH_SEED();
  Tensor x = randn({1, 2, 3, 4}, {.dtype = DType::f64});
  for (std::string mode : {"constant", "reflect", "replicate", "circular"})
    CHECK(autograd::gradcheck([mode](const std::vector<Tensor>& in) { return pad(in[0], {2, 3, 1, 2}, mode); }, {x}));
  Tensor y = randn({2, 3, 8, 6});
  CHECK(values(pixel_shuffle(pixel_unshuffle(y, 2), 2)) == values(y));
  CHECK(pixel_shuffle(randn({5, 2, 18, 3, 3}), 3).shape() == Shape{5, 2, 2, 9, 9});
  CHECK_BRRR_ERROR(pad(x, {1, 1}, "mirror"), ErrorKind::value, "pad", "mirror");
  CHECK_BRRR_ERROR(pad(x, {1}), ErrorKind::shape, "pad");
  CHECK_BRRR_ERROR(pad(x, {4, 0}, "reflect"), ErrorKind::value, "reflect", "smaller");
  CHECK_BRRR_ERROR(pad(x, {5, 0}, "circular"), ErrorKind::value, "circular");
  CHECK_BRRR_ERROR(pad(x, {-1, 0}, "replicate"), ErrorKind::value, "non-negative");
  CHECK_BRRR_ERROR(pad(x, {1, 1, 1, 1, 1, 1, 1, 1}, "reflect"), ErrorKind::shape, "reflect");
  CHECK_BRRR_ERROR(pad(x, {-3, -2}), ErrorKind::shape, "negative size");
  CHECK_BRRR_ERROR(pixel_shuffle(randn({1, 3, 2, 2}), 2), ErrorKind::shape, "pixel_shuffle");
  CHECK_BRRR_ERROR(pixel_unshuffle(randn({1, 3, 5, 4}), 2), ErrorKind::shape, "pixel_unshuffle");
  // Amounts and factors near 2^63 are errors, not sizes that wrap (signed overflow).
  const std::int64_t huge = std::int64_t{1} << 62;
  CHECK_BRRR_ERROR(pad(x, {huge, huge}), ErrorKind::value, "pad", "past 2^63");
  CHECK_BRRR_ERROR(pad(x, {INT64_MIN, INT64_MIN}), ErrorKind::value, "pad", "past 2^63");
  CHECK_BRRR_ERROR(pad(x, {INT64_MIN, 0}), ErrorKind::shape, "pad", "negative size");
  CHECK_BRRR_ERROR(pixel_shuffle(randn({1, 4, 2, 2}), huge), ErrorKind::shape, "pixel_shuffle", "4611686018427387904");
  CHECK_BRRR_ERROR(pixel_shuffle(randn({1, 0, std::int64_t{1} << 40, 2}), std::int64_t{1} << 31), ErrorKind::value, "pixel_shuffle",
                   "2^63");
  CHECK_BRRR_ERROR(pixel_unshuffle(randn({1, 3, 0, 0}), huge), ErrorKind::value, "pixel_unshuffle", "2^63");
}
