// The newer losses and options on the CPU against PyTorch (fixtures of
// tests/ops/make_loss_fixtures.py, run by make_math_fixtures.py): values and input gradients
// in f64 for every reduction; cross_entropy / nll_loss with a class weight and with
// probability targets; reductions and softmax with a dtype argument; var_mean, std_mean,
// vector_norm; gradcheck of a few against central differences; errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/ops/fixture_replay.hpp"

namespace {

using test::replay;
using In = std::vector<Tensor>;
using V = std::vector<double>;

Reduction reduction_of(const std::string& name) {
  if (name.ends_with("_none")) return Reduction::none;
  if (name.ends_with("_sum")) return Reduction::sum;
  return Reduction::mean;
}

Tensor fixture(const std::string& key) { return test::math_fixtures().at(key); }

}  // namespace

TEST_CASE("l1, smooth_l1 and huber against PyTorch for every reduction") {
  for (std::string red : {"none", "mean", "sum"}) {
    const Reduction r = reduction_of("_" + red);
    replay("l1_" + red, [r](const In& x) { return l1_loss(x[0], x[1], r); });
    replay("smooth_l1_" + red, [r](const In& x) { return smooth_l1_loss(x[0], x[1], r, 0.5); });
    replay("huber_" + red, [r](const In& x) { return huber_loss(x[0], x[1], r, 0.7); });
  }
  replay("smooth_l1_beta0", [](const In& x) { return smooth_l1_loss(x[0], x[1], Reduction::mean, 0.0); });
  replay("l1_broadcast", [](const In& x) { return l1_loss(x[0], x[1]); });
  Tensor a = zeros({2});
  CHECK_BRRR_ERROR(smooth_l1_loss(a, a, Reduction::mean, -1), ErrorKind::value, "smooth_l1_loss", "beta");
  CHECK_BRRR_ERROR(huber_loss(a, a, Reduction::mean, 0), ErrorKind::value, "huber_loss", "delta");
  CHECK_BRRR_ERROR(l1_loss(a, zeros({3})), ErrorKind::shape, "l1_loss");
  CHECK_BRRR_ERROR(l1_loss(a, zeros({2}, {.dtype = DType::i64})), ErrorKind::dtype, "l1_loss");
}

TEST_CASE("kl_div, binary_cross_entropy, poisson and gaussian NLL against PyTorch") {
  replay("kl_div_mean", [](const In& x) { return kl_div(x[0], x[1]); });
  replay("kl_div_batchmean", [](const In& x) { return kl_div(x[0], x[1], {.reduction = Reduction::sum, .batchmean = true}); });
  replay("kl_div_log_target", [](const In& x) { return kl_div(x[0], x[1], {.reduction = Reduction::sum, .log_target = true}); });
  replay("kl_div_zero_target", [](const In& x) { return kl_div(x[0], x[1], {.reduction = Reduction::none}); });
  CHECK_BRRR_ERROR(kl_div(zeros({2}), zeros({2}), {.batchmean = true}), ErrorKind::value, "kl_div", "batchmean");
  replay("bce_mean", [](const In& x) { return binary_cross_entropy(x[0], x[1]); });
  replay("bce_weight_sum", [](const In& x) { return binary_cross_entropy(x[0], x[1], x[2], Reduction::sum); });
  replay("bce_none", [](const In& x) { return binary_cross_entropy(x[0], x[1], {}, Reduction::none); });
  // At x = 0 and 1 the gradient is ~1e12 (1 / 1e-12): equal to PyTorch's to 1e-8.
  replay("bce_edges", [](const In& x) { return binary_cross_entropy(x[0], x[1], {}, Reduction::none); }, DType::f64, 1e-8);
  CHECK_BRRR_ERROR(binary_cross_entropy(full({2}, 1.5), zeros({2})), ErrorKind::value, "binary_cross_entropy", "[0, 1]");
  CHECK_BRRR_ERROR(binary_cross_entropy(zeros({2}), zeros({3})), ErrorKind::shape, "binary_cross_entropy");
  replay("poisson_log", [](const In& x) { return poisson_nll_loss(x[0], x[1]); });
  replay("poisson_full", [](const In& x) {
    return poisson_nll_loss(x[0], x[1], {.log_input = false, .full = true, .reduction = Reduction::sum});
  });
  replay("gaussian_nll", [](const In& x) { return gaussian_nll_loss(x[0], x[1], x[2]); });
  replay("gaussian_nll_full_last1",
         [](const In& x) { return gaussian_nll_loss(x[0], x[1], x[2], {.full = true, .reduction = Reduction::sum}); });
  replay("gaussian_nll_fewer", [](const In& x) { return gaussian_nll_loss(x[0], x[1], x[2], {.reduction = Reduction::none}); });
  replay("gaussian_nll_eps",
         [](const In& x) { return gaussian_nll_loss(x[0], x[1], x[2], {.eps = 0.1, .reduction = Reduction::none}); });
  CHECK_BRRR_ERROR(gaussian_nll_loss(zeros({2, 3}), zeros({2, 3}), ones({3})), ErrorKind::shape, "gaussian_nll_loss");
  CHECK_BRRR_ERROR(gaussian_nll_loss(zeros({2}), zeros({2}), full({2}, -1.0)), ErrorKind::value, "gaussian_nll_loss", "negative");
}

TEST_CASE("margin, cosine and triplet losses and distances against PyTorch") {
  replay("margin_ranking", [](const In& x) { return margin_ranking_loss(x[0], x[1], x[2], 0.3); });
  replay("cosine_similarity", [](const In& x) { return cosine_similarity(x[0], x[1], 1); });
  replay("cosine_similarity_bcast", [](const In& x) { return cosine_similarity(x[0], x[1], -1); });
  replay("cosine_embedding", [](const In& x) { return cosine_embedding_loss(x[0], x[1], x[2], 0.2); });
  replay("cosine_embedding_sum", [](const In& x) { return cosine_embedding_loss(x[0], x[1], x[2], 0, Reduction::sum); });
  replay("pairwise_distance_p3", [](const In& x) { return pairwise_distance(x[0], x[1], 3.0); });
  replay("triplet", [](const In& x) { return triplet_margin_loss(x[0], x[1], x[2]); });
  replay("triplet_swap_p1", [](const In& x) {
    return triplet_margin_loss(x[0], x[1], x[2], {.margin = 2.0, .p = 1, .swap = true, .reduction = Reduction::sum});
  });
  CHECK_BRRR_ERROR(triplet_margin_loss(zeros({2, 3}), zeros({2, 3}), zeros({2, 3}), {.margin = 0}), ErrorKind::value,
                   "triplet_margin_loss", "margin");
  CHECK_BRRR_ERROR(cosine_embedding_loss(zeros({2, 3, 4}), zeros({2, 3, 4}), ones({2})), ErrorKind::shape,
                   "cosine_embedding_loss");
  // Zero vectors: eps keeps the similarity finite (0), as PyTorch.
  CHECK(cosine_similarity(zeros({2, 3}), ones({2, 3})).to_host<float>() == std::vector<float>{0, 0});
}

TEST_CASE("cross_entropy and nll_loss with a class weight and with probability targets") {
  auto ce = [](Tensor t, CrossEntropyOptions o) {
    return [t, o](const In& x) mutable {
      o.weight = x[1];
      return cross_entropy(x[0], t, o);
    };
  };
  Tensor tgt = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 1, -100, 2});
  replay("ce_weight", ce(tgt, {}));
  replay("ce_weight_smooth", ce(tgt, {.label_smoothing = 0.2}));
  replay("ce_weight_sum", ce(tgt, {.reduction = Reduction::sum}));
  replay("ce_weight_none_3d", ce(Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 3, -100}, {2, 3}),
                                 {.reduction = Reduction::none}));
  replay("nll_weight", [tgt](const In& x) { return nll_loss(x[0], tgt, {.weight = x[1]}); });
  replay("ce_prob", [](const In& x) { return cross_entropy(x[0], x[1]); });
  replay("ce_prob_weight_smooth", [](const In& x) { return cross_entropy(x[0], x[1], {.label_smoothing = 0.1, .weight = x[2]}); });
  replay("ce_prob_none_3d", [](const In& x) { return cross_entropy(x[0], x[1], {.reduction = Reduction::none}); });
  replay("ce_prob_1d", [](const In& x) { return cross_entropy(x[0], x[1]); });
  // Unweighted class-index targets still take the fused kernel and agree with weight = 1.
  Tensor logits = fixture("ce_weight/x0");
  test::check_values(test::values(cross_entropy(logits, tgt, {.weight = ones({4}, {.dtype = DType::f64})})),
                     test::values(cross_entropy(logits, tgt)), 1e-14, 1e-14, "weight 1");
  // All targets ignored: NaN for mean, as unweighted.
  Tensor ignored = full({5}, -100.0, {.dtype = DType::i64});
  CHECK(std::isnan(cross_entropy(logits, ignored, {.weight = ones({4}, {.dtype = DType::f64})}).item<double>()));
  CHECK_BRRR_ERROR(cross_entropy(logits, tgt, {.weight = ones({3}, {.dtype = DType::f64})}), ErrorKind::shape, "weight");
  CHECK_BRRR_ERROR(cross_entropy(logits, tgt, {.weight = ones({4}, {.dtype = DType::i64})}), ErrorKind::dtype, "weight");
  CHECK_BRRR_ERROR(cross_entropy(logits, zeros({5, 3}, {.dtype = DType::f64})), ErrorKind::dtype, "cross_entropy",
                   "probabilities", "[5, 3]");
  CHECK_BRRR_ERROR(nll_loss(logits, zeros({5, 4}, {.dtype = DType::f64})), ErrorKind::dtype, "nll_loss");
}

TEST_CASE("dtype arguments, var_mean, std_mean and vector_norm against PyTorch") {
  // The fixture holds f16 values in f64: convert back first, as PyTorch did.
  replay("sum_dtype", [](const In& x) { return sum(x[0].to(DType::f16), {1}, false, DType::f32).to(DType::f64); }, DType::f64,
         1e-6, 1e-6);
  replay("softmax_dtype", [](const In& x) { return softmax(x[0].to(DType::f16), 1, DType::f32).to(DType::f64); }, DType::f64,
         1e-6, 1e-7);
  replay("log_softmax_dtype", [](const In& x) { return log_softmax(x[0].to(DType::f16), 0, DType::f64); });
  replay("mean_dtype_int", [](const In& x) { return mean(x[0], {}, false, DType::f64); });
  CHECK(sum(test::make(DType::i32, {1, 2}), {}, false, DType::i32).dtype() == DType::i32);
  CHECK_BRRR_ERROR(mean(zeros({2}), {}, false, DType::i64), ErrorKind::dtype, "mean");
  CHECK_BRRR_ERROR(softmax(zeros({2}), 0, DType::i32), ErrorKind::dtype, "softmax");
  replay("var_mean_v", [](const In& x) { return var_mean(x[0], {1}).first; });
  replay("var_mean_m", [](const In& x) { return var_mean(x[0], {1}).second; });
  replay("std_mean_s", [](const In& x) { return std_mean(x[0], {0}, 0, true).first; });
  replay("std_mean_m", [](const In& x) { return std_mean(x[0], {0}, 0, true).second; });
  replay("vector_norm_2", [](const In& x) { return vector_norm(x[0], 2, {1}); });
  replay("vector_norm_3", [](const In& x) { return vector_norm(x[0], 3.0); });
  replay("vector_norm_inf", [](const In& x) { return vector_norm(x[0], INFINITY, {0}, true); });
  replay("vector_norm_0", [](const In& x) { return vector_norm(x[0], 0, {1}); });
  replay("vector_norm_zero_row", [](const In& x) { return vector_norm(x[0], 2, {1}); });
  CHECK(vector_norm(test::make(DType::i64, {3, 4}), 2, {}, false, DType::f32).item<float>() == 5.0f);
  CHECK_BRRR_ERROR(vector_norm(test::make(DType::i64, {3, 4})), ErrorKind::dtype, "vector_norm");
}

TEST_CASE("gradcheck of the composed losses") {
  std::mt19937_64 rng(test::fresh_seed());
  auto normal = [&](Shape s) { return Tensor::from_vector(test::normal_values(rng, test::numel_of(s)), s); };
  auto check = [](const test::CaseFn& f, std::vector<Tensor> in) { CHECK(autograd::gradcheck(f, in)); };
  check([](const In& x) { return smooth_l1_loss(x[0], x[1], Reduction::sum, 0.8); }, {normal({3, 4}), normal({3, 4})});
  check([](const In& x) { return huber_loss(x[0], x[1], Reduction::mean, 0.6); }, {normal({3, 4}), normal({4})});
  check([](const In& x) { return kl_div(log_softmax(x[0], 1), softmax(x[1], 1)); }, {normal({3, 4}), normal({3, 4})});
  check([](const In& x) { return binary_cross_entropy(sigmoid(x[0]), sigmoid(x[1])); }, {normal({3, 4}), normal({3, 4})});
  check([](const In& x) { return gaussian_nll_loss(x[0], x[1], add(exp(x[2]), 0.1)); }, {normal({3, 4}), normal({3, 4}), normal({3, 1})});
  check([](const In& x) { return cosine_similarity(x[0], x[1], 1); }, {normal({3, 4}), normal({3, 4})});
  check([](const In& x) { return triplet_margin_loss(x[0], x[1], x[2], {.margin = 3.0}); },
        {normal({3, 4}), normal({3, 4}), normal({3, 4})});
  check([](const In& x) { return cross_entropy(x[0], softmax(x[1], 1), {.label_smoothing = 0.1}); },
        {normal({3, 4}), normal({3, 4})});
  Tensor t = Tensor::from_vector(std::vector<std::int64_t>{0, 2, 1});
  Tensor w = Tensor::from_vector(V{0.5, 2.0, 1.5, 1.0});
  check([t, w](const In& x) { return cross_entropy(x[0], t, {.label_smoothing = 0.3, .weight = w}); }, {normal({3, 4})});
  check([](const In& x) { return vector_norm(x[0], 3.0, {1}); }, {normal({3, 4})});
}
