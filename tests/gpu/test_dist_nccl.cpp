// brrr.dist on CUDA tensors through NCCL, world size 1 (the single GPU): every collective and
// dtype against the hand-computed results of tests/dist/collective_cases.hpp, the ordering
// of the communication stream after the current stream, device-side Work::wait(), and no host
// sync in any of it; DDP, ZeRO-1 and the tensor-parallel layers on one rank, and a DDP step
// under SyncPolicy::error. Its own executable (test_gpu_dist): it needs libnccl and libgloo at run
// time, which the other GPU suites do not.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/dist/collective_cases.hpp"
#include "tests/dist/parallel_cases.hpp"

using namespace brrr;

namespace {
// A world of one (no RANK/WORLD_SIZE set): NCCL for CUDA tensors, Gloo for CPU ones.
void ensure_world() {
  if (!dist::is_initialized()) dist::init_process_group({.timeout = std::chrono::seconds(60)});
}
}  // namespace

TEST_CASE("nccl: all_reduce, every dtype and op") { ensure_world(); dist_cases::all_reduce_every_dtype_and_op(test::gpu()); }
TEST_CASE("nccl: broadcast and reduce") { ensure_world(); dist_cases::broadcast_and_reduce_from_every_root(test::gpu()); }
TEST_CASE("nccl: all_gather") { ensure_world(); dist_cases::all_gather_into_one_tensor_and_a_list(test::gpu()); }
TEST_CASE("nccl: reduce_scatter") { ensure_world(); dist_cases::reduce_scatter_sum_and_avg(test::gpu()); }
TEST_CASE("nccl: all_to_all") { ensure_world(); dist_cases::all_to_all_equal_and_uneven(test::gpu()); }
TEST_CASE("nccl: async Work") { ensure_world(); dist_cases::async_work_and_order(test::gpu()); }
TEST_CASE("nccl: groups and barrier") { ensure_world(); dist_cases::groups_and_barrier(test::gpu()); }
TEST_CASE("nccl: argument errors") { ensure_world(); dist_cases::argument_errors(test::gpu()); }

TEST_CASE("nccl: collectives make no host sync, and run after the work before them") {
  ensure_world();
  Device dev = test::gpu();
  Tensor a = randn({1 << 20}, {.device = dev});
  Tensor expect = (a * 3 + 1).to(Device::cpu());
  cuda::synchronize(dev);
  std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard strict(cuda::SyncPolicy::error);
    Tensor b = a * 3 + 1;  // enqueued on the current stream just before the collective
    dist::Work w = dist::all_reduce(b, dist::ReduceOp::sum, {.async_op = true});
    w.wait();  // device-side: the current stream waits for the communication stream
    Tensor c = b * 1;  // ordered after the all-reduce
    dist::all_reduce(c, dist::ReduceOp::max);
    Tensor parts = empty({dist::world_size(), 1 << 20}, {.device = dev});
    dist::all_gather(parts, c);
    Tensor shard = empty({1 << 20}, {.device = dev});
    dist::reduce_scatter(shard, parts.flatten(), dist::ReduceOp::avg);
    a = shard;
  }
  CHECK(cuda::sync_count() == syncs);
  CHECK(test::values(a) == test::values(expect));
}

TEST_CASE("nccl: a collective on another stream is ordered by that stream's current work") {
  ensure_world();
  Device dev = test::gpu();
  cuda::Stream side = cuda::Stream::create(dev);
  Tensor t;
  {
    cuda::StreamGuard g(side);
    t = full({4096}, 2.0, {.device = dev});
    dist::all_reduce(t, dist::ReduceOp::product);  // waits on `side`, not the default stream
    t = t + 1;
  }
  cuda::current_stream(dev).wait([&] { cuda::Event e(false); e.record(side); return e; }());
  CHECK(test::values(t) == std::vector<double>(4096, 3.0));
}

TEST_CASE("nccl: CPU tensors in the same world go through Gloo") {
  ensure_world();
  Tensor t = full({3}, 5.0);
  dist::all_reduce(t);
  CHECK(test::values(t) == std::vector<double>(3, 5.0));
}

TEST_CASE("nccl: DDP on one rank == plain training (MLP and CNN, one bucket and many)") {
  ensure_world();
  parallel_cases::ddp_equals_one_big_batch(test::gpu(), false, 25);
  parallel_cases::ddp_equals_one_big_batch(test::gpu(), false, 400.0 / (1 << 20));
  parallel_cases::ddp_equals_one_big_batch(test::gpu(), true, 25);
  parallel_cases::ddp_buckets_and_views(test::gpu());
  parallel_cases::no_sync_accumulation(test::gpu());
  parallel_cases::unused_parameters(test::gpu());
}

TEST_CASE("nccl: ZeRO-1 on one rank == AdamW / SGD") {
  ensure_world();
  parallel_cases::zero_equals_plain(test::gpu(), false);
  parallel_cases::zero_equals_plain(test::gpu(), true);
}

TEST_CASE("nccl: tensor-parallel layers on one rank == unsharded") {
  ensure_world();
  parallel_cases::tensor_parallel_equals_unsharded(test::gpu());
}

TEST_CASE("nccl: a DDP training step makes no host sync") {
  ensure_world();
  Device dev = test::gpu();
  manual_seed(3);
  nn::Sequential model = parallel_cases::cnn();
  model.to(dev);
  nn::DistributedDataParallel ddp(model, {.bucket_cap_mb = 400.0 / (1 << 20), .first_bucket_cap_mb = 400.0 / (1 << 20)});
  optim::SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor x = randn({16, 1, 6, 6}, {.device = dev});
  Tensor y = randint(0, 3, {16}, {.device = dev});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(ddp(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  Tensor first = step();  // warm-up: allocator blocks, cuBLAS handle, the communicator
  cuda::synchronize(dev);
  std::uint64_t syncs = cuda::sync_count();
  Tensor last;
  {
    cuda::SyncPolicyGuard strict(cuda::SyncPolicy::error);
    for (int i = 0; i < 5; ++i) last = step();
  }
  CHECK(cuda::sync_count() == syncs);
  CHECK(last.item<float>() < first.item<float>());  // it trains
}

TEST_CASE("nccl: ZeRO-1 optimizer memory on the device is the shard's") {
  ensure_world();
  Device dev = test::gpu();
  manual_seed(4);
  nn::Sequential model{nn::Linear(1024, 1024), nn::ReLU(), nn::Linear(1024, 1024)};
  model.to(dev);
  optim::ZeroRedundancyOptimizer zero(model.parameters(), {.lr = 1e-3});
  Tensor x = randn({8, 1024}, {.device = dev});
  model(x).sum().backward();
  cuda::synchronize(dev);
  auto before = cuda::memory_stats(dev).allocated_bytes;
  zero.step();  // creates the moments: 2 x shard x 4 bytes, shard = all of it with one rank
  cuda::synchronize(dev);
  auto grown = cuda::memory_stats(dev).allocated_bytes - before;
  CHECK(zero.optimizer_state_bytes() == 2 * static_cast<std::uint64_t>(zero.shard_numel()) * 4);
  CHECK(grown >= zero.optimizer_state_bytes());
  CHECK(grown < zero.optimizer_state_bytes() + (1u << 20));  // nothing else of that size
}
