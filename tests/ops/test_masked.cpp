// nonzero, masked_select, masked_scatter on the CPU: PyTorch's examples by hand, broadcast
// masks, NaN counted as nonzero, 0-d and empty inputs, errors, and gradients against
// central differences.
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

namespace {
using V = std::vector<double>;
using In = std::vector<Tensor>;
}  // namespace

TEST_CASE("nonzero: coordinates in row-major order, NaN counts, 0-d and empty") {
  Tensor x = Tensor::from_vector(V{0.6, 0.0, 0.0, 0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0, 1.2, 0.0, 0.0, 0.0, 0.0, -0.4}, {4, 4});
  Tensor nz = nonzero(x);
  CHECK(nz.dtype() == DType::i64);
  CHECK(nz.shape() == Shape{4, 2});
  CHECK(test::values(nz) == V{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(test::values(Tensor::from_vector(V{1, 1, 1, 0, 1}).nonzero()) == V{0, 1, 2, 4});
  CHECK(test::values(nonzero(Tensor::from_vector(V{NAN, 0, -0.0}))) == V{0});
  CHECK(nonzero(full({}, 3.0)).shape() == Shape{1, 0});
  CHECK(nonzero(zeros({})).shape() == Shape{0, 0});
  CHECK(nonzero(zeros({2, 0, 3})).shape() == Shape{0, 3});
  CHECK(test::values(nonzero(test::make(DType::boolean, {0, 1, 1, 0}, {2, 2}))) == V{0, 1, 1, 0});
  CHECK(test::values(nonzero(test::make(DType::i32, {0, -3, 0}))) == V{1});
}

TEST_CASE("masked_select and masked_scatter: values, broadcast, errors") {
  Tensor x = Tensor::from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = test::make(DType::boolean, {1, 0, 1, 0, 0, 1}, {2, 3});
  CHECK(test::values(masked_select(x, mask)) == V{1, 3, 6});
  CHECK(test::values(x.masked_select(test::make(DType::boolean, {0, 1, 1}))) == V{2, 3, 5, 6});  // mask broadcast
  CHECK(test::values(masked_select(Tensor::from_vector(V{7}), mask)) == V{7, 7, 7});  // x broadcast
  CHECK(masked_select(x, zeros({2, 3}, {.dtype = DType::boolean})).shape() == Shape{0});
  Tensor src = Tensor::from_vector(V{10, 20, 30, 40, 50, 60, 70});
  CHECK(test::values(masked_scatter(x, mask, src)) == V{10, 2, 20, 4, 5, 30});
  CHECK(test::values(x.masked_scatter(test::make(DType::boolean, {1, 0, 1}), src)) == V{10, 2, 20, 30, 5, 40});
  CHECK(test::values(masked_scatter(x, zeros({3}, {.dtype = DType::boolean}), zeros({0}, {.dtype = DType::f64}))) == test::values(x));
  CHECK(test::values(x) == V{1, 2, 3, 4, 5, 6});  // out of place
  CHECK_BRRR_ERROR(masked_select(x, mask.to(DType::f32)), ErrorKind::dtype, "masked_select", "bool");
  CHECK_BRRR_ERROR(masked_select(x, zeros({4}, {.dtype = DType::boolean})), ErrorKind::shape, "masked_select");
  CHECK_BRRR_ERROR(masked_scatter(x, mask, Tensor::from_vector(V{1, 2})), ErrorKind::value, "masked_scatter", "3 true");
  CHECK_BRRR_ERROR(masked_scatter(x, mask, src.to(DType::f32)), ErrorKind::dtype, "masked_scatter");
  CHECK_BRRR_ERROR(masked_scatter(Tensor::from_vector(V{1, 2, 3}), zeros({2, 3}, {.dtype = DType::boolean}), src),
                   ErrorKind::shape, "masked_scatter");
}

TEST_CASE("masked_select and masked_scatter: gradients against central differences") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  auto normal = [&](Shape s) { return Tensor::from_vector(test::normal_values(rng, test::numel_of(s)), s); };
  Tensor mask = lt(rand({3, 4}), 0.5);
  CHECK(autograd::gradcheck([mask](const In& v) { return masked_select(v[0], mask); }, {normal({3, 4})}));
  CHECK(autograd::gradcheck([mask](const In& v) { return masked_select(v[0], mask); }, {normal({4})}));  // broadcast x
  CHECK(autograd::gradcheck([mask](const In& v) { return masked_scatter(v[0], mask, v[1]); }, {normal({3, 4}), normal({13})}));
}
