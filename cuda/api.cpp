// brrr.cuda: the public streams, events, sync accounting and allocator statistics, over
// the runtime internals in brrr.backend.
module;
#include <cstdint>
#include <memory>
#include <string>

#include "backend/stream_check.hpp"
module brrr.cuda;
import brrr.tensor;
import brrr.backend;

namespace brrr::cuda {

namespace {
int cuda_index(Device device, const char* op) {
  if (!device.is_cuda())
    throw Error(ErrorKind::device, std::string(op) + ": needs a CUDA device, got " + device.str());
  return device.index();
}
}  // namespace

bool is_available() { return backend::device_count() > 0; }
int device_count() { return backend::device_count(); }

// Event state, defined first: Stream::wait reads the clock an event captured.
struct Event::Impl {
  bool timing = true;
  void* event = nullptr;  // a cudaEvent_t, made on the first record
  int device = -1;
  stream_check::VectorClock clock;  // the recording stream's clock (stream check on only)
  ~Impl() { backend::event_destroy(event); }
};

// --- Stream ---

Stream Stream::create(Device device, int priority) {
  return Stream(backend::create_stream(cuda_index(device, "Stream::create"), priority));
}
Device Stream::device() const { return Device::cuda(state_->device); }
void* Stream::handle() const { return state_->handle; }
int Stream::priority() const { return state_->priority; }
std::uint64_t Stream::id() const { return state_->id; }

bool Stream::query() const {
  if (!backend::stream_query(*state_)) return false;
  backend::check_host_wait_stream(*state_);  // the host now knows all of it completed
  return true;
}

void Stream::synchronize() const { backend::synchronize_stream(*state_, "Stream::synchronize"); }

void Stream::wait(const Event& event) const {
  if (!event.recorded()) return;  // nothing to wait for, as in PyTorch
  backend::stream_wait_event(*state_, event.handle());
  backend::check_wait(*state_, event.impl_->clock);
}

void Stream::wait_stream(const Stream& other) const {
  if (other.device() != device())
    throw Error(ErrorKind::device, "Stream::wait_stream: this stream is on " + device().str() + ", the other on " +
                                       other.device().str() + "; use an Event for streams of two devices");
  backend::wait_stream(*state_, *other.state_);
}

Stream current_stream(Device device) { return Stream(backend::current_stream(cuda_index(device, "current_stream"))); }
Stream default_stream(Device device) { return Stream(backend::default_stream(cuda_index(device, "default_stream"))); }

StreamGuard::StreamGuard(const Stream& stream) : previous_(backend::current_stream(stream.state()->device)) {
  backend::set_current_stream(stream.state());
}
StreamGuard::~StreamGuard() { backend::set_current_stream(previous_); }

// --- Event ---

Event::Event(bool enable_timing) : impl_(std::make_shared<Impl>()) { impl_->timing = enable_timing; }

void Event::record(const Stream& stream) {
  int dev = stream.state()->device;
  if (impl_->event && impl_->device != dev)
    throw Error(ErrorKind::device, "Event::record: the event belongs to cuda:" + std::to_string(impl_->device) +
                                       ", the stream to cuda:" + std::to_string(dev));
  if (!impl_->event) {
    impl_->event = backend::event_create(dev, impl_->timing);
    impl_->device = dev;
  }
  backend::event_record(impl_->event, *stream.state());
  impl_->clock = backend::check_record(*stream.state());
}

void Event::record(Device device) { record(current_stream(device)); }

bool Event::query() const {
  if (!impl_->event) return true;
  if (!backend::event_query(impl_->event)) return false;
  backend::check_host_wait(impl_->clock);
  return true;
}

void Event::synchronize() const {
  if (!impl_->event) return;
  backend::synchronize_event(impl_->event, impl_->device, "Event::synchronize");
  backend::check_host_wait(impl_->clock);
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  if (!start.impl_->event || !end.impl_->event)
    throw Error(ErrorKind::cuda, "Event::elapsed_ms: both events must have been recorded");
  if (!start.impl_->timing || !end.impl_->timing)
    throw Error(ErrorKind::cuda, "Event::elapsed_ms: both events need enable_timing = true");
  return backend::event_elapsed_ms(start.impl_->event, end.impl_->event);
}

bool Event::recorded() const { return impl_->event != nullptr; }
void* Event::handle() const { return impl_->event; }

// --- synchronisation and memory ---

void synchronize(Device device) { backend::synchronize_device(cuda_index(device, "cuda::synchronize"), "cuda::synchronize"); }
std::uint64_t sync_count() { return backend::sync_count(); }
void set_sync_policy(SyncPolicy policy) { backend::set_sync_policy(policy); }
SyncPolicy sync_policy() { return backend::sync_policy(); }

MemoryStats memory_stats(Device device) { return backend::memory_stats(cuda_index(device, "memory_stats")); }
void reset_peak_memory_stats(Device device) { backend::reset_peak_memory_stats(cuda_index(device, "reset_peak_memory_stats")); }
void empty_cache(Device device) { backend::empty_cache(cuda_index(device, "empty_cache")); }

void record_stream(const Tensor& tensor, const Stream& stream) {
  backend::record_stream(tensor.storage(), stream.state());
  backend::note_recorded_stream(tensor.storage(), *stream.state());
}

void set_stream_check(bool on) { backend::set_stream_check(on); }
bool stream_check_enabled() { return backend::stream_check_enabled(); }

PinnedStats pinned_memory_stats() { return backend::pinned_stats(); }

}  // namespace brrr::cuda
