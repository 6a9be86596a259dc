// Ranks 7 — tensor parallelism (Megatron-LM, Shoeybi et al. 2019). Instead of splitting the
// batch, split the layers: the MLP's first weight by output features (column parallel), the
// second by input features (row parallel). Each rank computes its slice of the hidden layer,
// and one all_reduce of the outputs (one more in backward, for the input's gradient) puts it
// together. Every rank holds 1/N of the MLP's weights.
//
//   brrr-run --nproc-per-node 2 build/release/examples/ranks/tensor_parallel_mlp
//
// What to look for: the output and the input gradient equal the unsharded MLP's (max
// difference at f32 rounding) while each rank stores 1/N of the weights.
#include <algorithm>
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
  // The hidden layer is split across the ranks: a multiple of their number.
  const std::int64_t embed = 256, hidden = 1024 - 1024 % n;

  manual_seed(0);
  nn::Sequential full{nn::Linear(embed, hidden), nn::GELU(), nn::Linear(hidden, embed)};
  manual_seed(0);
  nn::ParallelMLP tp(embed, hidden);  // the same seed: this rank's slices of the same weights
  full.to(dev);
  tp.to(dev);

  manual_seed(1);
  Tensor x = randn({8, embed}).to(dev);
  Tensor x_full = x.clone().requires_grad_(), x_tp = x.clone().requires_grad_();
  Tensor y_full = full(x_full), y_tp = tp(x_tp);
  y_full.sum().backward();
  y_tp.sum().backward();
  double dy = max(abs(y_full - y_tp)).to(Device::cpu()).item<float>();
  double dx = max(abs(x_full.grad() - x_tp.grad())).to(Device::cpu()).item<float>();
  double worst = ranks::max_over_ranks(std::max(dy, dx));
  std::printf("rank %d: fc.weight %s, proj.weight %s\n", r, to_string(tp.named_parameters()[0].second.shape()).c_str(),
              to_string(tp.named_parameters()[2].second.shape()).c_str());
  dist::barrier();
  if (r == 0)
    std::printf("RESULT: tensor-parallel MLP %lld-%lld-%lld over %d ranks: max |difference| to the unsharded MLP %.2g "
                "(output and input gradient), %lld of %lld parameters per rank\n",
                static_cast<long long>(embed), static_cast<long long>(hidden), static_cast<long long>(embed), n, worst,
                static_cast<long long>(tp.num_parameters()), static_cast<long long>(full.num_parameters()));
  dist::destroy_process_group();
  return ranks::verdict(worst <= 1e-4, "the tensor-parallel MLP differs from the unsharded one by more than f32 rounding (1e-4)");
}
