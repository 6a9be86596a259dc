// nn::init on the CPU: fans of linear and conv weights, calculate_gain, the bounds and the
// statistics (mean, std) of uniform_/normal_/xavier_*/kaiming_* on large tensors against the
// formulas of torch.nn.init, the default initialisation of Linear, Conv2d and Embedding,
// determinism under manual_seed, no graph recording, and errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  std::vector<double> v = values(t);
  Stats s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size() - 1));
  return s;
}

// Tolerances of the sample moments: 5 standard errors for n samples (mean: sigma / sqrt(n);
// relative error of the std: sqrt((kurtosis - 1) / (4 n)), kurtosis 1.8 uniform, 3 normal).
double mean_tol(double sigma, std::int64_t n) { return 5.0 * sigma / std::sqrt(static_cast<double>(n)); }
double std_rel_tol(double kurtosis, std::int64_t n) {
  return 5.0 * std::sqrt((kurtosis - 1.0) / (4.0 * static_cast<double>(n)));
}

// U(-b, b): every value inside, the extremes close to the bound, std b / sqrt(3), mean 0.
void check_uniform(const Tensor& t, double b) {
  Stats s = stats_of(t);
  INFO("bound ", b, " min ", s.min, " max ", s.max, " mean ", s.mean, " std ", s.std, " n ", t.numel());
  REQUIRE(t.numel() >= 10000);
  double sigma = b / std::sqrt(3.0);
  // low + (high - low) u is computed in f32 (f64 for f64 tensors): allow its rounding.
  double slack = b * (t.dtype() == DType::f64 ? 1e-15 : 1e-6);
  CHECK(s.min >= -b - slack);
  CHECK(s.max <= b + slack);
  CHECK(s.max > 0.99 * b);
  CHECK(s.min < -0.99 * b);
  CHECK(std::abs(s.mean) < mean_tol(sigma, t.numel()));
  CHECK(s.std == doctest::Approx(sigma).epsilon(std_rel_tol(1.8, t.numel())));
}

// N(mean, std^2): sample mean and std.
void check_normal(const Tensor& t, double mean, double std) {
  Stats s = stats_of(t);
  INFO("expected mean ", mean, " std ", std, "; got mean ", s.mean, " std ", s.std, " n ", t.numel());
  REQUIRE(t.numel() >= 10000);
  CHECK(std::abs(s.mean - mean) < mean_tol(std, t.numel()));
  CHECK(s.std == doctest::Approx(std).epsilon(std_rel_tol(3.0, t.numel())));
}

}  // namespace

TEST_CASE("init::fan_in_and_fan_out: linear and conv weights") {
  CHECK(nn::init::fan_in_and_fan_out(empty({10, 20})) == std::pair<std::int64_t, std::int64_t>{20, 10});
  // Conv weight [O, C, kh, kw]: fan_in = C kh kw, fan_out = O kh kw.
  CHECK(nn::init::fan_in_and_fan_out(empty({16, 3, 5, 5})) == std::pair<std::int64_t, std::int64_t>{75, 400});
  CHECK(nn::init::fan_in_and_fan_out(empty({6, 2, 3, 1})) == std::pair<std::int64_t, std::int64_t>{6, 18});
  CHECK(nn::init::fan_in_and_fan_out(empty({4, 3, 2})) == std::pair<std::int64_t, std::int64_t>{6, 8});
  CHECK_BRRR_ERROR(nn::init::fan_in_and_fan_out(empty({7})), ErrorKind::shape, "fan", "[7]");
  CHECK_BRRR_ERROR(nn::init::fan_in_and_fan_out(Tensor()), ErrorKind::value, "undefined");
}

TEST_CASE("init::calculate_gain: PyTorch's values") {
  using nn::init::calculate_gain;
  CHECK(calculate_gain("linear") == 1.0);
  CHECK(calculate_gain("conv2d") == 1.0);
  CHECK(calculate_gain("conv_transpose2d") == 1.0);
  CHECK(calculate_gain("sigmoid") == 1.0);
  CHECK(calculate_gain("tanh") == doctest::Approx(5.0 / 3.0).epsilon(1e-15));
  CHECK(calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)).epsilon(1e-15));
  CHECK(calculate_gain("leaky_relu") == doctest::Approx(std::sqrt(2.0 / (1.0 + 0.01 * 0.01))).epsilon(1e-15));
  CHECK(calculate_gain("leaky_relu", 0.2) == doctest::Approx(std::sqrt(2.0 / 1.04)).epsilon(1e-15));
  CHECK(calculate_gain("leaky_relu", std::sqrt(5.0)) == doctest::Approx(std::sqrt(1.0 / 3.0)).epsilon(1e-15));
  CHECK(calculate_gain("selu") == 0.75);
  CHECK_BRRR_ERROR(calculate_gain("swish"), ErrorKind::value, "calculate_gain", "swish");
}

TEST_CASE("init::uniform_ and init::normal_: bounds and moments") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor t = empty({256, 512});
  nn::init::uniform_(t, -2.0, 5.0);
  Stats s = stats_of(t);
  CHECK(s.min >= -2.0);
  CHECK(s.max < 5.0);
  CHECK(std::abs(s.mean - 1.5) < mean_tol(7.0 / std::sqrt(12.0), t.numel()));
  CHECK(s.std == doctest::Approx(7.0 / std::sqrt(12.0)).epsilon(std_rel_tol(1.8, t.numel())));
  nn::init::uniform_(t);
  s = stats_of(t);
  CHECK(s.min >= 0.0);
  CHECK(s.max < 1.0);
  nn::init::normal_(t, 3.0, 0.5);
  check_normal(t, 3.0, 0.5);
  Tensor d = empty({200, 300}, {.dtype = DType::f64});
  nn::init::normal_(d, -1.0, 2.0);
  check_normal(d, -1.0, 2.0);
  CHECK_BRRR_ERROR(nn::init::uniform_(t, 1.0, 0.0), ErrorKind::value, "uniform_");
  CHECK_BRRR_ERROR(nn::init::normal_(t, 0.0, -1.0), ErrorKind::value, "normal_");
  CHECK_BRRR_ERROR(nn::init::normal_(zeros({3}, {.dtype = DType::i64})), ErrorKind::dtype, "normal_", "i64");
  CHECK_BRRR_ERROR(nn::init::uniform_(Tensor()), ErrorKind::value, "uniform_");
}

TEST_CASE("init::constant_, zeros_, ones_") {
  Tensor t = randn({3, 4});
  nn::init::constant_(t, 2.5);
  CHECK(values(t) == std::vector<double>(12, 2.5));
  nn::init::zeros_(t);
  CHECK(values(t) == std::vector<double>(12, 0.0));
  nn::init::ones_(t);
  CHECK(values(t) == std::vector<double>(12, 1.0));
  Tensor i = zeros({4}, {.dtype = DType::i32});
  nn::init::constant_(i, 7);
  CHECK(values(i) == std::vector<double>(4, 7.0));
  // On a view: only the view's elements change.
  Tensor m = zeros({3, 3});
  nn::init::ones_(m.select(1, 2));
  CHECK(values(m) == std::vector<double>{0, 0, 1, 0, 0, 1, 0, 0, 1});
}

TEST_CASE("init::xavier_uniform_ and xavier_normal_: Glorot & Bengio's bounds") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor w = empty({300, 200});
  nn::init::xavier_uniform_(w);
  check_uniform(w, std::sqrt(6.0 / 500.0));
  nn::init::xavier_uniform_(w, 2.0);
  check_uniform(w, 2.0 * std::sqrt(6.0 / 500.0));
  Tensor c = empty({64, 32, 3, 3});  // fan_in 288, fan_out 576
  nn::init::xavier_uniform_(c, nn::init::calculate_gain("relu"));
  check_uniform(c, std::sqrt(2.0) * std::sqrt(6.0 / (288.0 + 576.0)));
  nn::init::xavier_normal_(w);
  check_normal(w, 0.0, std::sqrt(2.0 / 500.0));
  nn::init::xavier_normal_(c, 0.5);
  check_normal(c, 0.0, 0.5 * std::sqrt(2.0 / 864.0));
  CHECK_BRRR_ERROR(nn::init::xavier_uniform_(empty({5})), ErrorKind::shape, "[5]");
}

TEST_CASE("init::kaiming_uniform_ and kaiming_normal_: He et al.'s bounds, fan modes") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  Tensor w = empty({256, 512});
  // Defaults: a = 0, fan_in, leaky_relu -> gain sqrt(2), bound sqrt(6 / fan_in).
  nn::init::kaiming_uniform_(w);
  check_uniform(w, std::sqrt(6.0 / 512.0));
  nn::init::kaiming_uniform_(w, 0, "fan_out", "relu");
  check_uniform(w, std::sqrt(6.0 / 256.0));
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));  // Linear's default: 1 / sqrt(fan_in)
  check_uniform(w, 1.0 / std::sqrt(512.0));
  nn::init::kaiming_uniform_(w, 0, "fan_in", "tanh");
  check_uniform(w, std::sqrt(3.0) * (5.0 / 3.0) / std::sqrt(512.0));
  Tensor c = empty({32, 16, 5, 5});  // fan_in 400, fan_out 800
  nn::init::kaiming_uniform_(c, 0, "fan_out");
  check_uniform(c, std::sqrt(6.0 / 800.0));
  nn::init::kaiming_normal_(w);
  check_normal(w, 0.0, std::sqrt(2.0) / std::sqrt(512.0));
  nn::init::kaiming_normal_(c, 0.1, "fan_in", "leaky_relu");
  check_normal(c, 0.0, std::sqrt(2.0 / 1.01) / std::sqrt(400.0));
  nn::init::kaiming_normal_(c, 0, "fan_out", "linear");
  check_normal(c, 0.0, 1.0 / std::sqrt(800.0));
  CHECK_BRRR_ERROR(nn::init::kaiming_uniform_(w, 0, "fan_avg"), ErrorKind::value, "kaiming_uniform_", "fan_avg");
  CHECK_BRRR_ERROR(nn::init::kaiming_normal_(w, 0, "fan_in", "softplus"), ErrorKind::value, "softplus");
  // Zero-element tensors: a no-op, as in PyTorch.
  Tensor z = empty({0, 4});
  nn::init::kaiming_uniform_(z);
  CHECK(z.numel() == 0);
}

TEST_CASE("init: reduced-precision tensors are drawn in f32 and rounded once") {
  manual_seed(fresh_seed());
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(to_string(dt));
    Tensor w = empty({128, 256}, {.dtype = dt});
    nn::init::kaiming_uniform_(w, std::sqrt(5.0));
    double b = 1.0 / 16.0;
    Stats s = stats_of(w);
    CHECK(s.max <= b * (1 + 1.0 / 128));  // rounding to 8 bits may step just past the bound
    CHECK(s.min >= -b * (1 + 1.0 / 128));
    CHECK(s.std == doctest::Approx(b / std::sqrt(3.0)).epsilon(0.03));
    CHECK(w.dtype() == dt);
  }
}

TEST_CASE("init: same seed, same values; the parameter stays a leaf and nothing is recorded") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  Tensor a = empty({40, 30}, {.requires_grad = true});
  Tensor b = empty({40, 30}, {.requires_grad = true});
  manual_seed(seed);
  nn::init::xavier_normal_(a);
  manual_seed(seed);
  nn::init::xavier_normal_(b);
  CHECK(values(a) == values(b));
  nn::init::xavier_normal_(b);
  CHECK(values(a) != values(b));
  CHECK(a.is_leaf());
  CHECK(a.requires_grad());
  CHECK(a.grad_fn().get() == nullptr);
  // Grad mode is restored after init.
  CHECK(autograd::is_grad_enabled());

  // Module construction is deterministic under manual_seed.
  manual_seed(seed);
  nn::Linear l1(7, 5);
  manual_seed(seed);
  nn::Linear l2(7, 5);
  CHECK(values(l1.weight()) == values(l2.weight()));
  CHECK(values(l1.bias()) == values(l2.bias()));
}

TEST_CASE("Linear, Conv2d and Embedding: PyTorch's default initialisation") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  manual_seed(seed);
  nn::Linear fc(400, 300);
  check_uniform(fc.weight(), 1.0 / std::sqrt(400.0));  // kaiming_uniform(a = sqrt 5)
  Stats b = stats_of(fc.bias());
  CHECK(b.max <= 1.0 / std::sqrt(400.0) * (1 + 1e-6));  // f32 rounding of the bound
  CHECK(b.min >= -1.0 / std::sqrt(400.0) * (1 + 1e-6));
  CHECK(b.max > 0.8 / std::sqrt(400.0));
  CHECK(b.min < -0.8 / std::sqrt(400.0));

  nn::Conv2d conv(16, 64, 5);  // fan_in = 16 * 25 = 400
  check_uniform(conv.weight(), 1.0 / 20.0);
  Stats cb = stats_of(conv.bias());
  CHECK(cb.max <= 1.0 / 20.0 * (1 + 1e-6));
  CHECK(cb.min >= -1.0 / 20.0 * (1 + 1e-6));
  nn::Conv2d grouped(64, 256, 3, {.groups = 4});  // weight [256, 16, 3, 3]: fan_in = 144
  check_uniform(grouped.weight(), 1.0 / 12.0);

  nn::Embedding emb(1000, 64, 0);
  std::vector<double> w = values(emb.weight());
  for (int j = 0; j < 64; ++j) CHECK(w[static_cast<std::size_t>(j)] == 0.0);
  check_normal(emb.weight().slice(0, 1, 1000), 0.0, 1.0);
}
