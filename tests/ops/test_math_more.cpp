// The newer elementwise math, rounding, logic, bitwise and all/any ops on the CPU: values
// and gradients against PyTorch (fixtures of tests/ops/make_math_fixtures.py, in f64; f32,
// bf16 and f16 against the same values with their precision), gradcheck against central
// differences (first and, for a few, second derivatives), non-contiguous and broadcast
// inputs, integer dtypes and errors.
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

using test::CaseFn;
using test::replay;
using V = std::vector<double>;

CaseFn unary(Tensor (*f)(const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return f(x[0]); };
}
CaseFn binary(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& x) { return f(x[0], x[1]); };
}

// Cases with a unary op of one tensor.
const std::map<std::string, Tensor (*)(const Tensor&)> unary_cases = {
    {"tan", tan},         {"asin", asin},       {"acos", acos},         {"atan", atan},   {"sinh", sinh},
    {"cosh", cosh},       {"expm1", expm1},     {"log2", log2},         {"log10", log10}, {"exp2", exp2},
    {"erfc", erfc},       {"erfinv", erfinv},   {"lgamma", lgamma},     {"digamma", digamma},
    {"reciprocal", reciprocal}, {"square", square}, {"frac", frac},      {"floor", floor}, {"ceil", ceil},
    {"trunc", trunc},     {"digamma_neg", digamma}, {"erfinv_edges", erfinv}, {"lgamma_edges", lgamma},
    {"digamma_edges", digamma}, {"isnan", isnan}, {"isinf", isinf},     {"isfinite", isfinite},
    {"logical_not", logical_not}, {"bitwise_not", bitwise_not}, {"all", all}, {"any", any},
};

const std::map<std::string, Tensor (*)(const Tensor&, const Tensor&)> binary_cases = {
    {"atan2", atan2},       {"hypot", hypot},           {"logaddexp", logaddexp},   {"xlogy", xlogy},
    {"copysign", copysign}, {"logaddexp_edges", logaddexp}, {"xlogy_edges", xlogy}, {"copysign_zero", copysign},
    {"atan2_zeros", atan2}, {"logical_and", logical_and}, {"logical_or", logical_or}, {"logical_xor", logical_xor},
};

}  // namespace

TEST_CASE("unary math: values and gradients against PyTorch (f64)") {
  for (const auto& [name, f] : unary_cases) replay(name, unary(f), DType::f64, 1e-12, 1e-13);
  // PyTorch's trigamma keeps fewer terms of the asymptotic series (about 1e-9 relative);
  // brrr's values here agree with mpmath's to 1e-15.
  replay("polygamma1", [](const std::vector<Tensor>& x) { return polygamma(1, x[0]); }, DType::f64, 3e-9);
  {  // trigamma against mpmath.psi(1, x) (50 digits)
    Tensor x = test::math_fixtures().at("polygamma1/x0");
    test::check_values(test::values(polygamma(1, x)),
                       V{1.0694520866437334, 6.313750099361805, 0.5358599450278345, 0.42919695788071854,
                         0.43113571216269536},
                       1e-14, 0, "trigamma vs mpmath");
  }
  replay("round", [](const std::vector<Tensor>& x) { return round(x[0]); });
  replay("round_half_even", [](const std::vector<Tensor>& x) { return round(x[0]); });
  replay("round_dec2", [](const std::vector<Tensor>& x) { return round(x[0], 2); });
  replay("round_decm1", [](const std::vector<Tensor>& x) { return round(x[0], -1); });
  replay("nan_to_num", [](const std::vector<Tensor>& x) { return nan_to_num(x[0]); });
  replay("nan_to_num_custom", [](const std::vector<Tensor>& x) { return nan_to_num(x[0], 1.0, 2.0, -3.0); });
}

TEST_CASE("unary math: f32, bf16 and f16 compute in f32 and round once") {
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const double tol = dt == DType::f32 ? 2e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
    for (const auto& [name, f] : unary_cases) {
      if (name.find("edges") != std::string::npos || name == "digamma_neg" || name == "floor" || name == "ceil" ||
          name == "trunc" || name == "frac" || name == "bitwise_not")
        continue;  // edge values beyond 16-bit ranges; rounding ops are checked exactly below
      // The inputs round to dt first: compare against the f64 op on the rounded inputs.
      const Tensor x = test::math_fixtures().at(name + "/x0").to(dt);
      const Tensor got = f(x), want = f(x.to(DType::f64));
      INFO(name, " in ", to_string(dt));
      CHECK(got.dtype() == (is_floating_point(want.dtype()) ? dt : want.dtype()));
      test::check_values(test::values(got), test::values(want), tol, tol * 0.5, name);  // digamma near its root
    }
  }
}

TEST_CASE("rounding ops are exact in every floating dtype and keep integers") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor x = test::make(dt, {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.75, 3.25});
    CHECK(test::values(floor(x)) == V{-3, -2, -1, 0, 1, 2, -2, 3});
    CHECK(test::values(ceil(x)) == V{-2, -1, -0.0, 1, 2, 3, -1, 4});
    CHECK(test::values(round(x)) == V{-2, -2, -0.0, 0, 2, 2, -2, 3});
    CHECK(test::values(trunc(x)) == V{-2, -1, -0.0, 0, 1, 2, -1, 3});
    CHECK(test::values(frac(x)) == V{-0.5, -0.5, -0.5, 0.5, 0.5, 0.5, -0.75, 0.25});
  }
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor x = test::make(dt, {-3, 0, 7});
    for (Tensor r : {floor(x), ceil(x), round(x), trunc(x), square(x)}) CHECK(r.dtype() == dt);
    CHECK(test::values(round(x)) == V{-3, 0, 7});
    CHECK(test::values(square(x)) == V{9, 0, 49});
    CHECK(reciprocal(x).dtype() == DType::f32);
    CHECK(tan(x).dtype() == DType::f32);
    CHECK_BRRR_ERROR(frac(x), ErrorKind::dtype, "frac");
    CHECK_BRRR_ERROR(round(x, 1), ErrorKind::dtype, "round");
  }
  CHECK(square(test::make(DType::boolean, {1, 0})).dtype() == DType::i64);
  CHECK_BRRR_ERROR(floor(test::make(DType::boolean, {1, 0})), ErrorKind::dtype, "floor");
}

TEST_CASE("binary math, lerp and clamp with tensor bounds: values and gradients against PyTorch") {
  for (const auto& [name, f] : binary_cases) replay(name, binary(f), DType::f64, 1e-12, 1e-13, name == "copysign_zero");
  replay("lerp", [](const std::vector<Tensor>& x) { return lerp(x[0], x[1], x[2]); });
  replay("lerp_scalar", [](const std::vector<Tensor>& x) { return lerp(x[0], x[1], 0.3); });
  replay("clamp_tensor", [](const std::vector<Tensor>& x) { return clamp(x[0], x[1], x[2]); });
  replay("clamp_min_tensor", [](const std::vector<Tensor>& x) { return clamp_min(x[0], x[1]); });
  replay("clamp_max_tensor", [](const std::vector<Tensor>& x) { return clamp_max(x[0], x[1]); });
  replay("clamp_ties", [](const std::vector<Tensor>& x) { return clamp(x[0], x[1], x[2]); });
  replay("clamp_min_ties", [](const std::vector<Tensor>& x) { return clamp_min(x[0], x[1]); });
  replay("clamp_max_ties", [](const std::vector<Tensor>& x) { return clamp_max(x[0], x[1]); });
  replay("clamp_crossed", [](const std::vector<Tensor>& x) { return clamp(x[0], x[1], x[2]); });
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const char* name : {"atan2", "hypot", "logaddexp", "xlogy", "copysign"}) {
      const double tol = dt == DType::f32 ? 2e-6 : dt == DType::bf16 ? 1e-2 : 2e-3;
      const Tensor a = test::math_fixtures().at(std::string(name) + "/x0").to(dt);
      const Tensor b = test::math_fixtures().at(std::string(name) + "/x1").to(dt);
      const auto f = binary_cases.at(name);
      INFO(name, " in ", to_string(dt));
      const Tensor got = f(a, b);
      CHECK(got.dtype() == dt);
      test::check_values(test::values(got), test::values(f(a.to(DType::f64), b.to(DType::f64))), tol, tol * 1e-3, name);
    }
}

TEST_CASE("binary math: integers promote to f32, scalar forms, non-contiguous inputs") {
  Tensor i = test::make(DType::i64, {1, 2, 3});
  CHECK(atan2(i, i).dtype() == DType::f32);
  CHECK(hypot(i, i).dtype() == DType::f32);
  CHECK(test::values(hypot(test::make(DType::i32, {3, 5}), test::make(DType::i32, {4, 12}))) == V{5, 13});
  CHECK(test::values(xlogy(0.0, test::make(DType::f64, {0.0, 2.0}))) == V{0, 0});
  CHECK(test::values(xlogy(test::make(DType::f64, {2.0, 0.0}), 1.0)) == V{0, 0});
  CHECK(test::values(copysign(test::make(DType::f64, {2.0, -3.0}), -1.0)) == V{-2, -3});
  // A transposed and a strided-sliced operand give the same as contiguous copies.
  Tensor a = Tensor::from_vector(test::iota(12, 1.0), {3, 4}).transpose(0, 1);
  Tensor b = Tensor::from_vector(test::iota(24, -5.0), {4, 6}).slice(1, 0, 6, 2);
  test::check_values(test::values(atan2(a, b)), test::values(atan2(a.contiguous(), b.contiguous())), 0, 0, "atan2");
  test::check_values(test::values(logaddexp(a, b)), test::values(logaddexp(a.contiguous(), b.contiguous())), 0, 0, "lae");
  CHECK_BRRR_ERROR(lerp(i, i, 0.5), ErrorKind::dtype, "lerp");
  CHECK_BRRR_ERROR(clamp(i, Tensor(), Tensor()), ErrorKind::value, "clamp");
  CHECK_BRRR_ERROR(atan2(i, test::make(DType::f64, {1, 2})), ErrorKind::shape, "atan2");
}

TEST_CASE("bitwise and logical ops against PyTorch; dtype rules") {
  for (const char* name : {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"}) {
    std::map<std::string, Tensor (*)(const Tensor&, const Tensor&)> fs = {
        {"bitwise_and", bitwise_and}, {"bitwise_or", bitwise_or}, {"bitwise_xor", bitwise_xor},
        {"bitwise_left_shift", bitwise_left_shift}, {"bitwise_right_shift", bitwise_right_shift}};
    replay(name, binary(fs.at(name)), DType::f64, 0, 0);
    replay(std::string(name) + "_i32", binary(fs.at(name)), DType::f64, 0, 0);
  }
  Tensor t = test::make(DType::boolean, {1, 1, 0, 0}), u = test::make(DType::boolean, {1, 0, 1, 0});
  CHECK(test::values(bitwise_and(t, u)) == V{1, 0, 0, 0});
  CHECK(test::values(bitwise_xor(t, u)) == V{0, 1, 1, 0});
  CHECK(bitwise_or(t, u).dtype() == DType::boolean);
  CHECK(test::values(bitwise_not(t)) == V{0, 0, 1, 1});
  CHECK(test::values(bitwise_and(test::make(DType::i64, {6, 5}), 3)) == V{2, 1});
  CHECK(test::values(bitwise_left_shift(test::make(DType::i32, {1, -1}), 4)) == V{16, -16});
  Tensor f = test::make(DType::f32, {1, 2});
  CHECK_BRRR_ERROR(bitwise_and(f, f), ErrorKind::dtype, "bitwise_and", "f32");
  CHECK_BRRR_ERROR(bitwise_not(f), ErrorKind::dtype, "bitwise_not");
  CHECK_BRRR_ERROR(bitwise_left_shift(t, t), ErrorKind::dtype, "bitwise_left_shift");
  CHECK_BRRR_ERROR(bitwise_or(test::make(DType::i64, {1}), 1.5), ErrorKind::dtype, "bitwise_or");
  CHECK(logical_and(test::make(DType::i32, {0, 3}), f).dtype() == DType::boolean);
}

TEST_CASE("all and any: over dims, keepdim, empty inputs, every dtype") {
  replay("all_dim1", [](const std::vector<Tensor>& x) { return all(x[0], {1}); });
  replay("any_dim1", [](const std::vector<Tensor>& x) { return any(x[0], {1}); });
  replay("all_dim0_keep", [](const std::vector<Tensor>& x) { return all(x[0], {0}, true); });
  replay("any_dim0_keep", [](const std::vector<Tensor>& x) { return any(x[0], {0}, true); });
  for (DType dt : test::all_dtypes) {
    Tensor x = test::make(dt, {1, 0, 1, 1}, {2, 2});
    CHECK(test::values(all(x, {1})) == V{0, 1});
    CHECK(test::values(any(x, {0})) == V{1, 1});
    CHECK(all(x).item<bool>() == false);
    CHECK(any(x).item<bool>() == true);
  }
  Tensor e = zeros({0, 3});
  CHECK(all(e).item<bool>() == true);
  CHECK(any(e).item<bool>() == false);
  CHECK(all(e, {0}).shape() == Shape{3});
  CHECK(test::values(all(e, {0})) == V{1, 1, 1});
  CHECK(any(e, {1}).shape() == Shape{0});
  CHECK_BRRR_ERROR(all(e, {2}), ErrorKind::index, "all");
}

TEST_CASE("gradcheck of the new differentiable elementwise ops, including second derivatives") {
  auto check = [](const std::function<Tensor(const std::vector<Tensor>&)>& f, std::vector<Tensor> in) {
    CHECK(autograd::gradcheck(f, in));
  };
  std::mt19937_64 rng(test::fresh_seed());
  auto normal = [&](Shape s, double scale = 1.0) {
    return Tensor::from_vector(test::normal_values(rng, test::numel_of(s), scale), s);
  };
  auto positive = [&](Shape s) { return add(abs(normal(s)), 0.5); };
  auto inside = [&](Shape s) { return mul(tanh(normal(s)), 0.8); };
  check([](auto& x) { return tan(x[0]); }, {inside({5})});
  check([](auto& x) { return asin(x[0]); }, {inside({5})});
  check([](auto& x) { return acos(x[0]); }, {inside({5})});
  check([](auto& x) { return atan(x[0]); }, {normal({5})});
  check([](auto& x) { return sinh(x[0]); }, {normal({5})});
  check([](auto& x) { return cosh(x[0]); }, {normal({5})});
  check([](auto& x) { return expm1(x[0]); }, {normal({5})});
  check([](auto& x) { return log2(x[0]); }, {positive({5})});
  check([](auto& x) { return log10(x[0]); }, {positive({5})});
  check([](auto& x) { return exp2(x[0]); }, {normal({5})});
  check([](auto& x) { return erfc(x[0]); }, {normal({5})});
  check([](auto& x) { return erfinv(x[0]); }, {inside({5})});
  check([](auto& x) { return lgamma(x[0]); }, {positive({5})});
  check([](auto& x) { return digamma(x[0]); }, {positive({5})});
  check([](auto& x) { return reciprocal(x[0]); }, {positive({5})});
  check([](auto& x) { return square(x[0]); }, {normal({5})});
  check([](auto& x) { return atan2(x[0], x[1]); }, {normal({3, 4}), positive({4})});
  check([](auto& x) { return hypot(x[0], x[1]); }, {positive({3, 1}), normal({3, 4})});
  check([](auto& x) { return logaddexp(x[0], x[1]); }, {normal({3, 4}), normal({4})});
  check([](auto& x) { return xlogy(x[0], x[1]); }, {normal({4}), positive({4})});
  check([](auto& x) { return copysign(x[0], x[1]); }, {positive({4}), normal({4})});
  check([](auto& x) { return lerp(x[0], x[1], x[2]); }, {normal({3, 4}), normal({4}), normal({3, 1})});
  // Second derivatives: the gradient of the gradient (the rules are Tensor ops).
  auto second = [](Tensor (*f)(const Tensor&), Tensor x) {
    CHECK(autograd::gradcheck(
        [f](const std::vector<Tensor>& in) {
          GradModeGuard on(true);
          Tensor y = sum(f(in[0]));
          return sum(autograd::grad({y}, {in[0]}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0]);
        },
        {x}));
  };
  second(tan, inside({4}));
  second(asin, inside({4}));
  second(erfinv, inside({4}));
  second(lgamma, positive({4}));
  second(expm1, normal({4}));
}

TEST_CASE("polygamma(1) has no derivative; polygamma orders beyond 1 are refused") {
  Tensor x = Tensor::from_vector(V{0.5, 2.0});
  x.requires_grad_();
  Tensor y = sum(polygamma(1, x));
  CHECK_BRRR_ERROR(autograd::backward({y}), ErrorKind::value, "polygamma");
  CHECK_BRRR_ERROR(polygamma(2, x), ErrorKind::value, "polygamma");
}
