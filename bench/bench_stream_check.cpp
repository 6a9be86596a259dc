// bench_stream_check: the host cost of the stream bookkeeping that every CUDA op pays
// (backend::note_access, modules/backend.cppm), measured without a GPU: the calls that
// backend::input()/output() make for the three tensors of one launch, on stand-in stream
// records and streams (no CUDA call is involved in the bookkeeping itself).
//   off_ns            check off: the writer-mask update and the flag load (what every op pays)
//   on_ns             check on, one stream: lock, vector clocks, hazard rules, history update
//   on_8_streams_ns   check on, each op on the next of 8 streams after an event wait on the
//                     previous one (8-wide clocks, reads from several streams in the history)
// The GPU-side numbers (enqueue time of an add and of an MLP step, check off and on) are in
// bench_runtime, section (c). Prints a table, then one JSON object on the last line.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "backend/stream_check.hpp"
#include "common.hpp"
import brrr.backend;

using namespace brrr;

int main() {
  // One binary op's operands: out = a + b, 1024 f32 each, with the stream records a device
  // allocation would carry (CPU heap memory has none: brrr's allocators keep them).
  Tensor a = randn({1024}), b = randn({1024}), out = empty({1024});
  backend::Operand oa = backend::tracked(a, "add"), ob = backend::tracked(b, "add"), oo = backend::tracked(out, "add");
  stream_check::AccessLog la, lb, lo;
  oa.log = &la;
  ob.log = &lb;
  oo.log = &lo;
  std::vector<backend::StreamState> streams;
  for (std::uint32_t i = 0; i < 8; ++i)
    streams.push_back({0, nullptr, 0, i == 0, 1000 + i, i});  // stand-ins: the bookkeeping needs no CUDA call

  auto time = [](const std::function<void()>& f) { return bench::host_ns_per_call(20000, 50, 20000, f).median_ns; };
  std::map<std::string, double> r;

  cuda::set_stream_check(false);
  using stream_check::AccessKind;
  auto add = [&](const backend::StreamState& s) {  // what the launch of out = a + b announces
    backend::note_access(s, oa, AccessKind::read);
    backend::note_access(s, ob, AccessKind::read);
    backend::note_access(s, oo, AccessKind::write);
  };
  r["off_ns"] = time([&] { add(streams[0]); });

  cuda::set_stream_check(true);
  r["on_ns"] = time([&] { add(streams[0]); });

  std::size_t k = 0;
  r["on_8_streams_ns"] = time([&] {
    const backend::StreamState& prev = streams[k];
    k = (k + 1) % streams.size();
    backend::check_wait(streams[k], backend::check_record(prev));  // an event from the previous stream
    add(streams[k]);
  });
  cuda::set_stream_check(false);

  // Reference: an empty call through std::function, the harness's own cost per call.
  r["harness_ns"] = time([] {});

  std::printf("brrr bench_stream_check (host only): the note_access calls of out = a + b (2 reads, 1 write)\n");
  std::printf("%-58s %10.1f ns\n", "check off (writer mask + flag load)", r["off_ns"]);
  std::printf("%-58s %10.1f ns\n", "check on, one stream", r["on_ns"]);
  std::printf("%-58s %10.1f ns\n", "check on, 8 streams, event record + wait between ops", r["on_8_streams_ns"]);
  std::printf("%-58s %10.1f ns\n", "(harness: an empty std::function call)", r["harness_ns"]);
  bench::print_json(r, 1);
  return 0;
}
