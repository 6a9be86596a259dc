// Normalisation on the CPU: batch_norm (training with running-stat updates, evaluation,
// without affine; 2-D, 3-D and 4-D inputs), group_norm, instance_norm, rms_norm and
// normalize against PyTorch fixtures (outputs and every input gradient, f64 and f32),
// gradients and second derivatives against central differences, the nn:: modules
// (BatchNorm1d/2d buffers and state_dict names, momentum and cumulative averages, eval mode,
// track_running_stats = false; InstanceNorm, GroupNorm, RMSNorm) and the errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/torch_fixtures.hpp"

using namespace brrr;
using namespace test;

namespace {

const char* file = "norms.safetensors";
const io::TensorMap& fx() { return fixtures(file); }

void replay_both(const std::string& name, const FixtureFn& f) {
  replay(file, name, f);
  replay(file, name, f, DType::f32, Device::cpu(), {.rtol = 1e-4, .atol = 1e-5});
}

}  // namespace

TEST_CASE("batch_norm matches PyTorch: training (running stats), evaluation, no affine") {
  for (std::string name : {"bn2d", "bn1d", "bn3d"}) {
    INFO(name);
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor rm = fx().at(name + ".running_mean0").to(dt).clone(), rv = fx().at(name + ".running_var0").to(dt).clone();
      const double tol = dt == DType::f64 ? 1e-10 : 1e-4;
      replay(file, name + ".train",
             [&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-5); }, dt,
             Device::cpu(), {.rtol = tol, .atol = tol});
      testing::assert_close(rm.to(DType::f64), fx().at(name + ".running_mean1"), {.rtol = tol, .atol = tol});
      testing::assert_close(rv.to(DType::f64), fx().at(name + ".running_var1"), {.rtol = tol, .atol = tol});
      Tensor rm0 = fx().at(name + ".running_mean0").to(dt), rv0 = fx().at(name + ".running_var0").to(dt);
      replay(file, name + ".eval",
             [&](const std::vector<Tensor>& in) { return batch_norm(in[0], rm0, rv0, in[1], in[2], false); }, dt,
             Device::cpu(), {.rtol = tol, .atol = tol});
      replay(file, name + ".train_noaffine",
             [&](const std::vector<Tensor>& in) { return batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-3); }, dt,
             Device::cpu(), {.rtol = tol, .atol = tol});
    }
  }
}

TEST_CASE("batch_norm: running stats of another dtype, non-contiguous input, bf16") {
  FRESH_SEED();
  Tensor x = randn({6, 4, 3, 5}, {.dtype = DType::f64}).permute({0, 1, 3, 2});  // non-contiguous
  Tensor rm = zeros({4}), rv = ones({4});  // f32 stats with f64 data: the Tensor-op update
  Tensor y = batch_norm(x, rm, rv, {}, {}, true, 0.3);
  Tensor mu = mean(x, {0, 2, 3}), va = var(x, {0, 2, 3}, 0.0);
  testing::assert_close(y, div(sub(x, mu.reshape({1, 4, 1, 1})), sqrt(add(va, 1e-5)).reshape({1, 4, 1, 1})),
                        {.rtol = 1e-12, .atol = 1e-12});
  testing::assert_close(rm, mul(mu, 0.3).to(DType::f32), {.rtol = 1e-6, .atol = 1e-6});
  testing::assert_close(rv, add(mul(var(x, {0, 2, 3}, 1.0), 0.3), 0.7).to(DType::f32), {.rtol = 1e-6, .atol = 1e-6});
  // bf16 input with f32 weights: statistics in f32, output rounded once.
  Tensor xb = x.to(DType::bf16);
  Tensor w = randn({4}), b = randn({4});
  Tensor got = batch_norm(xb, {}, {}, w, b, true);
  CHECK(got.dtype() == DType::bf16);
  Tensor want = batch_norm(xb.to(DType::f32), {}, {}, w.to(DType::bf16).to(DType::f32), b.to(DType::bf16).to(DType::f32),
                           true);
  testing::assert_close(got.to(DType::f32), want, {.rtol = 1e-2, .atol = 1e-2});
}

TEST_CASE("batch_norm: gradients and second derivatives against central differences") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  Tensor x = make(DType::f64, normal_values(rng, 3 * 2 * 4), {3, 2, 4});
  Tensor w = make(DType::f64, normal_values(rng, 2), {2}), b = make(DType::f64, normal_values(rng, 2), {2});
  for (bool training : {true, false}) {
    Tensor rm = make(DType::f64, {0.3, -0.2}, {2}), rv = make(DType::f64, {1.5, 0.7}, {2});
    auto f = [=](const std::vector<Tensor>& in) { return batch_norm(in[0], rm, rv, in[1], in[2], training, 0.0); };
    CHECK(autograd::gradcheck(f, {x, w, b}));
    // Second derivatives (create_graph): the Hessian-vector product of L(x) = <f(x), r>
    // against central differences of the analytic gradient along v.
    Tensor r = make(DType::f64, normal_values(rng, 24), {3, 2, 4}), v = make(DType::f64, normal_values(rng, 24), {3, 2, 4});
    auto gradient = [&](const Tensor& at, bool create_graph) {
      Tensor xi = at.detach().clone().requires_grad_();
      Tensor wi = w.detach().clone().requires_grad_();
      Tensor l = sum(mul(batch_norm(xi, rm, rv, wi, b, training, 0.0), r));
      return std::pair{xi, autograd::grad({l}, {xi}, {}, create_graph, create_graph)[0]};
    };
    auto [xi, g] = gradient(x, true);
    Tensor hv = autograd::grad({sum(mul(g, v))}, {xi}, {}, false, false, true)[0];
    const double eps = 1e-6;
    Tensor fd = div(sub(gradient(add(x, mul(v, eps)), false).second, gradient(sub(x, mul(v, eps)), false).second), 2 * eps);
    if (!hv.defined()) hv = zeros_like(fd);  // eval mode: the gradient is linear in the input
    testing::assert_close(hv, fd, {.rtol = 1e-5, .atol = 1e-6});
  }
}

TEST_CASE("group_norm, instance_norm, rms_norm, normalize match PyTorch") {
  replay_both("group_norm", [](const std::vector<Tensor>& in) { return group_norm(in[0], 3, in[1], in[2]); });
  replay_both("group_norm_1", [](const std::vector<Tensor>& in) { return group_norm(in[0], 1); });
  replay_both("group_norm_6", [](const std::vector<Tensor>& in) { return group_norm(in[0], 6); });
  replay_both("instance_norm",
              [](const std::vector<Tensor>& in) { return instance_norm(in[0], {}, {}, in[1], in[2]); });
  replay_both("instance_norm_1d", [](const std::vector<Tensor>& in) { return instance_norm(in[0]); });
  replay_both("rms_norm", [](const std::vector<Tensor>& in) { return rms_norm(in[0], {4, 5}, in[1], 1e-6); });
  replay(file, "rms_norm_default_eps", [](const std::vector<Tensor>& in) { return rms_norm(in[0], {5}); });
  for (std::string p : {"2.0", "1.0", "3.0", "inf"}) {
    double pv = p == "inf" ? INFINITY : std::stod(p);
    replay_both("normalize_" + p, [pv](const std::vector<Tensor>& in) { return normalize(in[0], pv, 1); });
  }
  replay_both("normalize_dim-1", [](const std::vector<Tensor>& in) { return normalize(in[0], 2.0, -1, 1e-3); });
}

TEST_CASE("group_norm, instance_norm, rms_norm, normalize: gradcheck and running stats") {
  FRESH_SEED();
  std::mt19937_64 rng(seed_);
  Tensor x = make(DType::f64, normal_values(rng, 2 * 4 * 5), {2, 4, 5});
  Tensor w = make(DType::f64, normal_values(rng, 4), {4}), b = make(DType::f64, normal_values(rng, 4), {4});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return group_norm(in[0], 2, in[1], in[2]); }, {x, w, b}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return instance_norm(in[0], {}, {}, in[1], in[2]); },
                            {x, w, b}));
  Tensor w5 = make(DType::f64, normal_values(rng, 5), {5});
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return rms_norm(in[0], {5}, in[1]); }, {x, w5}));
  for (double p : {1.0, 2.0, 3.0, static_cast<double>(INFINITY)})
    CHECK(autograd::gradcheck([p](const std::vector<Tensor>& in) { return normalize(in[0], p, 1); }, {x}));
  // instance_norm's running statistics: batch means of the instance statistics.
  Tensor rm = zeros({4}, {.dtype = DType::f64}), rv = ones({4}, {.dtype = DType::f64});
  (void)instance_norm(x, rm, rv, {}, {}, true, 0.5);
  testing::assert_close(rm, mul(mean(mean(x, {2}), {0}), 0.5));
  testing::assert_close(rv, add(mul(mean(var(x, {2}), {0}), 0.5), 0.5));
  // use_input_stats = false: the running statistics normalise.
  Tensor y = instance_norm(x, rm, rv, {}, {}, false);
  testing::assert_close(y, batch_norm(x, rm, rv));
  // bf16 rms_norm computes in f32.
  Tensor xb = x.to(DType::bf16);
  CHECK(values(rms_norm(xb, {5})) == values(rms_norm(xb.to(DType::f32), {5}, {}, 0.0078125).to(DType::bf16)));
}

TEST_CASE("normalisation errors") {
  Tensor x = randn({2, 3, 4});
  CHECK_BRRR_ERROR(batch_norm(randn({3}), {}, {}, {}, {}, true), ErrorKind::shape, "batch_norm", "[3]");
  CHECK_BRRR_ERROR(batch_norm(x, {}, {}), ErrorKind::value, "batch_norm", "evaluation");
  CHECK_BRRR_ERROR(batch_norm(randn({1, 3}), {}, {}, {}, {}, true), ErrorKind::value, "more than 1 value");
  CHECK_BRRR_ERROR(batch_norm(x, zeros({4}), ones({3})), ErrorKind::shape, "running_mean", "[3]", "[4]");
  CHECK_BRRR_ERROR(batch_norm(x, {}, {}, ones({2}), {}, true), ErrorKind::shape, "weight");
  CHECK_BRRR_ERROR(batch_norm(ones({2, 3}, {.dtype = DType::i64}), {}, {}, {}, {}, true), ErrorKind::dtype, "batch_norm");
  CHECK_BRRR_ERROR(group_norm(x, 2), ErrorKind::value, "group_norm", "num_groups = 2");
  CHECK_BRRR_ERROR(group_norm(x, 3, ones({4})), ErrorKind::shape, "group_norm", "weight");
  CHECK_BRRR_ERROR(instance_norm(randn({2, 3})), ErrorKind::shape, "instance_norm");
  CHECK_BRRR_ERROR(instance_norm(randn({2, 3, 1})), ErrorKind::value, "spatial");
  CHECK_BRRR_ERROR(instance_norm(x, {}, {}, {}, {}, false), ErrorKind::value, "use_input_stats");
  CHECK_BRRR_ERROR(rms_norm(x, {3}), ErrorKind::shape, "rms_norm", "normalized_shape");
  CHECK_BRRR_ERROR(rms_norm(x, {4}, ones({3})), ErrorKind::shape, "rms_norm", "weight");
  CHECK_BRRR_ERROR(normalize(x, 0.0), ErrorKind::value, "normalize", "p");
  CHECK_BRRR_ERROR(normalize(x, 2.0, 3), ErrorKind::index, "normalize");
}

TEST_CASE("BatchNorm1d/2d: buffers, state_dict names, momentum, eval, no tracking") {
  FRESH_SEED();
  nn::BatchNorm2d bn(3);
  nn::StateDict sd = bn.state_dict();
  std::string keys;
  for (const auto& [k, _] : sd) keys += k + " ";
  CHECK(keys == "bias num_batches_tracked running_mean running_var weight ");
  CHECK(bn.num_batches_tracked().dtype() == DType::i64);
  CHECK(bn.num_batches_tracked().dim() == 0);
  CHECK(bn.to_string() == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)");
  CHECK(bn.num_parameters() == 6);
  Tensor x1 = randn({4, 3, 2, 2}, {.dtype = DType::f64}), x2 = randn({4, 3, 2, 2}, {.dtype = DType::f64});
  bn.to(DType::f64);
  Tensor y = bn(x1);
  testing::assert_close(y, batch_norm(x1, {}, {}, {}, {}, true));
  (void)bn(x2);
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 2);
  Tensor want_rm = add(mul(mean(x1, {0, 2, 3}), 0.1 * 0.9), mul(mean(x2, {0, 2, 3}), 0.1));
  testing::assert_close(bn.running_mean(), want_rm);
  Tensor want_rv = add(add(mul(var(x1, {0, 2, 3}), 0.1 * 0.9), mul(var(x2, {0, 2, 3}), 0.1)), 0.81);
  testing::assert_close(bn.running_var(), want_rv);
  bn.eval();
  testing::assert_close(bn(x1), batch_norm(x1, bn.running_mean(), bn.running_var(), bn.weight(), bn.bias()));
  CHECK(bn.num_batches_tracked().item<std::int64_t>() == 2);  // not counted in eval
  // The gradient reaches weight and bias.
  bn.train();
  sum(mul(bn(x1), x2)).backward();
  CHECK(bn.weight().grad().defined());
  CHECK(bn.bias().grad().defined());

  // momentum = nullopt: the cumulative average 1 / num_batches_tracked.
  nn::BatchNorm1d cum(2, {.momentum = std::nullopt});
  cum.to(DType::f64);
  Tensor a = randn({5, 2}, {.dtype = DType::f64}), b2 = randn({5, 2}, {.dtype = DType::f64});
  (void)cum(a);
  (void)cum(b2);
  testing::assert_close(cum.running_mean(), div(add(mean(a, {0}), mean(b2, {0})), 2.0));
  CHECK(cum.to_string() == "BatchNorm1d(2, eps=1e-05, momentum=None, affine=true, track_running_stats=true)");
  // [N, C, L] input for BatchNorm1d.
  (void)cum(randn({3, 2, 4}, {.dtype = DType::f64}));

  // track_running_stats = false: no buffers; batch statistics in eval too.
  nn::BatchNorm1d untracked(2, {.affine = false, .track_running_stats = false});
  CHECK(untracked.state_dict().empty());
  untracked.eval();
  testing::assert_close(untracked(a), batch_norm(a, {}, {}, {}, {}, true));

  // load_state_dict round trip.
  nn::BatchNorm2d other(3);
  other.to(DType::f64);
  other.load_state_dict(bn.state_dict());
  testing::assert_close(other.running_var(), bn.running_var());
  CHECK(other.num_batches_tracked().item<std::int64_t>() == bn.num_batches_tracked().item<std::int64_t>());

  CHECK_BRRR_ERROR(bn(randn({2, 3, 4}, {.dtype = DType::f64})), ErrorKind::shape, "BatchNorm2d", "4-D");
  CHECK_BRRR_ERROR(bn(randn({2, 4, 2, 2}, {.dtype = DType::f64})), ErrorKind::shape, "BatchNorm2d", "3 channels");
  CHECK_BRRR_ERROR(nn::BatchNorm1d(0), ErrorKind::value, "num_features");
  CHECK_BRRR_ERROR(nn::BatchNorm1d(2, {.momentum = 1.5}), ErrorKind::value, "momentum");
}

TEST_CASE("InstanceNorm, GroupNorm, RMSNorm modules") {
  FRESH_SEED();
  Tensor x = randn({2, 4, 3, 3});
  nn::InstanceNorm2d in(4);
  CHECK(in.state_dict().empty());
  CHECK(in.to_string() == "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=false, track_running_stats=false)");
  testing::assert_close(in(x), instance_norm(x));
  testing::assert_close(in(x.select(0, 1)), instance_norm(x).select(0, 1));  // unbatched
  nn::InstanceNorm1d tracked(4, {.affine = true, .track_running_stats = true});
  (void)tracked(randn({2, 4, 6}));
  CHECK(tracked.state_dict().size() == 5);
  tracked.eval();
  Tensor z = randn({2, 4, 6});
  testing::assert_close(tracked(z), batch_norm(z, tracked.named_buffers()[0].second, tracked.named_buffers()[1].second,
                                               ones({4}), zeros({4})));

  nn::GroupNorm gn(2, 4);
  CHECK(gn.to_string() == "GroupNorm(2, 4, eps=1e-05, affine=true)");
  CHECK(gn.num_parameters() == 8);
  testing::assert_close(gn(x), group_norm(x, 2));
  CHECK_BRRR_ERROR(nn::GroupNorm(3, 4), ErrorKind::value, "GroupNorm");

  nn::RMSNorm rms({3, 3});
  CHECK(rms.to_string() == "RMSNorm((3, 3), eps=None, elementwise_affine=true)");
  testing::assert_close(rms(x), rms_norm(x, {3, 3}));
  CHECK(nn::RMSNorm({3}, 1e-6, false).num_parameters() == 0);
}
