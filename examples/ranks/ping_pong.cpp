// Ranks 2 — point to point. Rank 0 sends a tensor to rank 1, which sends it back; the round
// trip time gives the latency (small messages) and the bandwidth (large ones) of the link
// between two ranks: loopback TCP for CPU tensors (Gloo), NVLink or PCIe for GPUs (NCCL).
//
//   brrr-run --nproc-per-node 2 build/release/examples/ranks/ping_pong [--max-mib 256]
//
// What to look for: latency dominates below ~64 KiB (the time hardly grows with the size),
// bandwidth above ~1 MiB (time proportional to size). Bandwidth = 2 x bytes / round trip.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
import brrr;

#include "examples/ranks/common.hpp"

using namespace brrr;

int main(int argc, char** argv) {
  double max_mib = argc > 2 && std::string(argv[1]) == "--max-mib" ? std::atof(argv[2]) : 64;
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = ranks::device_of_rank();
  if (n < 2) {
    std::printf("ping_pong needs two ranks: brrr-run --nproc-per-node 2 %s\nRESULT: n/a (1 rank)\n", argv[0]);
    dist::destroy_process_group();
    return 0;
  }
  if (r == 0) std::printf("%12s %14s %12s\n", "bytes", "round trip us", "GB/s");
  double small_us = 0, big_gbps = 0, big_bytes = 0;
  for (double bytes = 8; bytes <= max_mib * (1 << 20); bytes *= 8) {
    Tensor t = zeros({static_cast<std::int64_t>(bytes / 4)}, {.device = dev});
    auto round_trip = [&] {
      if (r == 0) {
        dist::send(t, 1);
        dist::recv(t, 1);
      } else if (r == 1) {
        dist::recv(t, 0);
        dist::send(t, 0);
      }
    };
    int iters = bytes < (1 << 20) ? 50 : 10;
    double ms = ranks::time_ms(dev, 3, iters, round_trip);
    double gbps = 2 * bytes / (ms * 1e-3) / 1e9;
    if (r == 0) std::printf("%12.0f %14.1f %12.2f\n", bytes, ms * 1e3, gbps);
    if (bytes == 8) small_us = ms * 1e3;
    big_gbps = gbps;
    big_bytes = bytes;
  }
  if (r == 0)
    std::printf("RESULT: %s round trip %.1f us at 8 B, %.2f GB/s at %s (%s)\n", dev.is_cuda() ? "NCCL" : "Gloo",
                small_us, big_gbps, ranks::bytes_text(big_bytes).c_str(), dev.str().c_str());
  dist::destroy_process_group();
  return 0;
}
