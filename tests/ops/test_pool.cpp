// The pools of issue 17/18 on the CPU: max_pool2d / adaptive_max_pool2d (the argmax kernels),
// their indices, max_unpool2d, avg_pool2d's divisor_override and the 1-D pools against PyTorch
// (tests/ops/pool.safetensors from make_pool_fixtures.py: outputs, indices and input gradients,
// replayed contiguous and channels-last, in f64 and f32), gradients and second derivatives by
// central differences, the nn:: layers, and the errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
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

const io::TensorMap& pool_fixtures() {
  static const io::TensorMap map = io::load_safetensors(std::string(BRRR_TEST_DATA) + "/pool.safetensors");
  return map;
}

// Close within atol + rtol |want|; NaN matches NaN, infinities match exactly.
void check_values(const V& got, const V& want, double rtol, double atol, const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what, " element ", i, ": got ", got[i], ", PyTorch ", want[i]);
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else if (std::isinf(want[i])) CHECK(got[i] == want[i]);
    else CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

// A copy of x (4-D or 3-D) whose storage is channels-last: same values, non-contiguous.
Tensor channels_last(const Tensor& x) {
  if (x.dim() == 4) return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  if (x.dim() == 3) return x.permute({1, 2, 0}).contiguous().permute({2, 0, 1});
  return x.t().contiguous().t();
}

using PoolFn = std::function<ValuesIndices(const Tensor& x, const Tensor& i)>;

// Replays case `name`: output (and indices) in f64 and f32, gradient in f64; contiguous and
// channels-last inputs.
void replay(const std::string& name, const PoolFn& f) {
  const io::TensorMap& m = pool_fixtures();
  REQUIRE_MESSAGE(m.count(name + "/out"), "no fixture for " << name);
  const Tensor& x = m.at(name + "/x");
  Tensor idx_in = m.count(name + "/i") ? m.at(name + "/i") : Tensor();
  for (bool strided : {false, true})
    for (DType dt : {DType::f64, DType::f32}) {
      INFO("case ", name, " in ", to_string(dt), strided ? " channels-last" : " contiguous");
      Tensor xi = (strided ? channels_last(x) : x.clone()).to(dt);
      if (dt == DType::f64) xi.requires_grad_();
      ValuesIndices r = f(xi, idx_in);
      const Tensor& want = m.at(name + "/out");
      CHECK(r.values.shape() == want.shape());
      CHECK(r.values.dtype() == dt);
      const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
      check_values(values(r.values), values(want), tol, tol, name + " output");
      if (r.indices.defined()) {  // the with_indices forms
        REQUIRE(m.count(name + "/idx"));
        CHECK(r.indices.dtype() == DType::i64);
        CHECK(r.indices.shape() == want.shape());
        if (dt == DType::f64) CHECK(values(r.indices) == values(m.at(name + "/idx")));
      }
      if (dt != DType::f64) continue;
      autograd::backward({r.values}, {m.at(name + "/up")});
      REQUIRE(xi.grad().defined());
      check_values(values(xi.grad()), values(m.at(name + "/gx")), 1e-12, 1e-12, name + " gradient");
    }
}

PoolFn max2d(Pool2dOptions o) {
  return [o](const Tensor& x, const Tensor&) { return max_pool2d_with_indices(x, o); };
}
PoolFn values_only(std::function<Tensor(const Tensor&)> f) {
  return [f](const Tensor& x, const Tensor&) { return ValuesIndices{f(x), Tensor()}; };
}

// Distinct values (a shuffled arange, spaced 0.1) so that no window has a tie within eps.
Tensor distinct(const Shape& shape, std::mt19937_64& rng) {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  V v = iota(n);
  std::shuffle(v.begin(), v.end(), rng);
  for (auto& e : v) e = e * 0.1 - 0.05 * static_cast<double>(n);
  return Tensor::from_vector(v, shape);
}

}  // namespace

TEST_CASE("max_pool2d_with_indices matches PyTorch: padding, dilation, ceil_mode, ties, NaN, unbatched") {
  replay("mp_k2", max2d({.kernel_size = {2, 2}}));
  replay("mp_k3_s2_p1", max2d({.kernel_size = {3, 3}, .stride = A2{2, 2}, .padding = {1, 1}}));
  replay("mp_dilation", max2d({.kernel_size = {2, 3}, .stride = A2{2, 1}, .padding = {1, 1}, .dilation = {3, 2}}));
  replay("mp_ceil", max2d({.kernel_size = {3, 3}, .stride = A2{2, 2}, .padding = {1, 1}, .ceil_mode = true}));
  replay("mp_ceil_k2", max2d({.kernel_size = {2, 2}, .ceil_mode = true}));
  replay("mp_overlap", max2d({.kernel_size = {3, 3}, .stride = 1}));
  replay("mp_rect", max2d({.kernel_size = {1, 3}, .stride = A2{2, 2}, .padding = {0, 1}}));
  replay("mp_unbatched", max2d({.kernel_size = {2, 2}}));
  replay("mp_ties", max2d({.kernel_size = {3, 3}, .stride = 1, .padding = {1, 1}}));
  replay("mp_nan", max2d({.kernel_size = {2, 2}}));
  replay("mp_nan_overlap", max2d({.kernel_size = {3, 3}, .stride = 1, .padding = {1, 1}}));
  // max_pool2d is the values of max_pool2d_with_indices
  replay("mp_k3_s2_p1",
         values_only([](const Tensor& x) { return max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1}); }));
}

TEST_CASE("adaptive_max_pool2d matches PyTorch (uneven, uniform and overlapping bins, NaN)") {
  auto amp = [](A2 size) {
    return PoolFn([size](const Tensor& x, const Tensor&) { return adaptive_max_pool2d_with_indices(x, size); });
  };
  replay("amp_3x2", amp({3, 2}));
  replay("amp_uniform", amp({4, 4}));
  replay("amp_up", amp({5, 7}));
  replay("amp_unbatched", amp({2, 3}));
  replay("amp_nan", amp({3, 3}));
  replay("amp_3x2", values_only([](const Tensor& x) { return adaptive_max_pool2d(x, {3, 2}); }));
}

TEST_CASE("avg_pool2d divisor_override, ceil_mode and count_include_pad match PyTorch") {
  replay("ap_divisor", values_only([](const Tensor& x) {
           return avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1, .divisor_override = 5});
         }));
  replay("ap_divisor_ceil", values_only([](const Tensor& x) {
           return avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true, .divisor_override = 2});
         }));
  replay("ap_ceil_exclude", values_only([](const Tensor& x) {
           return avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true,
                                 .count_include_pad = false});
         }));
}

TEST_CASE("1-D pools match PyTorch") {
  replay("mp1d", [](const Tensor& x, const Tensor&) {
    return max_pool1d_with_indices(x, {.kernel_size = 3, .stride = 2, .padding = 1, .dilation = 2, .ceil_mode = true});
  });
  replay("mp1d_unbatched", [](const Tensor& x, const Tensor&) { return max_pool1d_with_indices(x, {.kernel_size = 2}); });
  replay("mp1d_unbatched", values_only([](const Tensor& x) { return max_pool1d(x, 2); }));
  replay("ap1d", values_only([](const Tensor& x) {
           return avg_pool1d(x, {.kernel_size = 4, .stride = 3, .padding = 2, .ceil_mode = true,
                                 .count_include_pad = false});
         }));
  replay("ap1d_include",
         values_only([](const Tensor& x) { return avg_pool1d(x, {.kernel_size = 3, .stride = 2, .padding = 1}); }));
  replay("aap1d", values_only([](const Tensor& x) { return adaptive_avg_pool1d(x, 4); }));
  replay("amp1d", [](const Tensor& x, const Tensor&) { return adaptive_max_pool1d_with_indices(x, 4); });
  replay("amp1d", values_only([](const Tensor& x) { return adaptive_max_pool1d(x, 4); }));
}

TEST_CASE("max_unpool2d matches PyTorch (default and given output sizes, repeated indices)") {
  auto unpool = [](MaxUnpool2dOptions o) {
    return PoolFn([o](const Tensor& x, const Tensor& i) { return ValuesIndices{max_unpool2d(x, i, o), Tensor()}; });
  };
  replay("unpool_k2", unpool({.kernel_size = 2}));
  replay("unpool_size", unpool({.kernel_size = 2, .output_size = {7, 7}}));
  replay("unpool_k3_s2_p1", unpool({.kernel_size = 3, .stride = 2, .padding = 1, .output_size = {1, 2, 8, 8}}));
  replay("unpool_overlap", unpool({.kernel_size = 3, .stride = 1}));
}

TEST_CASE("max_unpool2d inverts max_pool2d at the maxima; indices of a channels-last pool are the same") {
  FRESH_SEED();
  Tensor x = randn({2, 3, 8, 6}, {.dtype = DType::f64});
  auto [v, i] = max_pool2d_with_indices(x, {.kernel_size = 2});
  Tensor u = max_unpool2d(v, i, {.kernel_size = 2});
  CHECK(u.shape() == x.shape());
  // every pooled max sits at its index, the rest is 0
  V uv = values(u), xv = values(x);
  std::int64_t nonzero = 0;
  for (std::size_t k = 0; k < uv.size(); ++k)
    if (uv[k] != 0) {
      ++nonzero;
      CHECK(uv[k] == xv[k]);
    }
  CHECK(nonzero == v.numel());
  auto [v2, i2] = max_pool2d_with_indices(channels_last(x), {.kernel_size = 2});
  CHECK(values(i2) == values(i));
  CHECK(values(v2) == values(v));
}

TEST_CASE("max pools: big inputs take the parallel path and agree with the small-plane loop") {
  FRESH_SEED();
  // [8, 64, 32, 32]: far above the parallel threshold; compare with the planes pooled one by one.
  Tensor x = randn({8, 64, 32, 32});
  Tensor up = randn({8, 64, 11, 11});
  Pool2dOptions o{.kernel_size = 3, .stride = 3, .padding = 1, .ceil_mode = true};
  Tensor xl = x.clone().requires_grad_();
  auto [v, i] = max_pool2d_with_indices(xl, o);
  autograd::backward({v}, {up});
  for (std::int64_t n : {0, 5})
    for (std::int64_t c : {0, 17, 63}) {
      Tensor plane = x.select(0, n).select(0, c).unsqueeze(0).clone().requires_grad_();
      auto [pv, pi] = max_pool2d_with_indices(plane, o);
      autograd::backward({pv}, {up.select(0, n).select(0, c).unsqueeze(0)});
      CHECK(values(pv) == values(v.select(0, n).select(0, c).unsqueeze(0)));
      CHECK(values(pi) == values(i.select(0, n).select(0, c).unsqueeze(0)));
      CHECK(values(plane.grad()) == values(xl.grad().select(0, n).select(0, c).unsqueeze(0)));
    }
}

TEST_CASE("max pools: a window holding no input cell gives -inf and index -1 (no gradient)") {
  // H = W = 2, kernel 2, dilation 3, padding 1: the window reads cells -1 and 2 of each dim.
  Tensor x = randn({1, 1, 2, 2}, {.dtype = DType::f64}).requires_grad_();
  auto [v, i] = max_pool2d_with_indices(x, {.kernel_size = 2, .stride = 2, .padding = 1, .dilation = 3});
  CHECK(v.shape() == Shape{1, 1, 1, 1});
  CHECK(v.item<double>() == -inf);
  CHECK(i.item<std::int64_t>() == -1);
  v.sum().backward();
  CHECK(values(x.grad()) == V{0, 0, 0, 0});
}

TEST_CASE("gradients of the max pools, max_unpool2d and the 1-D pools (gradcheck, f64)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = distinct({2, 2, 7, 6}, rng);
  for (Pool2dOptions o : {Pool2dOptions{.kernel_size = 3, .stride = 1, .padding = 1},
                          Pool2dOptions{.kernel_size = {3, 2}, .stride = A2{2, 1}, .padding = {1, 1}, .ceil_mode = true},
                          Pool2dOptions{.kernel_size = {2, 3}, .stride = A2{1, 2}, .padding = {1, 0}, .dilation = {2, 2}}})
    CHECK(autograd::gradcheck([o](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); }, {x}));
  for (A2 size : {A2{3, 4}, A2{7, 6}, A2{9, 8}})
    CHECK(autograd::gradcheck([size](const std::vector<Tensor>& in) { return adaptive_max_pool2d(in[0], size); }, {x}));
  Tensor x1 = distinct({2, 3, 13}, rng);
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return max_pool1d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1}); }, {x1}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return adaptive_max_pool1d(in[0], 5); }, {x1}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return avg_pool1d(in[0], {.kernel_size = 4, .stride = 3, .padding = 2}); }, {x1}));
  CHECK(autograd::gradcheck([](const std::vector<Tensor>& in) { return adaptive_avg_pool1d(in[0], 5); }, {x1}));
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        return avg_pool2d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true, .divisor_override = 4});
      },
      {x}));
  // max_unpool2d: differentiable in its values (indices pass through gradcheck untouched);
  // windows that do not overlap, so no index repeats (a repeated one lands only once).
  auto [v, i] = max_pool2d_with_indices(x, {.kernel_size = 2});
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return max_unpool2d(in[0], in[1], {.kernel_size = 2, .output_size = {7, 6}}); },
      {v, i}));
}

TEST_CASE("second derivatives of max_pool2d and adaptive_max_pool2d (create_graph, gradcheck of the gradient)") {
  std::uint64_t seed = fresh_seed();
  INFO("seed ", seed);
  std::mt19937_64 rng(seed);
  Tensor x = distinct({2, 2, 6, 7}, rng);
  for (int adaptive : {0, 1}) {
    INFO("adaptive ", adaptive);
    auto pool = [adaptive](const Tensor& t) {
      return adaptive ? adaptive_max_pool2d(t, {4, 5}) : max_pool2d(t, {.kernel_size = 3, .stride = 1, .padding = 1});
    };
    Tensor up = pool(x).detach();  // its shape
    Tensor u = Tensor::from_vector(normal_values(rng, up.numel()), up.shape());
    // d/du of the input gradient for upstream u: linear in u, a gather at the indices.
    CHECK(autograd::gradcheck(
        [pool, x](const std::vector<Tensor>& in) {
          GradModeGuard on(true);  // gradcheck evaluates f under no_grad for its differences
          Tensor xl = x.detach().requires_grad_();
          return autograd::grad({pool(xl)}, {xl}, {in[0]}, false, true)[0];
        },
        {u}));
  }
}

TEST_CASE("nn pooling layers call their ops and describe themselves") {
  FRESH_SEED();
  Tensor x = randn({2, 3, 8, 8}), x1 = randn({2, 3, 10});
  nn::MaxPool2d mp(Pool2dOptions{.kernel_size = 2});
  CHECK(values(mp(x)) == values(max_pool2d(x, 2)));
  auto [v, i] = mp.forward_with_indices(x);
  CHECK(values(i) == values(max_pool2d_with_indices(x, {.kernel_size = 2}).indices));
  nn::MaxUnpool2d unpool(2);
  CHECK(values(unpool(v, i)) == values(max_unpool2d(v, i, {.kernel_size = 2})));
  CHECK(unpool(v, i, {9, 9}).shape() == Shape{2, 3, 9, 9});
  CHECK(unpool.impl()->name() == "MaxUnpool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  CHECK_BRRR_ERROR(nn::Module(unpool)(v), ErrorKind::value, "");
  nn::MaxPool1d mp1(3);
  CHECK(values(mp1(x1)) == values(max_pool1d(x1, 3)));
  CHECK(values(mp1.forward_with_indices(x1).indices) == values(max_pool1d_with_indices(x1, {.kernel_size = 3}).indices));
  CHECK(mp1.impl()->name() == "MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=false)");
  nn::AvgPool2d ap(Pool2dOptions{.kernel_size = 3, .stride = 1, .padding = 1, .divisor_override = 2});
  CHECK(values(ap(x)) == values(avg_pool2d(x, {.kernel_size = 3, .stride = 1, .padding = 1, .divisor_override = 2})));
  CHECK(ap.impl()->name() == "AvgPool2d(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), divisor_override=2)");
  nn::AvgPool1d ap1(Pool1dOptions{.kernel_size = 2, .count_include_pad = false});
  CHECK(values(ap1(x1)) == values(avg_pool1d(x1, 2)));
  nn::AdaptiveAvgPool2d aap({3, 2});
  CHECK(values(aap(x)) == values(adaptive_avg_pool2d(x, {3, 2})));
  CHECK(aap.impl()->name() == "AdaptiveAvgPool2d(output_size=(3, 2))");
  nn::AdaptiveAvgPool1d aap1(4);
  CHECK(values(aap1(x1)) == values(adaptive_avg_pool1d(x1, 4)));
  nn::AdaptiveMaxPool2d amp({3, 5});
  CHECK(values(amp(x)) == values(adaptive_max_pool2d(x, {3, 5})));
  CHECK(values(amp.forward_with_indices(x).indices) == values(adaptive_max_pool2d_with_indices(x, {3, 5}).indices));
  nn::AdaptiveMaxPool1d amp1(3);
  CHECK(values(amp1(x1)) == values(adaptive_max_pool1d(x1, 3)));
  CHECK(values(amp1.forward_with_indices(x1).values) == values(adaptive_max_pool1d(x1, 3)));
  // in a Sequential, as the Fashion-MNIST CNN uses them
  nn::Sequential seq{nn::MaxPool2d(2), nn::AdaptiveAvgPool2d({1, 1}), nn::Flatten()};
  CHECK(seq(x).shape() == Shape{2, 3});
  nn::MaxPool2d empty{nullptr};
  CHECK_BRRR_ERROR(empty.forward_with_indices(x), ErrorKind::value, "MaxPool2d");
}

TEST_CASE("pool errors name the op, shapes and dtypes") {
  Tensor x = randn({2, 3, 5, 5}), x1 = randn({2, 3, 7});
  CHECK_BRRR_ERROR(max_pool2d_with_indices(randn({5, 5}), {}), ErrorKind::shape, "max_pool2d_with_indices", "[5, 5]");
  CHECK_BRRR_ERROR(max_pool2d(x, {.kernel_size = 6}), ErrorKind::shape, "max_pool2d", "[2, 3, 5, 5]", "too small");
  CHECK_BRRR_ERROR(max_pool2d(x, {.kernel_size = 3, .padding = 2}), ErrorKind::value, "max_pool2d", "padding", "(2, 2)");
  CHECK_BRRR_ERROR(max_pool2d(x, {.kernel_size = 2, .dilation = {0, 1}}), ErrorKind::value, "max_pool2d", "dilation");
  CHECK_BRRR_ERROR(max_pool2d(x, {.kernel_size = 2, .stride = 0}), ErrorKind::value, "max_pool2d", "stride");
  CHECK_BRRR_ERROR(max_pool2d(x.to(DType::i32), 2), ErrorKind::dtype, "max_pool2d", "i32");
  CHECK_BRRR_ERROR(max_pool2d(Tensor(), 2), ErrorKind::value, "max_pool2d");
  CHECK_BRRR_ERROR(adaptive_max_pool2d(randn({5}), {2, 2}), ErrorKind::shape, "adaptive_max_pool2d", "[5]");
  CHECK_BRRR_ERROR(adaptive_max_pool2d(x, {0, 2}), ErrorKind::value, "adaptive_max_pool2d", "(0, 2)");
  CHECK_BRRR_ERROR(adaptive_max_pool2d(randn({2, 3, 0, 5}), {2, 2}), ErrorKind::shape, "adaptive_max_pool2d", "[2, 3, 0, 5]");
  CHECK_BRRR_ERROR(adaptive_max_pool2d(x.to(DType::i64), {2, 2}), ErrorKind::dtype, "adaptive_max_pool2d", "i64");
  CHECK_BRRR_ERROR(avg_pool2d(x, {.kernel_size = 2, .divisor_override = 0}), ErrorKind::value, "avg_pool2d",
                   "divisor_override");
  // 1-D: rank, sizes and padding in the 1-D op's own words
  CHECK_BRRR_ERROR(max_pool1d(x, 2), ErrorKind::shape, "max_pool1d", "[2, 3, 5, 5]");
  CHECK_BRRR_ERROR(max_pool1d(randn({7}), 2), ErrorKind::shape, "max_pool1d", "[7]");
  CHECK_BRRR_ERROR(max_pool1d(x1, 8), ErrorKind::shape, "max_pool1d", "[2, 3, 7]", "kernel_size 8");
  CHECK_BRRR_ERROR(max_pool1d(x1, {.kernel_size = 2, .padding = 2}), ErrorKind::value, "max_pool1d", "padding 2");
  CHECK_BRRR_ERROR(avg_pool1d(x, 2), ErrorKind::shape, "avg_pool1d", "[2, 3, 5, 5]");
  CHECK_BRRR_ERROR(avg_pool1d(x1, {.kernel_size = 2, .dilation = 2}), ErrorKind::value, "avg_pool1d", "dilation");
  CHECK_BRRR_ERROR(adaptive_avg_pool1d(x, 2), ErrorKind::shape, "adaptive_avg_pool1d", "[2, 3, 5, 5]");
  CHECK_BRRR_ERROR(adaptive_max_pool1d(x1, 0), ErrorKind::value, "adaptive_max_pool1d", "output_size 0");
  // max_unpool2d: indices' dtype, shape and range; output_size
  auto [v, i] = max_pool2d_with_indices(randn({2, 3, 6, 6}), {.kernel_size = 2});
  CHECK_BRRR_ERROR(max_unpool2d(v, i.to(DType::i32), {}), ErrorKind::dtype, "max_unpool2d", "i32");
  CHECK_BRRR_ERROR(max_unpool2d(v, i.slice(3, 0, 2), {}), ErrorKind::shape, "max_unpool2d", "[2, 3, 3, 2]",
                   "[2, 3, 3, 3]");
  CHECK_BRRR_ERROR(max_unpool2d(v.flatten(1), i.flatten(1), {}), ErrorKind::shape, "max_unpool2d", "[2, 27]");
  CHECK_BRRR_ERROR(max_unpool2d(v.to(DType::i64), i, {}), ErrorKind::dtype, "max_unpool2d", "i64");
  CHECK_BRRR_ERROR(max_unpool2d(v, i, {.output_size = {8, 6}}), ErrorKind::value, "max_unpool2d", "(8, 6)", "4 and 8");
  CHECK_BRRR_ERROR(max_unpool2d(v, i, {.output_size = {6}}), ErrorKind::shape, "max_unpool2d", "output_size");
  CHECK_BRRR_ERROR(max_unpool2d(v, i, {.kernel_size = 0}), ErrorKind::value, "max_unpool2d", "kernel_size");
  CHECK_BRRR_ERROR(max_unpool2d(v, add(i, 36), {}), ErrorKind::index, "max_unpool2d");
  CHECK_BRRR_ERROR(max_unpool2d(v, sub(i, 100), {}), ErrorKind::index, "max_unpool2d");
}
