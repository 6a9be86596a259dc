// brrr.dist on CUDA tensors through NCCL, world size 1 (the single GPU): every collective and
// dtype against the hand-computed results of tests/dist/collective_cases.hpp, the ordering
// of the communication stream after the current stream, device-side Work::wait(), and no host
// sync in any of it. Its own executable (test_gpu_dist): it needs libnccl and libgloo at run
// time, which the other GPU suites do not.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/dist/collective_cases.hpp"

using namespace brrr;

namespace {
// A world of one (no RANK/WORLD_SIZE set): NCCL for CUDA tensors, Gloo for CPU ones.
void ensure_world() {
  if (!dist::is_initialized()) dist::init_process_group({.timeout = std::chrono::seconds(60)});
}
Device gpu() { return Device::cuda(0); }
}  // namespace

TEST_CASE("nccl: all_reduce, every dtype and op") { ensure_world(); dist_cases::all_reduce_every_dtype_and_op(gpu()); }
TEST_CASE("nccl: broadcast and reduce") { ensure_world(); dist_cases::broadcast_and_reduce_from_every_root(gpu()); }
TEST_CASE("nccl: all_gather") { ensure_world(); dist_cases::all_gather_into_one_tensor_and_a_list(gpu()); }
TEST_CASE("nccl: reduce_scatter") { ensure_world(); dist_cases::reduce_scatter_sum_and_avg(gpu()); }
TEST_CASE("nccl: all_to_all") { ensure_world(); dist_cases::all_to_all_equal_and_uneven(gpu()); }
TEST_CASE("nccl: async Work") { ensure_world(); dist_cases::async_work_and_order(gpu()); }
TEST_CASE("nccl: groups and barrier") { ensure_world(); dist_cases::groups_and_barrier(gpu()); }
TEST_CASE("nccl: argument errors") { ensure_world(); dist_cases::argument_errors(gpu()); }

TEST_CASE("nccl: collectives make no host sync, and run after the work before them") {
  ensure_world();
  Device dev = gpu();
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
  Device dev = gpu();
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
