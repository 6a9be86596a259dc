// The tensor-core kernels of the fused attention (ops/cuda/attention_mma.cu, bf16 and f16, and
// f32 as TF32 when set_allow_tf32 is on; the last two cases)
// against the f32 SIMT kernel (ops/cuda/attention.cu) on the same rounded inputs and against the
// CPU composite: head dims 8..128 (the 32/64/128 variants; multiples of 8 take the cp.async
// loads, other dims and views whose strides are not multiples of 8 the element-wise ones),
// L != S and lengths that are not multiples of the tiles, causal and not, q/k/v/dout as
// transposed ([B, T, H, D] memory) and unaligned views (out, dq, dk, dv are always
// [B, L, H, D] views); dropout p 0.1 and 0.5 against the SIMT kernel and the CPU composite from
// one seed (values, gradients, the generator's state, the mask bit for bit); the backward bit
// for bit the same on two runs under set_deterministic, and the fused backward (f32 as TF32 with
// 32 < D <= 64, dq added with atomics, the default) against that deterministic one. Tolerances: the `attention` row of tests/tolerances.hpp
// (relative to the largest |want|, as in test_attention_parity.cpp). Skipped without a device.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

Tensor randn64(Shape shape) { return randn(std::move(shape), {.dtype = DType::f64}); }

// The attention row for results in dt (`how`: the TF32 one for f32 on tensor cores), its atol
// relative to the largest |want|.
testing::CloseOptions tol(DType dt, const Tensor& want, Computed how = Computed::attention) {
  const Tol t = tolerance(how, dt);
  const double peak = want.numel() ? amax(abs(want.to(DType::f64)), {}).item<double>() : 0.0;
  return {.rtol = t.rtol, .atol = t.atol * std::max(peak, 1.0)};
}

struct Dims {
  std::int64_t b, h, l, s, d;
};

// How q, k, v and the output gradient are laid out in memory.
enum class QkvLayout {
  contiguous,  // [B, H, T, D]
  bthd,        // transposed views of [B, T, H, D] memory (heads split from one projection)
  unaligned,   // the last D of a [B, H, T, D + 1] tensor: strides not multiples of 8, base off by 2 bytes
};
const char* layout_name(QkvLayout l) {
  return l == QkvLayout::contiguous ? "contiguous" : l == QkvLayout::bthd ? "bthd" : "unaligned";
}

// x as a view of `lay` over a fresh tensor on dev in dtype dt: {the leaf (memory), the view}.
std::pair<Tensor, Tensor> laid_out(const Tensor& x, QkvLayout lay, DType dt, Device dev, bool grad) {
  Tensor xd = x.to(dt).to(dev);
  Tensor base;
  if (lay == QkvLayout::bthd) base = xd.transpose(1, 2).contiguous();
  else if (lay == QkvLayout::unaligned) base = cat({zeros({x.size(0), x.size(1), x.size(2), 1}, {.dtype = dt, .device = dev}), xd}, -1);
  else base = xd.contiguous();
  base = base.detach();
  if (grad) base.requires_grad_();
  Tensor view = lay == QkvLayout::bthd ? base.transpose(1, 2) : lay == QkvLayout::unaligned ? base.narrow(-1, 1, x.size(3)) : base;
  return {base, view};
}

// The gradient of a leaf made by laid_out, as [B, H, T, D].
Tensor grad_of(const Tensor& base, QkvLayout lay, std::int64_t d) {
  Tensor g = base.grad();
  return lay == QkvLayout::bthd ? g.transpose(1, 2) : lay == QkvLayout::unaligned ? g.narrow(-1, 1, d) : g;
}

struct Result {
  Tensor y, dq, dk, dv;  // f32 (f64 for f64) on the CPU, [B, H, T, D]
  std::vector<float> next;  // the generator's next rand({17}) on dev after forward + backward
};

// scaled_dot_product_attention of q, k, v (values as given, converted to dt) on dev, forward
// and backward with upstream gradient g; from manual_seed(seed) when given.
Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, DType dt, Device dev, QkvLayout lay,
           SdpaOptions o, std::optional<std::uint64_t> seed = std::nullopt) {
  auto [qb, qv] = laid_out(q, lay, dt, dev, true);
  auto [kb, kv] = laid_out(k, lay, dt, dev, true);
  auto [vb, vv] = laid_out(v, lay, dt, dev, true);
  auto [gb, gv] = laid_out(g, lay, dt, dev, false);
  if (seed) manual_seed(*seed);
  Tensor y = scaled_dot_product_attention(qv, kv, vv, o);
  y.backward(gv);
  Result r;
  if (seed) r.next = rand({17}, {.device = dev}).to(Device::cpu()).to_host<float>();
  const DType out = dt == DType::f64 ? DType::f64 : DType::f32;
  const std::int64_t d = q.size(3);
  r.y = y.detach().to(Device::cpu()).to(out);
  r.dq = grad_of(qb, lay, d).to(Device::cpu()).to(out);
  r.dk = grad_of(kb, lay, d).to(Device::cpu()).to(out);
  r.dv = grad_of(vb, lay, d).to(Device::cpu()).to(out);
  return r;
}

// got (in dt) against want: output and the three gradients, finite and within the attention row.
void check_close(const Result& got, const Result& want, DType dt, const char* against,
                 Computed how = Computed::attention) {
  INFO("against ", against);
  const Tensor* pairs[4][2] = {{&got.y, &want.y}, {&got.dq, &want.dq}, {&got.dk, &want.dk}, {&got.dv, &want.dv}};
  const char* names[4] = {"output", "grad q", "grad k", "grad v"};
  for (int i = 0; i < 4; ++i) {
    INFO(names[i]);
    const Tensor g = pairs[i][0]->to(DType::f64), w = pairs[i][1]->to(DType::f64);
    CHECK(all(isfinite(g)).item<bool>());
    testing::assert_close(g, w, tol(dt, w, how));
  }
}

std::vector<float> host_f32(const Tensor& t) { return t.to(DType::f32).contiguous().to_host<float>(); }

/// Restores set_deterministic on scope exit.
struct DeterministicGuard {
  bool previous = deterministic();
  explicit DeterministicGuard(bool on) { set_deterministic(on); }
  ~DeterministicGuard() { set_deterministic(previous); }
};

bool same(const Result& a, const Result& b) {
  return host_f32(a.y) == host_f32(b.y) && host_f32(a.dq) == host_f32(b.dq) && host_f32(a.dk) == host_f32(b.dk) &&
         host_f32(a.dv) == host_f32(b.dv);
}

}  // namespace

TEST_CASE("tensor-core attention (bf16, f16) vs the f32 SIMT kernel and the CPU composite: dims, lengths, layouts") {
  FRESH_SEED();
  const std::vector<std::int64_t> dims = {8, 16, 32, 40, 64, 80, 128, 20, 1};
  const std::vector<Dims> shapes = {
      {2, 2, 64, 64, 0},   // whole tiles
      {1, 2, 77, 77, 0},   // partial tiles
      {2, 1, 100, 37, 0},  // L > S: rows past S see every key
      {1, 3, 33, 130, 0},  // L < S: causal keys past L are never attended (dK = dV = 0 there)
  };
  const QkvLayout layouts[3] = {QkvLayout::contiguous, QkvLayout::bthd, QkvLayout::unaligned};
  int n = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (std::int64_t d : dims)
      for (const Dims& sh : shapes)
        for (bool causal : {false, true}) {
          const Dims c{sh.b, sh.h, sh.l, sh.s, d};
          const QkvLayout lay = layouts[n++ % 3];
          INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)),
               causal ? ", causal" : "", ", ", layout_name(lay));
          // Inputs rounded to dt once: every path sees the same values.
          Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
          Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
          const SdpaOptions o{.is_causal = causal};
          const Result mma = run(q, k, v, g, dt, gpu(), lay, o);
          const Result simt = run(q, k, v, g, DType::f32, gpu(), QkvLayout::contiguous, o);
          const Result cpu = run(q, k, v, g, DType::f64, Device::cpu(), QkvLayout::contiguous, o);
          check_close(mma, simt, dt, "the f32 SIMT kernel");
          check_close(mma, cpu, dt, "the f64 CPU composite");
        }
}

TEST_CASE("tensor-core attention dropout vs the f32 SIMT kernel and the CPU composite from one seed") {
  FRESH_SEED();
  const std::vector<Dims> shapes = {
      {1, 2, 77, 77, 64},   // partial tiles (the 64 variant: 64 keys, 64 queries per step)
      {2, 1, 100, 37, 128}, // L > S (the 128 variant: 32 keys, 16 queries per step)
      {1, 3, 33, 130, 40},  // L < S, D zero-padded to 64
      {1, 2, 50, 90, 16},   // the 32 variant
      {2, 2, 45, 45, 20},   // element-wise loads (D not a multiple of 8)
  };
  std::uint64_t s = seed_;
  for (DType dt : {DType::bf16, DType::f16})
    for (double p : {0.1, 0.5})
      for (const Dims& c : shapes)
        for (bool causal : {false, true}) {
          ++s;
          INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)),
               causal ? ", causal" : "", ", p ", p, ", seed ", s);
          Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
          Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
          const SdpaOptions o{.dropout_p = p, .is_causal = causal};
          const Result mma = run(q, k, v, g, dt, gpu(), QkvLayout::bthd, o, s);
          const Result simt = run(q, k, v, g, DType::f32, gpu(), QkvLayout::contiguous, o, s);
          // The composite draws f32 uniforms for f32: the same words, the same mask.
          const Result cpu = run(q, k, v, g, DType::f32, Device::cpu(), QkvLayout::contiguous, o, s);
          check_close(mma, simt, dt, "the f32 SIMT kernel");
          check_close(mma, cpu, dt, "the f32 CPU composite");
          CHECK(mma.next == simt.next);  // both advanced the generator by B H L S words
          CHECK(mma.next == cpu.next);
        }
}

TEST_CASE("tensor-core attention dropout: the mask is the SIMT kernel's and the composite's bit for bit") {
  FRESH_SEED();
  // With V = [I_S | 0] (S <= D) the output's first S columns are the dropped weights, zero
  // exactly where an element was dropped (or is causal-masked). bf16 keeps every kept weight
  // nonzero (its exponent range is f32's).
  for (Dims c : {Dims{2, 3, 50, 40, 40}, Dims{1, 2, 70, 64, 64}, Dims{1, 1, 9, 30, 32}, Dims{1, 2, 33, 100, 128},
                 Dims{2, 2, 130, 20, 20}})
    for (double p : {0.1, 0.5})
      for (bool causal : {false, true}) {
        INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, causal ? ", causal" : "", ", p ", p);
        Tensor q = randn({c.b, c.h, c.l, c.d}).to(DType::bf16).to(DType::f32);
        Tensor k = randn({c.b, c.h, c.s, c.d}).to(DType::bf16).to(DType::f32);
        const TensorOptions i64{.dtype = DType::i64};
        Tensor v = eq(arange(c.s, i64).unsqueeze(1), arange(c.d, i64).unsqueeze(0))
                       .to(DType::f32)
                       .expand({c.b, c.h, c.s, c.d})
                       .contiguous();
        const SdpaOptions o{.dropout_p = p, .is_causal = causal};
        auto zeros_of = [&](DType dt, Device dev) {
          manual_seed(seed_ + 1);
          Tensor y = scaled_dot_product_attention(q.to(dt).to(dev), k.to(dt).to(dev), v.to(dt).to(dev), o);
          std::vector<float> x = host_f32(y.narrow(-1, 0, c.s).to(Device::cpu()));
          std::vector<bool> z(x.size());
          for (std::size_t i = 0; i < x.size(); ++i) z[i] = x[i] == 0.0f;
          return z;
        };
        const std::vector<bool> mma = zeros_of(DType::bf16, gpu());
        const std::vector<bool> simt = zeros_of(DType::f32, gpu());
        const std::vector<bool> cpu = zeros_of(DType::f32, Device::cpu());
        CHECK(mma == simt);
        CHECK(mma == cpu);
        std::int64_t dropped = 0;
        for (bool z : cpu) dropped += z;
        CHECK(dropped > 0);
      }
}

TEST_CASE("tensor-core attention backward under set_deterministic: two runs bit for bit") {
  FRESH_SEED();
  DeterministicGuard fixed(true);
  for (Dims c : {Dims{2, 3, 200, 200, 64}, Dims{1, 2, 150, 170, 128}, Dims{2, 2, 99, 99, 32}})
    for (DType dt : {DType::bf16, DType::f16})
      for (double p : {0.0, 0.2}) {
        INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)), ", p ", p);
        Tensor q = randn64({c.b, c.h, c.l, c.d}), k = randn64({c.b, c.h, c.s, c.d});
        Tensor v = randn64({c.b, c.h, c.s, c.d}), g = randn64({c.b, c.h, c.l, c.d});
        const SdpaOptions o{.dropout_p = p, .is_causal = true};
        const Result a = run(q, k, v, g, dt, gpu(), QkvLayout::bthd, o, seed_ + 7);
        const Result b = run(q, k, v, g, dt, gpu(), QkvLayout::bthd, o, seed_ + 7);
        CHECK(same(a, b));
      }
}

TEST_CASE("TF32 attention (f32, allow_tf32) vs the f32 SIMT kernel and the f64 CPU composite: dims, lengths, layouts, "
          "dropout") {
  FRESH_SEED();
  const std::vector<std::int64_t> dims = {8, 20, 32, 40, 64, 80, 128, 1};
  const std::vector<Dims> shapes = {
      {2, 2, 64, 64, 0},   // whole tiles
      {1, 2, 77, 77, 0},   // partial tiles
      {2, 1, 100, 37, 0},  // L > S
      {1, 3, 33, 130, 0},  // L < S
  };
  const QkvLayout layouts[3] = {QkvLayout::contiguous, QkvLayout::bthd, QkvLayout::unaligned};
  int n = 0;
  std::uint64_t s = seed_;
  for (std::int64_t d : dims)
    for (const Dims& sh : shapes)
      for (bool causal : {false, true}) {
        const Dims c{sh.b, sh.h, sh.l, sh.s, d};
        const QkvLayout lay = layouts[n % 3];
        const double p = n++ % 2 ? 0.2 : 0.0;
        ++s;
        INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, causal ? ", causal" : "", ", ",
             layout_name(lay), ", p ", p, ", seed ", s);
        Tensor q = randn64({c.b, c.h, c.l, c.d}).to(DType::f32), k = randn64({c.b, c.h, c.s, c.d}).to(DType::f32);
        Tensor v = randn64({c.b, c.h, c.s, c.d}).to(DType::f32), g = randn64({c.b, c.h, c.l, c.d}).to(DType::f32);
        const SdpaOptions o{.dropout_p = p, .is_causal = causal};
        Result tc, simt;
        {
          Tf32Guard on(true);
          tc = run(q, k, v, g, DType::f32, gpu(), lay, o, s);
        }
        {
          Tf32Guard off(false);
          simt = run(q, k, v, g, DType::f32, gpu(), QkvLayout::contiguous, o, s);
        }
        // The composite draws f32 uniforms for f32: the same words, the same mask.
        const Result cpu = run(q, k, v, g, DType::f32, Device::cpu(), QkvLayout::contiguous, o, s);
        check_close(tc, simt, DType::f32, "the f32 SIMT kernel", Computed::attention_tf32);
        check_close(tc, cpu, DType::f32, "the f32 CPU composite", Computed::attention_tf32);
        CHECK(tc.next == simt.next);
        // Not the SIMT kernel's values: the products ran on TF32.
        if (c.d >= 8) CHECK_FALSE(same(tc, simt));
      }
}

TEST_CASE("TF32 attention backward under set_deterministic: two runs bit for bit") {
  FRESH_SEED();
  Tf32Guard on(true);
  DeterministicGuard fixed(true);
  for (Dims c : {Dims{2, 3, 200, 200, 64}, Dims{1, 2, 150, 170, 128}, Dims{2, 2, 99, 99, 32}})
    for (double p : {0.0, 0.2}) {
      INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", p ", p);
      Tensor q = randn64({c.b, c.h, c.l, c.d}), k = randn64({c.b, c.h, c.s, c.d});
      Tensor v = randn64({c.b, c.h, c.s, c.d}), g = randn64({c.b, c.h, c.l, c.d});
      const SdpaOptions o{.dropout_p = p, .is_causal = true};
      const Result a = run(q, k, v, g, DType::f32, gpu(), QkvLayout::bthd, o, seed_ + 7);
      const Result b = run(q, k, v, g, DType::f32, gpu(), QkvLayout::bthd, o, seed_ + 7);
      CHECK(same(a, b));
    }
}

TEST_CASE("fused backward (dq by atomics, TF32, 32 < D <= 64) vs the deterministic two-kernel backward") {
  // The default for f32 on TF32 with D in (32, 64] unless set_deterministic: one delta launch,
  // then dK/dV adding dS K into dq with atomics. The same output and dv bit
  // for bit (the same kernels' sums); dq (the order of its sums) and dk (delta, summed in another
  // order) within the dtype's attention row of the deterministic ones, across layouts (unaligned: scalar atomics and
  // loads), L != S, partial tiles, causal and dropout; bf16/f16 and D = 32, 128 do not take it
  // (bit for bit).
  FRESH_SEED();
  const std::vector<Dims> shapes = {{2, 3, 200, 200, 64}, {1, 2, 77, 130, 40}, {2, 1, 100, 37, 64},
                                    {1, 2, 64, 64, 48},  {1, 1, 9, 30, 33},    {2, 2, 99, 99, 32},
                                    {1, 2, 70, 90, 128}};
  const QkvLayout layouts[3] = {QkvLayout::contiguous, QkvLayout::bthd, QkvLayout::unaligned};
  int n = 0;
  for (DType dt : {DType::bf16, DType::f16, DType::f32})
    for (const Dims& c : shapes)
      for (bool causal : {false, true}) {
        const QkvLayout lay = layouts[n % 3];
        const double p = n++ % 2 ? 0.2 : 0.0;
        INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, ", ", std::string(to_string(dt)),
             causal ? ", causal" : "", ", ", layout_name(lay), ", p ", p);
        Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
        Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
        const SdpaOptions o{.dropout_p = p, .is_causal = causal};
        Tf32Guard tf32(true);
        Result fused, fixed;
        {
          DeterministicGuard off(false);
          fused = run(q, k, v, g, dt, gpu(), lay, o, seed_ + 3);
        }
        {
          DeterministicGuard on(true);
          fixed = run(q, k, v, g, dt, gpu(), lay, o, seed_ + 3);
        }
        const Computed how = dt == DType::f32 ? Computed::attention_tf32 : Computed::attention;
        CHECK(host_f32(fused.y) == host_f32(fixed.y));
        CHECK(host_f32(fused.dv) == host_f32(fixed.dv));
        testing::assert_close(fused.dk.to(DType::f64), fixed.dk.to(DType::f64), tol(dt, fixed.dk.to(DType::f64), how));
        CHECK(fused.next == fixed.next);
        CHECK(all(isfinite(fused.dq)).item<bool>());
        testing::assert_close(fused.dq.to(DType::f64), fixed.dq.to(DType::f64), tol(dt, fixed.dq.to(DType::f64), how));
        if (dt != DType::f32 || c.d <= 32 || c.d > 64) CHECK(same(fused, fixed));  // (not fused)
        // Against the f64 CPU composite too (the same tolerance as the deterministic path's).
        const Result cpu = run(q, k, v, g, DType::f32, Device::cpu(), QkvLayout::contiguous, o, seed_ + 3);
        testing::assert_close(fused.dq.to(DType::f64), cpu.dq.to(DType::f64), tol(dt, cpu.dq.to(DType::f64), how));
      }
}

TEST_CASE("fused backward, small shapes (the sanitizers' case)") {
  // One small shape per path of the fused backward (vector and scalar loads and atomics,
  // dropout, causal, partial tiles) against the CPU composite: quick enough for
  // compute-sanitizer's memcheck and racecheck.
  FRESH_SEED();
  DeterministicGuard off(false);
  Tf32Guard tf32(true);
  const DType dt = DType::f32;
  for (const Dims& c : {Dims{1, 2, 70, 70, 64}, Dims{1, 1, 40, 50, 40}})
    for (bool causal : {false, true}) {
      INFO("B H L S D = ", c.b, " ", c.h, " ", c.l, " ", c.s, " ", c.d, causal ? ", causal" : "");
      Tensor q = randn64({c.b, c.h, c.l, c.d}).to(dt), k = randn64({c.b, c.h, c.s, c.d}).to(dt);
      Tensor v = randn64({c.b, c.h, c.s, c.d}).to(dt), g = randn64({c.b, c.h, c.l, c.d}).to(dt);
      const SdpaOptions o{.dropout_p = causal ? 0.2 : 0.0, .is_causal = causal};
      const QkvLayout lay = c.d == 40 ? QkvLayout::unaligned : QkvLayout::bthd;
      const Result got = run(q, k, v, g, dt, gpu(), lay, o, seed_ + 5);
      const Result cpu = run(q, k, v, g, dt, Device::cpu(), QkvLayout::contiguous, o, seed_ + 5);
      check_close(got, cpu, dt, "the f32 CPU composite", Computed::attention_tf32);
    }
}
