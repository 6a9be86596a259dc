// Ranks 5 — gradient accumulation with no_sync. A large batch that does not fit is split into
// k micro-batches; their gradients add up in grad() before one optimizer step. Under DDP every
// backward would average over the ranks; inside ddp.no_sync() it only accumulates locally, so
// the k micro-batches cost one round of all-reduces instead of k.
//
//   brrr-run --nproc-per-node 2 build/release/examples/ranks/grad_accumulation
//
// What to look for: the gradients equal those of one big batch (max |difference| at f32
// rounding), and the number of all-reduces per step drops from k x buckets to 1 x buckets.
#include <algorithm>
#include <chrono>
#include <cmath>
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
  const std::int64_t micro = 16, k = 4;

  manual_seed(0);
  nn::Sequential model{nn::Linear(32, 64), nn::GELU(), nn::Linear(64, 10)};
  model.to(dev);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.004, .first_bucket_cap_mb = 0.004});
  const std::size_t buckets = ddp.bucket_parameter_names().size();
  // The global batch: k micro-batches of n x micro examples; this rank takes its rows of each.
  manual_seed(1);
  Tensor x = randn({k * n * micro, 32}).to(dev);
  Tensor y = randint(0, 10, {k * n * micro}).to(dev);
  auto rows = [&](const Tensor& t, std::int64_t j) { return t.slice(0, (j * n + r) * micro, (j * n + r + 1) * micro); };

  // (fresh parameters: no gradients yet)
  for (std::int64_t j = 0; j < k; ++j) {
    auto loss = [&] { return cross_entropy(ddp(rows(x, j)), rows(y, j)) * (1.0 / k); };
    if (j + 1 < k) {
      auto no_sync = ddp.no_sync();  // local accumulation only
      loss().backward();
    } else {
      loss().backward();  // averages the accumulated sum over the ranks
    }
  }
  // The same gradients from one backward over the whole global batch, on one process.
  manual_seed(0);
  nn::Sequential reference{nn::Linear(32, 64), nn::GELU(), nn::Linear(64, 10)};
  reference.to(dev);
  cross_entropy(reference(x), y).backward();
  double worst = 0;
  auto got = model.parameters(), want = reference.parameters();
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, max(abs(got[i].grad() - want[i].grad())).to(Device::cpu()).item<float>() + 0.0);
  worst = ranks::max_over_ranks(worst);
  if (r == 0)
    std::printf("RESULT: %lld micro-batches per step with no_sync on %d ranks: max |grad - one big batch's| = %.2g, "
                "%zu all-reduces instead of %lld\n",
                static_cast<long long>(k), n, worst, buckets, static_cast<long long>(k) * static_cast<long long>(buckets));
  dist::destroy_process_group();
  return ranks::verdict(worst <= 1e-5, "no_sync's gradients differ from one big batch's by more than f32 rounding (1e-5)");
}
