// The CPU backend's intra-op thread pool (set_num_threads): every parallel kernel gives the
// same result on 1 thread and on several. Sums, softmax and elementwise ops split their
// work in blocks fixed by the shape alone, so they are compared bit for bit; GEMM (OpenBLAS
// per block of rows or columns) against a float64 reference; the f32 sums' error against
// float64 within the bound of pairwise summation.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

// Restores the pool's size when a test case ends.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

template <class F> std::vector<float> with_threads(int n, F&& f) {
  set_num_threads(n);
  return f().template to_host<float>();
}

const int thread_counts[] = {2, 3, 4, 7};

}  // namespace

TEST_CASE("set_num_threads: sizes the pool and rejects sizes below 1") {
  ThreadsGuard guard;
  CHECK(get_num_threads() >= 1);
  set_num_threads(3);
  CHECK(get_num_threads() == 3);
  CHECK_BRRR_ERROR(set_num_threads(0), ErrorKind::value, "set_num_threads", "0");
  CHECK(get_num_threads() == 3);
}

TEST_CASE("parallel sums, softmax and elementwise ops equal their 1-thread results bit for bit") {
  ThreadsGuard guard;
  FRESH_SEED();
  const Tensor big = randn({(1 << 20) + 123});   // a full sum over several blocks
  const Tensor rows = randn({3001, 257});        // sum over the last dim, softmax rows
  const Tensor cols = randn({20011, 37});        // sum over the first dim (bias gradient)
  const Tensor other = randn({3001, 257});
  auto cases = std::vector<std::pair<std::string, std::function<Tensor()>>>{
      {"sum all", [&] { return sum(big); }},
      {"sum dim 1", [&] { return sum(rows, {1}); }},
      {"sum dim 0", [&] { return sum(cols, {0}); }},
      {"softmax", [&] { return softmax(rows); }},
      {"log_softmax", [&] { return log_softmax(rows); }},
      {"exp", [&] { return exp(rows); }},
      {"tanh", [&] { return tanh(rows); }},
      {"mul", [&] { return rows * other; }},
      {"add scalar", [&] { return rows + 2.5; }},
  };
  for (auto& [name, f] : cases) {
    INFO(name);
    const auto one = with_threads(1, f);
    for (int n : thread_counts) {
      INFO("threads = ", n);
      CHECK(with_threads(n, f) == one);
    }
  }
}

TEST_CASE("parallel f32 sums stay within the pairwise bound against float64") {
  ThreadsGuard guard;
  FRESH_SEED();
  const std::int64_t n = (1 << 22) + 77;
  const Tensor x = rand({n});  // all positive: the bound below is relative to sum |x|
  const auto xs = x.to_host<float>();
  double ref = 0;
  for (float v : xs) ref += v;
  // Pairwise: leaves of <= 256 as 8 sequential lanes (32 adds), then log2(n) levels.
  const double bound = (32 + std::log2(static_cast<double>(n)) + 2) * 0x1p-24 * ref;
  for (int t : {1, 2, 4}) {
    set_num_threads(t);
    const double got = sum(x).item<float>();
    INFO("threads = ", t, " got ", got, " ref ", ref);
    CHECK(std::abs(got - ref) <= bound);
  }
  // Column sums (over dim 0) too.
  const Tensor m = rand({50000, 3});
  const auto ms = m.to_host<float>();
  for (int t : {1, 3}) {
    set_num_threads(t);
    const auto got = sum(m, {0}).to_host<float>();
    for (int c = 0; c < 3; ++c) {
      double r = 0;
      for (int i = 0; i < 50000; ++i) r += ms[static_cast<std::size_t>(i * 3 + c)];
      const double b = (64 + std::log2(50000.0) + 2) * 0x1p-24 * r;
      INFO("threads = ", t, " column ", c);
      CHECK(std::abs(got[static_cast<std::size_t>(c)] - r) <= b);
    }
  }
}

TEST_CASE("parallel GEMM matches a float64 reference on 1 and N threads") {
  ThreadsGuard guard;
  FRESH_SEED();
  struct Case { std::int64_t m, k, n; bool transpose_b; };
  for (auto c : {Case{300, 200, 150, false}, Case{17, 513, 900, true}, Case{1000, 64, 3, false}}) {
    INFO("m ", c.m, " k ", c.k, " n ", c.n, " transposed b ", c.transpose_b);
    const Tensor a = randn({c.m, c.k});
    const Tensor b = c.transpose_b ? randn({c.n, c.k}).transpose(0, 1) : randn({c.k, c.n});
    const auto ref = matmul(a.to(DType::f64), b.to(DType::f64)).to_host<double>();
    const auto a_abs = abs(a).to(DType::f64), b_abs = abs(b).to(DType::f64);
    const auto mag = matmul(a_abs, b_abs).to_host<double>();  // sum |a||b| per element
    for (int t : {1, 2, 4}) {
      INFO("threads = ", t);
      set_num_threads(t);
      const auto got = matmul(a, b).to_host<float>();
      bool ok = true;
      for (std::size_t i = 0; i < got.size() && ok; ++i)
        ok = std::abs(got[i] - ref[i]) <= (static_cast<double>(c.k) + 4) * 0x1p-24 * mag[i];
      CHECK(ok);
    }
  }
}

TEST_CASE("a DataLoader-like second thread runs its ops while the pool is busy") {
  ThreadsGuard guard;
  FRESH_SEED();
  set_num_threads(2);
  const Tensor x = randn({1 << 21});
  const auto expect = sum(x).item<float>();
  float other = 0;
  std::thread t([&] {
    for (int i = 0; i < 20; ++i) other = sum(x).item<float>();
  });
  for (int i = 0; i < 20; ++i) CHECK(sum(x).item<float>() == expect);
  t.join();
  CHECK(other == expect);
}
