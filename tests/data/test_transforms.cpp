// Batch transforms and custom datasets on the CPU: Normalize against hand-computed values;
// RandomCrop checked image by image (every output is one window of its padded input, the
// offsets cover every position, a seed replays them); RandomHorizontalFlip (each image as is
// or mirrored, the fraction near p); Compose's order; a Dataset defining only size() and
// get(i) through a DataLoader with a transform; a malformed example as an error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace brrr::data;
using namespace test;

TEST_CASE("Normalize: per-channel (x - mean) / std") {
  FRESH_SEED();
  Tensor x = rand({3, 2, 2, 2}, {.dtype = DType::f64});
  transforms::Normalize norm({0.5, 0.25}, {0.2, 0.4});
  std::vector<double> in = values(x), out = values(norm(x));
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::size_t c = (i / 4) % 2;
    double expected = (in[i] - (c == 0 ? 0.5 : 0.25)) / (c == 0 ? 0.2 : 0.4);
    CHECK(out[i] == doctest::Approx(expected).epsilon(1e-14));
  }
  CHECK(norm(x.to(DType::f32)).dtype() == DType::f32);
  CHECK_BRRR_ERROR(norm(zeros({1, 3, 2, 2})), ErrorKind::shape, "Normalize", "2 channel");
  CHECK_BRRR_ERROR(transforms::Normalize({0.5}, {0.0}), ErrorKind::value, "std");
  CHECK_BRRR_ERROR(norm(zeros({2, 2})), ErrorKind::shape, "[N, C, H, W]");
}

TEST_CASE("RandomCrop: each output is a window of its zero-padded input") {
  FRESH_SEED();
  const std::int64_t n = 400, c = 2, h = 5, w = 6, pad = 2, ch = 4, cw = 3;
  // Values 1.. so that zeros can only come from the padding.
  Tensor x = arange(1.0, static_cast<double>(n * c * h * w + 1), 1.0, {.dtype = DType::f32}).view({n, c, h, w});
  Tensor y = transforms::RandomCrop(ch, cw, pad)(x);
  REQUIRE(y.shape() == Shape{n, c, ch, cw});
  std::vector<double> xv = values(x), yv = values(y);
  std::set<std::pair<std::int64_t, std::int64_t>> offsets;
  for (std::int64_t k = 0; k < n; ++k) {
    // Find the window: try every offset of the padded image, keep the one that matches.
    int matches = 0;
    for (std::int64_t top = 0; top + ch <= h + 2 * pad; ++top)
      for (std::int64_t left = 0; left + cw <= w + 2 * pad; ++left) {
        bool ok = true;
        for (std::int64_t ci = 0; ci < c && ok; ++ci)
          for (std::int64_t i = 0; i < ch && ok; ++i)
            for (std::int64_t j = 0; j < cw && ok; ++j) {
              std::int64_t r = top + i - pad, col = left + j - pad;
              double expected = (r < 0 || r >= h || col < 0 || col >= w)
                                    ? 0.0
                                    : xv[static_cast<std::size_t>(((k * c + ci) * h + r) * w + col)];
              ok = yv[static_cast<std::size_t>(((k * c + ci) * ch + i) * cw + j)] == expected;
            }
        if (ok) {
          ++matches;
          offsets.insert({top, left});
        }
      }
    CHECK(matches == 1);
  }
  CHECK(offsets.size() == static_cast<std::size_t>((h + 2 * pad - ch + 1) * (w + 2 * pad - cw + 1)));  // all 6 x 8
  // A seed replays the same crops.
  manual_seed(seed_ + 1);
  Tensor a = transforms::RandomCrop(3)(x);
  manual_seed(seed_ + 1);
  Tensor b = transforms::RandomCrop(3)(x);
  CHECK(values(a) == values(b));
  CHECK_BRRR_ERROR(transforms::RandomCrop(9)(x), ErrorKind::shape, "RandomCrop", "smaller");
}

TEST_CASE("RandomHorizontalFlip: each image as is or mirrored, about p of them mirrored") {
  FRESH_SEED();
  const std::int64_t n = 2000, w = 3;
  Tensor x = randn({n, 1, 2, w});
  CHECK(values(transforms::RandomHorizontalFlip(0.0)(x)) == values(x));
  Tensor mirrored = x.index({indexing::Ellipsis, Tensor::from_vector(std::vector<std::int64_t>{2, 1, 0})});
  CHECK(values(transforms::RandomHorizontalFlip(1.0)(x)) == values(mirrored));
  std::vector<double> xv = values(x), mv = values(mirrored), yv = values(transforms::RandomHorizontalFlip(0.3)(x));
  int flipped = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    bool same = true, mirror = true;
    for (std::int64_t e = 0; e < 2 * w; ++e) {
      auto i = static_cast<std::size_t>(k * 2 * w + e);
      same = same && yv[i] == xv[i];
      mirror = mirror && yv[i] == mv[i];
    }
    CHECK((same || mirror));
    flipped += mirror && !same;
  }
  // Binomial(2000, 0.3): mean 600, sd 20.5; 5 sd either way.
  CHECK(flipped > 497);
  CHECK(flipped < 703);
}

TEST_CASE("Compose applies in order") {
  FRESH_SEED();
  Tensor x = rand({2, 1, 4, 4});
  transforms::Compose both{transforms::Normalize({0.5}, {0.5}), [](const Tensor& t) { return t * 2.0; }};
  testing::assert_close(both(x), (x - 0.5) / 0.5 * 2.0);
}

namespace {
// Only size() and get(i): example i is {[1, 2, 2] image of value i, label i % 3}.
class Squares : public Dataset {
public:
  std::int64_t size() const override { return 10; }
  std::vector<Tensor> get(std::int64_t i) const override {
    return {full({1, 2, 2}, static_cast<double>(i)), full({}, static_cast<double>(i % 3), {.dtype = DType::i64})};
  }
};
class Ragged : public Dataset {
public:
  std::int64_t size() const override { return 4; }
  std::vector<Tensor> get(std::int64_t i) const override { return {zeros({i == 2 ? 3 : 2})}; }
};
}  // namespace

TEST_CASE("a custom Dataset needs only size() and get(i); the loader applies the transform") {
  auto ds = std::make_shared<Squares>();
  auto f = ds->fields();
  REQUIRE(f.size() == 2);
  CHECK(f[0].first == Shape{1, 2, 2});
  CHECK(f[1].second == DType::i64);
  DataLoader loader(ds, {.batch_size = 4, .transform = [](const Tensor& t) { return t + 100.0; }});
  std::vector<double> firsts, labels;
  for (const Batch& b : loader) {
    CHECK(b[0].shape()[1] == 1);
    std::vector<double> v = values(b[0]);
    for (std::size_t k = 0; k < v.size(); k += 4) firsts.push_back(v[k]);
    for (double l : values(b[1])) labels.push_back(l);
  }
  CHECK(firsts == std::vector<double>{100, 101, 102, 103, 104, 105, 106, 107, 108, 109});
  CHECK(labels == std::vector<double>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0});
  DataLoader bad(std::make_shared<Ragged>(), {.batch_size = 4});
  CHECK_BRRR_ERROR(bad.begin(), ErrorKind::shape, "example 2", "[3]");
}
