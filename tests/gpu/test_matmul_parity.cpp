// matmul on the GPU (cuBLAS) against the CPU (Eigen) and a float64 reference: f32, f64, bf16
// and f16; transposed and padded views (transpose flags and leading dimensions, no copies),
// layouts that need the copying fallback, batched broadcast, folded batches, 1-D cases, zero
// sizes, TF32 on and off, backward parity, and one forward + backward under
// SyncPolicy::error. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"
#include "tests/ops/matmul_reference.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

using test::gpu;

// The float64 reference and sum|a||b| per element: test::ref_matmul (tests/ops/matmul_reference.hpp).

enum class Lay { contiguous, transposed, padded, strided, batch_permuted, expanded_batch };

const char* lay_name(Lay l) {
  switch (l) {
    case Lay::contiguous: return "contiguous";
    case Lay::transposed: return "transposed";
    case Lay::padded: return "padded";
    case Lay::strided: return "strided";
    case Lay::batch_permuted: return "batch_permuted";
    case Lay::expanded_batch: return "expanded_batch";
  }
  return "?";
}

/// `x` (contiguous) copied into a tensor of layout `lay` on `device` (same shape and values);
/// storage outside the view holds NaN.
Tensor relayout(const Tensor& x, Lay lay, Device device) {
  NoGradGuard no_grad;
  Shape s = x.shape();
  std::int64_t nd = x.dim();
  TensorOptions o{.dtype = x.dtype(), .device = device};
  double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor v;
  switch (lay) {
    case Lay::contiguous: return x.to(device);
    case Lay::transposed: {
      if (nd < 2) return x.to(device);
      Shape st = s;
      std::swap(st[nd - 1], st[nd - 2]);
      v = full(st, nan, o).transpose(-1, -2);
      break;
    }
    case Lay::padded: {
      Shape st = s;
      st.back() += 5;
      v = full(st, nan, o).narrow(-1, 2, s.back());
      break;
    }
    case Lay::strided: {
      Shape st = s;
      st.back() *= 2;
      v = full(st, nan, o).slice(-1, 1, st.back(), 2);
      break;
    }
    case Lay::batch_permuted: {
      if (nd < 4) return x.to(device);
      Shape st = s;
      std::swap(st[0], st[1]);
      v = full(st, nan, o).transpose(0, 1);
      break;
    }
    case Lay::expanded_batch:  // handled by the caller (values change)
      return x.to(device);
  }
  v.copy_(x.to(device));
  return v;
}

struct ShapeCase {
  Shape a, b;
};

const std::vector<ShapeCase> shape_cases = {
    {{7}, {7}},
    {{5, 7}, {7}},
    {{7}, {7, 6}},
    {{5, 7}, {7, 6}},
    {{1, 1}, {1, 1}},
    {{9, 1}, {1, 4}},
    {{1, 16}, {16, 1}},
    {{6, 5, 7}, {7, 3}},          // folded into one GEMM
    {{5, 7}, {4, 7, 3}},          // a broadcast over the batch (stride 0)
    {{3, 1, 5, 7}, {2, 7, 3}},    // both broadcast -> [3, 2, 5, 3]
    {{2, 3, 4, 5}, {2, 3, 5, 6}},
    {{7}, {3, 7, 2}},
    {{3, 2, 7}, {7}},
    {{65, 129}, {129, 33}},
    {{4, 64, 96}, {4, 96, 80}},
};

const DType float_dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

using test::Computed;
using test::Tol;

Tol tolerance(DType d, bool tf32) { return test::tolerance(tf32 ? Computed::gemm_tf32 : Computed::gemm_parity, d); }
Tol twice(Tol t) { return {2 * t.rtol, 2 * t.atol}; }

/// Largest excess of |got - want| over t.rtol * scale + t.atol (0 when within tolerance; NaN
/// counts).
double excess(const V& got, const V& want, const V& scale, Tol t) {
  double worst = 0;
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double e = std::abs(got[i] - want[i]) - t.rtol * scale[i] - t.atol - 1e-300;
    if (!(e <= 0)) worst = std::max(worst, std::isnan(e) ? 1e300 : e);
  }
  return worst;
}

/// One case: GPU and CPU results of the same (dtype-rounded) operands, each against float64,
/// and against each other.
void parity_case(DType dtype, const ShapeCase& c, Lay la, Lay lb, std::mt19937_64& rng, bool tf32) {
  Tensor a_cpu = make(dtype, normal_values(rng, numel_of(c.a)), c.a);
  Tensor b_cpu = make(dtype, normal_values(rng, numel_of(c.b)), c.b);
  Tensor a = relayout(a_cpu, la, gpu()), b = relayout(b_cpu, lb, gpu());
  V av = values(a_cpu), bv = values(b_cpu);
  Ref want = ref_matmul(av, c.a, bv, c.b);
  Ref scale = ref_matmul(av, c.a, bv, c.b, true);
  INFO("dtype ", std::string(to_string(dtype)), " a ", to_string(c.a), " ", std::string(lay_name(la)), " b ",
       to_string(c.b), " ", std::string(lay_name(lb)), " tf32 ", tf32);
  Tensor out = matmul(a, b);
  REQUIRE(out.shape() == want.shape);
  CHECK(out.device() == gpu());
  CHECK(out.dtype() == dtype);
  Tensor ref_cpu = matmul(a_cpu, b_cpu);
  V got = values(out), cpu = values(ref_cpu);
  const Tol tol = tolerance(dtype, tf32 && dtype == DType::f32);
  CHECK(excess(got, want.values, scale.values, tol) == 0);
  CHECK(excess(got, cpu, scale.values, twice(tol)) == 0);
}

}  // namespace

TEST_CASE("gpu matmul: parity with the CPU and float64, every dtype and layout") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tf32Guard tf32(false);
  const Lay lays[] = {Lay::contiguous, Lay::transposed, Lay::padded, Lay::strided, Lay::batch_permuted};
  for (DType dtype : float_dtypes)
    for (const ShapeCase& c : shape_cases)
      for (Lay la : lays)
        for (Lay lb : lays) parity_case(dtype, c, la, lb, rng, false);
}

TEST_CASE("gpu matmul: TF32 on stays within its tolerance, off is f32-exact-ish") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (bool allow : {false, true}) {
    Tf32Guard tf32(allow);
    for (const ShapeCase& c : shape_cases)
      for (Lay la : {Lay::contiguous, Lay::transposed})
        for (Lay lb : {Lay::contiguous, Lay::transposed}) parity_case(DType::f32, c, la, lb, rng, allow);
    // One operand at most an eighth of the other's size: on sm_90 a K-strided one (B row-major,
    // A column-major) is copied K-major before the TF32 product (ops/cuda/gemm_launch.cpp).
    const ShapeCase small_operand[] = {{{512, 96}, {96, 40}}, {{40, 96}, {96, 512}}, {{300, 17}, {17, 2}}};
    for (const ShapeCase& c : small_operand)
      for (Lay la : {Lay::contiguous, Lay::transposed, Lay::padded})
        for (Lay lb : {Lay::contiguous, Lay::transposed, Lay::padded}) parity_case(DType::f32, c, la, lb, rng, allow);
  }
  // A product where TF32's 10-bit mantissa shows: (1 + 2^-12)^2 summed 256 times.
  Tensor a = full({1, 256}, 1.0 + 1.0 / 4096, {.device = gpu()});
  Tensor b = full({256, 1}, 1.0 + 1.0 / 4096, {.device = gpu()});
  double exact = 256.0 * (1.0 + 1.0 / 4096) * (1.0 + 1.0 / 4096);
  {
    Tf32Guard off(false);
    CHECK(matmul(a, b).item<float>() == doctest::Approx(exact).epsilon(1e-6));
  }
  {
    Tf32Guard on(true);
    float v = matmul(a, b).item<float>();
    CHECK(v == doctest::Approx(exact).epsilon(1e-3));  // TF32 may round the operands to 1
  }
}

TEST_CASE("gpu matmul: expanded batches and user-expanded operands") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  for (DType dtype : float_dtypes) {
    Tensor b2 = make(dtype, normal_values(rng, 12), {3, 4});
    Tensor a = make(dtype, normal_values(rng, 30), {5, 2, 3});
    Tensor bx = b2.unsqueeze(0).expand({5, 3, 4});
    Tensor col = make(dtype, normal_values(rng, 4), {4, 1}).expand({4, 3});
    Tensor b3 = make(dtype, normal_values(rng, 6), {3, 2});
    for (auto [x, y] : {std::pair{a, bx}, std::pair{col, b3}}) {
      // the device copies of expanded CPU tensors are dense
      Tensor got = matmul(x.to(gpu()), y.to(gpu()));
      Tensor want = matmul(x, y);
      V scale = ref_matmul(values(x), x.shape(), values(y), y.shape(), true).values;
      CHECK(excess(values(got), values(want), scale, twice(tolerance(dtype, false))) == 0);
    }
    // an inner dim of stride 0 on the device: the copying fallback
    Tensor col_dev = make(dtype, values(col.narrow(1, 0, 1)), {4, 1}).to(gpu()).expand({4, 3});
    Tensor got_col = matmul(col_dev, b3.to(gpu()));
    V scale_col = ref_matmul(values(col), col.shape(), values(b3), b3.shape(), true).values;
    CHECK(excess(values(got_col), values(matmul(col, b3)), scale_col, twice(tolerance(dtype, false))) == 0);
    // stride-0 batch on the device itself
    Tensor bdev = b2.to(gpu()).unsqueeze(0).expand({5, 3, 4});
    CHECK(bdev.stride(0) == 0);
    Tensor got = matmul(a.to(gpu()), bdev);
    V scale = ref_matmul(values(a), a.shape(), values(bx), bx.shape(), true).values;
    CHECK(excess(values(got), values(matmul(a, bx)), scale, twice(tolerance(dtype, false))) == 0);
  }
}

TEST_CASE("gpu matmul: zero sizes") {
  for (DType dtype : float_dtypes) {
    TensorOptions o{.dtype = dtype, .device = gpu()};
    // k = 0 on a poisoned allocation: must be written with zeros
    Tensor out = matmul(empty({3, 0}, o), empty({0, 4}, o));
    CHECK(out.shape() == Shape{3, 4});
    CHECK(values(out) == V(12, 0.0));
    CHECK(values(matmul(empty({2, 5, 0}, o), empty({0, 3}, o))) == V(30, 0.0));
    CHECK(matmul(empty({0, 3}, o), empty({3, 4}, o)).shape() == Shape{0, 4});
    CHECK(matmul(empty({0, 2, 3}, o), empty({3, 4}, o)).shape() == Shape{0, 2, 4});
    Tensor dot = matmul(empty({0}, o), empty({0}, o));
    CHECK(dot.dim() == 0);
    CHECK(values(dot) == V{0.0});
  }
}

TEST_CASE("gpu matmul: errors") {
  CHECK_BRRR_ERROR(matmul(empty({2, 3}, {.device = gpu()}), empty({3, 2})), ErrorKind::device, "matmul", "cuda:0",
                   "cpu");
  CHECK_BRRR_ERROR(matmul(empty({32, 784}, {.device = gpu()}), empty({128, 10}, {.device = gpu()})), ErrorKind::shape,
                   "matmul: shapes [32, 784] and [128, 10] cannot be multiplied (784 != 128)");
  CHECK_BRRR_ERROR(matmul(empty({2, 2}, {.dtype = DType::i32, .device = gpu()}),
                          empty({2, 2}, {.dtype = DType::i32, .device = gpu()})),
                   ErrorKind::dtype, "matmul", "i32");
}

TEST_CASE("gpu matmul: backward parity with the CPU") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  const ShapeCase cases[] = {{{7}, {7}},         {{5, 7}, {7}},         {{7}, {7, 6}},       {{5, 7}, {7, 6}},
                             {{6, 5, 7}, {7, 3}}, {{5, 7}, {4, 7, 3}},   {{3, 1, 5, 7}, {2, 7, 3}},
                             {{3, 2, 7}, {7}},    {{65, 129}, {129, 33}}};
  for (DType dtype : {DType::f32, DType::f64}) {
    Tf32Guard tf32(false);
    for (const ShapeCase& c : cases) {
      INFO("dtype ", to_string(dtype), " a ", to_string(c.a), " b ", to_string(c.b));
      V av = normal_values(rng, numel_of(c.a)), bv = normal_values(rng, numel_of(c.b));
      Tensor a_cpu = make(dtype, av, c.a), b_cpu = make(dtype, bv, c.b);
      Tensor a_gpu = a_cpu.to(gpu()), b_gpu = b_cpu.to(gpu());
      for (Tensor* t : {&a_cpu, &b_cpu, &a_gpu, &b_gpu}) t->requires_grad_();
      Tensor y_cpu = matmul(a_cpu, b_cpu);
      Tensor r_cpu = make(dtype, normal_values(rng, y_cpu.numel()), y_cpu.shape());
      if (y_cpu.dim() == 0) r_cpu = full({}, normal_values(rng, 1)[0], {.dtype = dtype});
      y_cpu.backward(r_cpu);
      Tensor y_gpu = matmul(a_gpu, b_gpu);
      y_gpu.backward(r_cpu.to(gpu()));
      double tol = dtype == DType::f64 ? 1e-12 : 1e-4;
      for (auto [g, c2] : {std::pair{a_gpu.grad(), a_cpu.grad()}, std::pair{b_gpu.grad(), b_cpu.grad()}}) {
        REQUIRE(g.defined());
        CHECK(g.device() == gpu());
        CHECK(g.shape() == c2.shape());
        V gv = values(g), cv = values(c2);
        double worst = 0, mag = 1;
        for (std::size_t i = 0; i < gv.size(); ++i) {
          worst = std::max(worst, std::abs(gv[i] - cv[i]));
          mag = std::max(mag, std::abs(cv[i]));
        }
        CHECK(worst <= tol * mag);
      }
    }
  }
}

TEST_CASE("gpu matmul: forward + backward under SyncPolicy::error") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = Tensor::from_vector(normal_values(rng, 3 * 8 * 16), {3, 8, 16}).to(DType::f32).to(gpu());
  Tensor w1 = Tensor::from_vector(normal_values(rng, 16 * 32), {16, 32}).to(DType::f32).to(gpu());
  Tensor w2 = Tensor::from_vector(normal_values(rng, 10 * 32), {10, 32}).to(DType::f32).to(gpu());
  w1.requires_grad_();
  w2.requires_grad_();
  Tensor r = Tensor::from_vector(normal_values(rng, 3 * 8 * 10), {3, 8, 10}).to(DType::f32).to(gpu());
  cuda::synchronize();
  std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard g(cuda::SyncPolicy::error);
    Tensor h = matmul(x, w1);            // folded batch
    Tensor y = matmul(h, w2.t());        // transposed weight, no copy
    y.backward(r);
  }
  CHECK(cuda::sync_count() == syncs);
  REQUIRE(w1.grad().defined());
  REQUIRE(w2.grad().defined());
  // the same on the CPU
  Tensor xc = x.to(Device::cpu()), w1c = w1.detach().to(Device::cpu()), w2c = w2.detach().to(Device::cpu());
  w1c.requires_grad_();
  w2c.requires_grad_();
  matmul(matmul(xc, w1c), w2c.t()).backward(r.to(Device::cpu()));
  for (auto [g, c] : {std::pair{w1.grad(), w1c.grad()}, std::pair{w2.grad(), w2c.grad()}}) {
    V gv = values(g), cv = values(c);
    double worst = 0, mag = 1;
    for (std::size_t i = 0; i < gv.size(); ++i) {
      worst = std::max(worst, std::abs(gv[i] - cv[i]));
      mag = std::max(mag, std::abs(cv[i]));
    }
    CHECK(worst <= 1e-4 * mag);
  }
}

TEST_CASE("gpu matmul: on a side stream, results match the default stream") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor a = Tensor::from_vector(normal_values(rng, 64 * 48), {64, 48}).to(gpu());
  Tensor b = Tensor::from_vector(normal_values(rng, 48 * 40), {48, 40}).to(gpu());
  Tensor ref = matmul(a, b);
  cuda::Stream s = cuda::Stream::create(gpu());
  cuda::Event ready;
  ready.record(cuda::current_stream(gpu()));
  Tensor out;
  {
    cuda::StreamGuard g(s);
    s.wait(ready);
    out = matmul(a, b.t().contiguous().t());
  }
  s.synchronize();
  V got = values(out), want = values(ref);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}
