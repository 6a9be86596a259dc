// Two gradients where brrr used to differ from PyTorch (issue 17): amax/amin over a reduced
// row holding a NaN give the whole row NaN (full max()/min() still send it to the NaNs), and
// backward through an as_strided view whose elements overlap sums the overlapping gradients.
// Expected values are PyTorch 2.15's (printed by torch for the same inputs).
#include <doctest/doctest.h>

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

const double nan_v = std::nan("");

void check_values(const Tensor& t, const std::vector<double>& want) {
  std::vector<double> got = values(t);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", want ", want[i]);
    if (std::isnan(want[i])) CHECK(std::isnan(got[i]));
    else CHECK(got[i] == want[i]);
  }
}

}  // namespace

TEST_CASE("amax/amin: a NaN in a reduced row makes that row's gradient NaN (PyTorch)") {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO(std::string(to_string(dt)));
    // torch: x = [[1, nan, 3], [1, 5, 5]]; amax(x, 1).sum().backward() -> [[nan]*3, [0, .5, .5]]
    Tensor x = make(dt, {1, nan_v, 3, 1, 5, 5}, {2, 3}).requires_grad_();
    sum(amax(x, {1})).backward();
    check_values(x.grad(), {nan_v, nan_v, nan_v, 0, 0.5, 0.5});
    Tensor y = make(dt, {1, nan_v, 3, 1, 5, 5}, {2, 3}).requires_grad_();
    sum(amin(y, {1})).backward();
    check_values(y.grad(), {nan_v, nan_v, nan_v, 1, 0, 0});
    // Rows without a NaN are untouched; over all dims, one NaN poisons everything.
    Tensor z = make(dt, {1, nan_v, 3, 1, 5, 5}, {2, 3}).requires_grad_();
    amax(z, {0, 1}).backward();
    check_values(z.grad(), {nan_v, nan_v, nan_v, nan_v, nan_v, nan_v});
    // Full max()/min() keep sending the gradient to the NaNs (torch.max(x) does).
    Tensor w = make(dt, {1, nan_v, 3, 1, 5, 5}, {2, 3}).requires_grad_();
    max(w).backward();
    check_values(w.grad(), {0, 1, 0, 0, 0, 0});
  }
}

TEST_CASE("as_strided backward sums the gradients of overlapping elements (PyTorch)") {
  // torch: b = arange(6.); b.as_strided((3, 3), (1, 1)) weighted by arange(9).view(3, 3)
  // -> b.grad = [0, 4, 12, 12, 8, 0]
  Tensor b = arange(6, {.dtype = DType::f64}).requires_grad_();
  Tensor v = b.as_strided({3, 3}, {1, 1}, 0);
  sum(mul(v, arange(9, {.dtype = DType::f64}).view({3, 3}))).backward();
  check_values(b.grad(), {0, 4, 12, 12, 8, 0});
  // Through a 2-D input with an offset: x [2, 3], as_strided((4, 2), (1, 1), 1)
  // -> x.grad = [[0, 0, 3], [7, 11, 7]]
  Tensor x = arange(6, {.dtype = DType::f32}).view({2, 3}).detach().requires_grad_();
  Tensor u = x.as_strided({4, 2}, {1, 1}, 1);
  sum(mul(u, arange(8, {.dtype = DType::f32}).view({4, 2}))).backward();
  check_values(x.grad(), {0, 0, 3, 7, 11, 7});
  // A stride-0 view (every element the same position) sums everything into it.
  Tensor s = arange(3, {.dtype = DType::f64}).requires_grad_();
  sum(s.as_strided({4, 5}, {0, 0}, 2)).backward();
  check_values(s.grad(), {0, 0, 20});
  // create_graph: the gradient of the summed gradient is the view again.
  Tensor c = arange(4, {.dtype = DType::f64}).requires_grad_();
  Tensor cv = c.as_strided({3, 2}, {1, 1}, 0);
  Tensor g = autograd::grad({sum(mul(cv, cv))}, {c}, {}, true, true)[0];  // 2 * sum of overlapping values
  check_values(g, {0, 2 * (1 + 1), 2 * (2 + 2), 2 * 3});
  Tensor gg = autograd::grad({sum(g)}, {c})[0];
  check_values(gg, {2, 4, 4, 2});
  // The gradcheck of an overlapping view.
  CHECK(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return mul(in[0].as_strided({3, 3}, {2, 1}, 1), in[0].as_strided({3, 3}, {2, 1}, 1)); },
      {randn({9}, {.dtype = DType::f64})}));
}
