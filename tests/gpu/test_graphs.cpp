// CUDA graphs (issue 20): a training step captured once and replayed equals the same eager
// steps bit for bit from the same seed (an MLP with dropout and SGD momentum, a small CNN with
// Adam, an AdamW step whose learning rate a scheduler changes between replays); random draws
// under capture give fresh numbers per replay, the eager ones; a host sync inside a capture
// is an Error naming it and leaves everything usable; an eager block freed during a capture
// stays the graph's when its neighbours are freed; the allocator's statistics stay flat
// over 10 000 replays; a replay on another stream after an event wait sees the inputs written
// before the event; work on a second stream joined by events inside a capture; shared pools,
// reset and the API's errors. Without a CUDA device the suite exits 77 (skipped).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

#include "tests/tensor/helpers.hpp"

using namespace brrr;
using namespace test;

namespace {

using test::gpu;

// Bitwise equality of two tensors' values (f32 or f64), read on the current stream.
template <class T> bool same_bits(const Tensor& a, const Tensor& b) {
  std::vector<T> x = a.to_host<T>(), y = b.to_host<T>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// `n` batches (inputs [b, features], f32; labels [b] i64 in [0, classes)), on the GPU, drawn on
// the CPU generator so that both runs of a comparison see the same data.
struct Batches {
  std::vector<Tensor> x, y;
};
Batches make_batches(int n, Shape input_shape, std::int64_t classes, std::uint64_t seed) {
  manual_seed(seed);
  Batches b;
  for (int i = 0; i < n; ++i) {
    b.x.push_back(randn(input_shape).to(gpu()));
    b.y.push_back(randint(0, classes, {input_shape[0]}).to(gpu()));
  }
  cuda::synchronize();
  return b;
}

nn::Module make_mlp(std::uint64_t seed) {
  manual_seed(seed);
  nn::Module m = nn::Sequential{nn::Linear(32, 64), nn::ReLU(), nn::Dropout(0.3), nn::Linear(64, 10)};
  m.to(gpu());
  m.train();
  return m;
}

nn::Module make_cnn(std::uint64_t seed) {
  manual_seed(seed);
  nn::Module m = nn::Sequential{nn::Conv2d(1, 4, 3, {.padding = {1, 1}}), nn::ReLU(), nn::MaxPool2d(2),
                                nn::Dropout2d(0.25), nn::Flatten(), nn::Linear(4 * 4 * 4, 10)};
  m.to(gpu());
  m.train();
  return m;
}

// One run of `steps` training steps over `data`: eager, or `warmup` eager steps and then the
// rest replayed from one capture (GraphedStep with no warm-up of its own, so that every step
// sees its own batch). `after_step` runs after each step (a scheduler). Returns the loss of
// every step and the final parameters, cloned.
struct Run {
  std::vector<Tensor> losses;
  std::vector<Tensor> params;
  std::int64_t step_count = 0;
  double last_lr = 0;
};
Run train(const nn::Module& model, optim::Optimizer& opt, const Batches& data, bool graphed, int warmup = 3,
          const std::function<void()>& after_step = {}) {
  const int steps = static_cast<int>(data.x.size());
  Tensor x = zeros(data.x[0].shape(), {.device = gpu()});
  Tensor y = zeros(data.y[0].shape(), {.dtype = DType::i64, .device = gpu()});
  auto step = [&]() -> std::vector<Tensor> {
    opt.zero_grad();
    Tensor loss = cross_entropy(model(x), y);
    loss.backward();
    opt.step();
    return {loss};
  };
  Run run;
  std::unique_ptr<cuda::GraphedStep> g;
  for (int i = 0; i < steps; ++i) {
    x.copy_(data.x[static_cast<std::size_t>(i)]);
    y.copy_(data.y[static_cast<std::size_t>(i)]);
    Tensor loss;
    if (graphed && i >= warmup) {
      if (!g) g = std::make_unique<cuda::GraphedStep>(gpu(), step, cuda::GraphedStepOptions{.warmup = 0});
      loss = (*g)()[0];
    } else {
      loss = step()[0];
    }
    run.losses.push_back(loss.clone());
    if (after_step) after_step();
  }
  for (const Tensor& p : model.parameters()) run.params.push_back(p.detach().clone());
  cuda::synchronize();
  run.step_count = opt.step_count();
  run.last_lr = opt.lr();
  return run;
}

void check_same(const Run& eager, const Run& graphed) {
  REQUIRE(eager.losses.size() == graphed.losses.size());
  for (std::size_t i = 0; i < eager.losses.size(); ++i) {
    INFO("step ", i, ": eager loss ", eager.losses[i].item<float>(), ", graphed ", graphed.losses[i].item<float>());
    CHECK(same_bits<float>(eager.losses[i], graphed.losses[i]));
  }
  REQUIRE(eager.params.size() == graphed.params.size());
  for (std::size_t k = 0; k < eager.params.size(); ++k) {
    INFO("parameter ", k, " ", describe(eager.params[k]));
    CHECK(same_bits<float>(eager.params[k], graphed.params[k]));
  }
  CHECK(eager.step_count == graphed.step_count);
  CHECK(eager.last_lr == graphed.last_lr);
}

}  // namespace

TEST_CASE("graphed MLP with dropout and SGD momentum equals eager bit for bit over 20 steps") {
  Batches data = make_batches(20, {16, 32}, 10, 11);
  Run eager, graphed;
  {
    nn::Module m = make_mlp(5);
    optim::SGD opt(m.parameters(), {.lr = 0.05, .momentum = 0.9});
    manual_seed(99);  // the dropout masks' generator state, the same for both runs
    eager = train(m, opt, data, false);
  }
  {
    nn::Module m = make_mlp(5);
    optim::SGD opt(m.parameters(), {.lr = 0.05, .momentum = 0.9});
    manual_seed(99);
    graphed = train(m, opt, data, true);
  }
  check_same(eager, graphed);
  // The losses moved (dropout draws differ per step and the model trains).
  CHECK_FALSE(same_bits<float>(eager.losses[5], eager.losses[6]));
}

TEST_CASE("graphed CNN (conv, max pool, dropout2d) with Adam equals eager bit for bit over 20 steps") {
  Batches data = make_batches(20, {8, 1, 8, 8}, 10, 12);
  Run eager, graphed;
  {
    nn::Module m = make_cnn(6);
    optim::Adam opt(m.parameters(), {.lr = 1e-3});
    manual_seed(98);
    eager = train(m, opt, data, false);
  }
  {
    nn::Module m = make_cnn(6);
    optim::Adam opt(m.parameters(), {.lr = 1e-3});
    manual_seed(98);
    graphed = train(m, opt, data, true);
  }
  check_same(eager, graphed);
}

TEST_CASE("a scheduler changes the captured AdamW step's learning rate without re-capture, bit for bit") {
  Batches data = make_batches(20, {16, 32}, 10, 13);
  Run eager, graphed;
  {
    nn::Module m = make_mlp(7);
    optim::AdamW opt(m.parameters(), {.lr = 1e-2, .weight_decay = 0.01});
    optim::StepLR sched(opt, 4, 0.5);
    manual_seed(97);
    eager = train(m, opt, data, false, 3, [&] { sched.step(); });
  }
  {
    nn::Module m = make_mlp(7);
    optim::AdamW opt(m.parameters(), {.lr = 1e-2, .weight_decay = 0.01});
    optim::StepLR sched(opt, 4, 0.5);
    manual_seed(97);
    graphed = train(m, opt, data, true, 3, [&] { sched.step(); });
  }
  CHECK(eager.last_lr == doctest::Approx(1e-2 * 0.5 * 0.5 * 0.5 * 0.5 * 0.5));
  CHECK(graphed.step_count == 20);
  check_same(eager, graphed);
}

TEST_CASE("random draws under capture: fresh numbers per replay, the ones eager code draws") {
  Tensor u, n, k, d;
  cuda::Graph g;
  g.capture([&] {
    u = rand({1000}, {.device = gpu()});
    n = randn({333}, {.device = gpu()});
    k = randint(-5, 50, {77}, {.device = gpu()});
    d = rand({129}, {.dtype = DType::f64, .device = gpu()});
  });
  manual_seed(1234);
  std::vector<std::vector<Tensor>> eager;
  for (int r = 0; r < 3; ++r)
    eager.push_back({rand({1000}, {.device = gpu()}), randn({333}, {.device = gpu()}),
                     randint(-5, 50, {77}, {.device = gpu()}), rand({129}, {.dtype = DType::f64, .device = gpu()})});
  Tensor eager_next = rand({10}, {.device = gpu()});
  manual_seed(1234);
  for (int r = 0; r < 3; ++r) {
    g.replay();
    INFO("replay ", r);
    CHECK(same_bits<float>(u, eager[static_cast<std::size_t>(r)][0]));
    CHECK(same_bits<float>(n, eager[static_cast<std::size_t>(r)][1]));
    CHECK(k.to_host<std::int64_t>() == eager[static_cast<std::size_t>(r)][2].to_host<std::int64_t>());
    CHECK(same_bits<double>(d, eager[static_cast<std::size_t>(r)][3]));
  }
  // The replays advanced the generator as the eager draws did.
  CHECK(same_bits<float>(rand({10}, {.device = gpu()}), eager_next));
}

TEST_CASE("attention dropout under capture: fresh masks per replay, the eager sequence's, backward too") {
  // The fused kernels read (seed, offset) from the graph's replayed state (capture_random_words),
  // interleaved with ordinary draws that must keep their own words. f32: the SIMT kernels;
  // bf16: the tensor-core ones (ops/cuda/attention_mma.cu).
  for (DType dt : {DType::f32, DType::bf16}) {
    INFO(std::string(to_string(dt)));
    manual_seed(99);
    Tensor q = randn({2, 3, 40, 32}, {.device = gpu()}).to(dt).requires_grad_();
    Tensor k = randn({2, 3, 56, 32}, {.device = gpu()}).to(dt).requires_grad_();
    Tensor v = randn({2, 3, 56, 32}, {.device = gpu()}).to(dt).requires_grad_();
    Tensor r = randn({2, 3, 40, 32}, {.device = gpu()}).to(dt);
    const SdpaOptions o{.dropout_p = 0.2, .is_causal = true};
    auto step = [&] {
      Tensor before = rand({50}, {.device = gpu()});
      Tensor y = scaled_dot_product_attention(q, k, v, o);
      std::vector<Tensor> g = autograd::grad({sum(mul(y, r))}, {q, k, v});
      Tensor after = rand({50}, {.device = gpu()});
      return std::vector<Tensor>{before, y.detach().to(DType::f32), g[0].to(DType::f32), g[1].to(DType::f32),
                                 g[2].to(DType::f32), after};
    };
    std::vector<Tensor> captured;
    cuda::Graph graph;
    graph.capture([&] { captured = step(); });
    manual_seed(4321);
    std::vector<std::vector<Tensor>> eager;
    for (int i = 0; i < 3; ++i) {
      std::vector<Tensor> e = step();
      for (Tensor& t : e) t = t.clone();
      eager.push_back(e);
    }
    Tensor eager_next = rand({10}, {.device = gpu()});
    CHECK_FALSE(same_bits<float>(eager[0][1], eager[1][1]));  // fresh masks per step
    manual_seed(4321);
    for (int i = 0; i < 3; ++i) {
      graph.replay();
      INFO("replay ", i);
      for (std::size_t j = 0; j < captured.size(); ++j) {
        INFO("output ", j);
        CHECK(same_bits<float>(captured[j], eager[static_cast<std::size_t>(i)][j]));
      }
    }
    CHECK(same_bits<float>(rand({10}, {.device = gpu()}), eager_next));
  }
}

TEST_CASE("an eager block freed during a capture stays the graph's when its neighbours are freed after it") {
  // 64 blocks of 512 bytes in a row; pick one whose neighbours on both sides are adjacent.
  std::vector<Tensor> row;
  for (int i = 0; i < 64; ++i) row.push_back(full({128}, static_cast<double>(i), {.device = gpu()}));
  std::size_t mid = 0;
  for (std::size_t i = 1; i + 1 < row.size() && mid == 0; ++i) {
    auto* p = static_cast<char*>(row[i].data_ptr());
    if (static_cast<char*>(row[i - 1].data_ptr()) + 512 == p && p + 512 == static_cast<char*>(row[i + 1].data_ptr()))
      mid = i;
  }
  REQUIRE_MESSAGE(mid != 0, "no three adjacent 512-byte blocks among 64 fresh ones");
  const char* held = static_cast<const char*>(row[mid].data_ptr());
  const float value = static_cast<float>(mid);
  Tensor y;
  cuda::Graph g;
  g.capture([&] {
    y = mul(row[mid], 2.0);
    row[mid] = Tensor();  // freed during the capture: the graph still reads it at every replay
  });
  row.clear();  // its neighbours freed after the capture: they must not absorb it
  std::vector<Tensor> fresh;
  bool overlap = false;
  for (int i = 0; i < 5000; ++i) {
    fresh.push_back(full({128}, 7.0, {.device = gpu()}));
    auto* p = static_cast<const char*>(fresh.back().data_ptr());
    overlap = overlap || (p < held + 512 && held < p + 512);
  }
  CHECK_FALSE(overlap);
  g.replay();
  std::vector<float> got = y.to_host<float>();
  bool all = true;
  for (float v : got) all = all && v == 2.0f * value;
  CHECK(all);
}

TEST_CASE("a host sync inside a capture is Error(stream) naming it; the capture is discarded") {
  Tensor x = randn({64}, {.device = gpu()});
  cuda::Graph g;
  CHECK_BRRR_ERROR(g.capture([&] { (void)mul(x, 2.0).sum().item<float>(); }), ErrorKind::stream, "Tensor::item",
                   "CUDA graph capture");
  CHECK_FALSE(g.captured());
  CHECK_FALSE(cuda::is_capturing());
  CHECK_BRRR_ERROR(g.capture([&] { (void)mul(x, 2.0).to_host<float>(); }), ErrorKind::stream, "Tensor::to_host");
  CHECK_BRRR_ERROR(g.capture([&] { cuda::synchronize(); }), ErrorKind::stream, "cuda::synchronize");
  CHECK_BRRR_ERROR(g.capture([&] { cuda::current_stream(gpu()).synchronize(); }), ErrorKind::stream,
                   "Stream::synchronize");
  {  // the RAII form discards the capture when an exception leaves it
    bool thrown = false;
    try {
      cuda::GraphCapture capture(g);
      (void)x.sum().item<float>();
      capture.end();
    } catch (const Error& e) {
      thrown = true;
      CHECK(std::string(e.what()).find("Tensor::item") != std::string::npos);
    }
    CHECK(thrown);
    CHECK_FALSE(g.captured());
  }
  // Everything still works: eager work, syncs, and a capture of the same graph.
  CHECK(mul(x, 2.0).sum().item<float>() == doctest::Approx(2.0 * x.sum().item<float>()));
  Tensor y;
  g.capture([&] { y = mul(x, 3.0); });
  g.replay();
  CHECK(same_bits<float>(y, mul(x, 3.0)));
}

TEST_CASE("allocator statistics stay flat over 10 000 replays of a training step") {
  Batches data = make_batches(1, {256, 32}, 10, 14);
  nn::Module m = make_mlp(8);
  optim::SGD opt(m.parameters(), {.lr = 0.01, .momentum = 0.9});
  Tensor x = data.x[0].clone(), y = data.y[0].clone();
  auto before = cuda::memory_stats(gpu());
  cuda::GraphedStep step(gpu(), [&]() -> std::vector<Tensor> {
    opt.zero_grad();
    Tensor loss = cross_entropy(m(x), y);
    loss.backward();
    opt.step();
    return {loss};
  });
  auto captured = cuda::memory_stats(gpu());
  MESSAGE("cudaMalloc calls during the capture: ", captured.num_capture_cuda_malloc - before.num_capture_cuda_malloc,
          " (", captured.num_cuda_malloc - before.num_cuda_malloc, " since before the warm-up)");
  CHECK(step.graph().num_nodes() > 10);
  step();
  cuda::synchronize();
  auto first = cuda::memory_stats(gpu());
  const std::uint64_t syncs = cuda::sync_count();
  {
    cuda::SyncPolicyGuard no_syncs(cuda::SyncPolicy::error);
    for (int i = 0; i < 10000; ++i) step();
  }
  CHECK(cuda::sync_count() == syncs);
  cuda::synchronize();
  auto last = cuda::memory_stats(gpu());
  CHECK(last.allocated_bytes == first.allocated_bytes);
  CHECK(last.reserved_bytes == first.reserved_bytes);
  CHECK(last.num_cuda_malloc == first.num_cuda_malloc);
  CHECK(last.num_allocs == first.num_allocs);
  CHECK(last.peak_allocated_bytes == first.peak_allocated_bytes);
  CHECK(opt.step_count() == 3 + 1 + 10000);
  CHECK(std::isfinite(step.outputs()[0].item<float>()));
}

TEST_CASE("a replay on another stream after an event wait sees the inputs written before the event") {
  Tensor x = zeros({1 << 16}, {.device = gpu()});
  Tensor y;
  cuda::Graph g;
  g.capture([&] { y = add(mul(x, 2.0), 1.0); });
  cuda::Stream a = cuda::current_stream(gpu());
  cuda::Stream b = cuda::Stream::create(gpu());
  Tensor src = arange(0.0, 65536.0, 1.0, {.dtype = DType::f32, .device = gpu()});
  cuda::synchronize();
  cuda::Event written;
  {
    gpu_test::StreamGate gate(a.handle());  // a holds the copy back until the replay is enqueued
    x.copy_(src);                            // on a, behind the gate
    written.record(a);
    {
      cuda::StreamGuard on_b(b);
      b.wait(written);
      g.replay();  // on b, after the copy
    }
    gate.open();
    CHECK_FALSE(gate.timed_out());
  }
  cuda::StreamGuard on_b(b);
  std::vector<float> got = y.to_host<float>();
  bool all = true;
  for (std::size_t i = 0; i < got.size(); ++i) all = all && got[i] == 2.0f * static_cast<float>(i) + 1.0f;
  CHECK(all);
}

TEST_CASE("work on a second stream joined by events inside a capture") {
  Tensor x = randn({4096}, {.device = gpu()});
  Tensor u, v;
  cuda::Stream origin = cuda::current_stream(gpu());
  cuda::Stream side = cuda::Stream::create(gpu());
  cuda::Graph g;
  g.capture([&] {
    side.wait_stream(origin);  // side joins the capture
    {
      cuda::StreamGuard on_side(side);
      u = mul(x, 3.0);
    }
    origin.wait_stream(side);  // and is joined back before the end
    v = add(u, x);
  });
  for (int r = 0; r < 3; ++r) {
    x.copy_(randn({4096}, {.device = gpu()}));
    g.replay();
    CHECK(same_bits<float>(v, add(mul(x, 3.0), x)));
  }
  // A side stream left unjoined invalidates the capture: Error(stream), nothing held.
  cuda::Graph bad;
  CHECK_BRRR_ERROR(bad.capture([&] {
    side.wait_stream(origin);
    cuda::StreamGuard on_side(side);
    u = mul(x, 5.0);
  }),
                   ErrorKind::stream, "capture_end");
  CHECK_FALSE(bad.captured());
  CHECK(same_bits<float>(mul(x, 2.0), add(x, x)));  // eager work still runs
}

TEST_CASE("graphs sharing one pool, reset and capture again, and the API's errors") {
  cuda::MemPool pool(gpu());
  Tensor x = randn({1000}, {.device = gpu()});
  Tensor y1, y2;
  cuda::Graph g1(gpu(), pool), g2(gpu(), pool);
  g1.capture([&] { y1 = exp(mul(x, 0.5)); });
  g2.capture([&] { y2 = tanh(add(x, 1.0)); });
  for (int r = 0; r < 3; ++r) {
    x.copy_(randn({1000}, {.device = gpu()}));
    g1.replay();
    g2.replay();
    CHECK(same_bits<float>(y1, exp(mul(x, 0.5))));
    CHECK(same_bits<float>(y2, tanh(add(x, 1.0))));
  }
  CHECK(g1.num_nodes() >= 2);
  CHECK_BRRR_ERROR(g1.capture_begin(), ErrorKind::stream, "reset()");
  g1.reset();
  CHECK_FALSE(g1.captured());
  CHECK(g1.num_nodes() == 0);
  CHECK_BRRR_ERROR(g1.replay(), ErrorKind::value, "nothing has been captured");
  g1.capture([&] { y1 = mul(x, 4.0); });
  g1.replay();
  CHECK(same_bits<float>(y1, mul(x, 4.0)));

  cuda::Graph g3;
  g3.capture_begin();
  Tensor z = mul(x, 1.5);
  cuda::Graph g4;
  CHECK_BRRR_ERROR(g4.capture_begin(), ErrorKind::stream, "already capturing");
  CHECK(cuda::is_capturing());
  g3.capture_end();
  CHECK_FALSE(cuda::is_capturing());
  CHECK_BRRR_ERROR(g3.capture_end(), ErrorKind::stream, "no capture");
  g3.replay();
  CHECK(same_bits<float>(z, mul(x, 1.5)));

  // An optimizer without state cannot be captured (every replay would zero the state).
  Tensor w = randn({8}, {.device = gpu()});
  w.requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  w.set_grad(ones({8}, {.device = gpu()}));
  cuda::Graph g5;
  CHECK_BRRR_ERROR(g5.capture([&] { opt.step(); }), ErrorKind::stream, "SGD.step", "warm-up");
  CHECK(opt.step_count() == 0);
}
