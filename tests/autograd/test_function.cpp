// autograd::Function<T> on the CPU: forward/backward with save_for_backward, saved_data and
// needs_input_grad; gradients against hand-derived formulas and against gradcheck (central
// differences in f64); several outputs with one unused; an input returned as is; saved
// tensors checked against in-place changes; second-order gradients through create_graph;
// wrong gradient counts and shapes as errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace brrr::autograd;
using namespace test;

namespace {

int backward_calls = 0;
std::vector<bool> seen_needs;

// y = k * x^3 (k a non-tensor saved in saved_data).
struct Cube : Function<Cube> {
  static constexpr const char* name = "Cube";
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double k) {
    ctx->save_for_backward({x});
    ctx->saved_data["k"] = k;
    return x * x * x * k;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    ++backward_calls;
    Tensor x = ctx->get_saved_variables()[0];
    double k = ctx->saved_data["k"].toDouble();
    return {grads[0] * x * x * (3.0 * k), Tensor()};
  }
};

// (a * b, a + b): two outputs; records which inputs need a gradient.
struct MulAdd : Function<MulAdd> {
  static tensor_list forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->save_for_backward({a, b});
    return {a * b, a + b};
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) {
    seen_needs = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    auto s = ctx->get_saved_variables();
    Tensor ga = ctx->needs_input_grad(0) ? g[0] * s[1] + g[1] : Tensor();
    Tensor gb = ctx->needs_input_grad(1) ? g[0] * s[0] + g[1] : Tensor();
    return {ga, gb};
  }
};

// exp with its output saved (the cycle-free output rule).
struct Exp : Function<Exp> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx->save_for_backward({y});
    return y;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list g) { return {g[0] * ctx->get_saved_variables()[0]}; }
};

struct Identity : Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0] * 2.0}; }
};

struct TooMany : Function<TooMany> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 1.0; }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0], g[0], g[0]}; }
};
struct WrongShape : Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x.sum(); }
  static tensor_list backward(AutogradContext*, tensor_list g) { return {g[0]}; }
};

}  // namespace

TEST_CASE("Function: forward, backward, saved tensors and non-tensor state") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  std::vector<double> xv = normal_values(rng, 5);
  Tensor x = Tensor::from_vector(xv).requires_grad_();
  backward_calls = 0;
  Tensor y = Cube::apply(x, 1.5);
  CHECK(y.grad_fn()->name() == "CubeBackward");
  std::vector<double> yv = values(y.detach());
  for (std::size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == doctest::Approx(1.5 * std::pow(xv[i], 3)));
  (y * 2.0).sum().backward();
  CHECK(backward_calls == 1);
  std::vector<double> g = values(x.grad());
  for (std::size_t i = 0; i < xv.size(); ++i) CHECK(g[i] == doctest::Approx(2 * 4.5 * xv[i] * xv[i]));
  CHECK(gradcheck([](const std::vector<Tensor>& in) { return Cube::apply(in[0], -0.7); }, {x.detach()}));

  // Without grad mode, or without an input requiring grad, nothing is recorded.
  {
    NoGradGuard ng;
    CHECK(Cube::apply(x, 2.0).grad_fn() == nullptr);
  }
  CHECK(Cube::apply(x.detach(), 2.0).grad_fn() == nullptr);
}

TEST_CASE("Function: several outputs, needs_input_grad, unused outputs get zeros") {
  FRESH_SEED();
  Tensor a = randn({3}, {.dtype = DType::f64}).requires_grad_();
  Tensor b = randn({3}, {.dtype = DType::f64});
  tensor_list out = MulAdd::apply(a, b);
  REQUIRE(out.size() == 2);
  testing::assert_close(out[0], a.detach() * b);
  out[0].sum().backward();  // out[1] unused: its gradient is zeros
  CHECK(seen_needs == std::vector<bool>{true, false});
  testing::assert_close(a.grad(), b);
  CHECK(gradcheck([](const std::vector<Tensor>& in) {
          tensor_list o = MulAdd::apply(in[0], in[1]);
          return o[0] * 3.0 + o[1] * o[1];
        },
        {randn({4}, {.dtype = DType::f64}), randn({4}, {.dtype = DType::f64})}));
}

TEST_CASE("Function: saved outputs, identity outputs, in-place checks, second order") {
  FRESH_SEED();
  Tensor x = randn({4}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = Exp::apply(x);
  y.sum().backward();
  testing::assert_close(x.grad(), exp(x.detach()));
  CHECK_BRRR_ERROR(y.sum().backward(), ErrorKind::autograd, "second time");

  // Returning the input: the input's own history is left alone.
  Tensor leaf = randn({2}).requires_grad_();
  Tensor same = Identity::apply(leaf);
  CHECK(leaf.is_leaf());
  CHECK(!same.is_leaf());
  same.sum().backward();
  CHECK(values(leaf.grad()) == std::vector<double>{2, 2});

  // A saved input modified in place after the call makes backward throw.
  Tensor z = randn({3}, {.dtype = DType::f64}).requires_grad_();
  Tensor h = z * 1.0;
  Tensor c = Cube::apply(h, 1.0);
  h += 1.0;
  CHECK_BRRR_ERROR(c.sum().backward(), ErrorKind::autograd);

  // create_graph: d/dx of d(x^3)/dx = 6x.
  Tensor w = randn({3}, {.dtype = DType::f64}).requires_grad_();
  Tensor dy = autograd::grad({Cube::apply(w, 1.0).sum()}, {w}, {}, true, true)[0];
  Tensor d2 = autograd::grad({dy.sum()}, {w})[0];
  testing::assert_close(d2, w.detach() * 6.0);
}

TEST_CASE("Function: wrong gradient counts and shapes are errors") {
  Tensor x = randn({3}).requires_grad_();
  CHECK_BRRR_ERROR(TooMany::apply(x).sum().backward(), ErrorKind::autograd, "FunctionBackward", "3 gradients");
  CHECK_BRRR_ERROR(WrongShape::apply(x).backward(), ErrorKind::autograd, "shape [] for argument 0 of shape [3]");
}
