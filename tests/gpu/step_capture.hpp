// A training step's outputs, eager and as the replays of one captured CUDA graph, shared by the
// GPU suites. Include after `import brrr;` and tests/tensor/helpers.hpp (test::values); needs
// <cstdint>, <functional> and <vector>.
#pragma once

namespace test {

/// Runs `step` eagerly under SyncPolicy::error (CHECKs that it made no host sync), then
/// captures it once in a CUDA graph and replays that `replays` times (CHECKs that every output
/// equals eager's bit for bit after each replay). Returns eager's outputs.
inline std::vector<brrr::Tensor> check_step_capture(const std::function<std::vector<brrr::Tensor>()>& step,
                                                     int replays) {
  using namespace brrr;
  cuda::synchronize();
  std::vector<Tensor> eager;
  const std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard policy(cuda::SyncPolicy::error);
    eager = step();
  }
  CHECK(cuda::sync_count() == syncs);
  std::vector<Tensor> captured;
  cuda::Graph graph;
  graph.capture([&] { captured = step(); });
  CHECK(graph.num_nodes() > 0);
  for (int replay = 0; replay < replays; ++replay) {
    graph.replay();
    INFO("replay ", replay);
    REQUIRE(captured.size() == eager.size());
    for (std::size_t i = 0; i < eager.size(); ++i) {
      INFO("output ", i);
      CHECK(values(captured[i]) == values(eager[i]));
    }
  }
  return eager;
}

}  // namespace test
