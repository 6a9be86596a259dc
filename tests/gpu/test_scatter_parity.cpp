// scatter, scatter_reduce, index_add, index_copy, index_fill and index_put on cuda:0 against
// the CPU on the same inputs: every reduce with include_self on and off, every dtype, many
// duplicates (the CUDA kernels combine with atomics), forward and backward; the deferred
// device error of an out-of-range index. Inputs whose results do not depend on the order of
// the combines (small integers held exactly in every dtype, products of powers of two) are
// compared exactly; f32/f64 normals within the scatter tolerance row. Without a CUDA device
// the suite exits 77.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
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
using test::gpu;

using test::check_parity;

using test::parity;

// Values whose sums and products are exact in every dtype, so any combine order gives the
// CPU's result: small integers for sum/mean/amax/amin, {-2, -1, -0.5, 0.5, 1, 2} for prod
// (at most ~12 factors per destination here: |product| <= 2^12, exact even in bf16).
Tensor exact_values(Shape s, DType dt, bool for_prod) {
  if (for_prod) {
    Tensor pick = randint(0, 6, s);
    Tensor table = Tensor::from_vector(std::vector<double>{-2, -1, -0.5, 0.5, 1, 2});
    return index_select(table, 0, pick.reshape({-1})).reshape(s).to(dt);
  }
  return randint(-4, 5, s).to(dt);
}

}  // namespace

TEST_CASE("gpu scatter_reduce: every reduce, include_self, dtype; GPU equals CPU") {
  manual_seed(1701);
  // 40 sources per column into 7 destinations (dim 0), index longer than x along dim.
  const Shape xs{7, 33}, is{40, 33}, ss{41, 33};
  Tensor index = randint(0, 7, is);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (const char* reduce : {"sum", "prod", "mean", "amax", "amin"})
      for (bool self : {true, false}) {
        const std::string r = reduce;
        const std::string what = r + (self ? " include_self " : " exclude_self ") + to_string(dt);
        const bool prod = r == "prod";
        // prod: 6 destinations' worth of factors is plenty; fewer sources keep |product| small.
        Tensor idx = prod ? index.narrow(0, 0, 12) : index;
        Tensor x = exact_values(xs, dt, prod), src = exact_values(ss, dt, prod);
        parity(what + " exact", [idx, reduce, self](const In& i) { return scatter_reduce(i[0], 0, idx.to(i[0].device()), i[1], reduce, self); },
               {x, src}, false, {.rtol = 0, .atol = 0});
        if (dt == DType::f32 || dt == DType::f64) {
          // Normals: sums and products in another order round differently (a few ulps).
          Tensor xn = randn(xs, {.dtype = dt}), sn = randn(ss, {.dtype = dt});
          if (prod) {  // factors in [0.75, 1.25)
            xn = add(mul(rand(xs, {.dtype = dt}), 0.5), 0.75);
            sn = add(mul(rand(ss, {.dtype = dt}), 0.5), 0.75);
          }
          parity(what + " normal", [idx, reduce, self](const In& i) { return scatter_reduce(i[0], 0, idx.to(i[0].device()), i[1], reduce, self); },
                 {xn, sn}, true, test::close_options(test::Computed::scatter, dt));
        }
      }
  // Along the last dim of a 3-D tensor, with NaN (amax/amin propagate it on both devices).
  Tensor x = randn({3, 4, 5}, {.dtype = DType::f64}), src = randn({3, 4, 9}, {.dtype = DType::f64});
  src = where(lt(rand({3, 4, 9}), 0.1), full({}, NAN, {.dtype = DType::f64}), src);
  Tensor idx = randint(0, 5, {3, 4, 8});
  for (const char* reduce : {"amax", "amin"})
    parity(std::string(reduce) + " NaN dim 2", [idx, reduce](const In& i) { return scatter_reduce(i[0], 2, idx.to(i[0].device()), i[1], reduce); },
           {x, src}, false, {.rtol = 0, .atol = 0});
}

TEST_CASE("gpu scatter, index_add, index_copy, index_fill, index_put: GPU equals CPU") {
  manual_seed(1702);
  // Distinct destinations per column (a permutation): scatter's result is then defined.
  Tensor perm = argsort(rand({50, 6}), 0).narrow(0, 0, 30);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean}) {
    const std::string t = to_string(dt);
    Tensor x = dt == DType::boolean ? lt(rand({50, 6}), 0.5) : exact_values({50, 6}, dt, false);
    Tensor src = dt == DType::boolean ? lt(rand({30, 6}), 0.5) : exact_values({30, 6}, dt, false);
    const bool fp = is_floating_point(dt);
    parity("scatter " + t, [perm](const In& i) { return scatter(i[0], 0, perm.to(i[0].device()), i[1]); }, {x, src}, fp,
           {.rtol = 0, .atol = 0});
    parity("scatter value " + t, [perm](const In& i) { return scatter(i[0], 0, perm.to(i[0].device()), 1); }, {x}, fp,
           {.rtol = 0, .atol = 0});
    Tensor rows = argsort(rand({50}), 0).narrow(0, 0, 20);  // 20 distinct rows
    parity("index_copy " + t, [rows](const In& i) { return index_copy(i[0], 0, rows.to(i[0].device()), i[1]); },
           {x, dt == DType::boolean ? lt(rand({20, 6}), 0.5) : exact_values({20, 6}, dt, false)}, fp, {.rtol = 0, .atol = 0});
    parity("index_fill " + t, [rows](const In& i) { return index_fill(i[0], 0, rows.to(i[0].device()), 0); }, {x}, fp,
           {.rtol = 0, .atol = 0});
    if (dt == DType::boolean) continue;
    Tensor dup = randint(0, 6, {40});  // repeats add up
    parity("index_add " + t, [dup](const In& i) { return index_add(i[0], 1, dup.to(i[0].device()), i[1], 2); },
           {x, exact_values({50, 40}, dt, false)}, fp, {.rtol = 0, .atol = 0});
    parity("index_put accumulate " + t, [dup](const In& i) {
      return index_put(i[0], {indexing::Slice(), dup.to(i[0].device())}, i[1], true);
    }, {x, exact_values({50, 40}, dt, false)}, fp, {.rtol = 0, .atol = 0});
  }
}

TEST_CASE("gpu scatter family: an out-of-range index is a deferred device error naming the op") {
  Tensor x = randn({4, 4}, {.device = gpu()}), s = randn({1, 4}, {.device = gpu()});
  Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{9, 0, 0, 0}, {1, 4}).to(gpu());
  cuda::synchronize();
  (void)scatter(x, 0, bad, s);
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "scatter", "cuda:0");
  (void)scatter_reduce(x, 0, bad, s, "amax");
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "scatter_reduce", "cuda:0");
  (void)index_add(x, 0, Tensor::from_vector(std::vector<std::int64_t>{4}).to(gpu()), s);
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "index_add", "cuda:0");
  (void)index_copy(x, 1, Tensor::from_vector(std::vector<std::int64_t>{-1}).to(gpu()), randn({4, 1}, {.device = gpu()}));
  CHECK_BRRR_ERROR(cuda::synchronize(), ErrorKind::index, "index_copy", "cuda:0");
  CHECK_NOTHROW(cuda::synchronize());
}

TEST_CASE("gpu nonzero, masked_select, masked_scatter: GPU equals CPU; one counted sync for the data-dependent sizes") {
  manual_seed(1703);
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::boolean})
    for (const Shape& s : std::vector<Shape>{{1000}, {37, 29}, {3, 1, 40, 2}, {0, 5}, {}}) {
      const std::string what = std::string(to_string(dt)) + " " + to_string(s);
      Tensor x = dt == DType::boolean ? lt(rand(s), 0.3) : mul(lt(rand(s), 0.3).to(DType::f32), randint(1, 5, s).to(DType::f32)).to(dt);
      parity("nonzero " + what, [](const In& i) { return nonzero(i[0]); }, {x}, false, {.rtol = 0, .atol = 0});
    }
  Tensor x = randn({64, 33}, {.dtype = DType::f64}), mask = lt(rand({64, 33}), 0.4), row = lt(rand({33}), 0.5);
  parity("masked_select", [mask](const In& i) { return masked_select(i[0], mask.to(i[0].device())); }, {x}, true, {.rtol = 0, .atol = 0});
  parity("masked_select broadcast mask", [row](const In& i) { return masked_select(i[0], row.to(i[0].device())); }, {x}, true,
         {.rtol = 0, .atol = 0});
  parity("masked_scatter", [mask](const In& i) { return masked_scatter(i[0], mask.to(i[0].device()), i[1]); },
         {x, randn({64 * 33}, {.dtype = DType::f64})}, true, {.rtol = 0, .atol = 0});
  parity("masked_scatter f16 broadcast", [row](const In& i) { return masked_scatter(i[0], row.to(i[0].device()), i[1]); },
         {x.to(DType::f16), randn({3000}).to(DType::f16)}, false, {.rtol = 0, .atol = 0});

  // nonzero and masked_select read their count back: exactly one sync each, through the
  // counted choke point (an Error under SyncPolicy::error); masked_scatter needs none.
  Tensor xg = x.to(gpu()), mg = mask.to(gpu()), sg = randn({64 * 33}, {.dtype = DType::f64, .device = gpu()});
  cuda::synchronize();
  std::uint64_t c0 = cuda::sync_count();
  Tensor nz = nonzero(xg);
  CHECK(cuda::sync_count() == c0 + 1);
  c0 = cuda::sync_count();
  Tensor ms = masked_select(xg, mg);
  CHECK(cuda::sync_count() == c0 + 1);
  {
    cuda::SyncPolicyGuard strict(cuda::SyncPolicy::error);
    CHECK_THROWS_AS((void)nonzero(xg), Error);
    CHECK_THROWS_AS((void)masked_select(xg, mg), Error);
    c0 = cuda::sync_count();
    CHECK_NOTHROW((void)masked_scatter(xg, mg, sg));
    CHECK(cuda::sync_count() == c0);
  }
  CHECK(nz.shape() == Shape{64 * 33, 2});
}
