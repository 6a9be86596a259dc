// The fused CUDA attention (ops/cuda/attention.cu, reached through
// scaled_dot_product_attention on CUDA) against the CPU composite in float64 on the same
// rounded inputs: output and the three gradients, f32/bf16/f16, head dims 1..128 (each of the
// 32/64/128 kernel variants, and dims that are not a multiple of 16), sequence lengths that
// are not multiples of the tiles (L != S too), causal and not; strided heads taken from one
// [B, T, 3E] projection as a model does, forward + backward under SyncPolicy::error; the
// composite fallbacks (mask, dropout p = 1, f64) on CUDA against the CPU; dropout inside the
// fused kernel against the CPU composite from one seed (values, gradients, the mask bit for bit,
// the generator's state afterwards). Tolerances: the
// `attention` row of tests/tolerances.hpp (why: there). Without a CUDA device: skipped.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

Tensor randn64(Shape shape) { return randn(std::move(shape), {.dtype = DType::f64}); }

// The attention row, its atol relative to the largest |want| (tests/tolerances.hpp).
testing::CloseOptions attention_tol(DType d, const Tensor& want) {
  const Tol t = tolerance(Computed::attention, d);
  const double peak = want.numel() ? amax(abs(want.to(DType::f64)), {}).item<double>() : 0.0;
  return {.rtol = t.rtol, .atol = t.atol * std::max(peak, 1.0)};
}

// Leaves cached device blocks full of NaN, so an output element a kernel forgets to write
// shows up (the allocator hands the blocks out again).
void poison_cache(std::int64_t elements) {
  Tensor p = full({elements}, std::numeric_limits<double>::quiet_NaN(), {.dtype = DType::f32, .device = gpu()});
  (void)p;
}

// A fresh leaf requiring grad with t's values on `dev` (never t's own handle).
Tensor leaf(const Tensor& t, Device dev, std::optional<DType> dtype = std::nullopt) {
  return t.detach().to(dev).to(dtype.value_or(t.dtype())).clone().requires_grad_();
}

struct Dims {
  std::int64_t b, h, l, s, d;
};

// Fused on the GPU vs the f64 composite on the CPU, forward and the three gradients.
void check_case(Dims c, DType dt, bool causal, std::optional<double> scale = std::nullopt) {
  INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)),
       causal ? ", causal" : "");
  Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
  Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
  SdpaOptions o{.is_causal = causal, .scale = scale};

  poison_cache(4 * c.b * c.h * std::max(c.l, c.s) * c.d);
  Tensor qg = leaf(q, gpu()), kg = leaf(k, gpu()), vg = leaf(v, gpu());
  Tensor y = scaled_dot_product_attention(qg, kg, vg, o);
  REQUIRE(y.dtype() == dt);
  REQUIRE(y.shape() == Shape{c.b, c.h, c.l, c.d});
  if (c.h > 1 && c.l > 1) CHECK(y.transpose(1, 2).is_contiguous());  // the fused op's [B, L, H, D] layout
  y.backward(g.to(gpu()));

  Tensor qr = leaf(q, Device::cpu(), DType::f64), kr = leaf(k, Device::cpu(), DType::f64);
  Tensor vr = leaf(v, Device::cpu(), DType::f64);
  Tensor want = scaled_dot_product_attention(qr, kr, vr, o);
  want.backward(g.to(DType::f64));

  Tensor got = y.detach().to(Device::cpu());
  CHECK(all(isfinite(got)).item<bool>());
  testing::assert_close(got, want, attention_tol(dt, want));
  const Tensor* grads[3][2] = {{&qg, &qr}, {&kg, &kr}, {&vg, &vr}};
  for (int i = 0; i < 3; ++i) {
    INFO("gradient of ", "qkv"[i]);
    Tensor gi = grads[i][0]->grad().to(Device::cpu());
    CHECK(all(isfinite(gi)).item<bool>());
    testing::assert_close(gi, grads[i][1]->grad(), attention_tol(dt, grads[i][1]->grad()));
  }
}

}  // namespace

TEST_CASE("fused attention vs the CPU composite: head dims, odd lengths, causal, dtypes") {
  FRESH_SEED();
  const std::vector<Dims> shapes = {
      {2, 3, 64, 64, 64},   // whole tiles
      {1, 2, 37, 53, 32},   // partial tiles, L != S
      {2, 1, 130, 70, 128}, // L > S, the 128 variant
      {1, 2, 45, 45, 40},   // D not a multiple of 16 (the 64 variant, zero-padded)
      {1, 1, 1, 1, 64},     // one query, one key
      {1, 2, 5, 200, 16},   // few queries, many key tiles
      {1, 1, 257, 257, 1},  // D = 1
  };
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (bool causal : {false, true})
      for (const Dims& c : shapes) check_case(c, dt, causal);
  check_case({2, 2, 33, 47, 64}, DType::f32, true, 0.05);  // a scale of its own
}

TEST_CASE("fused attention at the GPT's shape [4, 6, 256, 64] bf16, causal") {
  FRESH_SEED();
  check_case({4, 6, 256, 256, 64}, DType::bf16, true);
  check_case({4, 6, 256, 256, 64}, DType::f32, true);
}

TEST_CASE("fused attention on heads split from one [B, T, 3E] projection, under SyncPolicy::error") {
  FRESH_SEED();
  const std::int64_t b = 2, t = 50, h = 4, d = 32, e = h * d;
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(std::string(to_string(dt)));
    Tensor qkv0 = randn64({b, t, 3 * e}).to(dt), g = randn64({b, t, e}).to(dt);
    auto forward = [&](const Tensor& qkv) {
      std::vector<Tensor> parts = split(qkv, e, -1);
      auto heads = [&](const Tensor& z) { return z.reshape({b, t, h, d}).transpose(1, 2); };  // strided views
      Tensor y = scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), {.is_causal = true});
      return y.transpose(1, 2).reshape({b, t, e});
    };
    Tensor xg = leaf(qkv0, gpu());
    Tensor gg = g.to(gpu());
    cuda::synchronize();
    const std::uint64_t syncs = cuda::sync_count();
    Tensor y;
    {
      cuda::SyncPolicyGuard guard(cuda::SyncPolicy::error);
      y = forward(xg);
      y.backward(gg);
    }
    CHECK(cuda::sync_count() == syncs);
    Tensor xr = leaf(qkv0, Device::cpu(), DType::f64);
    Tensor want = forward(xr);
    want.backward(g.to(DType::f64));
    testing::assert_close(y.detach().to(Device::cpu()), want, attention_tol(dt, want));
    testing::assert_close(xg.grad().to(Device::cpu()), xr.grad(), attention_tol(dt, xr.grad()));
  }
}

TEST_CASE("sdpa's composite fallbacks on CUDA (mask, f64, dropout 1) and dropout against the CPU") {
  FRESH_SEED();
  Tensor q = randn64({2, 2, 9, 8}), k = randn64({2, 2, 11, 8}), v = randn64({2, 2, 11, 8});
  Tensor mask = rand({9, 11}, {.dtype = DType::f64}) > 0.3;
  for (SdpaOptions o : {SdpaOptions{.attn_mask = mask}, SdpaOptions{.is_causal = true}}) {
    Tensor got = scaled_dot_product_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()),
                                              {.attn_mask = o.attn_mask.defined() ? o.attn_mask.to(gpu()) : Tensor(),
                                               .is_causal = o.is_causal});
    testing::assert_close(got.to(Device::cpu()), scaled_dot_product_attention(q, k, v, o),
                          test::close_options(Computed::accumulated, DType::f64));
  }
  // Dropout p = 1 stays the composite (all weights dropped: zeros).
  Tensor all_dropped = scaled_dot_product_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()), {.dropout_p = 1.0});
  testing::assert_close(all_dropped.to(Device::cpu()), zeros({2, 2, 9, 8}, {.dtype = DType::f64}), {.rtol = 0, .atol = 0});
  // Dropout p < 1 takes the fused kernel; the seed's mask is the same on both devices
  // (docs/architecture.md, Random numbers).
  manual_seed(5);
  Tensor cpu = scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), {.dropout_p = 0.3});
  manual_seed(5);
  Tensor dev = scaled_dot_product_attention(q.to(DType::f32).to(gpu()), k.to(DType::f32).to(gpu()),
                                            v.to(DType::f32).to(gpu()), {.dropout_p = 0.3});
  testing::assert_close(dev.to(Device::cpu()), cpu, test::close_options(Computed::accumulated, DType::f32));
}

namespace {

// The fused op with dropout on the GPU (dt) against the CPU composite in f32 on the same
// rounded inputs, each side from manual_seed(seed): the mask is then the same, so outputs and
// gradients agree to the attention tolerance, and the generators have advanced alike (the
// next rand() after forward + backward is bit for bit the same).
void check_dropout_case(Dims c, DType dt, bool causal, double p, std::uint64_t seed) {
  INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)),
       causal ? ", causal" : "", ", p ", p, ", seed ", seed);
  Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
  Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
  SdpaOptions o{.dropout_p = p, .is_causal = causal};

  poison_cache(4 * c.b * c.h * std::max(c.l, c.s) * c.d);
  Tensor qg = leaf(q, gpu()), kg = leaf(k, gpu()), vg = leaf(v, gpu());
  manual_seed(seed);
  Tensor y = scaled_dot_product_attention(qg, kg, vg, o);
  y.backward(g.to(gpu()));
  Tensor next_gpu = rand({17}, {.device = gpu()});

  Tensor qr = leaf(q, Device::cpu(), DType::f32), kr = leaf(k, Device::cpu(), DType::f32);
  Tensor vr = leaf(v, Device::cpu(), DType::f32);
  manual_seed(seed);
  Tensor want = scaled_dot_product_attention(qr, kr, vr, o);  // the composite (CPU)
  want.backward(g.to(DType::f32));
  Tensor next_cpu = rand({17});

  CHECK(next_gpu.to(Device::cpu()).to_host<float>() == next_cpu.to_host<float>());
  Tensor got = y.detach().to(Device::cpu());
  CHECK(all(isfinite(got)).item<bool>());
  testing::assert_close(got.to(DType::f32), want, attention_tol(dt, want));
  const Tensor* grads[3][2] = {{&qg, &qr}, {&kg, &kr}, {&vg, &vr}};
  for (int i = 0; i < 3; ++i) {
    INFO("gradient of ", "qkv"[i]);
    Tensor gi = grads[i][0]->grad().to(Device::cpu());
    CHECK(all(isfinite(gi)).item<bool>());
    testing::assert_close(gi.to(DType::f32), grads[i][1]->grad(), attention_tol(dt, grads[i][1]->grad()));
  }
}

// Positions where a tensor is exactly 0.
std::vector<bool> zeros_of(const Tensor& t) {
  std::vector<float> x = t.to(Device::cpu()).to(DType::f32).contiguous().to_host<float>();
  std::vector<bool> z(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) z[i] = x[i] == 0.0f;
  return z;
}

}  // namespace

TEST_CASE("fused attention dropout vs the CPU composite from one seed: values, gradients, generator") {
  FRESH_SEED();
  const std::vector<Dims> shapes = {
      {2, 3, 64, 64, 64},   // whole tiles
      {1, 2, 37, 53, 32},   // partial tiles, L != S (the 32 variant: 64 keys per dk/dv block)
      {2, 1, 130, 70, 128}, // L > S, the 128 variant
      {1, 2, 45, 45, 40},   // D not a multiple of 16
      {1, 2, 5, 200, 16},   // few queries, many key tiles
      {1, 1, 1, 1, 64},     // one query, one key
  };
  std::uint64_t s = seed_;
  for (DType dt : {DType::f32, DType::bf16})
    for (bool causal : {false, true})
      for (const Dims& c : shapes) check_dropout_case(c, dt, causal, 0.2, ++s);
  check_dropout_case({2, 2, 33, 47, 64}, DType::f32, true, 0.6, ++s);
  check_dropout_case({4, 6, 256, 256, 64}, DType::bf16, true, 0.2, ++s);  // the GPT's shape
}

TEST_CASE("fused attention dropout: the mask is the composite's bit for bit (V = I shows P o Z)") {
  FRESH_SEED();
  // With V = [I_S | 0] (S <= D) the output's first S columns are the dropped weights, zero
  // exactly where an element was dropped (or is causal-masked): the zero patterns must agree.
  for (Dims c : {Dims{2, 3, 50, 40, 40}, Dims{1, 2, 70, 64, 64}, Dims{1, 1, 9, 30, 32}, Dims{1, 2, 33, 100, 128}})
    for (bool causal : {false, true}) {
      INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, causal ? ", causal" : "");
      Tensor q = randn({c.b, c.h, c.l, c.d}), k = randn({c.b, c.h, c.s, c.d});
      const TensorOptions i64{.dtype = DType::i64};
      Tensor v = eq(arange(c.s, i64).unsqueeze(1), arange(c.d, i64).unsqueeze(0))
                     .to(DType::f32)
                     .expand({c.b, c.h, c.s, c.d})
                     .contiguous();
      SdpaOptions o{.dropout_p = 0.3, .is_causal = causal};
      manual_seed(seed_ + 1);
      Tensor y = scaled_dot_product_attention(q.to(gpu()), k.to(gpu()), v.to(gpu()), o);
      manual_seed(seed_ + 1);
      Tensor want = scaled_dot_product_attention(q, k, v, o);
      const std::vector<bool> zg = zeros_of(y.narrow(-1, 0, c.s)), zc = zeros_of(want.narrow(-1, 0, c.s));
      CHECK(zg == zc);
      std::int64_t dropped = 0;
      for (bool z : zc) dropped += z;
      CHECK(dropped > 0);
    }
}

TEST_CASE("fused attention dropout: one seed gives one output, another seed another") {
  FRESH_SEED();
  Tensor q = randn({2, 4, 64, 64}, {.device = gpu()}), k = randn({2, 4, 64, 64}, {.device = gpu()});
  Tensor v = randn({2, 4, 64, 64}, {.device = gpu()});
  auto run = [&](std::uint64_t s, DType dt) {
    manual_seed(s);
    return scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), {.dropout_p = 0.2, .is_causal = true})
        .to(DType::f32);
  };
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(std::string(to_string(dt)));
    Tensor a = run(seed_, dt), b = run(seed_, dt), c = run(seed_ + 1, dt);
    CHECK(a.to_host<float>() == b.to_host<float>());
    CHECK(a.to_host<float>() != c.to_host<float>());
    // Two calls in a row draw different masks (the generator advanced).
    manual_seed(seed_);
    Tensor first = scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), {.dropout_p = 0.2}).to(DType::f32);
    Tensor second = scaled_dot_product_attention(q.to(dt), k.to(dt), v.to(dt), {.dropout_p = 0.2}).to(DType::f32);
    CHECK(first.to_host<float>() != second.to_host<float>());
  }
}

TEST_CASE("scaled_dot_product_flash_attention with dropout on CUDA equals the CPU kernel's from one seed") {
  FRESH_SEED();
  // The CPU side of the contract draws the same mask (f32 words for f32/bf16, f64 for f64).
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(std::string(to_string(dt)));
    Tensor q = randn64({2, 2, 21, 24}).to(dt), k = randn64({2, 2, 35, 24}).to(dt), v = randn64({2, 2, 35, 24}).to(dt);
    Tensor g = randn64({2, 2, 21, 24}).to(dt);
    SdpaOptions o{.dropout_p = 0.25, .is_causal = true};
    Tensor qg = leaf(q, gpu()), kg = leaf(k, gpu()), vg = leaf(v, gpu());
    Tensor qc = leaf(q, Device::cpu()), kc = leaf(k, Device::cpu()), vc = leaf(v, Device::cpu());
    manual_seed(seed_);
    Tensor y = scaled_dot_product_flash_attention(qg, kg, vg, o);
    y.backward(g.to(gpu()));
    manual_seed(seed_);
    Tensor want = scaled_dot_product_flash_attention(qc, kc, vc, o);
    want.backward(g);
    // The f32 row for both: a different mask would be off by far more.
    testing::assert_close(y.to(Device::cpu()), want, attention_tol(DType::f32, want));
    testing::assert_close(qg.grad().to(Device::cpu()), qc.grad(), attention_tol(DType::f32, qc.grad()));
    testing::assert_close(kg.grad().to(Device::cpu()), kc.grad(), attention_tol(DType::f32, kc.grad()));
    testing::assert_close(vg.grad().to(Device::cpu()), vc.grad(), attention_tol(DType::f32, vc.grad()));
  }
}
