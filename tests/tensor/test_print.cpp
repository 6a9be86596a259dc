// operator<< for tensors: exact text for small cases of every style (fixed 4 decimals, whole
// floats "1.", integers, bool, scientific, nan/inf, 0-d, empty, 3-d, strided views), the
// summary of tensors over 1000 elements, and random values read back from the text.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

std::string str(const Tensor& t) {
  std::ostringstream os;
  os << t;
  return os.str();
}

/// The numbers of a printed tensor, in order ("..." skipped), parsed back.
std::vector<double> printed_numbers(const std::string& text) {
  std::size_t begin = text.find("tensor(") + 7, end = text.find(", shape=");
  std::string body = text.substr(begin, end - begin);
  for (char& c : body)
    if (c == '[' || c == ']' || c == ',' || c == '\n') c = ' ';
  std::istringstream is(body);
  std::vector<double> out;
  std::string word;
  while (is >> word)
    if (word != "...") out.push_back(std::stod(word));
  return out;
}

}  // namespace

TEST_CASE("print: f32 with 4 decimals, aligned, and the shape, dtype and device") {
  Tensor t = Tensor::from_vector(std::vector<float>{0.5f, -1.25f, 3.14159f, 100.0f}, {2, 2});
  CHECK(str(t) ==
        "tensor([[  0.5000,  -1.2500],\n"
        "        [  3.1416, 100.0000]], shape=[2, 2], dtype=f32, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<float>{0.25f, -0.125f})) ==
        "tensor([ 0.2500, -0.1250], shape=[2], dtype=f32, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<double>{2.0 / 3})) == "tensor([0.6667], shape=[1], dtype=f64, device=cpu)");
  CHECK(str(full({2}, 0.1, {.dtype = DType::bf16})) ==
        "tensor([0.1001, 0.1001], shape=[2], dtype=bf16, device=cpu)");  // bf16(0.1) = 0.10009765625
  CHECK(str(full({1}, 0.1, {.dtype = DType::f16})) == "tensor([0.1000], shape=[1], dtype=f16, device=cpu)");
  std::string s = str(rand({3, 2}));
  CHECK(s.find("shape=[3, 2]") != std::string::npos);
  CHECK(s.find("dtype=f32") != std::string::npos);
  CHECK(s.find("device=cpu") != std::string::npos);
  CHECK(s.rfind("tensor(", 0) == 0);
  CHECK(s.back() == ')');
}

TEST_CASE("print: whole-number floats as \"1.\", integers, bool") {
  CHECK(str(Tensor::from_vector(std::vector<float>{1, 2, -3})) ==
        "tensor([ 1.,  2., -3.], shape=[3], dtype=f32, device=cpu)");
  CHECK(str(ones({2}, {.dtype = DType::f64})) == "tensor([1., 1.], shape=[2], dtype=f64, device=cpu)");
  CHECK(str(arange(6).view({2, 3})) ==
        "tensor([[0, 1, 2],\n"
        "        [3, 4, 5]], shape=[2, 3], dtype=i64, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<std::int32_t>{-12, 7, 100})) ==
        "tensor([-12,   7, 100], shape=[3], dtype=i32, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<bool>{true, false})) ==
        "tensor([ true, false], shape=[2], dtype=bool, device=cpu)");
  CHECK(str(full({2, 2}, 1.0, {.dtype = DType::boolean})) ==
        "tensor([[true, true],\n"
        "        [true, true]], shape=[2, 2], dtype=bool, device=cpu)");
  // i64 past 2^53 prints its own digits, not its nearest double's (INT64_MAX printed as
  // 9223372036854775808, 2^53 + 1 as 9007199254740992).
  CHECK(str(Tensor::from_vector(std::vector<std::int64_t>{INT64_MAX, -5})) ==
        "tensor([9223372036854775807,                  -5], shape=[2], dtype=i64, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<std::int64_t>{INT64_MIN, (std::int64_t{1} << 53) + 1}).view({2, 1})) ==
        "tensor([[-9223372036854775808],\n"
        "        [    9007199254740993]], shape=[2, 1], dtype=i64, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<std::int64_t>{INT64_MAX}).view({})) ==
        "tensor(9223372036854775807, shape=[], dtype=i64, device=cpu)");
}

TEST_CASE("print: scientific for tiny or huge values, nan and inf") {
  CHECK(str(Tensor::from_vector(std::vector<float>{1e-5f, 1.0f})) ==
        "tensor([1.0000e-05, 1.0000e+00], shape=[2], dtype=f32, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<double>{1e9, 1.5})) ==
        "tensor([1.0000e+09, 1.5000e+00], shape=[2], dtype=f64, device=cpu)");
  CHECK(str(Tensor::from_vector(std::vector<float>{NAN, INFINITY, -INFINITY, 1.5f})) ==
        "tensor([   nan,    inf,   -inf, 1.5000], shape=[4], dtype=f32, device=cpu)");
}

TEST_CASE("print: 0-d, empty, 3-d, strided views, undefined") {
  CHECK(str(full({}, 2.5)) == "tensor(2.5000, shape=[], dtype=f32, device=cpu)");
  CHECK(str(full({}, 3.0)) == "tensor(3., shape=[], dtype=f32, device=cpu)");
  CHECK(str(arange(5).select(0, 4)) == "tensor(4, shape=[], dtype=i64, device=cpu)");
  CHECK(str(zeros({0})) == "tensor([], shape=[0], dtype=f32, device=cpu)");
  CHECK(str(zeros({0, 3}, {.dtype = DType::i32})) == "tensor([], shape=[0, 3], dtype=i32, device=cpu)");
  CHECK(str(arange(24).view({2, 3, 4})) ==
        "tensor([[[ 0,  1,  2,  3],\n"
        "         [ 4,  5,  6,  7],\n"
        "         [ 8,  9, 10, 11]],\n"
        "\n"
        "        [[12, 13, 14, 15],\n"
        "         [16, 17, 18, 19],\n"
        "         [20, 21, 22, 23]]], shape=[2, 3, 4], dtype=i64, device=cpu)");
  // A transposed view prints in its own (logical) order.
  CHECK(str(arange(12, {.dtype = DType::f64}).view({3, 4}).t()) ==
        "tensor([[ 0.,  4.,  8.],\n"
        "        [ 1.,  5.,  9.],\n"
        "        [ 2.,  6., 10.],\n"
        "        [ 3.,  7., 11.]], shape=[4, 3], dtype=f64, device=cpu)");
  CHECK(str(arange(10).slice(0, 1, 10, 4)) == "tensor([1, 5, 9], shape=[3], dtype=i64, device=cpu)");
  CHECK(str(arange(3).expand({2, 3})) ==
        "tensor([[0, 1, 2],\n"
        "        [0, 1, 2]], shape=[2, 3], dtype=i64, device=cpu)");
  CHECK(str(Tensor()) == "tensor(undefined)");
}

TEST_CASE("print: more than 1000 elements are summarised with \"...\"") {
  CHECK(str(arange(2000)) == "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64, device=cpu)");
  // Exactly 1000: printed in full; 1001: summarised.
  std::string all = str(arange(1000));
  CHECK(all.find("...") == std::string::npos);
  CHECK(printed_numbers(all) == iota(1000));
  CHECK(str(arange(1001)).find("...") != std::string::npos);
  CHECK(printed_numbers(str(arange(1001))) == std::vector<double>{0, 1, 2, 998, 999, 1000});
  // 2-d: the first and last 3 rows, each with its first and last 3 columns.
  std::string m = str(arange(1200, {.dtype = DType::f32}).view({40, 30}));
  CHECK(m ==
        "tensor([[   0.,    1.,    2., ...,   27.,   28.,   29.],\n"
        "        [  30.,   31.,   32., ...,   57.,   58.,   59.],\n"
        "        [  60.,   61.,   62., ...,   87.,   88.,   89.],\n"
        "        ...,\n"
        "        [1110., 1111., 1112., ..., 1137., 1138., 1139.],\n"
        "        [1140., 1141., 1142., ..., 1167., 1168., 1169.],\n"
        "        [1170., 1171., 1172., ..., 1197., 1198., 1199.]], shape=[40, 30], dtype=f32, device=cpu)");
  // Short dims are not cut: [2, 600] keeps both rows.
  std::vector<double> wide = printed_numbers(str(arange(1200).view({2, 600})));
  CHECK(wide == std::vector<double>{0, 1, 2, 597, 598, 599, 600, 601, 602, 1197, 1198, 1199});
  // A summarised random tensor shows exactly its corner values, to 4 decimals.
  Tensor r = randn({50, 40});
  std::vector<double> v = values(r);
  std::vector<double> shown = printed_numbers(str(r));
  REQUIRE(shown.size() == 36);
  std::size_t k = 0;
  for (int i : {0, 1, 2, 47, 48, 49})
    for (int j : {0, 1, 2, 37, 38, 39}) {
      CAPTURE(i);
      CAPTURE(j);
      CHECK(std::abs(shown[k++] - v[static_cast<std::size_t>(i * 40 + j)]) <= 5.0001e-5);
    }
}

TEST_CASE("print: random values read back from the text") {
  std::uint64_t seed = fresh_seed();
  INFO("seed = ", seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-50, 50);
  std::vector<float> xs(60);
  for (auto& x : xs) x = static_cast<float>(u(rng));
  Tensor t = Tensor::from_vector(xs, {3, 4, 5});
  std::string s = str(t);
  std::vector<double> back = printed_numbers(s);
  REQUIRE(back.size() == 60);
  for (std::size_t i = 0; i < 60; ++i) {
    CAPTURE(i);
    CHECK(std::abs(back[i] - xs[i]) <= 5.0001e-5);  // 4 decimals, rounded
  }
  CHECK(s.find("shape=[3, 4, 5], dtype=f32, device=cpu)") != std::string::npos);
  // Integers are printed exactly.
  Tensor ri = randint(-1000, 1000, {7, 3});
  CHECK(printed_numbers(str(ri)) == values(ri));
  // Printing a tensor does not change it.
  std::vector<float> before = t.to_host<float>();
  (void)str(t.transpose(0, 2));
  CHECK(t.to_host<float>() == before);
}
