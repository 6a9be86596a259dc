// Ranks 3 — a tour of the collectives. Every rank calls the same collective on a tensor of the
// same size; the library moves the data in rings or trees between them. Each row prints the
// time, the algorithm bandwidth (size / time) and the bus bandwidth, nccl-tests' measure
// that is comparable across rank counts and to the link's speed
// (github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):
//   all_reduce       busbw = algbw * 2 (n-1) / n     size = the tensor
//   reduce_scatter   busbw = algbw * (n-1) / n       size = the input (n blocks)
//   all_gather       busbw = algbw * (n-1) / n       size = the output (n blocks)
//   all_to_all       busbw = algbw * (n-1) / n       size = the tensor
//   broadcast, reduce busbw = algbw                   size = the tensor
//
//   brrr-run --nproc-per-node 2 build/release/examples/ranks/collectives_tour [--max-mib 256]
//
// What to look for: bus bandwidth grows with the size until it saturates the link; all_reduce
// moves twice the data of reduce_scatter + all_gather each, which is what it is made of.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>
import brrr;

#include "examples/ranks/common.hpp"

using namespace brrr;

int main(int argc, char** argv) {
  double max_mib = argc > 2 && std::string(argv[1]) == "--max-mib" ? std::atof(argv[2]) : 16;
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = ranks::device_of_rank();
  const double ring = static_cast<double>(n - 1) / n;  // 0 for one rank: nothing crosses a link
  if (r == 0)
    std::printf("%d ranks, %s, f32\n%-15s %10s %12s %12s %12s\n", n, dev.is_cuda() ? "NCCL" : "Gloo", "collective",
                "size", "time us", "algbw GB/s", "busbw GB/s");
  double best_busbw = 0, best_algbw = 0, best_size = 0;
  for (double bytes = 4096; bytes <= max_mib * (1 << 20); bytes *= 16) {
    const std::int64_t count = static_cast<std::int64_t>(bytes / 4) / n * n;  // divisible by n
    const double size = static_cast<double>(count) * 4;
    Tensor t = ones({count}, {.device = dev});
    Tensor block = ones({count / n}, {.device = dev});
    Tensor out = empty({count}, {.device = dev});
    struct Row {
      const char* name;
      double factor;
      std::function<void()> run;
    };
    std::vector<Row> rows = {
        {"all_reduce", 2 * ring, [&] { dist::all_reduce(t); }},
        {"reduce_scatter", ring, [&] { dist::reduce_scatter(block, t); }},
        {"all_gather", ring, [&] { dist::all_gather(out, block); }},
        {"all_to_all", ring, [&] { dist::all_to_all(out, t); }},
        {"broadcast", 1, [&] { dist::broadcast(t, 0); }},
        {"reduce", 1, [&] { dist::reduce(t, 0); }},
    };
    for (auto& row : rows) {
      int iters = bytes < (1 << 20) ? 20 : 5;
      double ms = ranks::max_over_ranks(ranks::time_ms(dev, 2, iters, row.run));
      double algbw = size / (ms * 1e-3) / 1e9, busbw = algbw * row.factor;
      if (r == 0)
        std::printf("%-15s %10s %12.1f %12.2f %12.2f\n", row.name, ranks::bytes_text(size).c_str(), ms * 1e3, algbw,
                    busbw);
      if (std::string(row.name) == "all_reduce" && algbw >= best_algbw) best_busbw = busbw, best_algbw = algbw, best_size = size;
    }
  }
  if (r == 0)
    std::printf("RESULT: all_reduce bus bandwidth %.2f GB/s (algbw %.2f GB/s) at %s over %d rank%s (%s)\n", best_busbw,
                best_algbw, ranks::bytes_text(best_size).c_str(), n, n == 1 ? "" : "s", dev.is_cuda() ? "NCCL" : "Gloo");
  dist::destroy_process_group();
  return 0;
}
