// Convolution and pooling on the CPU: conv2d against a direct float64 loop reference (stride,
// padding, dilation, groups, bias, non-square kernels, unbatched and non-contiguous inputs),
// unfold/fold values and their adjointness, gradients against central differences
// (autograd::gradcheck), max_pool2d / avg_pool2d against direct references following
// PyTorch's rules (ceil_mode output size, padding never wins, count_include_pad divisors, hand
// computed edge divisors), adaptive_avg_pool2d bins, and error kinds and messages.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;
using A2 = std::array<std::int64_t, 2>;
constexpr double inf = std::numeric_limits<double>::infinity();

void check_close(const V& got, const V& want, double rtol, double atol) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", want ", want[i]);
    CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

void check_finite(const Tensor& t) {
  for (double v : values(t)) {
    INFO("value ", v);
    CHECK(std::isfinite(v));
  }
}

// floor division (negative numerators round down).
std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

struct ConvCase {
  std::int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  bool bias;
};

// out[n, o, oy, ox] = b[o] + sum_{c in group(o), ky, kx} x[n, c, oy*sh - ph + ky*dh, ...] w[o, c', ky, kx]
V conv_ref(const V& x, const V& w, const V& b, const ConvCase& k, std::int64_t& oh, std::int64_t& ow) {
  oh = floor_div(k.h + 2 * k.ph - k.dh * (k.kh - 1) - 1, k.sh) + 1;
  ow = floor_div(k.w + 2 * k.pw - k.dw * (k.kw - 1) - 1, k.sw) + 1;
  std::int64_t cg = k.c / k.groups, og = k.o / k.groups;
  V out(static_cast<std::size_t>(k.n * k.o * oh * ow), 0.0);
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t o = 0; o < k.o; ++o)
      for (std::int64_t oy = 0; oy < oh; ++oy)
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double acc = k.bias ? b[static_cast<std::size_t>(o)] : 0.0;
          std::int64_t g = o / og;
          for (std::int64_t ci = 0; ci < cg; ++ci)
            for (std::int64_t ky = 0; ky < k.kh; ++ky)
              for (std::int64_t kx = 0; kx < k.kw; ++kx) {
                std::int64_t y = oy * k.sh - k.ph + ky * k.dh, xx = ox * k.sw - k.pw + kx * k.dw;
                if (y < 0 || y >= k.h || xx < 0 || xx >= k.w) continue;
                std::int64_t c = g * cg + ci;
                acc += x[static_cast<std::size_t>(((n * k.c + c) * k.h + y) * k.w + xx)] *
                       w[static_cast<std::size_t>(((o * cg + ci) * k.kh + ky) * k.kw + kx)];
              }
          out[static_cast<std::size_t>(((n * k.o + o) * oh + oy) * ow + ox)] = acc;
        }
  return out;
}

const std::vector<ConvCase> conv_cases = {
    // n c  h  w  o  kh kw sh sw ph pw dh dw groups bias
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true},
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, false},
    {1, 2, 9, 8, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, true},
    {2, 2, 9, 9, 2, 3, 3, 1, 1, 2, 2, 2, 2, 1, true},
    {1, 4, 8, 7, 4, 3, 2, 2, 1, 1, 0, 1, 1, 2, true},
    {2, 4, 6, 6, 8, 1, 3, 1, 2, 0, 1, 1, 1, 4, false},
    {1, 4, 10, 9, 4, 2, 3, 2, 2, 2, 1, 2, 1, 4, true},
    {3, 6, 5, 5, 6, 5, 1, 1, 1, 2, 0, 1, 1, 2, false},
    {1, 1, 4, 4, 1, 4, 4, 1, 1, 0, 0, 1, 1, 1, true},  // kernel == input
    {2, 3, 5, 11, 5, 2, 5, 3, 2, 0, 2, 1, 2, 1, true},
};

V randv(std::mt19937_64& rng, std::int64_t n) {
  std::normal_distribution<double> d(0.0, 1.0);
  V v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// PyTorch's pooling_output_shape.
std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil) {
  std::int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0), s) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolCase {
  std::int64_t h, w;
  A2 k, s, p, d;
  bool ceil, include_pad;
};

// Max over the real cells of each window (padding never wins).
V max_pool_ref(const V& x, std::int64_t planes, const PoolCase& c, std::int64_t& oh, std::int64_t& ow) {
  oh = pool_out(c.h, c.k[0], c.s[0], c.p[0], c.d[0], c.ceil);
  ow = pool_out(c.w, c.k[1], c.s[1], c.p[1], c.d[1], c.ceil);
  V out;
  for (std::int64_t pl = 0; pl < planes; ++pl)
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        double m = -inf;
        for (std::int64_t i = 0; i < c.k[0]; ++i)
          for (std::int64_t j = 0; j < c.k[1]; ++j) {
            std::int64_t y = oy * c.s[0] - c.p[0] + i * c.d[0], xx = ox * c.s[1] - c.p[1] + j * c.d[1];
            if (y < 0 || y >= c.h || xx < 0 || xx >= c.w) continue;
            m = std::max(m, x[static_cast<std::size_t>((pl * c.h + y) * c.w + xx)]);
          }
        out.push_back(m);
      }
  return out;
}

// PyTorch's avg_pool2d: hend = min(hstart + k, H + p); pool_size = (hend - hstart)(wend - wstart);
// then clip to the input; divisor = pool_size (count_include_pad) or the clipped count.
V avg_pool_ref(const V& x, std::int64_t planes, const PoolCase& c, std::int64_t& oh, std::int64_t& ow) {
  oh = pool_out(c.h, c.k[0], c.s[0], c.p[0], 1, c.ceil);
  ow = pool_out(c.w, c.k[1], c.s[1], c.p[1], 1, c.ceil);
  V out;
  for (std::int64_t pl = 0; pl < planes; ++pl)
    for (std::int64_t oy = 0; oy < oh; ++oy)
      for (std::int64_t ox = 0; ox < ow; ++ox) {
        std::int64_t h0 = oy * c.s[0] - c.p[0], w0 = ox * c.s[1] - c.p[1];
        std::int64_t h1 = std::min(h0 + c.k[0], c.h + c.p[0]), w1 = std::min(w0 + c.k[1], c.w + c.p[1]);
        std::int64_t pool_size = (h1 - h0) * (w1 - w0);
        h0 = std::max<std::int64_t>(h0, 0), w0 = std::max<std::int64_t>(w0, 0);
        h1 = std::min(h1, c.h), w1 = std::min(w1, c.w);
        double s = 0;
        for (std::int64_t y = h0; y < h1; ++y)
          for (std::int64_t xx = w0; xx < w1; ++xx) s += x[static_cast<std::size_t>((pl * c.h + y) * c.w + xx)];
        out.push_back(s / static_cast<double>(c.include_pad ? pool_size : (h1 - h0) * (w1 - w0)));
      }
  return out;
}

const std::vector<PoolCase> pool_cases = {
    // h  w  k       s       p       d       ceil  include_pad
    {6, 6, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false, true},
    {7, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, true},
    {7, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
    {6, 7, {1, 1}, {2, 2}, {0, 0}, {1, 1}, true, true},
    {5, 5, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true, true},
    {5, 5, {2, 2}, {2, 2}, {1, 1}, {1, 1}, true, false},
    {5, 5, {4, 4}, {2, 2}, {1, 1}, {1, 1}, true, true},
    {5, 5, {4, 4}, {2, 2}, {1, 1}, {1, 1}, true, false},
    {8, 9, {3, 2}, {3, 2}, {1, 1}, {1, 1}, true, false},
    {8, 9, {3, 2}, {1, 3}, {0, 1}, {1, 1}, false, false},
    {9, 10, {3, 3}, {2, 2}, {1, 1}, {2, 2}, false, true},  // dilation (max only)
    {9, 10, {2, 3}, {2, 1}, {1, 1}, {3, 2}, true, true},   // dilation + ceil (max only)
};

Tensor randn64(Shape s) { return randn(std::move(s), {.dtype = DType::f64}); }

}  // namespace

TEST_CASE("conv2d matches a direct float64 loop (stride, padding, dilation, groups, bias)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (const ConvCase& k : conv_cases) {
    INFO("case c=", k.c, " h=", k.h, " w=", k.w, " o=", k.o, " k=", k.kh, "x", k.kw, " s=", k.sh, ",", k.sw,
         " p=", k.ph, ",", k.pw, " d=", k.dh, ",", k.dw, " groups=", k.groups, " bias=", k.bias);
    V xv = randv(rng, k.n * k.c * k.h * k.w), wv = randv(rng, k.o * (k.c / k.groups) * k.kh * k.kw), bv = randv(rng, k.o);
    std::int64_t oh = 0, ow = 0;
    V want = conv_ref(xv, wv, bv, k, oh, ow);
    Conv2dOptions opt{.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}, .dilation = {k.dh, k.dw}, .groups = k.groups};
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(to_string(dt));
      Tensor x = make(dt, xv, {k.n, k.c, k.h, k.w}), w = make(dt, wv, {k.o, k.c / k.groups, k.kh, k.kw});
      Tensor b = k.bias ? make(dt, bv, {k.o}) : Tensor{};
      Tensor y = conv2d(x, w, b, opt);
      CHECK(y.shape() == Shape{k.n, k.o, oh, ow});
      CHECK(y.dtype() == dt);
      double tol = dt == DType::f64 ? 1e-12 : 1e-4;
      check_close(values(y), want, tol, tol);
    }
    // 3-D unbatched input: the first sample, result without the batch dim.
    if (k.n >= 1) {
      Tensor x = make(DType::f64, xv, {k.n, k.c, k.h, k.w}).select(0, 0);
      Tensor y = conv2d(x, make(DType::f64, wv, {k.o, k.c / k.groups, k.kh, k.kw}),
                        k.bias ? make(DType::f64, bv, {k.o}) : Tensor{}, opt);
      CHECK(y.shape() == Shape{k.o, oh, ow});
      V first(want.begin(), want.begin() + k.o * oh * ow);
      check_close(values(y), first, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("conv2d on non-contiguous inputs (permuted, sliced) and weights") {
  manual_seed(3);
  // [N, H, W, C] permuted to [N, C, H, W], then a slice along W: strides are not row-major.
  Tensor base = randn64({2, 7, 9, 4});
  Tensor x = base.permute({0, 3, 1, 2}).slice(3, 1, 8);
  REQUIRE(!x.is_contiguous());
  Tensor w = randn64({6, 2, 3, 3}).transpose(2, 3);  // non-contiguous weight too
  Tensor b = randn64({6});
  Conv2dOptions opt{.stride = {2, 1}, .padding = {1, 1}, .groups = 2};
  Tensor got = conv2d(x, w, b, opt);
  Tensor want = conv2d(x.contiguous(), w.contiguous(), b, opt);
  std::int64_t oh = 0, ow = 0;
  ConvCase k{2, 4, 7, 7, 6, 3, 3, 2, 1, 1, 1, 1, 1, 2, true};
  V ref = conv_ref(values(x.contiguous()), values(w.contiguous()), values(b), k, oh, ow);
  CHECK(got.shape() == Shape{2, 6, oh, ow});
  check_close(values(got), ref, 1e-12, 1e-12);
  check_close(values(want), ref, 1e-12, 1e-12);
  // A channel slice (the narrow that groups use, here by the caller).
  Tensor xc = randn64({1, 6, 5, 5}).narrow(1, 1, 4);
  Tensor y = conv2d(xc, w, {}, {.groups = 2});
  check_close(values(y), values(conv2d(xc.contiguous(), w, {}, {.groups = 2})), 1e-12, 1e-12);
}

TEST_CASE("unfold: shapes and values") {
  // 1x1x3x4 arange, kernel 2x2, stride 1: column l = (oy, ox) holds the 2x2 window at (oy, ox).
  Tensor x = arange(0, 12, 1, {.dtype = DType::f64}).view({1, 1, 3, 4});
  Tensor u = unfold(x, {2, 2});
  REQUIRE(u.shape() == Shape{1, 4, 6});
  CHECK(values(u) == V{0, 1, 2, 4, 5, 6,  //
                       1, 2, 3, 5, 6, 7,  //
                       4, 5, 6, 8, 9, 10,  //
                       5, 6, 7, 9, 10, 11});
  // padding 1, stride 2, kernel 3x3 on 3x4 -> out 2x2; row (i, j) = window cell (i, j), zero outside.
  Tensor u2 = unfold(x, {3, 3}, {1, 1}, {1, 1}, {2, 2});
  REQUIRE(u2.shape() == Shape{1, 9, 4});
  V xv = values(x), want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      for (int oy = 0; oy < 2; ++oy)
        for (int ox = 0; ox < 2; ++ox) {
          int y = oy * 2 - 1 + i, xx = ox * 2 - 1 + j;
          want.push_back(y < 0 || y >= 3 || xx < 0 || xx >= 4 ? 0.0 : xv[static_cast<std::size_t>(y * 4 + xx)]);
        }
  CHECK(values(u2) == want);
  // Dilation 2 on 5x5, kernel 2: out 3x3, channels ordered c-major.
  Tensor x2 = randn64({2, 3, 5, 5});
  Tensor u3 = unfold(x2, {2, 2}, {2, 2});
  CHECK(u3.shape() == Shape{2, 12, 9});
  // 3-D unbatched.
  CHECK(unfold(x2.select(0, 1), {2, 2}, {2, 2}).shape() == Shape{12, 9});
  check_close(values(unfold(x2.select(0, 1), {2, 2}, {2, 2})), values(u3.select(0, 1)), 0, 0);
  // The value at channel c=2, (i, j)=(1, 0), l=(oy, ox)=(2, 1) reads x[n, 2, 2*1 + 2, 1 + 0].
  CHECK(values(u3.select(0, 1).select(0, 2 * 4 + 1 * 2 + 0).select(0, 2 * 3 + 1))[0] ==
        values(x2.select(0, 1).select(0, 2).select(0, 4).select(0, 1))[0]);
  // Non-contiguous input.
  Tensor xt = x2.transpose(2, 3);
  check_close(values(unfold(xt, {3, 2}, {1, 1}, {1, 0}, {1, 2})), values(unfold(xt.contiguous(), {3, 2}, {1, 1}, {1, 0}, {1, 2})),
              0, 0);
}

TEST_CASE("fold(unfold(x)) = x * windows covering each cell; fold is unfold's adjoint") {
  manual_seed(5);
  Tensor x = randn64({2, 3, 4, 5});
  // kernel 2, stride 1: a cell is covered by (#rows of windows covering y) * (#cols covering x).
  Tensor back = fold(unfold(x, {2, 2}), {4, 5}, {2, 2});
  REQUIRE(back.shape() == Shape{2, 3, 4, 5});
  auto cover = [](int i, int n) { return (i == 0 || i == n - 1) ? 1.0 : 2.0; };
  V xv = values(x), want;
  for (int nc = 0; nc < 6; ++nc)
    for (int y = 0; y < 4; ++y)
      for (int xx = 0; xx < 5; ++xx)
        want.push_back(xv[static_cast<std::size_t>((nc * 4 + y) * 5 + xx)] * cover(y, 4) * cover(xx, 5));
  check_close(values(back), want, 1e-14, 1e-14);
  // Non-overlapping windows: fold(unfold(x)) == x.
  check_close(values(fold(unfold(x, {2, 1}, {1, 1}, {0, 0}, {2, 1}), {4, 5}, {2, 1}, {1, 1}, {0, 0}, {2, 1})), xv, 0, 0);

  struct G {
    A2 k, d, p, s;
  };
  for (G g : {G{{2, 2}, {1, 1}, {0, 0}, {1, 1}}, G{{3, 3}, {1, 1}, {1, 1}, {2, 2}}, G{{2, 3}, {2, 1}, {1, 2}, {1, 2}},
              G{{3, 2}, {1, 2}, {2, 0}, {3, 1}}}) {
    Tensor xa = randn64({2, 3, 7, 6});
    Tensor u = unfold(xa, g.k, g.d, g.p, g.s);
    Tensor ya = randn64(u.shape());
    double lhs = values(sum(mul(u, ya)))[0];
    Tensor f = fold(ya, {7, 6}, g.k, g.d, g.p, g.s);
    CHECK(f.shape() == Shape{2, 3, 7, 6});
    double rhs = values(sum(mul(xa, f)))[0];
    CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
    // unbatched fold
    CHECK(fold(ya.select(0, 0), {7, 6}, g.k, g.d, g.p, g.s).shape() == Shape{3, 7, 6});
    // Non-contiguous columns.
    Tensor yt = randn64({u.size(0), u.size(2), u.size(1)}).transpose(1, 2);
    check_close(values(fold(yt, {7, 6}, g.k, g.d, g.p, g.s)), values(fold(yt.contiguous(), {7, 6}, g.k, g.d, g.p, g.s)), 0,
                0);
  }
}

TEST_CASE("gradients of conv2d, unfold and fold (gradcheck, f64)") {
  manual_seed(7);
  for (const ConvCase& k : {ConvCase{2, 2, 5, 4, 3, 3, 2, 1, 1, 1, 0, 1, 1, 1, true},
                            ConvCase{1, 4, 6, 6, 4, 3, 3, 2, 2, 1, 1, 1, 1, 2, true},
                            ConvCase{1, 2, 7, 6, 2, 2, 2, 1, 2, 2, 1, 2, 2, 2, false}}) {
    INFO("groups ", k.groups, " stride ", k.sh);
    Conv2dOptions opt{.stride = {k.sh, k.sw}, .padding = {k.ph, k.pw}, .dilation = {k.dh, k.dw}, .groups = k.groups};
    Tensor x = randn64({k.n, k.c, k.h, k.w}), w = randn64({k.o, k.c / k.groups, k.kh, k.kw}), b = randn64({k.o});
    if (k.bias)
      CHECK(autograd::gradcheck([opt](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], opt); }, {x, w, b}));
    else
      CHECK(autograd::gradcheck([opt](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], {}, opt); }, {x, w}));
  }
  // unbatched, non-contiguous input
  Tensor xu = randn64({5, 4, 3}).permute({2, 0, 1});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], {}, {.padding = {1, 0}}); },
                            {xu, randn64({2, 3, 2, 2})}));
  Tensor x = randn64({2, 2, 5, 4});
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return unfold(in[0], {2, 3}, {2, 1}, {1, 1}, {1, 2}); }, {x}));
  Tensor cols = randn64({2, 2 * 6, 5 * 2});
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return fold(in[0], {5, 4}, {2, 3}, {2, 1}, {1, 1}, {1, 2}); }, {cols}));
  // second order through unfold/fold (their backward is each other).
  Tensor xs = randn64({1, 1, 4, 4}).requires_grad_();
  Tensor y = unfold(xs, {2, 2});
  Tensor g = autograd::grad({sum(mul(y, y))}, {xs}, {}, true, true)[0];
  // d/dx sum(unfold(x)^2) = 2 fold(unfold(x)); its grad-of-sum is 2 fold(unfold(ones)).
  Tensor gg = autograd::grad({sum(g)}, {xs})[0];
  check_close(values(gg), values(mul(fold(unfold(ones({1, 1, 4, 4}, {.dtype = DType::f64}), {2, 2}), {4, 4}, {2, 2}), 2.0)),
              1e-12, 1e-12);
}

TEST_CASE("max_pool2d and avg_pool2d match direct references (padding, dilation, ceil_mode, count_include_pad)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (const PoolCase& c : pool_cases) {
    INFO("h=", c.h, " w=", c.w, " k=", c.k[0], "x", c.k[1], " s=", c.s[0], ",", c.s[1], " p=", c.p[0], ",", c.p[1],
         " d=", c.d[0], ",", c.d[1], " ceil=", c.ceil, " include_pad=", c.include_pad);
    const std::int64_t n = 2, ch = 3;
    V xv = randv(rng, n * ch * c.h * c.w);
    Pool2dOptions o{.kernel_size = c.k, .stride = c.s, .padding = c.p, .dilation = c.d, .ceil_mode = c.ceil,
                    .count_include_pad = c.include_pad};
    for (DType dt : {DType::f64, DType::f32}) {
      INFO(to_string(dt));
      double tol = dt == DType::f64 ? 1e-14 : 1e-5;
      Tensor x = make(dt, xv, {n, ch, c.h, c.w});
      std::int64_t oh = 0, ow = 0;
      V want = max_pool_ref(xv, n * ch, c, oh, ow);
      Tensor y = max_pool2d(x, o);
      CHECK(y.shape() == Shape{n, ch, oh, ow});
      CHECK(y.dtype() == dt);
      check_close(values(y), want, tol, tol);
      check_finite(y);
      Tensor yu = max_pool2d(x.select(0, 1), o);  // unbatched
      CHECK(yu.shape() == Shape{ch, oh, ow});
      check_close(values(yu), values(y.select(0, 1)), 0, 0);
      if (c.d == A2{1, 1}) {
        V wa = avg_pool_ref(xv, n * ch, c, oh, ow);
        Tensor a = avg_pool2d(x, o);
        CHECK(a.shape() == Shape{n, ch, oh, ow});
        check_close(values(a), wa, tol, tol);
        check_finite(a);
        // non-contiguous input
        Tensor xt = make(dt, xv, {n, ch, c.h, c.w}).permute({1, 0, 2, 3}).contiguous().permute({1, 0, 2, 3});
        check_close(values(avg_pool2d(xt, o)), wa, tol, tol);
      }
    }
  }
}

TEST_CASE("pool output sizes follow PyTorch 2.11 (ceil_mode), with no -inf or NaN") {
  struct S {
    std::int64_t h, w, k, s, p, oh, ow;
  };
  for (S c : {S{6, 7, 1, 2, 0, 3, 4}, S{32, 32, 1, 2, 0, 16, 16}, S{5, 5, 2, 2, 1, 3, 3}}) {
    INFO(c.h, "x", c.w, " kernel ", c.k, " stride ", c.s, " padding ", c.p);
    Tensor x = randn64({2, c.h, c.w});
    Pool2dOptions o{.kernel_size = {c.k, c.k}, .stride = A2{c.s, c.s}, .padding = {c.p, c.p}, .ceil_mode = true};
    for (bool include : {true, false}) {
      o.count_include_pad = include;
      Tensor m = max_pool2d(x, o), a = avg_pool2d(x, o);
      CHECK(m.shape() == Shape{2, c.oh, c.ow});
      CHECK(a.shape() == Shape{2, c.oh, c.ow});
      check_finite(m);
      check_finite(a);
    }
  }
  // Kernel 1, stride 2, ceil on 6x7: picks x[2i, 2j].
  Tensor x = randn64({1, 6, 7});
  check_close(values(max_pool2d(x, {.kernel_size = {1, 1}, .stride = A2{2, 2}, .ceil_mode = true})),
              values(x.slice(1, 0, 6, 2).slice(2, 0, 7, 2)), 0, 0);
}

TEST_CASE("avg_pool2d edge divisors in ceil mode (hand computed, 5x5 input)") {
  // 5x5, kernel 4, stride 2, padding 1, ceil: out 3x3 (floor mode would give 2x2). Window
  // rows start at -1, 1, 3: [-1, 3), [1, 5), [3, 7) clipped to the padded bound 6 -> [3, 6).
  // Sizes within the padded bounds: 4, 4, 3; real cells: 3 ([0, 3)), 4 ([1, 5)), 2 ([3, 5)).
  Tensor ones5 = ones({1, 5, 5}, {.dtype = DType::f64});
  Pool2dOptions o{.kernel_size = {4, 4}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = true};
  // include pad: mean of ones = real / padded-size.
  V incl = {9.0 / 16, 12.0 / 16, 6.0 / 12,  //
            12.0 / 16, 16.0 / 16, 8.0 / 12,  //
            6.0 / 12, 8.0 / 12, 4.0 / 9};
  check_close(values(avg_pool2d(ones5, o)), incl, 1e-15, 0);
  o.count_include_pad = false;
  check_close(values(avg_pool2d(ones5, o)), V(9, 1.0), 1e-15, 0);
  // arange 0..24 input, count_include_pad = false: window sums / real counts, by hand.
  Tensor xr = arange(0, 25, 1, {.dtype = DType::f64}).view({1, 5, 5});
  // Rows {0,1,2},{1..4},{3,4}; cols likewise. Sum over rows R, cols C = sum_{r,c} (5r + c).
  auto win = [](std::vector<int> rs, std::vector<int> cs) {
    double s = 0;
    for (int r : rs)
      for (int c : cs) s += 5 * r + c;
    return s;
  };
  std::vector<std::vector<int>> spans = {{0, 1, 2}, {1, 2, 3, 4}, {3, 4}};
  V want_ex, want_in;
  const double padded[3] = {4, 4, 3};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double s = win(spans[static_cast<std::size_t>(i)], spans[static_cast<std::size_t>(j)]);
      want_ex.push_back(s / static_cast<double>(spans[static_cast<std::size_t>(i)].size() * spans[static_cast<std::size_t>(j)].size()));
      want_in.push_back(s / (padded[i] * padded[j]));
    }
  CHECK(want_ex[0] == doctest::Approx(6.0));  // (0+1+2+5+6+7+10+11+12)/9
  check_close(values(avg_pool2d(xr, o)), want_ex, 1e-14, 0);
  o.count_include_pad = true;
  check_close(values(avg_pool2d(xr, o)), want_in, 1e-14, 0);

  // 5x5, kernel 2, stride 2, no padding, ceil: 3x3; the last row/column of windows holds one
  // real cell per dim and is clipped to the (unpadded) bound 5: divisor 2 on edges, 1 in the corner.
  Pool2dOptions o2{.kernel_size = {2, 2}, .stride = A2{2, 2}, .ceil_mode = true};
  V want2 = {(0 + 1 + 5 + 6) / 4.0, (2 + 3 + 7 + 8) / 4.0, (4 + 9) / 2.0,  //
             (10 + 11 + 15 + 16) / 4.0, (12 + 13 + 17 + 18) / 4.0, (14 + 19) / 2.0,  //
             (20 + 21) / 2.0, (22 + 23) / 2.0, 24.0};
  check_close(values(avg_pool2d(xr, o2)), want2, 1e-15, 0);
  o2.count_include_pad = false;
  check_close(values(avg_pool2d(xr, o2)), want2, 1e-15, 0);
  // 5x5, kernel 2, stride 2, padding 1, ceil: windows [-1, 1), [1, 3), [3, 5) -> padded size 4
  // everywhere; real counts 1 in the corner, 2 on the first row/column, 4 inside.
  Pool2dOptions o3{.kernel_size = {2, 2}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = true};
  V want3_in = {0 / 4.0, (1 + 2) / 4.0, (3 + 4) / 4.0,  //
                (5 + 10) / 4.0, (6 + 7 + 11 + 12) / 4.0, (8 + 9 + 13 + 14) / 4.0,  //
                (15 + 20) / 4.0, (16 + 17 + 21 + 22) / 4.0, (18 + 19 + 23 + 24) / 4.0};
  check_close(values(avg_pool2d(xr, o3)), want3_in, 1e-15, 0);
  o3.count_include_pad = false;
  V want3_ex = {0.0, (1 + 2) / 2.0, (3 + 4) / 2.0,  //
                (5 + 10) / 2.0, (6 + 7 + 11 + 12) / 4.0, (8 + 9 + 13 + 14) / 4.0,  //
                (15 + 20) / 2.0, (16 + 17 + 21 + 22) / 4.0, (18 + 19 + 23 + 24) / 4.0};
  check_close(values(avg_pool2d(xr, o3)), want3_ex, 1e-15, 0);
}

TEST_CASE("max_pool2d: padding never wins, even over all-negative inputs") {
  Tensor x = full({1, 1, 3, 3}, -5.0, {.dtype = DType::f64}) - arange(0, 9, 1, {.dtype = DType::f64}).view({1, 1, 3, 3});
  Tensor y = max_pool2d(x, {.kernel_size = {2, 2}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = true});
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  CHECK(values(y) == V{-5, -6, -8, -9});
}

TEST_CASE("gradients of max_pool2d and avg_pool2d (gradcheck, f64)") {
  // max_pool2d: distinct values (a shuffled arange plus small noise) so no window has ties.
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  V base = iota(2 * 2 * 7 * 6);
  std::shuffle(base.begin(), base.end(), rng);
  for (auto& v : base) v *= 0.1;
  Tensor x = Tensor::from_vector(base, {2, 2, 7, 6});
  for (Pool2dOptions o : {Pool2dOptions{.kernel_size = {2, 2}},
                          Pool2dOptions{.kernel_size = {3, 2}, .stride = A2{2, 1}, .padding = {1, 1}, .ceil_mode = true},
                          Pool2dOptions{.kernel_size = {2, 3}, .stride = A2{1, 2}, .padding = {1, 0}, .dilation = {2, 1}}}) {
    CHECK(autograd::gradcheck([o](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); }, {x}));
  }
  Tensor xa = randn64({2, 2, 7, 6});
  for (bool include : {true, false})
    for (bool ceil : {false, true}) {
      INFO("include_pad ", include, " ceil ", ceil);
      Pool2dOptions o{.kernel_size = {3, 2}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = ceil,
                      .count_include_pad = include};
      CHECK(autograd::gradcheck([o](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); }, {xa}));
    }
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], {3, 4}); }, {xa}));
  // max_pool2d gradient goes to the argmax only.
  Tensor xm = Tensor::from_vector(V{1, 4, 2, 3}, {1, 1, 2, 2}).requires_grad_();
  max_pool2d(xm, {.kernel_size = {2, 2}}).sum().backward();
  CHECK(values(xm.grad()) == V{0, 1, 0, 0});
}

TEST_CASE("adaptive_avg_pool2d: divisible and non-divisible sizes") {
  Tensor x = randn64({2, 3, 8, 8});
  Tensor y = adaptive_avg_pool2d(x, {4, 4});
  CHECK(y.shape() == Shape{2, 3, 4, 4});
  V xv = values(x), want;
  for (int pl = 0; pl < 6; ++pl)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int a = 0; a < 2; ++a)
          for (int b = 0; b < 2; ++b) s += xv[static_cast<std::size_t>((pl * 8 + 2 * i + a) * 8 + 2 * j + b)];
        want.push_back(s / 4);
      }
  check_close(values(y), want, 1e-14, 1e-14);
  // 7x5 -> 3x2: rows [0,3), [2,5), [4,7); cols [0,3), [2,5) (floor(i H/o), ceil((i+1) H/o)).
  Tensor x2 = randn64({2, 7, 5});
  Tensor y2 = adaptive_avg_pool2d(x2, {3, 2});
  CHECK(y2.shape() == Shape{2, 3, 2});
  const int r0[3] = {0, 2, 4}, r1[3] = {3, 5, 7}, c0[2] = {0, 2}, c1[2] = {3, 5};
  V xv2 = values(x2), want2;
  for (int pl = 0; pl < 2; ++pl)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) {
        double s = 0;
        for (int a = r0[i]; a < r1[i]; ++a)
          for (int b = c0[j]; b < c1[j]; ++b) s += xv2[static_cast<std::size_t>((pl * 7 + a) * 5 + b)];
        want2.push_back(s / ((r1[i] - r0[i]) * (c1[j] - c0[j])));
      }
  check_close(values(y2), want2, 1e-14, 1e-14);
  // Output 1x1 = global mean; output equal to input = identity.
  check_close(values(adaptive_avg_pool2d(x, {1, 1})), values(mean(x, {2, 3})), 1e-14, 1e-14);
  check_close(values(adaptive_avg_pool2d(x2, {7, 5})), values(x2), 0, 0);
}

TEST_CASE("conv and pool errors name the op, shapes and dtypes") {
  Tensor x = randn({2, 3, 5, 5}), w = randn({4, 3, 3, 3});
  CHECK_BRRR_ERROR(conv2d(randn({3, 5}), w), ErrorKind::shape, "conv2d", "[3, 5]");
  CHECK_BRRR_ERROR(conv2d(randn({1, 2, 3, 5, 5}), w), ErrorKind::shape, "conv2d", "[1, 2, 3, 5, 5]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 2, 3, 3})), ErrorKind::shape, "conv2d", "[2, 3, 5, 5]", "[4, 2, 3, 3]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 3})), ErrorKind::shape, "conv2d", "[4, 3, 3]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 1, 3, 3}), {}, {.groups = 2}), ErrorKind::shape, "conv2d", "[4, 1, 3, 3]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 1, 3, 3}), {}, {.groups = 3}), ErrorKind::shape, "conv2d", "groups");
  CHECK_BRRR_ERROR(conv2d(x, w, {}, {.groups = 0}), ErrorKind::shape, "conv2d");
  CHECK_BRRR_ERROR(conv2d(x, w, randn({3})), ErrorKind::shape, "conv2d", "bias", "[3]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 6, 3})), ErrorKind::shape, "conv2d", "[2, 3, 5, 5]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 3, 3}), {}, {.dilation = {3, 1}}), ErrorKind::shape, "conv2d");
  CHECK_BRRR_ERROR(conv2d(randn({1, 1, 2, 2}), randn({1, 1, 4, 4}), {}, {.stride = {4, 4}}), ErrorKind::shape, "conv2d");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 3, 3}), {}, {.stride = {0, 1}}), ErrorKind::value, "conv2d");
  CHECK_BRRR_ERROR(conv2d(x, w.to(DType::f64)), ErrorKind::dtype, "conv2d", "f32", "f64");
  CHECK_BRRR_ERROR(conv2d(x, w, randn({4}, {.dtype = DType::f64})), ErrorKind::dtype, "conv2d", "f64");
  CHECK_BRRR_ERROR(conv2d(x.to(DType::i32), w.to(DType::i32)), ErrorKind::dtype, "conv2d", "i32");
  CHECK_BRRR_ERROR(unfold(randn({5, 5}), {2, 2}), ErrorKind::shape, "unfold", "[5, 5]");
  CHECK_BRRR_ERROR(unfold(x, {6, 2}), ErrorKind::shape, "unfold", "[2, 3, 5, 5]");
  CHECK_BRRR_ERROR(unfold(randn({1, 1, 2, 2}), {4, 4}, {1, 1}, {0, 0}, {4, 4}), ErrorKind::shape, "unfold");
  CHECK_BRRR_ERROR(fold(randn({2, 12, 7}), {5, 5}, {2, 2}), ErrorKind::shape, "fold", "[2, 12, 7]");
  CHECK_BRRR_ERROR(fold(randn({2, 13, 16}), {5, 5}, {2, 2}), ErrorKind::shape, "fold", "[2, 13, 16]");
  CHECK_BRRR_ERROR(fold(randn({2, 3, 12, 16}), {5, 5}, {2, 2}), ErrorKind::shape, "fold");
  for (bool avg : {false, true}) {
    auto pool = [avg](const Tensor& t, Pool2dOptions o) { return avg ? avg_pool2d(t, o) : max_pool2d(t, o); };
    const char* op = avg ? "avg_pool2d" : "max_pool2d";
    CHECK_BRRR_ERROR(pool(randn({5, 5}), {}), ErrorKind::shape, op, "[5, 5]");
    CHECK_BRRR_ERROR(pool(randn({1, 1, 1, 5, 5}), {}), ErrorKind::shape, op, "[1, 1, 1, 5, 5]");
    CHECK_BRRR_ERROR(pool(x, {.kernel_size = {6, 2}}), ErrorKind::shape, op, "[2, 3, 5, 5]");
    CHECK_BRRR_ERROR(pool(randn({1, 1, 2, 2}), {.kernel_size = {4, 4}}), ErrorKind::shape, op, "[1, 1, 2, 2]");
    CHECK_BRRR_ERROR(pool(x, {.kernel_size = {3, 3}, .padding = {2, 1}}), ErrorKind::value, op, "padding", "(2, 1)");
    CHECK_BRRR_ERROR(pool(x, {.kernel_size = {2, 2}, .padding = {0, 2}}), ErrorKind::value, op, "padding");
    CHECK_BRRR_ERROR(pool(x, {.kernel_size = {0, 2}}), ErrorKind::value, op);
    CHECK_BRRR_ERROR(pool(x.to(DType::i64), {}), ErrorKind::dtype, op, "i64");
  }
  CHECK_BRRR_ERROR(avg_pool2d(x, {.dilation = {2, 2}}), ErrorKind::value, "avg_pool2d", "dilation");
  CHECK_BRRR_ERROR(adaptive_avg_pool2d(randn({5, 5}), {2, 2}), ErrorKind::shape, "adaptive_avg_pool2d", "[5, 5]");
  CHECK_BRRR_ERROR(adaptive_avg_pool2d(x, {0, 2}), ErrorKind::value, "adaptive_avg_pool2d");
}

TEST_CASE("window geometry near 2^63 (kernel, padding, stride, dilation) is an error, not a wrap or an endless sweep") {
  // Each of these computed an output size in plain int64 (UBSan: signed integer overflow), and
  // max_pool2d with a 2^62 kernel and padding swept 2^124 window cells for one output.
  const std::int64_t huge = std::int64_t{1} << 62;
  Tensor x = randn({1, 3, 5, 5});
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 3, 3}), {}, {.padding = huge}), ErrorKind::value, "conv2d", "2^63",
                   "[1, 3, 5, 5]");
  CHECK_BRRR_ERROR(conv2d(x, randn({4, 3, 3, 3}), {}, {.dilation = huge}), ErrorKind::shape, "conv2d", "smaller");
  CHECK(conv2d(x, randn({4, 3, 3, 3}), {}, {.stride = huge}).shape() == Shape{1, 4, 1, 1});
  CHECK_BRRR_ERROR(conv1d(randn({1, 3, 5}), randn({4, 3, 3}), {}, {.dilation = huge}), ErrorKind::shape, "conv1d");
  CHECK_BRRR_ERROR(conv_transpose2d(x, randn({3, 4, 3, 3}), {}, {.stride = {huge, 1}}), ErrorKind::value,
                   "conv_transpose2d", "past 2^63");
  CHECK_BRRR_ERROR(conv_transpose2d(x, randn({3, 4, 3, 3}), {}, {.dilation = {huge, 1}}), ErrorKind::value,
                   "conv_transpose2d", "past 2^63");
  CHECK_BRRR_ERROR(conv_transpose2d(x, randn({3, 4, 3, 3}), {}, {.padding = {huge, 0}}), ErrorKind::shape,
                   "conv_transpose2d", "non-positive");
  CHECK_BRRR_ERROR(unfold(x, {2, 2}, {1, 1}, {huge, 0}), ErrorKind::value, "unfold", "2^63");
  CHECK_BRRR_ERROR(unfold(x, {2, 2}, {huge, 1}), ErrorKind::shape, "unfold", "smaller");
  CHECK_BRRR_ERROR(fold(randn({1, 12, 4}), {3, 3}, {2, 2}, {1, 1}, {huge, 0}), ErrorKind::value, "fold", "2^63");
  CHECK_BRRR_ERROR(max_pool2d(x, {.kernel_size = huge, .padding = huge / 2}), ErrorKind::value, "max_pool2d", "2^63");
  CHECK_BRRR_ERROR(avg_pool2d(x, {.kernel_size = huge, .padding = huge / 2}), ErrorKind::value, "avg_pool2d", "2^63");
  CHECK_BRRR_ERROR(max_pool1d(randn({1, 3, 5}), {.kernel_size = huge, .padding = huge / 2}), ErrorKind::value,
                   "max_pool1d", "2^63");
  CHECK(max_pool2d(x, {.kernel_size = 2, .stride = huge, .ceil_mode = true}).shape() == Shape{1, 3, 1, 1});
  CHECK_BRRR_ERROR(adaptive_avg_pool2d(x, {huge, huge}), ErrorKind::value, "adaptive_avg_pool2d", "2^63");
  ValuesIndices mp = max_pool2d_with_indices(randn({1, 1, 4, 4}), {.kernel_size = 2});
  CHECK_BRRR_ERROR(max_unpool2d(mp.values, mp.indices, {.kernel_size = 2, .stride = huge}), ErrorKind::value,
                   "max_unpool2d", "past 2^63");
  CHECK_BRRR_ERROR(max_unpool2d(mp.values, mp.indices, {.kernel_size = 2, .output_size = {huge, huge}}), ErrorKind::value,
                   "max_unpool2d");
}
