// masked_fill, tril/triu, dropout (its statistics and its seeded mask) and the
// deterministic switch, on the CPU: values, errors, gradients.
#include <doctest/doctest.h>

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
#include "tests/ops/index_cases.hpp"

using namespace index_test;

using namespace brrr;
using namespace test;

// ---------------------------------------------------------------------------------------
// masked_fill
// ---------------------------------------------------------------------------------------

TEST_CASE("masked_fill: values, broadcast mask, value cast to the dtype") {
  manual_seed(51);
  Tensor x = randn({3, 4});
  Tensor mask = make(DType::boolean, {1, 0, 0, 1}, {4});
  Tensor out = masked_fill(x, mask, -2.5);
  V xv = values(x), want = xv;
  for (std::size_t i = 0; i < want.size(); ++i)
    if (i % 4 == 0 || i % 4 == 3) want[i] = -2.5;
  CHECK(out.dtype() == DType::f32);
  CHECK(values(out) == want);
  // the mask may add dims (the result has the broadcast shape, as PyTorch's out-of-place op)
  Tensor m2 = make(DType::boolean, {1, 0, 0, 0, 0, 0, 0, 1}, {2, 1, 4});
  CHECK(masked_fill(x, m2, 0.0).shape() == Shape{2, 3, 4});
  // integer tensors keep their dtype; the value is truncated like a conversion
  Tensor xi = make(DType::i32, {1, 2, 3}, {3});
  Tensor oi = masked_fill(xi, make(DType::boolean, {0, 1, 0}, {3}), 7.9);
  CHECK(oi.dtype() == DType::i32);
  CHECK(values(oi) == V{1, 7, 3});
  // -inf for attention masks, on a non-contiguous input
  Tensor xt = randn({4, 3}).t();
  Tensor causal = make(DType::boolean, {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}, {3, 4});
  V ot = values(masked_fill(xt, causal, -std::numeric_limits<double>::infinity()));
  V xtv = values(xt);
  for (std::size_t i = 0; i < 12; ++i) {
    bool masked = values(causal)[i] != 0;
    CHECK((masked ? std::isinf(ot[i]) && ot[i] < 0 : ot[i] == xtv[i]));
  }
}

TEST_CASE("masked_fill: errors and gradient") {
  Tensor x = randn({3, 4});
  CHECK_BRRR_ERROR(masked_fill(x, zeros({4}), 1.0), ErrorKind::dtype, "masked_fill", "bool", "f32");
  CHECK_BRRR_ERROR(masked_fill(x, zeros({3}, {.dtype = DType::boolean}), 1.0), ErrorKind::shape, "masked_fill",
                   "[3, 4]", "[3]");
  Tensor mask = make(DType::boolean, {1, 0, 0, 1, 0, 1, 1, 0}, {2, 1, 4});
  check_grad("masked_fill", [mask](const std::vector<Tensor>& in) { return masked_fill(in[0], mask, 3.0); },
             {randn({3, 4})});
  Tensor xg = randn({3, 4}, {.requires_grad = true});
  masked_fill(xg, make(DType::boolean, {1, 0, 0, 1}, {4}), 9.0).sum().backward();
  CHECK(values(xg.grad()) == V{0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0});
}

// ---------------------------------------------------------------------------------------
// tril / triu
// ---------------------------------------------------------------------------------------

TEST_CASE("tril/triu: values for several diagonals, batched, non-contiguous") {
  manual_seed(61);
  for (Shape s : {Shape{3, 4}, Shape{4, 3}, Shape{2, 3, 3}, Shape{2, 1, 2, 5}}) {
    Tensor x = randn(s);
    V xv = values(x);
    std::int64_t h = s[s.size() - 2], w = s.back();
    for (std::int64_t k : {-5, -1, 0, 1, 2, 6}) {
      CAPTURE(to_string(s));
      CAPTURE(k);
      V lo = values(tril(x, k)), up = values(triu(x, k));
      for (std::size_t i = 0; i < xv.size(); ++i) {
        std::int64_t r = (static_cast<std::int64_t>(i) / w) % h, c = static_cast<std::int64_t>(i) % w;
        CHECK(lo[i] == (c - r <= k ? xv[i] : 0.0));
        CHECK(up[i] == (c - r >= k ? xv[i] : 0.0));
      }
    }
  }
  Tensor xt = randn({4, 3}).t();  // [3, 4]
  V xv = values(xt), lo = values(tril(xt)), up = values(triu(xt, 1));
  for (std::size_t i = 0; i < 12; ++i) {
    std::int64_t r = static_cast<std::int64_t>(i) / 4, c = static_cast<std::int64_t>(i) % 4;
    CHECK(lo[i] == (c <= r ? xv[i] : 0.0));
    CHECK(up[i] == (c >= r + 1 ? xv[i] : 0.0));
  }
  Tensor xi = make(DType::i64, {1, 2, 3, 4}, {2, 2});
  CHECK(values(tril(xi)) == V{1, 0, 3, 4});
  CHECK(tril(xi).dtype() == DType::i64);
  CHECK(tril(zeros({0, 3})).shape() == Shape{0, 3});
}

TEST_CASE("tril/triu: errors and gradients") {
  CHECK_BRRR_ERROR(tril(randn({3})), ErrorKind::shape, "tril", "at least 2 dims", "[3]");
  CHECK_BRRR_ERROR(triu(full({}, 1.0)), ErrorKind::shape, "triu", "[]");
  check_grad("tril", [](const std::vector<Tensor>& in) { return tril(in[0], -1); }, {randn({2, 3, 4})});
  check_grad("triu", [](const std::vector<Tensor>& in) { return triu(in[0], 1); }, {randn({4, 3})});
  Tensor x = randn({3, 3}, {.requires_grad = true});
  tril(x).sum().backward();
  CHECK(values(x.grad()) == V{1, 0, 0, 1, 1, 0, 1, 1, 1});
}

// ---------------------------------------------------------------------------------------
// dropout
// ---------------------------------------------------------------------------------------

TEST_CASE("dropout: p = 0 and eval return the input itself; p = 1 gives zeros and zero gradients") {
  Tensor x = randn({4, 5}, {.requires_grad = true});
  CHECK(dropout(x, 0.0).is_same(x));
  CHECK(dropout(x, 0.7, false).is_same(x));
  CHECK(dropout(x, 1.0, false).is_same(x));
  Tensor z = dropout(x, 1.0);
  CHECK(values(z) == V(20, 0.0));
  z.sum().backward();
  CHECK(values(x.grad()) == V(20, 0.0));
}

TEST_CASE("dropout: errors") {
  Tensor x = randn({3});
  CHECK_BRRR_ERROR(dropout(x, -0.1), ErrorKind::value, "dropout", "[0, 1]");
  CHECK_BRRR_ERROR(dropout(x, 1.5), ErrorKind::value, "dropout", "1.5");
  CHECK_BRRR_ERROR(dropout(x, std::numeric_limits<double>::quiet_NaN()), ErrorKind::value, "dropout");
  CHECK_BRRR_ERROR(dropout(make(DType::i32, {1, 2}, {2}), 0.5), ErrorKind::dtype, "dropout", "i32");
}

TEST_CASE("dropout: fraction zeroed ~ p on 1e5 elements, kept values scaled by 1/(1-p), gradient = mask/(1-p)") {
  manual_seed(71);
  const std::int64_t n = 100000;
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    for (DType dt : {DType::f32, DType::f64}) {
      CAPTURE(p);
      CAPTURE(dt);
      Tensor x = add(rand({n}, {.dtype = dt}), 0.5);  // never 0, so a zero means dropped
      x.requires_grad_(true);
      Tensor y = dropout(x, p);
      V xv = values(x), yv = values(y);
      std::int64_t zeroed = 0;
      bool scaled = true;
      double scale_f = dt == DType::f32 ? static_cast<double>(static_cast<float>(1.0 / (1.0 - p))) : 1.0 / (1.0 - p);
      for (std::size_t i = 0; i < xv.size(); ++i) {
        if (yv[i] == 0) {
          ++zeroed;
        } else {
          double want = dt == DType::f32 ? static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(scale_f))
                                         : xv[i] * scale_f;
          scaled = scaled && yv[i] == want;
        }
      }
      double frac = static_cast<double>(zeroed) / static_cast<double>(n);
      double sd = std::sqrt(p * (1 - p) / static_cast<double>(n));
      CHECK(std::abs(frac - p) < 6 * sd);
      CHECK(scaled);
      y.sum().backward();
      V gv = values(x.grad());
      bool grad_ok = true;
      for (std::size_t i = 0; i < gv.size(); ++i) grad_ok = grad_ok && gv[i] == (yv[i] == 0 ? 0.0 : scale_f);
      CHECK(grad_ok);
    }
  }
}

TEST_CASE("dropout: the same seed gives the same mask; bf16/f16 inputs") {
  Tensor x = add(rand({1000}), 1.0);
  manual_seed(5);
  V a = values(dropout(x, 0.4));
  manual_seed(5);
  V b = values(dropout(x, 0.4));
  CHECK(a == b);
  V c = values(dropout(x, 0.4));  // the generator moved on
  CHECK(a != c);
  for (DType dt : {DType::bf16, DType::f16}) {
    manual_seed(5);
    V h = values(dropout(x.to(dt), 0.4));
    for (std::size_t i = 0; i < h.size(); ++i) CHECK((h[i] == 0) == (a[i] == 0));  // same f32 uniforms
  }
}

TEST_CASE("dropout: gradcheck with the mask fixed by re-seeding inside the function") {
  manual_seed(72);
  check_grad("dropout p 0.4",
             [](const std::vector<Tensor>& in) {
               manual_seed(1234);
               return dropout(in[0], 0.4);
             },
             {randn({4, 6})});
}

TEST_CASE("dropout: the fused kernel equals x * noise of rand() >= p, bit for bit; the generator advances alike") {
  FRESH_SEED();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (std::int64_t n : {1, 3, 4, 5, 4099}) {
      CAPTURE(dt);
      CAPTURE(n);
      const double p = 0.3;
      // A non-contiguous input (a transposed view) with every value non-zero.
      Tensor x = add(randn({2, n}, {.dtype = DType::f64}), 5.0).to(dt).t();
      manual_seed(seed_);
      Tensor got = dropout(x, p);
      Tensor after_got = rand({3});
      manual_seed(seed_);
      Tensor u = rand(x.shape(), {.dtype = dt == DType::f64 ? DType::f64 : DType::f32});
      Tensor noise = where(ge(u, p), full({}, 1.0 / (1.0 - p), {.dtype = dt}), zeros({}, {.dtype = dt}));
      Tensor want = mul(x, noise);
      Tensor after_want = rand({3});
      CHECK(got.dtype() == dt);
      CHECK(got.shape() == x.shape());
      CHECK(values(got) == values(want));
      CHECK(values(after_got) == values(after_want));
      // The gradient is the noise; under create_graph it is a recorded product.
      Tensor xl = x.detach().clone().requires_grad_();
      manual_seed(seed_);
      Tensor y = dropout(xl, p);
      Tensor g = ones(x.shape(), {.dtype = dt});
      auto gx = autograd::grad({y}, {xl}, {g}, true, true);
      CHECK(values(gx[0]) == values(noise));
    }
  }
}

// ---------------------------------------------------------------------------------------
// deterministic switch
// ---------------------------------------------------------------------------------------

TEST_CASE("set_deterministic: a switch; CPU results are the same either way") {
  CHECK_FALSE(deterministic());
  std::mt19937_64 rng(81);
  manual_seed(81);
  Tensor w = randn({6, 3}, {.requires_grad = true});
  Tensor idx = index_tensor(random_index(rng, 40, 0, 5), {40});
  Tensor g = randn({40, 3});
  embedding(w, idx).backward(g);
  std::vector<float> a = w.grad().to_host<float>();
  set_deterministic(true);
  CHECK(deterministic());
  w.set_grad(Tensor());
  embedding(w, idx).backward(g);
  set_deterministic(false);
  CHECK_FALSE(deterministic());
  CHECK(w.grad().to_host<float>() == a);
}
