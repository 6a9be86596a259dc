// Stream safety on the device: host reads wait for the stream that wrote the data (issue
// 14's scenario), and the stream check (cuda::set_stream_check) reports every hazard class
// while the correct patterns (event + wait, wait_stream, synchronize, record_stream, the
// DataLoader's prefetch, a training step) run clean and compute the same numbers.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/gpu_helpers.hpp"
import brrr;

using namespace brrr;
using gpu_test::StreamGate;

namespace {

Device gpu() { return Device::cuda(0); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool all_equal(const std::vector<float>& v, float value) {
  for (float x : v)
    if (x != value) return false;
  return !v.empty();
}

// Holds stream `s` at a gate until a helper thread opens it `ms` milliseconds from now: work
// enqueued on `s` meanwhile cannot run, so a host read that does not wait for `s` would see
// the data before it is written, deterministically.
struct Held {
  StreamGate gate;
  std::thread opener;
  Held(const cuda::Stream& s, int ms)
      : gate(s.handle()), opener([this, ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          gate.open();
        }) {}
  ~Held() { opener.join(); }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
};

// The message of the Error(stream) that `f` throws (a test failure if it throws nothing
// or another kind).
template <class F> std::string stream_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::stream);
    return e.what();
  }
  FAIL("expected Error(stream)");
  return "";
}

constexpr int hold_ms = 300;

}  // namespace

TEST_CASE("host reads wait for the stream that wrote the data, whatever the current stream (issue 14)") {
  Device dev = gpu();
  cuda::Stream s1 = cuda::Stream::create(dev), s2 = cuda::Stream::create(dev);
  const std::int64_t n = 1 << 20;
  Tensor big;
  {
    cuda::StreamGuard g1(s1);
    big = full({n}, 1.0, {.device = dev});  // written on s1
    Tensor warm = big.sum();
  }
  cuda::Event written;
  written.record(s1);
  s2.wait(written);  // the user's correct device-side ordering
  {
    // s2's pools get their blocks now (nothing allocates from the driver while s2 is held),
    // and a freed NaN block makes a read that comes too early visibly wrong.
    cuda::StreamGuard g2(s2);
    Tensor warm = (big.view({1024, 1024}).transpose(0, 1) * 2.0).sum();
    Tensor warm_slice = big.slice(0, 0, 3) * 5.0;
    Tensor poison = full({}, NAN, {.device = dev});
  }
  s2.synchronize();
  cuda::record_stream(big, s2);
  // The pinned allocator has a cached block for the small copies below: no cudaHostAlloc
  // while a stream is held.
  { Tensor warm_pinned = empty({8}, {.pinned = true}); }

  std::uint64_t c = 0;
  double ms = 0;
  auto timed = [&](auto&& read) {
    c = cuda::sync_count();
    auto t0 = std::chrono::steady_clock::now();
    read();
    ms = gpu_test::ms_since(t0);
  };

  SUBCASE("item after the guard: the sum computed on s2 (the issue's scenario)") {
    float v = 0;
    {
      Held held(s2, hold_ms);
      Tensor out;
      {
        cuda::StreamGuard g2(s2);
        out = big.sum();
      }
      timed([&] { v = out.item<float>(); });  // copies on the default stream
      CHECK_FALSE(held.gate.timed_out());
    }
    CHECK(v == static_cast<float>(n));
    CHECK(ms > 100);  // it waited for s2, which the gate held
    CHECK(cuda::sync_count() == c + 1);
  }

  SUBCASE("to_host, contiguous and transposed") {
    std::vector<float> a, b;
    {
      Held held(s2, hold_ms);
      Tensor y, t;
      {
        cuda::StreamGuard g2(s2);
        y = big * 3.0;
        t = (big.view({1024, 1024}) * 2.0).transpose(0, 1);
      }
      timed([&] { a = y.to_host<float>(); });
      CHECK(cuda::sync_count() == c + 1);
      b = t.to_host<float>();  // compacted on the default stream after it waited for s2
      CHECK(cuda::sync_count() == c + 2);
      CHECK_FALSE(held.gate.timed_out());
    }
    CHECK(ms > 100);
    CHECK(all_equal(a, 3.0f));
    CHECK(all_equal(b, 2.0f));
  }

  SUBCASE("printing and to(cpu)") {
    std::string printed;
    std::vector<float> h;
    {
      Held held(s2, hold_ms);
      Tensor y, z;
      {
        cuda::StreamGuard g2(s2);
        y = big.slice(0, 0, 3) * 5.0;
        z = big.slice(0, 0, 4) * 7.0;
      }
      timed([&] {
        std::ostringstream os;
        os << y;
        printed = os.str();
      });
      CHECK(cuda::sync_count() == c + 1);
      h = z.to(Device::cpu()).to_host<float>();
      CHECK_FALSE(held.gate.timed_out());
    }
    MESSAGE(printed);
    CHECK(ms > 100);
    CHECK(contains(printed, "5."));
    CHECK_FALSE(contains(printed, "nan"));
    CHECK(h == std::vector<float>(4, 7.0f));
  }

  SUBCASE("to(cpu, non_blocking): the copy waits on the device, the host read of the pinned result on the host") {
    std::vector<float> h;
    double enqueue_ms = 0;
    {
      Held held(s2, hold_ms);
      Tensor y;
      {
        cuda::StreamGuard g2(s2);
        y = big.slice(0, 0, 8) * 4.0;
      }
      Tensor pinned;
      timed([&] { pinned = y.to(Device::cpu(), {.non_blocking = true}); });
      enqueue_ms = ms;
      CHECK(pinned.is_pinned());
      CHECK(cuda::sync_count() == c);  // no sync to enqueue it
      timed([&] { h = pinned.to_host<float>(); });  // the host waits for the copy
      CHECK(cuda::sync_count() == c + 1);
      CHECK_FALSE(held.gate.timed_out());
    }
    CHECK(enqueue_ms < 50);
    CHECK(ms > 50);
    CHECK(h == std::vector<float>(8, 4.0f));
  }
}

TEST_CASE("host reads: a pinned result whose copy has completed costs no sync; one still in flight is a sync") {
  Device dev = gpu();
  cuda::Stream s = cuda::current_stream(dev);
  Tensor y = full({64}, 2.5, {.device = dev});
  Tensor pinned = y.to(Device::cpu(), {.non_blocking = true});
  s.synchronize();
  std::uint64_t c = cuda::sync_count();
  CHECK(pinned.to_host<float>() == std::vector<float>(64, 2.5f));
  CHECK(pinned.sum().item<float>() == 160.0f);  // a CPU op and a CPU item
  CHECK(cuda::sync_count() == c);

  Tensor late = empty({64}, {.pinned = true});  // allocated before the stream is held
  {
    StreamGate gate(s.handle());
    late.copy_(y, {.non_blocking = true});  // behind the gate
    {
      cuda::SyncPolicyGuard strict(cuda::SyncPolicy::error);
      try {
        (void)late.to_host<float>();
        FAIL("reading a pinned tensor under an unfinished copy must be a (refused) sync");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::sync);
        CHECK(contains(e.what(), "Tensor::to_host"));
      }
    }
    gate.open();
  }
  CHECK(late.to_host<float>() == std::vector<float>(64, 2.5f));
}

TEST_CASE("stream check: a read of another stream's unordered write throws Error(stream) before enqueueing") {
  Device dev = gpu();
  cuda::Stream s1 = cuda::Stream::create(dev);
  cuda::Stream def = cuda::current_stream(dev);
  cuda::StreamCheckGuard check(true);
  REQUIRE(cuda::stream_check_enabled());
  Tensor x = full({1024}, 1.0, {.device = dev});  // written on the default stream
  cuda::synchronize(dev);  // ... and finished; but the host sync came BEFORE the next write
  x.fill_(2.0);
  std::string msg;
  {
    cuda::StreamGuard g(s1);
    msg = stream_error([&] { Tensor y = x * 3.0; });
  }
  MESSAGE(msg);
  CHECK(contains(msg, "mul: stream #" + std::to_string(s1.id()) + " on cuda:0 reads a [1024] f32 tensor"));
  CHECK(contains(msg, "fill_ wrote on the default stream of cuda:0"));
  CHECK(contains(msg, "read-after-write"));
  CHECK(s1.query());  // refused before anything was enqueued on s1

  // The fix: an event after the write, waited on by s1.
  cuda::Event e;
  e.record(def);
  s1.wait(e);
  Tensor y;
  {
    cuda::StreamGuard g(s1);
    y = x * 3.0;
  }
  CHECK(all_equal(y.to_host<float>(), 6.0f));  // a host read: ordered by itself
  cuda::synchronize(dev);  // every free below is ordered
}

TEST_CASE("stream check: write-after-read and write-after-write races") {
  Device dev = gpu();
  cuda::Stream s1 = cuda::Stream::create(dev);
  cuda::Stream def = cuda::current_stream(dev);
  cuda::StreamCheckGuard check(true);

  SUBCASE("write-after-read: s1 is ordered after the write but not after the read") {
    Tensor x = full({256}, 1.0, {.device = dev});
    cuda::Event after_write;
    after_write.record(def);
    Tensor total = x.sum();  // the default stream reads x
    s1.wait(after_write);
    std::string msg;
    {
      cuda::StreamGuard g(s1);
      msg = stream_error([&] { x.fill_(5.0); });
    }
    MESSAGE(msg);
    CHECK(contains(msg, "fill_: stream #" + std::to_string(s1.id())));
    CHECK(contains(msg, "writes a [256] f32 tensor that sum read on the default stream"));
    CHECK(contains(msg, "write-after-read"));
    s1.wait_stream(def);  // the fix: after the read too
    {
      cuda::StreamGuard g(s1);
      x.fill_(5.0);
    }
    CHECK(total.item<float>() == 256.0f);
    def.wait_stream(s1);  // the default stream reads x next
    CHECK(x.sum().item<float>() == 1280.0f);
    cuda::synchronize(dev);  // every free at the end of the subcase is ordered
  }

  SUBCASE("write-after-write") {
    Tensor x = zeros({16, 4}, {.device = dev});
    std::string msg;
    {
      cuda::StreamGuard g(s1);
      msg = stream_error([&] { x.slice(0, 0, 8).fill_(1.0); });
    }
    MESSAGE(msg);
    CHECK(contains(msg, "fill_: stream #" + std::to_string(s1.id())));
    CHECK(contains(msg, "writes a [8, 4] f32 tensor that fill_ wrote on the default stream"));
    CHECK(contains(msg, "through a [16, 4] f32 view"));
    CHECK(contains(msg, "write-after-write"));
    cuda::synchronize(dev);
  }
}

TEST_CASE("stream check: cuBLAS, optimizer steps and copies are checked like kernels") {
  Device dev = gpu();
  cuda::Stream s1 = cuda::Stream::create(dev);
  cuda::Stream def = cuda::current_stream(dev);
  cuda::StreamCheckGuard check(true);

  SUBCASE("matmul reads an operand written on another stream") {
    manual_seed(1);
    Tensor a;
    {
      cuda::StreamGuard g(s1);
      a = randn({64, 32}, {.device = dev});
    }
    Tensor b = randn({32, 16}, {.device = dev});
    std::string msg = stream_error([&] { Tensor c = matmul(a, b); });
    MESSAGE(msg);
    CHECK(contains(msg, "matmul: the default stream of cuda:0 (#"));
    CHECK(contains(msg, "reads a [64, 32] f32 tensor that randn wrote on stream #" + std::to_string(s1.id())));
    def.wait_stream(s1);
    Tensor c = matmul(a, b);
    Tensor ref = matmul(a.to(Device::cpu()), b.to(Device::cpu()));
    CHECK(testing::allclose(c.to(Device::cpu()), ref, {.rtol = 1e-4, .atol = 1e-4}));
    cuda::synchronize(dev);
  }

  SUBCASE("an optimizer step on another stream than the backward pass") {
    manual_seed(2);
    nn::Linear fc(8, 4);
    fc.to(dev);
    Tensor x = randn({2, 8}, {.device = dev});
    fc(x).sum().backward();
    optim::SGD opt(fc.parameters(), {.lr = 0.1});
    std::string msg;
    {
      cuda::StreamGuard g(s1);
      msg = stream_error([&] { opt.step(); });
    }
    MESSAGE(msg);
    CHECK(contains(msg, "optimizer step: stream #" + std::to_string(s1.id())));
    s1.wait_stream(def);
    {
      cuda::StreamGuard g(s1);
      opt.step();
    }
    def.wait_stream(s1);  // the parameters are used on the default stream again
    Tensor y = fc(x);
    CHECK(std::isfinite(y.sum().item<float>()));
    cuda::synchronize(dev);
  }

  SUBCASE("an async host-to-device copy over data another stream still reads") {
    Tensor d = full({1024}, 1.0, {.device = dev});
    Tensor pinned = full({1024}, 3.0, {.pinned = true});
    s1.wait_stream(def);
    Tensor partial;
    {
      cuda::StreamGuard g(s1);
      partial = d.sum();  // s1 reads d
    }
    std::string msg = stream_error([&] { d.copy_(pinned, {.non_blocking = true}); });
    MESSAGE(msg);
    CHECK(contains(msg, "Tensor::copy_: the default stream of cuda:0 (#"));
    CHECK(contains(msg, "writes a [1024] f32 tensor that sum read on stream #" + std::to_string(s1.id())));
    CHECK(contains(msg, "write-after-read"));
    def.wait_stream(s1);
    d.copy_(pinned, {.non_blocking = true});
    CHECK(all_equal(d.to_host<float>(), 3.0f));
    CHECK(partial.item<float>() == 1024.0f);
    cuda::synchronize(dev);
  }
}

TEST_CASE("stream check: freeing memory another stream may still use, without record_stream") {
  Device dev = gpu();
  cuda::Stream s1 = cuda::Stream::create(dev);
  cuda::Stream def = cuda::current_stream(dev);
  cuda::StreamCheckGuard check(true);
  Tensor y;

  SUBCASE("reported by the next op") {
    Tensor x = full({1 << 16}, 1.0, {.device = dev});  // allocated and written on the default stream
    s1.wait_stream(def);
    {
      cuda::StreamGuard g(s1);
      y = x.sum();  // s1 reads x
    }
    x = Tensor();  // its block goes back to the default stream's pool while s1 may still read it
    std::string msg = stream_error([&] { Tensor z = zeros({4}, {.device = dev}); });
    MESSAGE(msg);
    CHECK(contains(msg, "[65536] f32 tensor (262144 bytes, allocated on the default stream of cuda:0"));
    CHECK(contains(msg, "stream #" + std::to_string(s1.id()) + " on cuda:0 may still read it (sum)"));
    CHECK(contains(msg, "record_stream"));
    Tensor z = zeros({4}, {.device = dev});  // reported once
  }

  SUBCASE("reported by the next sync") {
    Tensor x = full({256}, 1.0, {.device = dev});
    s1.wait_stream(def);
    {
      cuda::StreamGuard g(s1);
      y = x * 2.0;
    }
    x = Tensor();
    std::string msg = stream_error([&] { def.synchronize(); });
    CHECK(contains(msg, "was freed while"));
  }

  SUBCASE("record_stream, a wait of the owner or a host sync make it safe") {
    Tensor a = full({256}, 1.0, {.device = dev}), b = full({256}, 1.0, {.device = dev}),
           c = full({256}, 1.0, {.device = dev});
    s1.wait_stream(def);
    {
      cuda::StreamGuard g(s1);
      y = a + b + c;
    }
    cuda::record_stream(a, s1);
    a = Tensor();
    Tensor after_a = zeros({4}, {.device = dev});  // no report
    cuda::Event done;
    done.record(s1);
    def.wait(done);
    b = Tensor();
    Tensor after_b = zeros({4}, {.device = dev});
    s1.synchronize();
    c = Tensor();
    Tensor after_c = zeros({4}, {.device = dev});
    CHECK(all_equal(y.to_host<float>(), 3.0f));
  }
  cuda::synchronize(dev);
}

TEST_CASE("stream check: the correct patterns are never flagged and compute the right values") {
  Device dev = gpu();
  cuda::Stream def = cuda::current_stream(dev);
  cuda::Stream s1 = cuda::Stream::create(dev), s2 = cuda::Stream::create(dev);
  cuda::StreamCheckGuard check(true);

  Tensor x = full({1024}, 2.0, {.device = dev});  // default stream
  // event + wait
  cuda::Event e;
  e.record(def);
  s1.wait(e);
  Tensor y;
  {
    cuda::StreamGuard g(s1);
    y = x * 3.0;  // 6
  }
  // wait_stream
  s2.wait_stream(s1);
  Tensor z;
  {
    cuda::StreamGuard g(s2);
    z = y + 1.0;  // 7
  }
  // host reads of data written on other streams are ordered by themselves
  CHECK(all_equal(z.to_host<float>(), 7.0f));
  CHECK(z.sum().item<float>() == 7168.0f);  // the default stream waited for s2 in to_host
  // Stream::synchronize: what the host enqueues afterwards follows s2
  s2.synchronize();
  Tensor w = z * 2.0;  // 14, default stream
  // Event::synchronize
  {
    cuda::StreamGuard g(s1);
    y.fill_(5.0);  // after s2's read of y (z = y + 1): the host synchronized s2
  }
  cuda::Event filled;
  filled.record(s1);
  filled.synchronize();
  Tensor v = y + 0.5;  // 5.5
  // query() returning true is a host synchronisation too
  {
    cuda::StreamGuard g(s2);
    s2.wait_stream(def);  // z is rewritten after the default stream read it (w = z * 2)
    z.fill_(9.0);
  }
  cuda::Event refilled;
  refilled.record(s2);
  while (!refilled.query()) std::this_thread::yield();
  Tensor u = z - 1.0;  // 8
  // cuda::synchronize
  {
    cuda::StreamGuard g(s1);
    s1.wait_stream(def);
    x.fill_(4.0);
  }
  cuda::synchronize(dev);
  Tensor t = x * x;  // 16
  // record_stream: memory used on s1 dropped at once
  {
    Tensor tmp = full({1024}, 1.0, {.device = dev});
    s1.wait_stream(def);
    cuda::StreamGuard g(s1);
    y = y + tmp;  // 6 (a new y on s1)
    cuda::record_stream(tmp, s1);
  }
  def.wait_stream(s1);
  CHECK(all_equal(w.to_host<float>(), 14.0f));
  CHECK(all_equal(v.to_host<float>(), 5.5f));
  CHECK(all_equal(u.to_host<float>(), 8.0f));
  CHECK(all_equal(t.to_host<float>(), 16.0f));
  CHECK(all_equal(y.to_host<float>(), 6.0f));
  cuda::synchronize(dev);
}

namespace {

// Three SGD-momentum steps of a small MLP on `dev`, all on the current stream; the losses.
std::vector<float> train_steps(Device dev) {
  manual_seed(11);
  nn::Sequential mlp{nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4)};
  mlp.to(dev);
  optim::SGD opt(mlp.parameters(), {.lr = 0.05, .momentum = 0.9});
  Tensor x = randn({8, 16}).to(dev);
  Tensor target = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 0, 1, 2, 3}).to(dev);
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(mlp(x), target);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

}  // namespace

TEST_CASE("stream check: a training step runs clean, on the default stream and on another one, with the same numbers") {
  Device dev = gpu();
  std::vector<float> unchecked = train_steps(dev);
  cuda::synchronize(dev);
  std::vector<float> checked, on_s1;
  {
    cuda::StreamCheckGuard check(true);
    checked = train_steps(dev);
    cuda::Stream s1 = cuda::Stream::create(dev);
    {
      cuda::StreamGuard g(s1);  // everything, parameters included, made and used on s1
      on_s1 = train_steps(dev);
    }
    cuda::synchronize(dev);
  }
  CHECK(checked == unchecked);
  CHECK(on_s1 == unchecked);
  CHECK(unchecked.back() < unchecked.front());
}

TEST_CASE("stream check: the DataLoader's prefetch on its transfer stream runs clean") {
  Device dev = gpu();
  cuda::StreamCheckGuard check(true);
  const std::int64_t n = 100, width = 8;
  std::vector<float> pixels(static_cast<std::size_t>(n * width));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i;
    for (std::int64_t j = 0; j < width; ++j) pixels[static_cast<std::size_t>(i * width + j)] = static_cast<float>(i + j);
  }
  auto dataset = std::make_shared<data::TensorDataset>(std::vector<Tensor>{
      Tensor::from_vector(pixels, {n, width}), Tensor::from_vector(labels)});
  data::DataLoader loader(dataset, {.batch_size = 16, .shuffle = true, .seed = 3, .device = dev, .prefetch = 2});
  // Sum over all examples of (label * 1000 + sum of pixels): each example exactly once.
  double expected = 0;
  for (std::int64_t i = 0; i < n; ++i) expected += static_cast<double>(i) * 1000 + static_cast<double>(i * width + width * (width - 1) / 2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    Tensor total = zeros({}, {.dtype = DType::f64, .device = dev});
    std::int64_t batches = 0;
    for (const data::Batch& b : loader) {
      CHECK(b[0].device() == dev);
      Tensor per_example = sum(b[0].to(DType::f64), {1}) + b[1].to(DType::f64) * 1000.0;
      total = total + per_example.sum();
      ++batches;
    }
    CHECK(batches == 7);
    CHECK(total.item<double>() == expected);
  }
  // An epoch abandoned midway leaves a prefetched batch in flight; the next one starts clean.
  for (const data::Batch& b : loader) {
    (void)b;
    break;
  }
  std::int64_t again = 0;
  for (const data::Batch& b : loader) again += b[1].numel();
  CHECK(again == n);
  cuda::synchronize(dev);
}

TEST_CASE("copies between two GPUs are ordered on both sides (needs 2 devices)") {
  if (cuda::device_count() < 2) {
    MESSAGE("one CUDA device: nothing to check");
    return;
  }
  Device d0 = Device::cuda(0), d1 = Device::cuda(1);
  cuda::Stream side = cuda::Stream::create(d0);
  CHECK_THROWS_AS(side.wait_stream(cuda::current_stream(d1)), Error);  // one device only
  cuda::StreamCheckGuard check(true);
  Tensor x = zeros({1 << 20}, {.device = d0});
  cuda::current_stream(d0).synchronize();
  {
    Held held(side, hold_ms);
    side.wait_stream(cuda::current_stream(d0));
    {
      cuda::StreamGuard g(side);
      x.fill_(3.0);  // written on a side stream of cuda:0, held at the gate
    }
    Tensor y = x.to(d1);  // the peer copy waits for x's writer, on the device
    CHECK(all_equal(y.to_host<float>(), 3.0f));
    CHECK_FALSE(held.gate.timed_out());
  }
  cuda::synchronize(d0);
  cuda::synchronize(d1);
}

// Linear's weight and bias gradients run on a side stream during backward (backend::SideWork,
// ops/matmul.cpp): every later reader must wait for them. Here each kind of reader meets them
// under the stream check, which throws Error(stream) for an unordered access: the sum of a
// tied weight's two gradients inside the pass, a tensor hook and a post-accumulate hook on
// the current stream, an optimizer step after the pass, and a user stream ordered after the
// current one. The values match the CPU's.
TEST_CASE("stream check: weight gradients made on the side stream are ordered before every use") {
  Device dev = gpu();
  Tensor x_cpu = randn({256, 64}), x2_cpu = randn({256, 64}), w_cpu = randn({48, 64}), b_cpu = randn({48});
  struct Result {
    Tensor w_grad, b_grad, hook_sum, w_after_step, on_user_stream;
  };
  const auto run = [&](Device d) {
    Tensor x = x_cpu.to(d), x2 = x2_cpu.to(d);
    Tensor w = w_cpu.to(d).clone(), b = b_cpu.to(d).clone();  // fresh leaves on every run
    w.requires_grad_();
    b.requires_grad_();
    Result r;
    auto h1 = w.register_hook([](const Tensor& g) { return g * 2.0; });  // reads the summed gradient
    auto h2 = w.register_post_accumulate_grad_hook([&](const Tensor& p) { r.hook_sum = p.grad().sum(); });
    // w and b are used twice: their two gradients are summed inside the pass.
    Tensor loss = (linear(x, w, b) * linear(x2, w, b)).mean();
    loss.backward();
    r.w_grad = w.grad();
    r.b_grad = b.grad();
    optim::SGD opt({w, b}, {.lr = 0.1});
    opt.step();
    r.w_after_step = w.detach().clone();
    if (d.is_cuda()) {
      cuda::Stream user = cuda::Stream::create(d);
      user.wait_stream(cuda::current_stream(d));
      {
        cuda::StreamGuard g(user);
        r.on_user_stream = b.grad() * 3.0;
      }
      cuda::current_stream(d).wait_stream(user);  // before b.grad() is freed on the current stream
    } else {
      r.on_user_stream = b.grad() * 3.0;
    }
    return r;
  };
  const Result cpu = run(Device::cpu());
  Result gpu_r;
  {
    cuda::StreamCheckGuard check(true);
    for (int i = 0; i < 3; ++i) gpu_r = run(dev);  // later rounds reuse the earlier rounds' memory
    cuda::synchronize(dev);
  }
  const testing::CloseOptions tol{.rtol = 1e-4, .atol = 1e-5};
  testing::assert_close(gpu_r.w_grad, cpu.w_grad, tol);
  testing::assert_close(gpu_r.b_grad, cpu.b_grad, tol);
  testing::assert_close(gpu_r.hook_sum, cpu.hook_sum, tol);
  testing::assert_close(gpu_r.w_after_step, cpu.w_after_step, tol);
  testing::assert_close(gpu_r.on_user_stream, cpu.on_user_stream, tol);
}

// autograd::grad for x alone still computes w's gradient (w requires grad) on the side stream
// and drops it inside the pass, before any stream touched it: its block must wait for the side
// stream before the current stream reuses it (the allocations that follow would otherwise
// race the GEMM still writing there). Checked by the stream check's free rule and by values.
TEST_CASE("stream check: a side-stream weight gradient dropped inside autograd::grad is not reused early") {
  Device dev = gpu();
  Tensor x_cpu = randn({512, 96}), w_cpu = randn({128, 96});
  const auto run = [&](Device d) {
    Tensor x = x_cpu.to(d).clone(), w = w_cpu.to(d).clone();
    x.requires_grad_();
    w.requires_grad_();
    Tensor h = linear(x, w);
    Tensor loss = (linear(h.tanh(), w.t().contiguous()) * 0.5).pow(2.0).mean();  // [512, 96]
    return autograd::grad({loss}, {x})[0];
  };
  const Tensor cpu = run(Device::cpu());
  Tensor gx;
  {
    cuda::StreamCheckGuard check(true);
    for (int i = 0; i < 3; ++i) gx = run(dev);
    cuda::synchronize(dev);
  }
  testing::assert_close(gx, cpu, {.rtol = 1e-4, .atol = 1e-5});
}
