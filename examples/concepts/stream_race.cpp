// Concept 8 — a race between two streams, the stream check's report, and the fix.
//
// Streams run independently: work on the consumer stream does not wait for work on the
// producer stream unless an event orders them. Here the producer fills x (after some long
// work, as a real producer would have) while the consumer sums x with nothing ordering the
// two: the sum reads x before the fill reached it. Nothing fails, the number is just wrong.
// cuda::set_stream_check(true) (or BRRR_STREAM_CHECK=1) tracks, per storage, which stream
// last wrote it and which read it since, with vector clocks advanced by Event::record,
// Stream::wait and host synchronisations; the unordered read throws Error(stream) before it
// is enqueued, naming both ops and both streams. The fix is one event: recorded on the
// producer after the fill, waited on by the consumer (device-side; the host never waits).
//
// The host read at the end, s.item(), is correct in every part: a host read waits for the
// stream that wrote the value (here the consumer), whatever the current stream.
//
// usage: concept_stream_race [--require-gpu]   (--require-gpu: a test mode that exits 77
// without a CUDA device and 1 when the check did not fire or the fix gave a wrong sum)
#include <cstdio>
#include <cstring>
#include <string>
import brrr;

using namespace brrr;

constexpr std::int64_t n = 16 << 20;  // x: 16 Mi f32 = 64 MiB

int main(int argc, char** argv) {
  bool test_mode = argc > 1 && std::strcmp(argv[1], "--require-gpu") == 0;
  if (!cuda::is_available()) {
    std::printf(
        "concept_stream_race: no CUDA device here, so nothing races.\n"
        "On a GPU a producer stream fills x (%lld f32 ones) after some long work while a consumer\n"
        "stream sums x with no event between them, and the program prints:\n"
        "  1. the race: the sum read before the fill (0 instead of %lld), with no error;\n"
        "  2. the stream check's report: Error(stream) naming sum, fill_, both streams, x's shape;\n"
        "  3. the fix: an Event recorded on the producer and waited on by the consumer: %lld.\n"
        "RESULT: n/a (no CUDA device)\n",
        static_cast<long long>(n), static_cast<long long>(n), static_cast<long long>(n));
    return test_mode ? 77 : 0;
  }
  Device dev = Device::cuda(0);
  cuda::Stream producer = cuda::Stream::create(dev), consumer = cuda::Stream::create(dev);
  Tensor x = zeros({n}, {.device = dev});
  Tensor busy = zeros({64 << 20}, {.device = dev});  // 256 MiB for the producer's long work
  cuda::record_stream(busy, producer);
  cuda::synchronize(dev);

  // The producer: milliseconds of work, then x = 1 everywhere.
  auto produce = [&] {
    cuda::StreamGuard on_producer(producer);
    Tensor work = busy;
    for (int i = 0; i < 20; ++i) work = work * 1.0;
    x.fill_(1.0);
  };
  auto consume = [&] {
    cuda::StreamGuard on_consumer(consumer);
    return x.sum();
  };
  auto reset = [&] {
    cuda::synchronize(dev);
    x.fill_(0.0);
    cuda::synchronize(dev);
  };
  std::printf("x: %lld f32 on %s; producer is stream #%llu, consumer stream #%llu\n\n", static_cast<long long>(n),
              dev.str().c_str(), static_cast<unsigned long long>(producer.id()),
              static_cast<unsigned long long>(consumer.id()));

  // 1. The race.
  produce();
  Tensor racy = consume();  // nothing orders this read after the fill
  float racy_sum = racy.item<float>();
  std::printf("1. no event, no check: consumer's sum = %.0f (expected %lld)%s\n", racy_sum, static_cast<long long>(n),
              racy_sum == static_cast<float>(n) ? " -- the race happened to be won this time" : " -- read too early");

  // 2. The same program under the stream check.
  reset();
  bool reported = false;
  {
    cuda::StreamCheckGuard check(true);
    produce();
    try {
      Tensor s = consume();
      std::printf("2. the check did not report the race (unexpected)\n");
    } catch (const Error& e) {
      reported = e.kind() == ErrorKind::stream;
      std::printf("2. with cuda::set_stream_check(true): Error(%s)\n   %s\n", to_string(e.kind()), e.what());
    }
    cuda::synchronize(dev);
  }

  // 3. The fix: an event after the fill, waited on by the consumer.
  reset();
  float fixed_sum = 0;
  bool clean = true;
  {
    cuda::StreamCheckGuard check(true);
    try {
      produce();
      cuda::Event filled;
      filled.record(producer);
      consumer.wait(filled);  // device-side: the host does not wait here
      Tensor s = consume();
      fixed_sum = s.item<float>();
      cuda::synchronize(dev);
    } catch (const Error& e) {
      clean = false;
      std::printf("3. the fixed program was reported: %s\n", e.what());
    }
  }
  std::printf("3. Event::record(producer) + consumer.wait(event), check on: sum = %.0f, no report\n\n", fixed_sum);

  bool ok = reported && clean && fixed_sum == static_cast<float>(n);
  std::printf("RESULT: unordered read: sum %.0f of %lld, no error; with the check: %s; with an event: %.0f, %s\n",
              racy_sum, static_cast<long long>(n), reported ? "Error(stream) before the read was enqueued" : "NOT reported",
              fixed_sum, clean ? "no report" : "REPORTED");
  return test_mode && !ok ? 1 : 0;
}
