// GEMM tuning (BRRR_GEMM_TUNE, ops/cuda/gemm_launch.cpp): with it set, a new cuBLASLt plan
// times the heuristic's candidates on the call's operands and keeps the fastest. The products
// must stay right whichever candidate wins: the plain product (f32, TF32, bf16, batched), the
// bias epilogue and the bias-gradient epilogue (whose timing runs write to scratch memory, not
// to the gradient); the tuning waits (host syncs) happen once per new shape and never again
// for it; and where the host must not wait (SyncPolicy::error, a graph capture) a new shape
// keeps the heuristic's first choice instead of throwing. Shapes here are used by no other
// suite, so each makes a new plan in test_gpu's process. Skipped without a CUDA device.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

using namespace brrr;
using namespace test;

namespace {

using V = std::vector<double>;

// Sets BRRR_GEMM_TUNE for the scope (it is read whenever a new plan is made).
struct TuneEnv {
  std::string previous;
  bool had = false;
  explicit TuneEnv(const char* value) {
    if (const char* v = std::getenv("BRRR_GEMM_TUNE")) previous = v, had = true;
    setenv("BRRR_GEMM_TUNE", value, 1);
  }
  ~TuneEnv() {
    if (had) setenv("BRRR_GEMM_TUNE", previous.c_str(), 1);
    else unsetenv("BRRR_GEMM_TUNE");
  }
  TuneEnv(const TuneEnv&) = delete;
  TuneEnv& operator=(const TuneEnv&) = delete;
};

Tensor uniform(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  V v(static_cast<std::size_t>(numel_of(s)));
  for (double& x : v) x = u(rng);
  return Tensor::from_vector(v, s);
}

V values(const Tensor& t) { return t.detach().to(Device::cpu()).to(DType::f64).contiguous().to_host<double>(); }

// got (any device/dtype) against want (f64) within rtol * scale per element (scale: the sum of
// the terms' magnitudes).
void check_close(const Tensor& got, const Tensor& want, const Tensor& scale, double rtol, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const V g = values(got), w = values(want), s = values(scale);
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= rtol * s[i] + 1e-30)) ++bad;
  CHECK(bad == 0);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const V x = values(a), y = values(b);
  return x == y;
}

// a @ b on cuda:0 in `dt` twice (tuned on the first call), against the f64 product of the
// inputs rounded to dt. Returns the syncs of the first call.
std::uint64_t check_matmul(const Shape& as, const Shape& bs, DType dt, bool tf32, double rtol, std::uint64_t seed) {
  Tf32Guard guard(tf32);
  const Tensor a64 = uniform(as, seed).to(dt).to(DType::f64);
  const Tensor b64 = uniform(bs, seed + 1).to(dt).to(DType::f64);
  const Tensor want = matmul(a64, b64), scale = matmul(abs(a64), abs(b64));
  const Tensor a = a64.to(dt).to(gpu()), b = b64.to(dt).to(gpu());
  cuda::synchronize();
  const std::uint64_t s0 = cuda::sync_count();
  Tensor first = matmul(a, b);
  const std::uint64_t s1 = cuda::sync_count();
  Tensor second = matmul(a, b);
  CHECK(cuda::sync_count() == s1);  // the plan is made: no more tuning waits
  std::ostringstream what;
  what << to_string(dt) << (tf32 ? " (TF32)" : "") << " " << to_string(as) << " @ " << to_string(bs);
  check_close(first, want, scale, rtol, what.str());
  CHECK(same_bits(first, second));  // one key, one algorithm
  return s1 - s0;
}

}  // namespace

TEST_CASE("tuned GEMMs: f32, TF32, bf16 and batched products stay right; tuning waits once per shape") {
  TuneEnv tune("8");
  std::uint64_t waits = 0;
  waits += check_matmul({333, 129}, {129, 257}, DType::f32, false, tolerance(Computed::gemm_parity, DType::f32).rtol, 1);
  waits += check_matmul({1040, 392}, {392, 1160}, DType::f32, true, tolerance(Computed::gemm_tf32, DType::f32).rtol, 3);
  waits += check_matmul({1032, 384}, {384, 1544}, DType::bf16, false, tolerance(Computed::gemm_parity, DType::bf16).rtol, 5);
  waits += check_matmul({6, 136, 72}, {6, 72, 104}, DType::bf16, false, tolerance(Computed::gemm_parity, DType::bf16).rtol, 7);
  // The heuristic offers several candidates for shapes this size, so some were timed.
  CHECK(waits > 0);
}

TEST_CASE("tuned GEMMs: linear's bias epilogue and its backward's bias-gradient epilogue") {
  TuneEnv tune("8");
  Tf32Guard guard(true);
  const Shape xs{2056, 392}, ws{1168, 392};
  const Tensor x64 = uniform(xs, 11), w64 = uniform(ws, 12), b64 = uniform({1168}, 13), g64 = uniform({2056, 1168}, 14);
  // f64 references: out = x w^T + b, dx = g w, dw = g^T x, db = sum_rows g.
  const Tensor out_want = add(matmul(x64, w64.transpose(0, 1)), b64);
  const Tensor out_scale = add(matmul(abs(x64), abs(w64).transpose(0, 1)), abs(b64));
  const Tensor dx_want = matmul(g64, w64), dx_scale = matmul(abs(g64), abs(w64));
  const Tensor dw_want = matmul(g64.transpose(0, 1), x64), dw_scale = matmul(abs(g64).transpose(0, 1), abs(x64));
  const Tensor db_want = sum(g64, {0}), db_scale = sum(abs(g64), {0});
  const double rtol = tolerance(Computed::gemm_tf32, DType::f32).rtol;
  for (int round = 0; round < 2; ++round) {  // the first makes (and tunes) the plans, the second reuses them
    CAPTURE(round);
    Tensor x = x64.to(DType::f32).to(gpu()).requires_grad_(true);
    Tensor w = w64.to(DType::f32).to(gpu()).requires_grad_(true);
    Tensor b = b64.to(DType::f32).to(gpu()).requires_grad_(true);
    Tensor out = linear(x, w, b);
    autograd::backward({out}, {g64.to(DType::f32).to(gpu())});
    check_close(out, out_want, out_scale, rtol, "linear output");
    check_close(x.grad(), dx_want, dx_scale, rtol, "dx");
    check_close(w.grad(), dw_want, dw_scale, rtol, "dw");
    check_close(b.grad(), db_want, db_scale, tolerance(Computed::accumulated, DType::f32).rtol, "db");
  }
}

TEST_CASE("tuned GEMMs: where the host must not wait, a new shape keeps the heuristic's choice") {
  TuneEnv tune("8");
  Tf32Guard guard(false);
  const Tensor a64 = uniform({264, 200}, 21), b64 = uniform({200, 328}, 22);
  const Tensor a = a64.to(DType::f32).to(gpu()), b = b64.to(DType::f32).to(gpu());
  const double rtol = tolerance(Computed::gemm_parity, DType::f32).rtol;
  Tensor c;
  {
    cuda::SyncPolicyGuard no_waits(cuda::SyncPolicy::error);
    const std::uint64_t s0 = cuda::sync_count();
    CHECK_NOTHROW(c = matmul(a, b));
    CHECK(cuda::sync_count() == s0);
  }
  check_close(c, matmul(a64, b64), matmul(abs(a64), abs(b64)), rtol, "under SyncPolicy::error");

  // Under capture: a shape first seen inside the capture.
  const Tensor a2 = uniform({296, 200}, 23).to(DType::f32).to(gpu());
  Tensor c2;
  cuda::Graph graph;
  CHECK_NOTHROW(graph.capture([&] { c2 = matmul(a2, b); }));
  graph.replay();
  const Tensor a2_64 = a2.to(Device::cpu()).to(DType::f64);
  check_close(c2, matmul(a2_64, b64), matmul(abs(a2_64), abs(b64)), rtol, "under capture");
}
