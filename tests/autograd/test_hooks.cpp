// Autograd hooks in LibTorch's spelling: Tensor::register_hook on leaves and non-leaves
// (seeing the summed gradient, replacing it, removal), post-accumulate-grad hooks on leaves
// (what DDP hangs its bucket all-reduces on), retain_grad, and autograd::queue_callback.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

using namespace brrr;

#include "tests/tensor/helpers.hpp"

namespace {
using V = std::vector<double>;
V host(const Tensor& t) { return t.to(DType::f64).to_host<double>(); }
Tensor leaf(std::vector<float> v) {
  Tensor t = Tensor::from_vector(v);
  t.requires_grad_();
  return t;
}
}  // namespace

TEST_CASE("register_hook on a leaf sees the gradient before accumulation and may replace it") {
  Tensor x = leaf({1, 2, 3});
  V seen;
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    seen = host(g);
    ++calls;
    return g * 10;
  });
  (x * x).sum().backward();  // d/dx = 2x
  CHECK(calls == 1);
  CHECK(seen == V{2, 4, 6});
  CHECK(host(x.grad()) == V{20, 40, 60});
  (x * 1).sum().backward();
  CHECK(host(x.grad()) == V{30, 50, 70});  // accumulated, hook applied to the new part only
}

TEST_CASE("register_hook on a non-leaf sees the sum over its uses, once") {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  V seen;
  int calls = 0;
  auto h = y.register_hook([&](const Tensor& g) {
    seen = host(g);
    ++calls;
    return g * 3;
  });
  Tensor z = (y * y).sum() + y.sum();  // dz/dy = 2y + 1
  z.backward({}, true);
  CHECK(calls == 1);
  CHECK(seen == V{5, 9});
  CHECK(host(x.grad()) == V{30, 54});  // 3 (2y + 1) * 2
  h.remove();
  h.remove();  // idempotent
  x.set_grad({});
  z.backward();
  CHECK(calls == 1);
  CHECK(host(x.grad()) == V{10, 18});
}

TEST_CASE("hooks run in registration order; an undefined result keeps the gradient") {
  Tensor x = leaf({1});
  std::string order;
  x.register_hook([&](const Tensor& g) { order += "a"; return g + 1; });
  x.register_hook([&](const Tensor&) { order += "b"; return Tensor(); });
  x.register_hook([&](const Tensor& g) { order += "c"; return g * 2; });
  (x * 3).sum().backward();
  CHECK(order == "abc");
  CHECK(host(x.grad()) == V{8});
}

TEST_CASE("post-accumulate-grad hooks run after grad() is updated, for every leaf") {
  Tensor w = leaf({1, 2}), b = leaf({3});
  std::vector<std::string> log;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) {
    CHECK(p.is_same(w));
    log.push_back("w " + std::to_string(host(p.grad())[0]));
  });
  auto hb = b.register_post_accumulate_grad_hook([&](const Tensor& p) { log.push_back("b " + std::to_string(host(p.grad())[0])); });
  Tensor x = Tensor::from_vector(std::vector<float>{5, 7});
  ((x * w).sum() + b.sum() * 2).backward();
  REQUIRE(log.size() == 2);
  CHECK(std::count(log.begin(), log.end(), "w 5.000000") == 1);
  CHECK(std::count(log.begin(), log.end(), "b 2.000000") == 1);
  hb.remove();
  ((x * w).sum() + b.sum()).backward();
  CHECK(log.size() == 3);
  CHECK(log.back() == "w 10.000000");
}

TEST_CASE("hook errors: no grad, non-leaf post-accumulate hooks, wrong shapes") {
  Tensor plain = Tensor::from_vector(std::vector<float>{1});
  CHECK_BRRR_ERROR(plain.register_hook([](const Tensor& g) { return g; }), ErrorKind::autograd, "register_hook",
                   "does not require grad");
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  CHECK_BRRR_ERROR(y.register_post_accumulate_grad_hook([](const Tensor&) {}), ErrorKind::autograd,
                   "register_post_accumulate_grad_hook", "made by");
  CHECK_BRRR_ERROR(plain.register_post_accumulate_grad_hook([](const Tensor&) {}), ErrorKind::autograd,
                   "without requires_grad");
  y.register_hook([](const Tensor&) { return zeros({3}); });
  CHECK_BRRR_ERROR(y.sum().backward(), ErrorKind::autograd, "hook", "[3]", "[2]");
}

TEST_CASE("retain_grad keeps a non-leaf's gradient") {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  CHECK_FALSE(y.retains_grad());
  y.retain_grad();
  CHECK(y.retains_grad());
  CHECK(x.retains_grad());
  Tensor z = (y * y).sum();
  z.backward({}, true);
  CHECK(host(y.grad()) == V{6, 12});
  z.backward();
  CHECK(host(y.grad()) == V{12, 24});
  CHECK(host(x.grad()) == V{36, 72});
}

TEST_CASE("grad() of a non-leaf without retain_grad warns once, as PyTorch") {
  // Capture stderr (fd 2) in a file around the reads.
  char path[] = "/tmp/brrr_grad_warn_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  (y * y).sum().backward();
  CHECK_FALSE(y.grad().defined());
  CHECK_FALSE((x * 2).grad().defined());  // a second non-leaf: no second warning
  CHECK(x.grad().defined());              // a leaf: no warning
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path);
  // Once per process: an earlier case of this suite may already have printed it.
  std::size_t n = 0;
  for (std::size_t at = text.find("grad() of a non-leaf"); at != std::string::npos; at = text.find("grad() of a non-leaf", at + 1)) ++n;
  CHECK(n <= 1);
  if (n == 1) CHECK(text.find("retain_grad()") != std::string::npos);
}

TEST_CASE("queue_callback runs once the whole graph is done") {
  Tensor a = leaf({1}), b = leaf({2});
  int callbacks = 0;
  bool both_ready = false;
  auto queue_once = [&](const Tensor&) {
    if (callbacks++ == 0)
      autograd::queue_callback([&] { both_ready = a.grad().defined() && b.grad().defined(); });
  };
  a.register_post_accumulate_grad_hook(queue_once);
  b.register_post_accumulate_grad_hook(queue_once);
  (a * b).sum().backward();
  CHECK(callbacks == 2);
  CHECK(both_ready);
  CHECK_BRRR_ERROR(autograd::queue_callback([] {}), ErrorKind::autograd, "no backward pass");
  // An exception from a callback leaves backward().
  Tensor c = leaf({1});
  c.register_post_accumulate_grad_hook([](const Tensor&) {
    autograd::queue_callback([] { throw Error(ErrorKind::value, "from the callback"); });
  });
  CHECK_BRRR_ERROR((c * 2).sum().backward(), ErrorKind::value, "from the callback");
  CHECK_BRRR_ERROR((c * 3).sum().backward(), ErrorKind::value, "from the callback");  // again: an error, no crash
}
