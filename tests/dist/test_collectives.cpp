// Every collective and dtype through Gloo on CPU tensors, with the world size brrr-run gives
// (CTest runs 1, 2 and 3 ranks). The bodies are shared with the NCCL suite (tests/gpu).
#include <doctest/doctest.h>

#include <algorithm>
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

using brrr::Device;

TEST_CASE("dist: the world from brrr-run's variables") {
  CHECK(brrr::dist::is_initialized());
  CHECK(brrr::dist::rank() == std::atoi(std::getenv("RANK")));
  CHECK(brrr::dist::world_size() == std::atoi(std::getenv("WORLD_SIZE")));
  CHECK(brrr::dist::local_rank() == std::atoi(std::getenv("LOCAL_RANK")));
  CHECK(brrr::dist::local_world_size() == std::atoi(std::getenv("LOCAL_WORLD_SIZE")));
  CHECK(brrr::dist::world_group().backend() == brrr::dist::Backend::gloo);
}
TEST_CASE("dist: all_reduce, every dtype and op") { dist_cases::all_reduce_every_dtype_and_op(Device::cpu()); }
TEST_CASE("dist: broadcast and reduce from every root") { dist_cases::broadcast_and_reduce_from_every_root(Device::cpu()); }
TEST_CASE("dist: all_gather into one tensor and into a list") { dist_cases::all_gather_into_one_tensor_and_a_list(Device::cpu()); }
TEST_CASE("dist: reduce_scatter") { dist_cases::reduce_scatter_sum_and_avg(Device::cpu()); }
TEST_CASE("dist: all_to_all, equal blocks and lists") { dist_cases::all_to_all_equal_and_uneven(Device::cpu()); }
TEST_CASE("dist: send/recv and isend/irecv") { dist_cases::point_to_point_ring(Device::cpu()); }
TEST_CASE("dist: async_op returns a Work") { dist_cases::async_work_and_order(Device::cpu()); }
TEST_CASE("dist: new_group and barrier") { dist_cases::groups_and_barrier(Device::cpu()); }
TEST_CASE("dist: bad arguments are errors on every rank, before any communication") { dist_cases::argument_errors(Device::cpu()); }
TEST_CASE("dist: CUDA tensors need NCCL") {
  if (!brrr::cuda::is_available()) return;  // nothing to try without a GPU
  brrr::Tensor t = brrr::zeros({2}, {.device = Device::cuda(0)});
  CHECK_BRRR_ERROR(brrr::dist::all_reduce(t), brrr::ErrorKind::device, "gloo", "CPU tensors only");
}
TEST_CASE("dist: NCCL is in a build with CUDA and NCCL, and only there; Gloo ranks work either way") {
#ifdef BRRR_TEST_EXPECT_NCCL
  CHECK(brrr::dist::has_nccl());
#else
  CHECK_FALSE(brrr::dist::has_nccl());
  CHECK_BRRR_ERROR(brrr::dist::new_group({}, {.backend = brrr::dist::Backend::nccl}), brrr::ErrorKind::device,
                   "new_group", "no NCCL");
#endif
  // The refused group took no group id: a Gloo group and its collective still match up.
  brrr::dist::ProcessGroup g = brrr::dist::new_group({}, {.backend = brrr::dist::Backend::gloo});
  brrr::Tensor t = brrr::ones({3});
  brrr::dist::all_reduce(t, brrr::dist::ReduceOp::sum, {.group = g});
  const double n = brrr::dist::world_size();
  CHECK(test::values(t) == std::vector<double>{n, n, n});
}
