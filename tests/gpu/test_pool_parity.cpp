// The max-pool kernels (Backend::max_pool2d / max_pool2d_backward), adaptive_max_pool2d,
// max_unpool2d, avg_pool2d's divisor_override and the 1-D pools on cuda:0 against the CPU:
// values, indices (exactly) and gradients over padding, dilation, ceil_mode, overlapping
// windows and bins, unbatched, channels-last and zero-size inputs, NaN and ties, f32/f64/bf16/
// f16; the second derivative; a large Fashion-MNIST-shaped case; the deferred device error of
// max_unpool2d's out-of-range index; no host sync in forward + backward. Without a CUDA device
// the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/tolerances.hpp"

namespace {

using In = std::vector<Tensor>;
using A2 = std::array<std::int64_t, 2>;
using test::check_parity;
using test::gpu;
using test::parity;

// Max pooling picks elements, so values and gradients are exact when no window overlaps;
// overlapping windows sum gradients (different orders on the two sides): the conv row.
testing::CloseOptions tol(DType d) { return test::close_options(test::Computed::conv_parity, d); }

Tensor cpu_randn(Shape shape, DType dtype) { return randn(std::move(shape), {.dtype = DType::f64}).to(dtype); }

Tensor channels_last(const Tensor& x) { return x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }

// Values and indices of a with-indices pool on both devices: indices equal, values close.
void indices_parity(const std::string& what, const std::function<ValuesIndices(const Tensor&)>& f, const Tensor& x) {
  ValuesIndices c = f(x), g = f(x.to(gpu()));
  check_parity(g.values, c.values, what + " values", tol(x.dtype()));
  check_parity(g.indices, c.indices, what + " indices", {.rtol = 0, .atol = 0});
}

struct P {
  std::int64_t h, w;
  A2 k, s, p, d;
  bool ceil;
};
const P cases[] = {
    {6, 6, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {7, 5, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
    {7, 7, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false}, {9, 10, {3, 3}, {2, 2}, {1, 1}, {2, 2}, false},
    {9, 10, {2, 3}, {2, 1}, {1, 1}, {3, 2}, true}, {5, 8, {1, 3}, {2, 2}, {0, 1}, {1, 1}, true},
    {28, 28, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {13, 11, {4, 3}, {3, 2}, {2, 1}, {1, 2}, true},
};

}  // namespace

TEST_CASE("gpu max_pool2d: values, indices and gradients match the CPU") {
  FRESH_SEED();
  for (const P& c : cases)
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      std::ostringstream what;
      what << to_string(dt) << " " << c.h << "x" << c.w << " k=" << c.k[0] << "x" << c.k[1] << " s=" << c.s[0] << ","
           << c.s[1] << " p=" << c.p[0] << "," << c.p[1] << " d=" << c.d[0] << "," << c.d[1] << " ceil=" << c.ceil;
      Pool2dOptions o{.kernel_size = c.k, .stride = c.s, .padding = c.p, .dilation = c.d, .ceil_mode = c.ceil};
      Tensor x = cpu_randn({2, 3, c.h, c.w}, dt);
      indices_parity(what.str(), [o](const Tensor& t) { return max_pool2d_with_indices(t, o); }, x);
      indices_parity(what.str() + " channels-last", [o](const Tensor& t) { return max_pool2d_with_indices(t, o); },
                     channels_last(x));
      parity(what.str(), [o](const In& in) { return max_pool2d(in[0], o); }, {x}, true, tol(dt));
      parity(what.str() + " unbatched", [o](const In& in) { return max_pool2d(in[0].select(0, 1), o); }, {x}, true,
             tol(dt));
      parity(what.str() + " transposed", [o](const In& in) { return max_pool2d(in[0].transpose(2, 3), o); }, {x}, true,
             tol(dt));
    }
}

TEST_CASE("gpu max_pool2d: ties, NaN, -inf and windows without input cells match the CPU") {
  FRESH_SEED();
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  Tensor ties = randint(0, 3, {2, 3, 8, 8}).to(DType::f32);  // many ties: the first max wins
  Tensor special = randn({1, 2, 6, 6}, {.dtype = DType::f64});
  {
    NoGradGuard g;
    special.select(1, 0).slice(1, 0, 2).slice(2, 0, 2).fill_(nan);
    special.select(1, 1).slice(1, 2, 5).slice(2, 2, 5).fill_(-inf);
    special.select(1, 0).slice(1, 3, 4).slice(2, 3, 5).fill_(nan);
  }
  for (Pool2dOptions o : {Pool2dOptions{.kernel_size = 3, .stride = 1, .padding = 1}, Pool2dOptions{.kernel_size = 2},
                          Pool2dOptions{.kernel_size = 2, .stride = 2, .padding = 1, .dilation = 3}}) {
    indices_parity("ties", [o](const Tensor& t) { return max_pool2d_with_indices(t, o); }, ties);
    indices_parity("NaN / -inf", [o](const Tensor& t) { return max_pool2d_with_indices(t, o); }, special);
    parity("ties grad", [o](const In& in) { return max_pool2d(in[0], o); }, {ties}, true, tol(DType::f32));
    parity("NaN grad", [o](const In& in) { return max_pool2d(in[0], o); }, {special}, true, tol(DType::f64));
  }
  // a window holding no input cell: -inf, index -1 on both sides
  Tensor tiny = randn({1, 1, 2, 2});
  indices_parity("empty window",
                 [](const Tensor& t) {
                   return max_pool2d_with_indices(t, {.kernel_size = 2, .stride = 2, .padding = 1, .dilation = 3});
                 },
                 tiny);
}

TEST_CASE("gpu adaptive_max_pool2d and the 1-D pools match the CPU") {
  FRESH_SEED();
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    INFO(to_string(dt));
    Tensor x = cpu_randn({2, 3, 7, 5}, dt);
    for (A2 size : {A2{3, 2}, A2{7, 5}, A2{1, 1}, A2{9, 11}, A2{4, 4}}) {
      indices_parity("adaptive_max_pool2d", [size](const Tensor& t) { return adaptive_max_pool2d_with_indices(t, size); },
                     x);
      parity("adaptive_max_pool2d", [size](const In& in) { return adaptive_max_pool2d(in[0], size); }, {x}, true,
             tol(dt));
      parity("adaptive_max_pool2d channels-last",
             [size](const In& in) { return adaptive_max_pool2d(channels_last(in[0]), size); }, {x}, true, tol(dt));
    }
    Tensor x1 = cpu_randn({2, 3, 17}, dt);
    indices_parity("max_pool1d",
                   [](const Tensor& t) {
                     return max_pool1d_with_indices(t, {.kernel_size = 3, .stride = 2, .padding = 1, .dilation = 2,
                                                        .ceil_mode = true});
                   },
                   x1);
    parity("max_pool1d", [](const In& in) { return max_pool1d(in[0], {.kernel_size = 4, .stride = 1, .padding = 2}); },
           {x1}, true, tol(dt));
    parity("max_pool1d unbatched", [](const In& in) { return max_pool1d(in[0].select(0, 0), 3); }, {x1}, true, tol(dt));
    parity("adaptive_max_pool1d", [](const In& in) { return adaptive_max_pool1d(in[0], 6); }, {x1}, true, tol(dt));
    indices_parity("adaptive_max_pool1d", [](const Tensor& t) { return adaptive_max_pool1d_with_indices(t, 6); }, x1);
    parity("avg_pool1d",
           [](const In& in) {
             return avg_pool1d(in[0], {.kernel_size = 4, .stride = 3, .padding = 2, .ceil_mode = true,
                                       .count_include_pad = false});
           },
           {x1}, true, tol(dt));
    parity("adaptive_avg_pool1d", [](const In& in) { return adaptive_avg_pool1d(in[0], 5); }, {x1}, true, tol(dt));
    parity("avg_pool2d divisor_override",
           [](const In& in) {
             return avg_pool2d(in[0], {.kernel_size = 3, .stride = 2, .padding = 1, .ceil_mode = true,
                                       .divisor_override = 4});
           },
           {x}, true, tol(dt));
  }
}

TEST_CASE("gpu max_unpool2d matches the CPU; an out-of-range index is a deferred device error") {
  FRESH_SEED();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = cpu_randn({2, 3, 9, 8}, dt);
    for (MaxUnpool2dOptions o : {MaxUnpool2dOptions{.kernel_size = 2}, MaxUnpool2dOptions{.kernel_size = 3, .stride = 2,
                                                                                           .padding = 1, .output_size = {9, 8}}}) {
      Pool2dOptions po{.kernel_size = o.kernel_size, .stride = o.stride, .padding = o.padding};
      auto [v, i] = max_pool2d_with_indices(x, po);
      parity("max_unpool2d", [o](const In& in) { return max_unpool2d(in[0], in[1], o); }, {v, i}, true, tol(dt));
      parity("max_unpool2d unbatched", [o](const In& in) { return max_unpool2d(in[0].select(0, 1), in[1].select(0, 1), o); },
             {v, i}, true, tol(dt));
    }
  }
  Tensor v = randn({1, 1, 2, 2}, {.device = gpu()});
  Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 16, 2}, {1, 1, 2, 2}).to(gpu());
  cuda::synchronize();
  (void)max_unpool2d(v, bad, {.kernel_size = 2});
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "max_unpool2d", "cuda:0");
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("gpu max pools: second derivative, zero-size batch, Fashion-MNIST shape, no host sync") {
  FRESH_SEED();
  Tensor x = cpu_randn({2, 3, 8, 9}, DType::f64), u = cpu_randn({2, 3, 8, 9}, DType::f64);
  // The gradient of <grad_x(up), u> with respect to the upstream gradient: a gather at the indices.
  parity("max_pool2d double backward",
         [](const In& in) {
           GradModeGuard on(true);
           Tensor xl = in[0].detach().requires_grad_();
           Tensor y = max_pool2d(xl, {.kernel_size = 3, .stride = 1, .padding = 1});
           return autograd::grad({y}, {xl}, {in[1]}, false, true)[0];
         },
         {x, u}, true, tol(DType::f64));
  parity("zero-size batch", [](const In& in) { return max_pool2d(in[0], 2); }, {cpu_randn({0, 3, 8, 8}, DType::f32)},
         true, tol(DType::f32));
  Tensor big = cpu_randn({128, 32, 28, 28}, DType::f32);
  indices_parity("[128, 32, 28, 28]", [](const Tensor& t) { return max_pool2d_with_indices(t, {.kernel_size = 2}); }, big);
  Tensor xg = big.to(gpu()).requires_grad_();
  cuda::synchronize();
  {
    cuda::SyncPolicyGuard guard(cuda::SyncPolicy::error);
    const std::uint64_t before = cuda::sync_count();
    Tensor y = max_pool2d(xg, 2);
    autograd::backward({y}, {ones(y.shape(), {.device = gpu()})});
    CHECK(cuda::sync_count() == before);
  }
  // non-overlapping windows: each cell gets 1 (its window's max) or 0
  CHECK(sum(xg.grad()).item<float>() == static_cast<float>(128 * 32 * 14 * 14));
}
