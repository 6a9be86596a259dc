// softmax / log_softmax on the CPU: values against a float64 reference computed here, along
// every dim, contiguous and non-contiguous, infinities and large logits, 0-d and zero-size,
// every floating dtype; gradients against central differences (autograd::gradcheck) and
// second derivatives; errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/softmax_loss_cases.hpp"

using namespace softmax_loss_test;

using namespace brrr;
using namespace test;

// ---------------------------------------------------------------------------------------
// softmax / log_softmax
// ---------------------------------------------------------------------------------------

TEST_CASE("softmax and log_softmax match a float64 reference along every dim and dtype") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const std::vector<Shape> shapes = {{7}, {3, 5}, {4, 1, 6}, {2, 3, 4, 5}, {3, 1500}, {2, 33}};
  for (const Shape& shape : shapes) {
    for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
      V raw = normal_values(rng, numel_of(shape), 3.0);
      Tensor x = make(dtype, raw, shape);
      V xv = values(x);  // the values as the dtype holds them
      const std::int64_t nd = static_cast<std::int64_t>(shape.size());
      for (std::int64_t dim = -nd; dim < nd; ++dim) {
        for (bool log : {false, true}) {
          INFO("shape ", to_string(shape), " ", to_string(dtype), " dim ", dim, log ? " log_softmax" : " softmax");
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          CHECK(y.shape() == shape);
          CHECK(y.dtype() == dtype);
          Tol t = tol_for(dtype);
          check_close(values(y), ref_softmax(xv, shape, dim, log), t.rtol, t.atol);
        }
      }
    }
  }
}

TEST_CASE("softmax of non-contiguous inputs: transposed, sliced, expanded") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor base = make(DType::f64, normal_values(rng, 6 * 8), {6, 8});
  {
    Tensor xt = base.t();  // [8, 6], strides [1, 8]
    CHECK_FALSE(xt.is_contiguous());
    V xv = values(xt);
    for (std::int64_t dim : {0, 1}) {
      check_close(values(softmax(xt, dim)), ref_softmax(xv, {8, 6}, dim, false), 1e-12, 1e-12);
      check_close(values(log_softmax(xt, dim)), ref_softmax(xv, {8, 6}, dim, true), 1e-12, 1e-12);
    }
  }
  {
    Tensor xs = base.slice(1, 1, 8, 2);  // [6, 4] every other column
    V xv = values(xs);
    for (std::int64_t dim : {0, 1}) check_close(values(softmax(xs, dim)), ref_softmax(xv, {6, 4}, dim, false), 1e-12, 1e-12);
  }
  {
    Tensor row = make(DType::f32, normal_values(rng, 5), {1, 5});
    Tensor xe = row.expand({3, 5});  // stride 0 rows
    V xv = values(xe);
    check_close(values(softmax(xe, 1)), ref_softmax(xv, {3, 5}, 1, false), 1e-6, 1e-7);
    check_close(values(softmax(xe, 0)), V(15, 1.0 / 3.0), 1e-6, 1e-7);
  }
}

TEST_CASE("softmax with infinities and large logits follows PyTorch") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(to_string(dtype));
    check_close(values(softmax(make(dtype, {-inf, -inf, -inf}))), {nan_v, nan_v, nan_v}, 0, 0);
    check_close(values(log_softmax(make(dtype, {-inf, -inf, -inf}))), {nan_v, nan_v, nan_v}, 0, 0);
    check_close(values(softmax(make(dtype, {0, -inf}))), {1, 0}, 0, 0);
    check_close(values(log_softmax(make(dtype, {0, -inf}))), {0, -inf}, 0, 0);
    check_close(values(softmax(make(dtype, {0, inf}))), {nan_v, nan_v}, 0, 0);
    check_close(values(log_softmax(make(dtype, {0, inf}))), {nan_v, nan_v}, 0, 0);
    check_close(values(softmax(make(dtype, {1, nan_v, 2}))), {nan_v, nan_v, nan_v}, 0, 0);
    // Large logits: max subtracted first, no overflow.
    check_close(values(softmax(make(dtype, {1e4, 1e4 - 1, 0}))),
                {1 / (1 + std::exp(-1.0)), std::exp(-1.0) / (1 + std::exp(-1.0)), 0}, 1e-6, 1e-7);
    check_close(values(log_softmax(make(dtype, {1e4, 0}))), {0, -1e4}, 1e-7, 1e-7);
    check_close(values(softmax(make(dtype, {-1e4, -1e4}))), {0.5, 0.5}, 1e-7, 0);
    // A row of -inf next to a finite row: only that row is NaN.
    check_close(values(softmax(make(dtype, {-inf, -inf, 1, 1}, {2, 2}), 1)), {nan_v, nan_v, 0.5, 0.5}, 1e-7, 0);
  }
}

TEST_CASE("softmax of 0-d, single-element and zero-size tensors") {
  Tensor s = full({}, 3.5, {.dtype = DType::f64});
  CHECK(softmax(s).shape() == Shape{});
  CHECK(softmax(s).item<double>() == 1.0);
  CHECK(log_softmax(s, 0).item<double>() == 0.0);
  CHECK(values(softmax(make(DType::f32, {5}, {1, 1}), 0)) == V{1.0});
  Tensor z = zeros({0, 4});
  CHECK(softmax(z, 1).shape() == Shape{0, 4});
  CHECK(softmax(z, 0).shape() == Shape{0, 4});
  CHECK(log_softmax(zeros({3, 0}), 1).shape() == Shape{3, 0});
}

TEST_CASE("softmax errors") {
  CHECK_BRRR_ERROR(softmax(arange(5)), ErrorKind::dtype, "softmax", "i64");
  CHECK_BRRR_ERROR(log_softmax(arange(5).to(DType::i32)), ErrorKind::dtype, "log_softmax", "i32");
  CHECK_BRRR_ERROR(softmax(zeros({2, 3}), 2), ErrorKind::index, "softmax", "[2, 3]");
  CHECK_BRRR_ERROR(log_softmax(zeros({2, 3}), -3), ErrorKind::index, "log_softmax");
  CHECK_BRRR_ERROR(softmax(Tensor()), ErrorKind::value, "softmax");
}

TEST_CASE("softmax and log_softmax gradients (gradcheck), including second order") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor x = randn({3, 4, 5}, {.dtype = DType::f64});
  for (std::int64_t dim : {0, 1, 2, -1}) {
    INFO("dim ", dim);
    CHECK(autograd::gradcheck([dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {x}));
    CHECK(autograd::gradcheck([dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {x}));
  }
  // Non-contiguous input, and the output feeding further ops.
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0].transpose(0, 2), 1) * 3.0; },
                            {x}));
  // 0-d: the gradient is 0.
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); },
                            {full({}, 0.7, {.dtype = DType::f64})}));
  // Second order: the gradient of <softmax(x), w> is itself differentiable.
  Tensor w = randn({3, 4, 5}, {.dtype = DType::f64});
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    CHECK(autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          GradModeGuard on(true);  // gradcheck evaluates f under NoGradGuard for the differences
          Tensor y = log ? log_softmax(in[0], 1) : softmax(in[0], 1);
          return autograd::grad({sum(y * w)}, {in[0]}, {}, true, true)[0];
        },
        {x}));
  }
}

TEST_CASE("softmax backward by hand") {
  // y = softmax([0, ln 3]) = [1/4, 3/4]; with g = [1, 0]: dx = y * (g - <g, y>) = [3/16, -3/16]
  Tensor x = make(DType::f64, {0, std::log(3.0)}).requires_grad_();
  Tensor y = softmax(x);
  (y * make(DType::f64, {1, 0})).sum().backward();
  check_close(values(x.grad()), {3.0 / 16, -3.0 / 16}, 1e-14, 1e-15);
  // log_softmax: dx = g - softmax * sum(g) = [1, 0] - [1/4, 3/4]
  Tensor x2 = make(DType::f64, {0, std::log(3.0)}).requires_grad_();
  (log_softmax(x2) * make(DType::f64, {1, 0})).sum().backward();
  check_close(values(x2.grad()), {0.75, -0.75}, 1e-14, 1e-15);
}
