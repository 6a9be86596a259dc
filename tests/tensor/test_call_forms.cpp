// The call forms LibTorch accepts, on the CPU: an int where a dim list is taken, an int where
// a 2-D size is taken, Tensor::from_vector with a braced list, tensor({...}) literals (nested
// for 2-D, dtype inference, ragged lists refused) and item<T>() converting from any dtype
// (truncation, overflow errors), with item_exact<T>() keeping the strict form.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <array>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

TEST_CASE("an int where a dim list is taken") {
  FRESH_SEED();
  Tensor x = randn({3, 4}, {.dtype = DType::f64});
  CHECK(values(sum(x, 1)) == values(sum(x, {1})));
  CHECK(values(mean(x, 0, true)) == values(mean(x, {0}, true)));
  CHECK(values(amax(x, -1)) == values(amax(x, {-1})));
  CHECK(values(var(x, 1)) == values(var(x, {1})));
  Tensor lse = logsumexp(x, 1);
  std::vector<double> xv = values(x);
  for (int r = 0; r < 3; ++r) {
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(xv[r * 4 + c]);
    CHECK(values(lse)[r] == doctest::Approx(std::log(z)).epsilon(1e-12));
  }
}

TEST_CASE("an int where a 2-D size is taken") {
  FRESH_SEED();
  Tensor x = randn({2, 3, 6, 6});
  CHECK(values(max_pool2d(x, 2)) == values(max_pool2d(x, Pool2dOptions{.kernel_size = {2, 2}})));
  CHECK(max_pool2d(x, 3).shape() == Shape{2, 3, 2, 2});
  CHECK(values(avg_pool2d(x, 2)) == values(avg_pool2d(x, {.kernel_size = {2, 2}, .stride = 2})));
  CHECK(values(max_pool2d(x, {.kernel_size = 3, .stride = 1, .padding = 1})) ==
        values(max_pool2d(x, {.kernel_size = {3, 3}, .stride = std::array<std::int64_t, 2>{1, 1}, .padding = {1, 1}})));
  Tensor w = randn({4, 3, 3, 3});
  Tensor a = conv2d(x, w, {}, {.stride = 2, .padding = 1});
  Tensor b = conv2d(x, w, {}, {.stride = {2, 2}, .padding = {1, 1}});
  CHECK(a.shape() == Shape{2, 4, 3, 3});
  CHECK(values(a) == values(b));
  CHECK(conv2d(x, w, {}, {.stride = {1, 2}}).shape() == Shape{2, 4, 4, 2});
  CHECK(adaptive_avg_pool2d(x, 1).shape() == Shape{2, 3, 1, 1});
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.stride = {1, 2, 3}}), ErrorKind::value, "expected 2 values, got 3");
}

TEST_CASE("from_vector with a braced list and tensor() literals") {
  Tensor a = Tensor::from_vector({1.f, 2.f, 3.f});
  CHECK(a.dtype() == DType::f32);
  CHECK(values(a) == std::vector<double>{1, 2, 3});
  Tensor b = Tensor::from_vector({1.0, 2.0, 3.0, 4.0}, {2, 2});
  CHECK(b.dtype() == DType::f64);
  CHECK(b.shape() == Shape{2, 2});

  Tensor s = tensor(2.5);
  CHECK(s.dim() == 0);
  CHECK(s.dtype() == DType::f32);
  CHECK(s.item<float>() == 2.5f);
  Tensor i = tensor({1, 2, 3});
  CHECK(i.dtype() == DType::i64);
  CHECK(i.shape() == Shape{3});
  CHECK(values(i) == std::vector<double>{1, 2, 3});
  Tensor m = tensor({{1, 2}, {3, 4}, {5, 6}});
  CHECK(m.shape() == Shape{3, 2});
  CHECK(values(m) == std::vector<double>{1, 2, 3, 4, 5, 6});
  Tensor f = tensor({{1.5, 2}, {3, 4}});  // one float makes it f32, as torch.tensor
  CHECK(f.dtype() == DType::f32);
  CHECK(values(f) == std::vector<double>{1.5, 2, 3, 4});
  Tensor one = tensor({7});
  CHECK(one.shape() == Shape{1});
  Tensor nested = tensor({{{1}, {2}}});
  CHECK(nested.shape() == Shape{1, 2, 1});
  CHECK(tensor({true, false}).dtype() == DType::boolean);
  CHECK(tensor({}).shape() == Shape{0});
  Tensor d = tensor({1, 2}, {.dtype = DType::f64, .requires_grad = true});
  CHECK(d.dtype() == DType::f64);
  CHECK(d.requires_grad());
  CHECK(tensor({std::int64_t{1} << 60}).item<std::int64_t>() == (std::int64_t{1} << 60));  // exact
  CHECK(values(tensor(std::vector<float>{0.5f, 1.5f})) == std::vector<double>{0.5, 1.5});
  CHECK_BRRR_ERROR(tensor({{1, 2}, {3}}), ErrorKind::shape, "tensor", "regular");
  CHECK_BRRR_ERROR(tensor({1, {2, 3}}), ErrorKind::shape, "tensor", "regular");
}

TEST_CASE("item<T>() converts from any dtype; item_exact<T>() does not") {
  CHECK(tensor(3.75).item<double>() == 3.75);
  CHECK(tensor(3.75).item<std::int64_t>() == 3);
  CHECK(tensor(-3.75).item<std::int32_t>() == -3);
  CHECK(tensor(7).item<float>() == 7.0f);
  CHECK(tensor(7).item<bool>());
  CHECK(!tensor(0.0).item<bool>());
  CHECK(tensor(true).item<std::int64_t>() == 1);
  CHECK(static_cast<float>(tensor(1.5).item<half>()) == 1.5f);
  CHECK(static_cast<float>(tensor(1.5).to(DType::bf16).item<bfloat16>()) == 1.5f);
  CHECK(tensor(std::int64_t{5'000'000'000}).item<double>() == 5e9);
  CHECK(tensor(2.5).to(DType::f16).item<double>() == 2.5);
  CHECK_BRRR_ERROR(tensor(std::int64_t{5'000'000'000}).item<std::int32_t>(), ErrorKind::value, "item<i32>",
                   "5000000000", "overflow");
  CHECK_BRRR_ERROR(full({}, std::nan("")).item<std::int64_t>(), ErrorKind::value, "nan", "overflow");
  CHECK_BRRR_ERROR(full({}, 1e10).item<std::int32_t>(), ErrorKind::value, "overflow");
  CHECK(full({}, 2147483647.9, {.dtype = DType::f64}).item<std::int32_t>() == 2147483647);
  CHECK_BRRR_ERROR(tensor(1.5).item_exact<double>(), ErrorKind::dtype, "item_exact<f64>", "f32");
  CHECK(tensor(1.5).item_exact<float>() == 1.5f);
  CHECK_BRRR_ERROR(tensor({1, 2}).item<double>(), ErrorKind::shape, "exactly one element");
}
