// gradcheck (central differences against the engine) and brrr.testing's assert_close /
// allclose: both accept what is right, and reject what is wrong with a message that says
// where and by how much.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

// StringMaker for vectors, toString for DType/ErrorKind, CHECK_BRRR_ERROR.
#include "tests/tensor/helpers.hpp"

namespace {

using V = std::vector<double>;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const V& v, Shape shape = {}) {
  return Tensor::from_vector(v, shape.empty() ? Shape{static_cast<std::int64_t>(v.size())} : shape);
}

/// The message of the brrr::Error `f` throws ("" when it throws none).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

/// The number printed right after `key` in `text` (NaN when absent).
double number_after(const std::string& text, const std::string& key) {
  auto pos = text.find(key);
  if (pos == std::string::npos) return kNaN;
  return std::strtod(text.c_str() + pos + key.size(), nullptr);
}

}  // namespace

// =========================================================================================
// gradcheck
// =========================================================================================

TEST_CASE("gradcheck passes on correct gradients") {
  FRESH_SEED();
  Tensor x = randn({3, 4}, {.dtype = DType::f64});
  Tensor y = randn({4}, {.dtype = DType::f64});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return (in[0] * in[1]).sum(); }, {x, y}));
  // non-scalar outputs are reduced with a random projection
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return tanh(in[0]) * in[1] + exp(in[1]); }, {x, y}));
  // f32 inputs are checked in f64
  Tensor xf = randn({5});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return sigmoid(in[0]) * in[0]; }, {xf}));
  // integer inputs pass through unchecked
  Tensor k = randint(-3, 4, {3, 4}, {.dtype = DType::i64});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[1]; }, {x, k}));
  // the inputs it receives are f64 CPU leaves that require grad; the caller's are untouched
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        CHECK(in[0].dtype() == DType::f64);
        CHECK(in[0].device() == Device::cpu());
        CHECK(in[0].is_leaf());
        return in[0] * 2.0;
      },
      {xf}));
  CHECK_FALSE(xf.requires_grad());
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradcheck names the input and element of a wrong gradient") {
  // f(a, b) = a * b + b * b, but one element of one factor of b is detached: the analytic
  // gradient with respect to b misses b there (a + b instead of a + 2b).
  Tensor a = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f64({-0.5, 1.5, 2.0, -1.0, 0.75, 0.5}, {2, 3});
  Tensor mask = f64({0, 0, 0, 0, 0, 1}, {2, 3});
  Fn wrong = [mask](const std::vector<Tensor>& in) {
    const Tensor& p = in[0];
    const Tensor& q = in[1];
    return (p * q + q * (q * (1.0 - mask) + q.detach() * mask)).sum();  // scalar: no projection
  };
  std::string msg = error_of([&] { (void)autograd::gradcheck(wrong, {a, b}); });
  INFO(msg);
  REQUIRE_FALSE(msg.empty());
  CHECK(msg.find("gradcheck") != std::string::npos);
  CHECK(msg.find("input 1") != std::string::npos);
  CHECK(msg.find("[2, 3]") != std::string::npos);
  CHECK(msg.find("element [1, 2]") != std::string::npos);
  CHECK(msg.find("atol") != std::string::npos);
  CHECK(number_after(msg, "analytic ") == doctest::Approx(6.5).epsilon(1e-9));
  CHECK(number_after(msg, "numeric ") == doctest::Approx(7.0).epsilon(1e-6));
  bool autograd_kind = false;
  try {
    (void)autograd::gradcheck(wrong, {a, b});
  } catch (const Error& e) {
    autograd_kind = e.kind() == ErrorKind::autograd;
  }
  CHECK(autograd_kind);

  // wrong with respect to the first input: x * x.detach() has analytic x, numeric 2x
  Tensor x = f64({0.5, -2.0, 3.0});
  CHECK_BRRR_ERROR(autograd::gradcheck([](const std::vector<Tensor>& in) { return (in[0] * in[0].detach()).sum(); },
                                       {x}),
                   ErrorKind::autograd, "input 0", "[3]", "element [0]", "analytic 0.5", "numeric");
  // a gradient missing entirely (the detached input is unused by the graph): analytic 0
  CHECK_BRRR_ERROR(autograd::gradcheck([](const std::vector<Tensor>& in) { return (in[0] * in[1].detach()).sum(); },
                                       {x, f64({1.0, 2.0, 3.0})}),
                   ErrorKind::autograd, "input 1", "element [0]", "analytic 0");
}

TEST_CASE("gradcheck tolerances are the options'") {
  // a gradient wrong by 1e-4 relative passes the defaults (rtol 1e-3) but not rtol 1e-7
  Tensor x = f64({1.0, 2.0, -1.5});
  // f = x^2 + 1e-4 x x.detach(): d/dx = 2x + 1e-4 x (analytic) vs 2x + 2e-4 x (numeric), a
  // relative error of 5e-5
  Fn f = [](const std::vector<Tensor>& in) { return in[0] * in[0] + in[0] * in[0].detach() * 1e-4; };
  CHECK(autograd::gradcheck(f, {x}));
  autograd::GradcheckOptions strict{.eps = 1e-6, .atol = 1e-9, .rtol = 1e-7};
  CHECK_BRRR_ERROR(autograd::gradcheck(f, {x}, strict), ErrorKind::autograd, "input 0", "element [0]",
                   "atol 1e-09", "rtol 1e-07");
}

TEST_CASE("gradcheck refuses what it cannot check") {
  Tensor k = randint(0, 5, {3}, {.dtype = DType::i64});
  CHECK_BRRR_ERROR(autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * 2; }, {k}),
                   ErrorKind::autograd, "no floating-point input");
  Tensor x = randn({3}, {.dtype = DType::f64});
  CHECK_BRRR_ERROR(autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0].detach() * 2.0; }, {x}),
                   ErrorKind::autograd, "does not require grad");
}

TEST_CASE("gradcheck does not move the global generator") {
  const std::uint64_t seed = test::fresh_seed();
  INFO("seed = ", seed, " (replay with BRRR_TEST_SEED)");
  manual_seed(seed);
  Tensor a = randn({6});
  manual_seed(seed);
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return exp(in[0]) * 3.0; }, {randn({4, 3})}));
  Tensor b = randn({6});
  manual_seed(seed);
  (void)randn({4, 3});
  Tensor c = randn({6});
  CHECK(b.to_host<float>() == c.to_host<float>());
  CHECK(a.to_host<float>() != b.to_host<float>());
}

// =========================================================================================
// assert_close / allclose
// =========================================================================================

TEST_CASE("assert_close passes within tolerance") {
  FRESH_SEED();
  Tensor a = randn({4, 5}, {.dtype = DType::f64});
  CHECK_NOTHROW(testing::assert_close(a, a));
  CHECK_NOTHROW(testing::assert_close(a, a * (1 + 5e-8)));  // f64: rtol 1e-7
  CHECK(testing::allclose(a, a + 5e-8));                    // f64: atol 1e-7
  CHECK_FALSE(testing::allclose(a, a + 1e-6));
  // non-contiguous operands compare element by element in logical order
  CHECK_NOTHROW(testing::assert_close(a.t(), a.t().contiguous()));
  CHECK_FALSE(testing::allclose(a.t(), a.contiguous().view({5, 4})));
  // zero-size
  CHECK_NOTHROW(testing::assert_close(zeros({0, 3}), zeros({0, 3})));
  // custom tolerances
  Tensor one = f64({1.0, 2.0});
  Tensor near = f64({1.05, 2.0});
  CHECK(testing::allclose(near, one, {.rtol = 0.0, .atol = 0.1}));
  CHECK_FALSE(testing::allclose(near, one, {.rtol = 0.0, .atol = 0.01}));
  CHECK(testing::allclose(near, one, {.rtol = 0.06, .atol = 0.0}));
  CHECK_FALSE(testing::allclose(near, one, {.rtol = 0.04, .atol = 0.0}));
  // rtol is relative to the expected value (the second argument)
  CHECK(testing::allclose(f64({1.0}), f64({1.1}), {.rtol = 0.095, .atol = 0.0}));
  CHECK_FALSE(testing::allclose(f64({1.1}), f64({1.0}), {.rtol = 0.095, .atol = 0.0}));
}

TEST_CASE("assert_close failure message: count, worst index, both values, tolerance") {
  Tensor actual = f64({0.0, 1.0, 2.0, 4.0, 5.0, 6.0}, {2, 3});
  Tensor expected = f64({0.0, 1.001, 2.0, 4.5, 5.0, 6.0}, {2, 3});
  std::string msg = error_of([&] { testing::assert_close(actual, expected); });
  INFO(msg);
  REQUIRE_FALSE(msg.empty());
  CHECK(msg.find("assert_close") != std::string::npos);
  CHECK(msg.find("2 of 6") != std::string::npos);
  CHECK(msg.find("worst at index [1, 0]") != std::string::npos);
  CHECK(msg.find("actual 4, expected 4.5") != std::string::npos);
  CHECK(msg.find("tolerance") != std::string::npos);
  CHECK(number_after(msg, "tolerance ") == doctest::Approx(1e-7 + 1e-7 * 4.5));
  CHECK(msg.find("f64") != std::string::npos);
  CHECK(msg.find("cpu") != std::string::npos);
  bool value_kind = false;
  try {
    testing::assert_close(actual, expected);
  } catch (const Error& e) {
    value_kind = e.kind() == ErrorKind::value;
  }
  CHECK(value_kind);
  CHECK_FALSE(testing::allclose(actual, expected));
  // one failing element of a 1-D tensor
  CHECK_BRRR_ERROR(testing::assert_close(f64({1, 2, 3, 4}), f64({1, 2, 3.5, 4})), ErrorKind::value, "1 of 4",
                   "index [2]", "tolerance");
}

TEST_CASE("assert_close: NaN only with equal_nan, infinities exactly") {
  Tensor n1 = f64({kNaN, 1.0}), n2 = f64({kNaN, 1.0});
  CHECK_FALSE(testing::allclose(n1, n2));
  CHECK_BRRR_ERROR(testing::assert_close(n1, n2), ErrorKind::value, "1 of 2", "index [0]");
  CHECK(testing::allclose(n1, n2, {.equal_nan = true}));
  CHECK_NOTHROW(testing::assert_close(n1, n2, {.equal_nan = true}));
  CHECK_FALSE(testing::allclose(f64({kNaN}), f64({1.0}), {.equal_nan = true}));
  CHECK_FALSE(testing::allclose(f64({1.0}), f64({kNaN}), {.equal_nan = true}));
  CHECK(testing::allclose(f64({kInf, -kInf}), f64({kInf, -kInf})));
  CHECK_FALSE(testing::allclose(f64({kInf}), f64({-kInf})));
  CHECK_FALSE(testing::allclose(f64({kInf}), f64({1e308})));
  CHECK_FALSE(testing::allclose(f64({1e308}), f64({kInf}), {.rtol = 1.0, .atol = 1.0}));
}

TEST_CASE("assert_close: shapes must match exactly (no broadcasting)") {
  CHECK_BRRR_ERROR(testing::assert_close(zeros({3}), zeros({1, 3})), ErrorKind::shape, "[3]", "[1, 3]");
  CHECK_BRRR_ERROR(testing::assert_close(zeros({2, 3}), zeros({3, 2})), ErrorKind::shape, "[2, 3]", "[3, 2]");
  CHECK_FALSE(testing::allclose(zeros({3}), zeros({1, 3})));
  CHECK_FALSE(testing::allclose(zeros({}), zeros({1})));
  CHECK_BRRR_ERROR(testing::assert_close(Tensor(), zeros({1})), ErrorKind::value, "undefined");
  CHECK_FALSE(testing::allclose(Tensor(), zeros({1})));
}

TEST_CASE("assert_close across dtypes: the less precise dtype's default tolerance") {
  // f32 0.1 vs f64 0.1: differ by ~1.5e-9, within f32's tolerance
  Tensor f = full({3}, 0.1, {.dtype = DType::f32});
  Tensor d = full({3}, 0.1, {.dtype = DType::f64});
  CHECK_NOTHROW(testing::assert_close(f, d));
  CHECK_NOTHROW(testing::assert_close(d, f));
  // but f64 against f64 at 1e-6 relative is too far
  Tensor d1 = full({3}, 1.0, {.dtype = DType::f64}), f1 = full({3}, 1.0, {.dtype = DType::f32});
  CHECK(testing::allclose(d1 * (1 + 1e-7), d1));
  CHECK_FALSE(testing::allclose(d1 * (1 + 1e-6), d1));
  // and f32 against f64 at 1e-4 relative too (f32 alone: within 1e-5)
  CHECK(testing::allclose(f1, d1 * (1 + 1e-5)));
  CHECK_FALSE(testing::allclose(f1, d1 * (1 + 1e-4)));
  // bf16 0.1 (= 0.10009765625) vs f32 0.1: within bf16's rtol 1.6e-2
  Tensor b = full({3}, 0.1, {.dtype = DType::bf16});
  CHECK(testing::allclose(b, f));
  CHECK_FALSE(testing::allclose(b, full({3}, 0.1, {.dtype = DType::f32}), {.rtol = 1e-5, .atol = 1e-5}));
  // f16 vs f64
  Tensor h = full({2}, 1.0 / 3, {.dtype = DType::f16});
  CHECK(testing::allclose(h, full({2}, 1.0 / 3, {.dtype = DType::f64})));
  // integers and bool: exact
  Tensor i = Tensor::from_vector(std::vector<std::int32_t>{1, 2, 3});
  Tensor l = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 3});
  Tensor l2 = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 4});
  CHECK_NOTHROW(testing::assert_close(i, l));
  CHECK_BRRR_ERROR(testing::assert_close(i, l2), ErrorKind::value, "1 of 3", "index [2]", "i32", "i64");
  Tensor p = Tensor::from_vector(std::vector<bool>{true, false});
  CHECK(testing::allclose(p, Tensor::from_vector(std::vector<bool>{true, false})));
  CHECK_FALSE(testing::allclose(p, Tensor::from_vector(std::vector<bool>{true, true})));
  // an integer against a float: the float's tolerance
  CHECK(testing::allclose(i, Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.000001f})));
  CHECK_FALSE(testing::allclose(i, Tensor::from_vector(std::vector<float>{1.0f, 2.0f, 3.01f})));
}
