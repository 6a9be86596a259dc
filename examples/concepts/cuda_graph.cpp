// Concept 9 — CUDA graphs: enqueue a whole step once, replay it with one launch.
//
// Every op costs the host a few microseconds to enqueue (checks, allocation, the kernel
// launch itself). A step of many small kernels is therefore host-bound: the GPU finishes each
// kernel before the host has enqueued the next one. A CUDA graph records the step once
// (cuda::Graph::capture: the kernels are captured, not run) and replays it with a single
// cudaGraphLaunch: the host's cost per step drops to one call, and the GPU runs the kernels
// back to back. The rules that make this safe: tensors keep their addresses (fill static
// inputs with copy_ before replay), nothing inside may sync (item() there is an Error), and
// allocations come from the graph's private pool.
//
// What to look for: the same numbers from both loops, and the graphed loop's time per step
// far below the eager one's (the step is 64 dependent elementwise ops on 4096 floats).
// --require-gpu (the gpu test): exit 77 without a CUDA device, 1 when the results differ.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
import brrr;

using namespace brrr;
using Clock = std::chrono::steady_clock;

constexpr int steps = 500, ops = 64;

static Tensor step(const Tensor& x) {
  Tensor h = x;
  for (int i = 0; i < ops / 2; ++i) h = tanh(mul(h, 1.01));
  return h;
}

int main(int argc, char** argv) {
  const bool require_gpu = argc > 1 && std::string(argv[1]) == "--require-gpu";  // the gpu test's mode
  if (!cuda::is_available()) {
    if (require_gpu) {
      std::printf("concept_cuda_graph: no CUDA device, skipped\n");
      return 77;
    }
    std::printf(
        "concept_cuda_graph: no CUDA device here, so nothing to measure.\n"
        "On a GPU it runs a step of %d small elementwise kernels %d times eagerly and %d times as\n"
        "replays of one cuda::Graph capture, checks both give the same numbers, and prints the\n"
        "time per step of each (the graph's far lower: one launch instead of %d).\n"
        "RESULT: skipped (no CUDA device)\n",
        ops, steps, steps, ops);
    return 0;
  }
  Device dev = Device::cuda(0);
  Tensor x = randn({4096}, {.device = dev});
  Tensor eager_out = step(x);  // warm-up: caches, kernels loaded
  cuda::synchronize(dev);

  auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) eager_out = step(x);
  cuda::synchronize(dev);
  double eager_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps;

  cuda::Graph graph(dev);
  Tensor out;
  graph.capture([&] { out = step(x); });  // recorded, not run
  t0 = Clock::now();
  for (int i = 0; i < steps; ++i) graph.replay();
  cuda::synchronize(dev);
  double graph_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / steps;

  std::vector<float> a = eager_out.to_host<float>(), b = out.to_host<float>();
  bool same = a == b;
  std::printf("eager: %.1f us per step (%d kernels enqueued one by one)\n", eager_us, ops);
  std::printf("graph: %.1f us per step (one cudaGraphLaunch of %zu nodes)\n", graph_us, graph.num_nodes());
  std::printf("same results: %s\n", same ? "yes" : "NO");
  std::printf("RESULT: graph %.1fx faster per step (%.1f vs %.1f us)\n", eager_us / graph_us, graph_us, eager_us);
  return same ? 0 : 1;
}
