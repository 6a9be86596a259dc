// Ranks 1 — one process per device. brrr-run starts N copies of this program; each gets its
// RANK, WORLD_SIZE and LOCAL_RANK from the environment, joins the others through the store
// that rank 0 hosts (init_process_group), picks its device (cuda:LOCAL_RANK) and its shard of
// the data (DistributedSampler), and they agree on one number with an all_reduce.
//
//   brrr-run --nproc-per-node 4 build/release/examples/ranks/hello_ranks
//
// What to look for: each rank prints a different device and different example indices; the
// sum of the ranks is the same everywhere. The ranks share no memory: the sum came through
// the network (Gloo, TCP) or NVLink/PCIe (NCCL).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
import brrr;

#include "examples/ranks/common.hpp"

using namespace brrr;

int main() {
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = ranks::device_of_rank();

  data::DistributedSampler sampler(10, {.shuffle = false});
  std::string shard;
  for (auto i : sampler.indices()) shard += " " + std::to_string(i);
  std::printf("rank %d of %d, local rank %d of %d, device %s, examples%s\n", r, n, dist::local_rank(),
              dist::local_world_size(), dev.str().c_str(), shard.c_str());

  Tensor t = full({1}, r, {.device = dev});
  dist::all_reduce(t);  // every rank contributes its rank; every rank gets the sum
  double sum = t.to(Device::cpu()).item<float>();
  dist::barrier();
  if (r == 0)
    std::printf("RESULT: %d ranks (%s), sum of the ranks %.0f (expected %d)\n", n, dev.is_cuda() ? "NCCL" : "Gloo", sum,
                n * (n - 1) / 2);
  dist::destroy_process_group();
  return ranks::verdict(sum == n * (n - 1) / 2, "the all_reduce of the ranks is not n (n - 1) / 2");
}
