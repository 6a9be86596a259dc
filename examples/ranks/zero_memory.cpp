// Ranks 6 — ZeRO-1: shard the optimizer state. Plain data parallelism keeps a full copy of
// AdamW's two moments on every rank (8 bytes per parameter in f32); ZeRO-1 gives each rank
// 1/N of them: it reduce-scatters the gradients, updates its shard, and all-gathers the new
// parameters (Rajbhandari et al. 2020).
//
//   brrr-run --nproc-per-node 4 build/release/examples/ranks/zero_memory
//
// What to look for: optimizer state per rank ~ 1/N of AdamW's, measured (device memory on a
// GPU: allocated bytes before and after the first step; the state tensors' bytes on the CPU),
// and the same parameters after the steps as with plain AdamW.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>
import brrr;

#include "examples/ranks/common.hpp"

using namespace brrr;

namespace {
nn::Sequential make() {
  return nn::Sequential{nn::Linear(512, 1024), nn::ReLU(), nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 512)};
}
// Bytes the first step allocated on a GPU (the optimizer state); the optimizer's own count on the CPU.
template <class Opt> std::uint64_t first_step_bytes(Device dev, Opt& opt, std::uint64_t cpu_count_after) {
  if (!dev.is_cuda()) {
    opt.step();
    return cpu_count_after;
  }
  cuda::synchronize(dev);
  auto before = cuda::memory_stats(dev).allocated_bytes;
  opt.step();
  cuda::synchronize(dev);
  return cuda::memory_stats(dev).allocated_bytes - before;
}
}  // namespace

int main() {
  dist::init_process_group();
  const int r = dist::rank(), n = dist::world_size();
  Device dev = ranks::device_of_rank();
  manual_seed(0);
  Tensor x = randn({32, 512}).to(dev);

  manual_seed(1);
  nn::Sequential plain = make();
  plain.to(dev);
  optim::AdamW adamw(plain.parameters(), {.lr = 1e-3});
  cross_entropy(plain(x), zeros({32}, {.dtype = DType::i64}).to(dev)).backward();
  std::uint64_t plain_bytes = first_step_bytes(dev, adamw, 2ull * plain.num_parameters() * 4);

  manual_seed(1);
  nn::Sequential sharded = make();
  sharded.to(dev);
  optim::ZeroRedundancyOptimizer zero(sharded.parameters(), {.lr = 1e-3});
  // Each rank sees its own batch: ZeRO averages the gradients itself (no DDP needed). Here all
  // ranks take the same one, so the result must equal plain AdamW's.
  cross_entropy(sharded(x), zeros({32}, {.dtype = DType::i64}).to(dev)).backward();
  zero.step();  // the state is made here; measured after it on the CPU
  std::uint64_t zero_bytes = dev.is_cuda() ? 0 : zero.optimizer_state_bytes();
  if (dev.is_cuda()) {
    // A second instance measured on the device from its first step.
    manual_seed(1);
    nn::Sequential again = make();
    again.to(dev);
    optim::ZeroRedundancyOptimizer z2(again.parameters(), {.lr = 1e-3});
    cross_entropy(again(x), zeros({32}, {.dtype = DType::i64}).to(dev)).backward();
    zero_bytes = first_step_bytes(dev, z2, 0);
  }
  double diff = 0;
  auto a = sharded.parameters(), b = plain.parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, max(abs(a[i] - b[i])).to(Device::cpu()).item<float>() + 0.0);
  std::uint64_t worst = static_cast<std::uint64_t>(ranks::max_over_ranks(static_cast<double>(zero_bytes)));
  if (r == 0)
    std::printf("RESULT: optimizer state per rank %s with ZeRO-1 vs %s with AdamW on %d ranks (%.3f of it, 1/N = %.3f), "
                "%lld parameters, max |param difference| %.2g\n",
                ranks::bytes_text(static_cast<double>(worst)).c_str(), ranks::bytes_text(static_cast<double>(plain_bytes)).c_str(),
                n, static_cast<double>(worst) / static_cast<double>(plain_bytes), 1.0 / n,
                static_cast<long long>(plain.num_parameters()), diff);
  dist::destroy_process_group();
  // On the CPU, the optimizers' own counts: 1/N of the state plus the padding of the flat
  // buffer to N equal blocks, within 10% of 1/N. (A GPU's first-step allocations also hold
  // the step's temporaries: printed, not checked.)
  const double share = static_cast<double>(worst) / static_cast<double>(plain_bytes);
  return ranks::verdict(diff <= 1e-5 && (dev.is_cuda() || share <= 1.1 / n),
                        "ZeRO-1's parameters differ from AdamW's, or its state is not about 1/N of AdamW's");
}
