// DDP, ZeRO-1, tensor parallelism and the DistributedSampler through Gloo on CPU tensors,
// with the world size brrr-run gives (CTest runs 1, 2 and 3 ranks). The bodies are shared
// with the GPU suite (tests/gpu/test_dist_nccl.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>
import brrr;

#include "tests/tensor/helpers.hpp"
#include "tests/dist/parallel_cases.hpp"

using brrr::Device;
namespace pc = parallel_cases;

TEST_CASE("ddp: N ranks with batch B/N == one process with batch B after 20 steps (MLP, one bucket)") {
  pc::ddp_equals_one_big_batch(Device::cpu(), false, 25);
}
TEST_CASE("ddp: the same with a bucket per parameter or two (MLP)") {
  pc::ddp_equals_one_big_batch(Device::cpu(), false, 400.0 / (1 << 20));
}
TEST_CASE("ddp: the same for a small CNN") { pc::ddp_equals_one_big_batch(Device::cpu(), true, 25); }
TEST_CASE("ddp: buckets in reverse order, gradients are views of them") { pc::ddp_buckets_and_views(Device::cpu()); }
TEST_CASE("ddp: no_sync over k micro-batches == one batch k times larger") { pc::no_sync_accumulation(Device::cpu()); }
TEST_CASE("ddp: unused parameters are an error naming them, or zeros with find_unused_parameters") {
  pc::unused_parameters(Device::cpu());
}
TEST_CASE("zero-1 over AdamW == AdamW, with 1/N of its state") { pc::zero_equals_plain(Device::cpu(), false); }
TEST_CASE("zero-1 over SGD == SGD") { pc::zero_equals_plain(Device::cpu(), true); }
TEST_CASE("zero-1 state_dict resumes exactly (AdamW, SGD)") {
  pc::zero_resumes_exactly(Device::cpu(), false);
  pc::zero_resumes_exactly(Device::cpu(), true);
}
TEST_CASE("tensor parallel layers == the unsharded layers") { pc::tensor_parallel_equals_unsharded(Device::cpu()); }

TEST_CASE("DistributedSampler: disjoint shards covering the dataset, reshuffled per epoch") {
  using brrr::data::DistributedSampler;
  for (int replicas : {1, 2, 3, 4})
    for (bool drop_last : {false, true}) {
      CAPTURE(replicas);
      CAPTURE(drop_last);
      const std::int64_t n = 10;
      std::vector<std::int64_t> all;
      std::vector<std::vector<std::int64_t>> epoch0(static_cast<std::size_t>(replicas));
      for (int r = 0; r < replicas; ++r) {
        DistributedSampler s(n, {.num_replicas = replicas, .rank = r, .seed = 5, .drop_last = drop_last});
        auto idx = s.indices();
        CHECK(static_cast<std::int64_t>(idx.size()) == s.num_samples());
        CHECK(s.num_samples() == (drop_last ? n / replicas : (n + replicas - 1) / replicas));
        epoch0[static_cast<std::size_t>(r)] = idx;
        all.insert(all.end(), idx.begin(), idx.end());
        s.set_epoch(1);
        CHECK(s.indices() != idx);  // a new order
      }
      std::set<std::int64_t> distinct(all.begin(), all.end());
      if (drop_last) {
        CHECK(distinct.size() == all.size());  // disjoint
      } else {
        CHECK(distinct.size() == static_cast<std::size_t>(n));  // everything, the padding repeats
        CHECK(static_cast<std::int64_t>(all.size()) == ((n + replicas - 1) / replicas) * replicas);
      }
      for (auto i : all) CHECK((i >= 0 && i < n));
    }
  DistributedSampler plain(5, {.num_replicas = 2, .rank = 1, .shuffle = false});
  CHECK(plain.indices() == std::vector<std::int64_t>{1, 3, 0});  // 0..4 padded with 0, then every 2nd from 1
  DistributedSampler from_world(7);  // rank and size from the process group
  CHECK(from_world.num_samples() == (7 + brrr::dist::world_size() - 1) / brrr::dist::world_size());
  CHECK_BRRR_ERROR(DistributedSampler(4, {.num_replicas = 2, .rank = 2}), brrr::ErrorKind::value, "rank 2", "[0, 2)");
}
