// scaled_dot_product_attention on the CPU (the composite, the reference) and the fused kernel
// contract's CPU side (scaled_dot_product_flash_attention): values against a float64 loop
// reference with every mask kind, causal masks of square and rectangular shapes, broadcast
// masks, fully masked rows (PyTorch's safe softmax: 0), custom scales; the fused op's layout
// and its log-sum-exp-based backward against the composite's, gradcheck of both, second
// derivatives through the fused op; dropout reproducible from the seed, and the fused op's
// dropout (the same mask as the composite's from one seed, its gradients and second
// derivatives, the generator's state afterwards); PyTorch fixtures
// (tests/ops/fixtures/make_attention_fixtures.py); errors; edge shapes (E = 0, S = 0, empty
// fused outputs), masks that do not broadcast to the weights, batch dims, non-finite scales.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/torch_fixtures.hpp"

using namespace brrr;
using namespace test;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();
using V = std::vector<double>;

// Attention in double over q [N, L, E], k [N, S, E], v [N, S, Ev] (row-major, N the flattened
// batch dims) with an additive bias [N, L, S] (0, -inf or a float mask; empty: none).
V ref_attention(const V& q, const V& k, const V& v, const V& bias, std::int64_t n, std::int64_t l, std::int64_t s,
                std::int64_t e, std::int64_t ev, double scale, bool causal) {
  V out(static_cast<std::size_t>(n * l * ev), 0.0);
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < l; ++i) {
      V sc(static_cast<std::size_t>(s));
      double m = -inf;
      for (std::int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < e; ++d) dot += q[(b * l + i) * e + d] * k[(b * s + j) * e + d];
        double x = dot * scale;
        if (!bias.empty()) x += bias[(b * l + i) * s + j];
        if (causal && j > i) x = -inf;
        sc[j] = x;
        m = std::max(m, x);
      }
      if (m == -inf) continue;  // every key masked: 0
      double z = 0;
      for (double& x : sc) z += (x = std::exp(x - m));
      for (std::int64_t j = 0; j < s; ++j)
        for (std::int64_t d = 0; d < ev; ++d) out[(b * l + i) * ev + d] += sc[j] / z * v[(b * s + j) * ev + d];
    }
  return out;
}

Tensor randn64(Shape shape) { return randn(std::move(shape), {.dtype = DType::f64}); }

// The reference of sdpa(q, k, v, o) for 4-D (or 3-D) inputs of one batch shape.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o) {
  const std::int64_t l = q.size(-2), s = k.size(-2), e = q.size(-1), ev = v.size(-1);
  const std::int64_t n = q.numel() / (l * e);
  V bias;
  if (o.attn_mask.defined()) {
    Shape full_shape = q.shape();
    full_shape.back() = s;
    Tensor m = o.attn_mask.expand(full_shape).contiguous();
    bias = values(m);
    if (m.dtype() == DType::boolean)
      for (double& x : bias) x = x != 0 ? 0.0 : -inf;
  }
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(e));
  V out = ref_attention(values(q.to(DType::f64)), values(k.to(DType::f64)), values(v.to(DType::f64)), bias, n, l, s,
                        e, ev, scale, o.is_causal);
  Shape shape = q.shape();
  shape.back() = ev;
  return Tensor::from_vector(out, shape);
}

testing::CloseOptions tight() { return {.rtol = 1e-12, .atol = 1e-12}; }

// The attention row, its atol taken relative to the largest |want| (see tests/tolerances.hpp).
testing::CloseOptions attention_tol(DType d, const Tensor& want) {
  const Tol t = tolerance(Computed::attention, d);
  const double peak = want.numel() ? amax(abs(want.to(DType::f64)), {}).item<double>() : 0.0;
  return {.rtol = t.rtol, .atol = t.atol * std::max(peak, 1.0)};
}

}  // namespace

TEST_CASE("sdpa composite against the float64 reference: masks, causal, scale, broadcasting") {
  FRESH_SEED();
  struct Case {
    Shape q, k, v;
    std::function<SdpaOptions()> options;
  };
  std::vector<Case> cases = {
      {{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 6}, [] { return SdpaOptions{}; }},
      {{2, 3, 6, 4}, {2, 3, 6, 4}, {2, 3, 6, 4}, [] { return SdpaOptions{.is_causal = true}; }},
      {{1, 2, 4, 4}, {1, 2, 7, 4}, {1, 2, 7, 5}, [] { return SdpaOptions{.is_causal = true}; }},  // L < S
      {{1, 2, 7, 4}, {1, 2, 3, 4}, {1, 2, 3, 5}, [] { return SdpaOptions{.is_causal = true}; }},  // L > S
      {{2, 3, 5, 8}, {2, 3, 7, 8}, {2, 3, 7, 8}, [] { return SdpaOptions{.attn_mask = rand({5, 7}) > 0.3}; }},
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4},
       [] { return SdpaOptions{.attn_mask = randn64({2, 1, 5, 7}), .scale = 0.3}; }},
      {{2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}, [] { return SdpaOptions{.attn_mask = randn({1, 3, 5, 1}).to(DType::f64)}; }},
      {{4, 5, 8}, {4, 7, 8}, {4, 7, 2}, [] { return SdpaOptions{.scale = 2.0}; }},
      {{3, 1, 16}, {3, 9, 16}, {3, 9, 16}, [] { return SdpaOptions{}; }},  // L = 1
  };
  for (const Case& c : cases) {
    Tensor q = randn64(c.q), k = randn64(c.k), v = randn64(c.v);
    SdpaOptions o = c.options();
    INFO("q ", to_string(c.q), " k ", to_string(c.k), " v ", to_string(c.v), " causal ", o.is_causal);
    testing::assert_close(scaled_dot_product_attention(q, k, v, o), reference(q, k, v, o), tight());
  }
}

TEST_CASE("sdpa: rows that mask every key give 0 and finite gradients (PyTorch's safe softmax)") {
  FRESH_SEED();
  Tensor q = randn64({1, 2, 3, 4}).requires_grad_(), k = randn64({1, 2, 5, 4}).requires_grad_();
  Tensor v = randn64({1, 2, 5, 4}).requires_grad_();
  Tensor keep = ones({3, 5}, {.dtype = DType::boolean});
  keep = logical_and(keep, ne(arange(3, {.dtype = DType::i64}).unsqueeze(1), 1));  // row 1: nothing kept
  for (Tensor mask : {keep, where(keep, zeros({}, {.dtype = DType::f64}), full({}, -inf, {.dtype = DType::f64}))}) {
    Tensor y = scaled_dot_product_attention(q, k, v, {.attn_mask = mask});
    testing::assert_close(y.select(2, 1), zeros({1, 2, 4}, {.dtype = DType::f64}), tight());
    testing::assert_close(y, reference(q.detach(), k.detach(), v.detach(), {.attn_mask = mask}), tight());
    q.set_grad(Tensor());
    y.sum().backward();
    CHECK(all(isfinite(q.grad())).item<bool>());
    testing::assert_close(q.grad().select(2, 1), zeros({1, 2, 4}, {.dtype = DType::f64}), tight());
    CHECK(all(isfinite(k.grad())).item<bool>());
    k.set_grad(Tensor());
    v.set_grad(Tensor());
  }
}

TEST_CASE("flash attention (CPU kernel) against the reference: dims, causal, rectangles, strided inputs") {
  FRESH_SEED();
  struct Case {
    std::int64_t b, h, l, s, d;
  };
  for (Case c : {Case{2, 3, 5, 5, 8}, Case{1, 2, 7, 4, 1}, Case{1, 1, 4, 9, 40}, Case{2, 1, 33, 17, 128},
                 Case{1, 2, 1, 1, 3}}) {
    for (bool causal : {false, true}) {
      INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", causal ", causal);
      // Strided like a model's heads: [B, T, H, D] memory seen as [B, H, T, D].
      Tensor q = randn64({c.b, c.l, c.h, c.d}).transpose(1, 2), k = randn64({c.b, c.s, c.h, c.d}).transpose(1, 2);
      Tensor v = randn64({c.b, c.s, c.h, c.d}).transpose(1, 2);
      SdpaOptions o{.is_causal = causal};
      Tensor y = scaled_dot_product_flash_attention(q, k, v, o);
      CHECK(y.shape() == Shape{c.b, c.h, c.l, c.d});
      CHECK(y.transpose(1, 2).is_contiguous());  // laid out [B, L, H, D]
      testing::assert_close(y, reference(q, k, v, o), tight());
      testing::assert_close(y, scaled_dot_product_attention(q, k, v, o), tight());
    }
  }
}

TEST_CASE("flash attention backward equals the composite's; gradcheck of both") {
  FRESH_SEED();
  for (bool causal : {false, true}) {
    for (auto [l, s] : {std::pair<std::int64_t, std::int64_t>{6, 6}, {4, 7}, {7, 3}}) {
      INFO("L ", l, " S ", s, " causal ", causal);
      Tensor q0 = randn64({2, 2, l, 5}), k0 = randn64({2, 2, s, 5}), v0 = randn64({2, 2, s, 5});
      Tensor g = randn64({2, 2, l, 5});
      SdpaOptions o{.is_causal = causal, .scale = 0.7};
      std::vector<Tensor> fused{q0.clone().requires_grad_(), k0.clone().requires_grad_(), v0.clone().requires_grad_()};
      std::vector<Tensor> comp{q0.clone().requires_grad_(), k0.clone().requires_grad_(), v0.clone().requires_grad_()};
      autograd::backward({scaled_dot_product_flash_attention(fused[0], fused[1], fused[2], o)}, {g});
      // The composite alone (the CPU never takes the fused path in sdpa).
      autograd::backward({scaled_dot_product_attention(comp[0], comp[1], comp[2], o)}, {g});
      for (int i = 0; i < 3; ++i) {
        INFO("gradient of input ", i);
        testing::assert_close(fused[i].grad(), comp[i].grad(), {.rtol = 1e-10, .atol = 1e-11});
      }
      auto fused_fn = [o](const std::vector<Tensor>& x) { return scaled_dot_product_flash_attention(x[0], x[1], x[2], o); };
      CHECK(autograd::gradcheck(fused_fn, {q0, k0, v0}));
    }
  }
  auto masked = [](const std::vector<Tensor>& x) {
    Tensor keep = gt(x[3], 0.0);
    return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = keep});
  };
  CHECK(autograd::gradcheck(masked, {randn64({1, 2, 4, 3}), randn64({1, 2, 6, 3}), randn64({1, 2, 6, 2}),
                                     randn64({4, 6})}));
  auto additive = [](const std::vector<Tensor>& x) {
    return scaled_dot_product_attention(x[0], x[1], x[2], {.attn_mask = x[3], .scale = 0.4});
  };
  CHECK(autograd::gradcheck(additive, {randn64({2, 1, 3, 3}), randn64({2, 1, 5, 3}), randn64({2, 1, 5, 4}),
                                       randn64({2, 1, 3, 5})}));
}

TEST_CASE("flash attention: second derivatives (create_graph) match the composite's") {
  FRESH_SEED();
  Tensor q0 = randn64({1, 2, 5, 3}), k0 = randn64({1, 2, 5, 3}), v0 = randn64({1, 2, 5, 3});
  Tensor r = randn64({1, 2, 5, 3}), r2 = randn64({1, 2, 5, 3});
  std::vector<Tensor> got;
  for (bool fused : {true, false}) {
    Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    SdpaOptions o{.is_causal = true};
    Tensor y = fused ? scaled_dot_product_flash_attention(q, k, v, o) : scaled_dot_product_attention(q, k, v, o);
    std::vector<Tensor> g = autograd::grad({sum(mul(y, r))}, {q, k, v}, {}, true, true);
    sum(mul(add(add(g[0], g[1]), g[2]), r2)).backward();
    got.push_back(q.grad());
    got.push_back(k.grad());
    got.push_back(v.grad());
  }
  for (int i = 0; i < 3; ++i) testing::assert_close(got[i], got[i + 3], {.rtol = 1e-10, .atol = 1e-11});
}

TEST_CASE("flash attention (CPU kernel) in f32/bf16/f16 against float64") {
  FRESH_SEED();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    INFO("dtype ", to_string(dt));
    Tensor q = randn64({2, 2, 19, 16}).to(dt), k = randn64({2, 2, 23, 16}).to(dt), v = randn64({2, 2, 23, 16}).to(dt);
    Tensor g = randn64({2, 2, 19, 16}).to(dt);
    Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    Tensor y = scaled_dot_product_flash_attention(ql, kl, vl, {.is_causal = true});
    CHECK(y.dtype() == dt);
    y.backward(g);
    std::vector<Tensor> ref{q.to(DType::f64).requires_grad_(), k.to(DType::f64).requires_grad_(),
                            v.to(DType::f64).requires_grad_()};
    Tensor want = scaled_dot_product_attention(ref[0], ref[1], ref[2], {.is_causal = true});
    want.backward(g.to(DType::f64));
    testing::assert_close(y, want, attention_tol(dt, want));
    testing::assert_close(ql.grad(), ref[0].grad(), attention_tol(dt, ref[0].grad()));
    testing::assert_close(kl.grad(), ref[1].grad(), attention_tol(dt, ref[1].grad()));
    testing::assert_close(vl.grad(), ref[2].grad(), attention_tol(dt, ref[2].grad()));
  }
}

TEST_CASE("sdpa dropout: the seed's dropout of the attention weights") {
  FRESH_SEED();
  Tensor q = randn64({2, 2, 6, 4}), k = randn64({2, 2, 6, 4}), v = randn64({2, 2, 6, 4});
  const std::uint64_t s = fresh_seed();
  manual_seed(s);
  Tensor y = scaled_dot_product_attention(q, k, v, {.dropout_p = 0.25, .is_causal = true});
  manual_seed(s);
  Tensor scores = masked_fill(matmul(q, k.transpose(-2, -1)) * 0.5,
                              gt(arange(6, {.dtype = DType::i64}).unsqueeze(0), arange(6, {.dtype = DType::i64}).unsqueeze(1)),
                              -inf);
  Tensor want = matmul(dropout(softmax(scores, -1), 0.25, true), v);
  testing::assert_close(y, want, tight());
  CHECK(!testing::allclose(y, scaled_dot_product_attention(q, k, v, {.is_causal = true})));
}

TEST_CASE("flash attention dropout (CPU kernel) equals the composite's from one seed: values, gradients, generator") {
  FRESH_SEED();
  std::uint64_t s = seed_;
  struct Case {
    std::int64_t b, h, l, s, d;
  };
  for (DType dt : {DType::f64, DType::f32})
    for (bool causal : {false, true})
      for (Case c : {Case{2, 2, 6, 6, 5}, Case{1, 3, 4, 9, 8}, Case{2, 1, 11, 3, 2}}) {
        INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", to_string(dt), ", causal ", causal);
        ++s;
        Tensor q0 = randn64({c.b, c.h, c.l, c.d}).to(dt), k0 = randn64({c.b, c.h, c.s, c.d}).to(dt);
        Tensor v0 = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
        SdpaOptions o{.dropout_p = 0.3, .is_causal = causal};
        std::vector<Tensor> fused{q0.clone().requires_grad_(), k0.clone().requires_grad_(), v0.clone().requires_grad_()};
        std::vector<Tensor> comp{q0.clone().requires_grad_(), k0.clone().requires_grad_(), v0.clone().requires_grad_()};
        manual_seed(s);
        Tensor y = scaled_dot_product_flash_attention(fused[0], fused[1], fused[2], o);
        y.backward(g);
        Tensor next_fused = rand({9}, {.dtype = dt});
        manual_seed(s);
        Tensor want = scaled_dot_product_attention(comp[0], comp[1], comp[2], o);  // the composite on the CPU
        want.backward(g);
        Tensor next_comp = rand({9}, {.dtype = dt});
        CHECK(next_fused.to(DType::f64).to_host<double>() == next_comp.to(DType::f64).to_host<double>());
        const testing::CloseOptions tol =
            dt == DType::f64 ? testing::CloseOptions{.rtol = 1e-10, .atol = 1e-11} : testing::CloseOptions{.rtol = 1e-4, .atol = 1e-5};
        testing::assert_close(y, want, tol);
        for (int i = 0; i < 3; ++i) {
          INFO("gradient of input ", i);
          testing::assert_close(fused[i].grad(), comp[i].grad(), tol);
        }
        CHECK(!testing::allclose(y, scaled_dot_product_flash_attention(q0, k0, v0, {.is_causal = causal})));
      }
}

TEST_CASE("flash attention dropout: gradcheck with the mask held fixed, second derivatives match the composite's") {
  FRESH_SEED();
  const SdpaOptions o{.dropout_p = 0.4, .is_causal = true};
  auto fixed = [&](bool fused) {
    return [fused, o, s = seed_](const std::vector<Tensor>& x) {
      manual_seed(s);  // one mask for every evaluation
      return fused ? scaled_dot_product_flash_attention(x[0], x[1], x[2], o) : scaled_dot_product_attention(x[0], x[1], x[2], o);
    };
  };
  Tensor q0 = randn64({1, 2, 5, 3}), k0 = randn64({1, 2, 6, 3}), v0 = randn64({1, 2, 6, 3});
  CHECK(autograd::gradcheck(fixed(true), {q0, k0, v0}));
  Tensor r = randn64({1, 2, 5, 3}), r2 = randn64({1, 2, 5, 3}), r3 = randn64({1, 2, 6, 3});
  std::vector<Tensor> got;
  for (bool fused : {true, false}) {
    Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    Tensor y = fixed(fused)({q, k, v});
    std::vector<Tensor> g = autograd::grad({sum(mul(y, r))}, {q, k, v}, {}, true, true);
    add(sum(mul(g[0], r2)), sum(mul(add(g[1], g[2]), r3))).backward();
    got.push_back(q.grad());
    got.push_back(k.grad());
    got.push_back(v.grad());
  }
  for (int i = 0; i < 3; ++i) testing::assert_close(got[i], got[i + 3], {.rtol = 1e-10, .atol = 1e-11});
}

TEST_CASE("sdpa against PyTorch (fixtures)") {
  const io::TensorMap& m = fixtures("attention.safetensors");
  auto opts = [&](const std::string& name) {
    SdpaOptions o;
    if (m.count(name + ".mask")) o.attn_mask = m.at(name + ".mask");
    if (name == "causal" || name == "causal_rect") o.is_causal = true;
    if (name == "float_mask") o.scale = 0.3;
    if (name == "three_dims") o.scale = 0.5;
    return o;
  };
  for (std::string name : {"plain", "causal", "causal_rect", "bool_mask", "float_mask", "three_dims"}) {
    SdpaOptions o = opts(name);
    replay("attention.safetensors", name,
           [o](const std::vector<Tensor>& x) { return scaled_dot_product_attention(x[0], x[1], x[2], o); });
    if (!o.attn_mask.defined() && m.at(name + ".in0").dim() == 4 && m.at(name + ".in2").size(-1) == m.at(name + ".in0").size(-1))
      replay("attention.safetensors", name,
             [o](const std::vector<Tensor>& x) { return scaled_dot_product_flash_attention(x[0], x[1], x[2], o); });
  }
}

TEST_CASE("sdpa errors") {
  Tensor q = randn({1, 2, 3, 4}), k = randn({1, 2, 5, 4}), v = randn({1, 2, 5, 4});
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k.to(DType::f64), v), ErrorKind::dtype,
                   "scaled_dot_product_attention", "one dtype");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, randn({1, 2, 5, 3}), v), ErrorKind::shape,
                   "scaled_dot_product_attention", "[1, 2, 5, 3]");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, randn({1, 2, 4, 4})), ErrorKind::shape, "[1, 2, 4, 4]");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(randn({4}), k, v), ErrorKind::shape, "at least 2 dims");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q.to(DType::i64), k.to(DType::i64), v.to(DType::i64)),
                   ErrorKind::dtype, "scaled_dot_product_attention");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5}), ErrorKind::value, "dropout_p");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = -0.1}), ErrorKind::value, "dropout_p");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 5}), .is_causal = true}),
                   ErrorKind::value, "is_causal");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 5}, {.dtype = DType::i64})}),
                   ErrorKind::dtype, "attn_mask");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones({3, 4})}), ErrorKind::shape,
                   "scaled_dot_product_attention");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(q, k, v, {.attn_mask = ones({3, 5})}), ErrorKind::value,
                   "no attn_mask");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(q, k, v, {.dropout_p = 1.0}), ErrorKind::value, "dropout_p");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(q, k, v, {.dropout_p = -0.5}), ErrorKind::value, "dropout_p");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(randn({2, 3, 4}), randn({2, 3, 4}), randn({2, 3, 4})),
                   ErrorKind::shape, "[B, H, L, D]");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(randn({1, 1, 2, 129}), randn({1, 1, 2, 129}),
                                                      randn({1, 1, 2, 129})),
                   ErrorKind::shape, "D <= 128");
  CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(q, k, randn({1, 2, 5, 3})), ErrorKind::shape, "[B, H, S, D]");
}

TEST_CASE("sdpa edge shapes: E = 0 gives the mean of v, S = 0 gives zeros (with any mask), gradients") {
  FRESH_SEED();
  // E == 0: every score is 0 (PyTorch scales q and k by sqrt(scale) before their empty product),
  // so the weights are uniform, not 0 * (1 / sqrt(0)) = NaN.
  Tensor v = randn64({2, 5, 3}).requires_grad_();
  Tensor qe = zeros({2, 4, 0}, {.dtype = DType::f64}).requires_grad_(), ke = zeros({2, 5, 0}, {.dtype = DType::f64});
  for (SdpaOptions o : {SdpaOptions{}, SdpaOptions{.scale = 3.0}, SdpaOptions{.is_causal = true}}) {
    v.set_grad(Tensor());
    Tensor y = scaled_dot_product_attention(qe, ke, v, o);
    REQUIRE(y.shape() == Shape{2, 4, 3});
    Tensor want = o.is_causal ? div(cumsum(v.detach(), 1).narrow(1, 0, 4),
                                    arange(1, 5, 1, {.dtype = DType::f64}).view({1, 4, 1}))  // keys 0..i
                              : mean(v.detach(), {1}, true).expand({2, 4, 3});
    testing::assert_close(y, want, tight());
    y.sum().backward();
    // d sum / d v_j = the total weight key j gets: 4 / 5 for each without causal.
    if (!o.is_causal) testing::assert_close(v.grad(), full({2, 5, 3}, 0.8, {.dtype = DType::f64}), tight());
    CHECK(all(isfinite(v.grad())).item<bool>());
    CHECK(qe.grad().shape() == Shape{2, 4, 0});
  }
  // S == 0: no keys, every row 0 (no max over an empty row is taken for the mask); zero gradients.
  Tensor q = randn64({2, 3, 4}).requires_grad_();
  Tensor k0 = zeros({2, 0, 4}, {.dtype = DType::f64}), v0 = zeros({2, 0, 6}, {.dtype = DType::f64});
  const std::vector<SdpaOptions> options = {
      {}, {.is_causal = true}, {.attn_mask = ones({3, 0}, {.dtype = DType::boolean})},
      {.attn_mask = zeros({2, 3, 0}, {.dtype = DType::f64})}, {.dropout_p = 0.5}};
  for (const SdpaOptions& o : options) {
    q.set_grad(Tensor());
    Tensor y = scaled_dot_product_attention(q, k0, v0, o);
    testing::assert_close(y, zeros({2, 3, 6}, {.dtype = DType::f64}), tight());
    y.sum().backward();
    testing::assert_close(q.grad(), zeros({2, 3, 4}, {.dtype = DType::f64}), tight());
  }
}

TEST_CASE("sdpa masks broadcast to the weights, not beyond; batch dims broadcast; scale") {
  FRESH_SEED();
  Tensor q = randn64({1, 2, 3, 4}), k = randn64({1, 2, 5, 4}), v = randn64({1, 2, 5, 4});
  // A mask larger than the weights [1, 2, 3, 5] used to add its dims to the output ([5, 2, 3, 4]);
  // PyTorch adds the mask in place and refuses it.
  for (Shape bad : {Shape{5, 2, 3, 5}, Shape{1, 1, 1, 3, 5}, Shape{3, 1, 3, 5}, Shape{4, 3, 5}}) {
    INFO("mask ", to_string(bad));
    CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = ones(bad, {.dtype = DType::boolean})}),
                     ErrorKind::shape, "scaled_dot_product_attention", "attn_mask", to_string(bad), "[1, 2, 3, 5]");
    CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.attn_mask = zeros(bad, {.dtype = DType::f64})}),
                     ErrorKind::shape, "attn_mask", to_string(bad));
  }
  // Broadcast batch dims (PyTorch's math path, matmul's rule): q's batch 1 against k's 2, and a
  // mask of the weights' full shape [2, 3, 5].
  Tensor q1 = randn64({1, 3, 4}), k2 = randn64({2, 5, 4}), v2 = randn64({2, 5, 2});
  Tensor mask = randn64({2, 3, 5});
  Tensor y = scaled_dot_product_attention(q1, k2, v2, {.attn_mask = mask});
  testing::assert_close(y, reference(q1.expand({2, 3, 4}), k2, v2, {.attn_mask = mask}), tight());
  // Batch dims that do not broadcast name this op and all three shapes (not matmul's two).
  CHECK_BRRR_ERROR(scaled_dot_product_attention(randn64({2, 3, 4}), randn64({3, 5, 4}), randn64({3, 5, 4})),
                   ErrorKind::shape, "scaled_dot_product_attention", "batch dims", "[2, 3, 4]", "[3, 5, 4]");
  CHECK_BRRR_ERROR(scaled_dot_product_attention(randn64({2, 3, 4}), randn64({2, 5, 4}), randn64({3, 5, 4})),
                   ErrorKind::shape, "scaled_dot_product_attention", "batch dims", "[2, 5, 4]", "[3, 5, 4]");
  // Scale: NaN and infinity only ever give NaN weights: refused by both ops; 0 gives uniform
  // weights; a negative one is taken as given.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {nan, inf, -inf}) {
    CHECK_BRRR_ERROR(scaled_dot_product_attention(q, k, v, {.scale = bad}), ErrorKind::value,
                     "scaled_dot_product_attention", "scale");
    CHECK_BRRR_ERROR(scaled_dot_product_flash_attention(q, k, v, {.scale = bad}), ErrorKind::value,
                     "scaled_dot_product_flash_attention", "scale");
  }
  testing::assert_close(scaled_dot_product_attention(q, k, v, {.scale = 0.0}),
                        mean(v, {2}, true).expand({1, 2, 3, 4}), tight());
  for (bool causal : {false, true}) {
    const SdpaOptions o{.is_causal = causal, .scale = -0.8};
    testing::assert_close(scaled_dot_product_attention(q, k, v, o), reference(q, k, v, o), tight());
    testing::assert_close(scaled_dot_product_flash_attention(q, k, v, o), reference(q, k, v, o), tight());
  }
}

TEST_CASE("flash attention with an empty output (B, H or L of 0) still records: zero gradients") {
  FRESH_SEED();
  for (Shape qs : {Shape{1, 2, 0, 4}, Shape{0, 2, 3, 4}, Shape{1, 0, 3, 4}}) {
    INFO("query ", to_string(qs));
    Shape ks{qs[0], qs[1], 5, 4};
    Tensor q = randn64(qs).requires_grad_(), k = randn64(ks).requires_grad_(), v = randn64(ks).requires_grad_();
    Tensor y = scaled_dot_product_flash_attention(q, k, v, {.dropout_p = 0.3, .is_causal = true});
    CHECK(y.shape() == qs);
    REQUIRE(y.requires_grad());  // was a tensor without history: backward threw
    y.sum().backward();
    CHECK(q.grad().shape() == qs);
    testing::assert_close(k.grad(), zeros(ks, {.dtype = DType::f64}), tight());
    testing::assert_close(v.grad(), zeros(ks, {.dtype = DType::f64}), tight());
  }
}
