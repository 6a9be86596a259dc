// bench_host_ops: the host cost of small ops on the CPU, where the kernels are trivial and
// what is measured is the op layer itself: checks, output allocation, dispatch, and the
// autograd node each op records. Each figure is host nanoseconds per call (median over
// batches, bench::host_ns_per_call) on 16-element f32 tensors:
//   add_ns, add_autograd_ns            a + b (the second with a leaf requiring grad)
//   mul_scalar_autograd_ns             x * 2.0
//   unary_autograd_ns                  exp(x)
//   chain_forward_backward_ns          ((x * w + 1).relu() * x).sum(), backward()
// and, for each, `<name>_allocs`: heap allocations per call (operator new is counted here).
// Runs without a GPU. Prints a table, then one JSON object on the last line.
//
// usage: bench_host_ops [--batches N]   (default 200 batches of 200 calls)
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <string>
#include "common.hpp"

namespace {
std::atomic<long> allocations{0};
}
// Counting replacements of the global allocation functions (the sized/aligned forms fall
// back to these).
void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace brrr;

int main(int argc, char** argv) {
  long batches = 200;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--batches") == 0) batches = std::atol(argv[i + 1]);
  const long batch = 200, warmup = 2000;
  Tensor a = randn({16}), b = randn({16});
  Tensor x = randn({16}, {.requires_grad = true}), w = randn({16}, {.requires_grad = true});
  std::map<std::string, double> r;
  auto time = [&](const char* key, const auto& f) {
    r[key] = bench::host_ns_per_call(warmup, batches, batch, f).median_ns;
    long before = allocations.load();
    for (int i = 0; i < 100; ++i) f();
    std::string name = key;
    r[name.substr(0, name.size() - 3) + "_allocs"] = static_cast<double>(allocations.load() - before) / 100;
  };
  time("add_ns", [&] { Tensor c = a + b; });
  time("add_autograd_ns", [&] { Tensor c = x + b; });
  time("mul_scalar_autograd_ns", [&] { Tensor c = x * 2.0; });
  time("unary_autograd_ns", [&] { Tensor c = exp(x); });
  time("chain_forward_backward_ns", [&] {
    Tensor loss = (relu(x * w + 1.0) * x).sum();
    loss.backward();
  });
  for (const auto& [k, v] : r) std::printf("%-36s %10.1f\n", k.c_str(), v);
  bench::print_json(r, 1);
}
