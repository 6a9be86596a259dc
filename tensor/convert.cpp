// Copies and conversions: clone, to(DType), to(Device), pin_memory, copy_, fill_.
module;
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/stream_check.hpp"
module brrr.tensor;
import brrr.backend;

namespace brrr {

namespace {

// Contiguous, same-dtype tensors on both sides: bytes move by one memcpy. Every transfer is
// announced to the stream bookkeeping (backend::note_access) on the stream that runs it.
void copy_bytes(const Tensor& dst, const Tensor& src, bool non_blocking) {
  std::size_t bytes = dst.nbytes();
  if (bytes == 0) return;
  Device dd = dst.device(), sd = src.device();
  const char* op = "Tensor::copy_";
  if (dd.is_cpu() && sd.is_cpu()) {
    // Host memory: pinned source or destination may still be under an async copy.
    backend::wait_host_pending(src.storage(), op);
    backend::wait_host_pending(dst.storage(), op);
    std::memcpy(dst.data_ptr(), src.data_ptr(), bytes);
  } else if (dd.is_cuda() && sd.is_cpu()) {
    auto stream = backend::current_stream(dd.index());
    backend::note_access(*stream, backend::tracked(dst, op), stream_check::AccessKind::write);
    backend::note_access(*stream, backend::tracked(src, op), stream_check::AccessKind::read);
    if (src.is_pinned()) {
      backend::memcpy_async(dst.data_ptr(), src.data_ptr(), bytes, backend::CopyKind::host_to_device, stream);
      backend::record_pinned_use(src.storage(), stream);
      // A blocking copy was asked for: wait for it, as PyTorch's non_blocking=false does.
      if (!non_blocking) backend::synchronize_stream(*stream, "Tensor::copy_ (host to device)");
    } else {
      backend::copy_host_to_device(dst.data_ptr(), src.data_ptr(), bytes, dd.index(),
                                   "Tensor::copy_ from pageable host memory");
    }
  } else if (dd.is_cpu() && sd.is_cuda()) {
    if (dst.is_pinned() && non_blocking) {
      // A copy to host memory waits for the streams that wrote the source, like a host read;
      // the host then waits for the copy before it reads the destination (wait_host_pending).
      auto stream = backend::current_stream(sd.index());
      backend::order_after_writers(src.storage(), stream);
      backend::note_access(*stream, backend::tracked(dst, op), stream_check::AccessKind::write);
      backend::note_access(*stream, backend::tracked(src, op), stream_check::AccessKind::read);
      backend::memcpy_async(dst.data_ptr(), src.data_ptr(), bytes, backend::CopyKind::device_to_host, stream);
      backend::record_pinned_use(dst.storage(), stream);
      backend::note_host_pending(dst.storage(), stream);
    } else {
      backend::wait_host_pending(dst.storage(), op);
      backend::copy_device_to_host(dst.data_ptr(), src, bytes, "Tensor::copy_ (device to host)");
    }
  } else {
    // Device to device (peer copies go through unified addressing), on the destination's
    // current stream. Between two devices the copy is ordered after the source's current
    // stream and its writers, and the source's current stream after the copy, as in
    // PyTorch: the source may be freed to its stream's pool right after.
    auto stream = backend::current_stream(dd.index());
    backend::order_after_writers(src.storage(), stream);
    backend::StreamPtr src_stream = dd == sd ? nullptr : backend::current_stream(sd.index());
    if (src_stream) backend::wait_stream(*stream, *src_stream);
    backend::note_access(*stream, backend::tracked(dst, op), stream_check::AccessKind::write);
    backend::note_access(*stream, backend::tracked(src, op), stream_check::AccessKind::read);
    backend::memcpy_async(dst.data_ptr(), src.data_ptr(), bytes, backend::CopyKind::device_to_device, stream);
    if (src_stream) backend::wait_stream(*src_stream, *stream);
  }
}

}  // namespace

namespace {
// In-place writes are not recorded by autograd: refuse them where a gradient would be lost.
void check_inplace(const char* op, const Tensor& dst, const Tensor* src) {
  if (!autograd::is_grad_enabled()) return;
  if (dst.requires_grad())
    throw Error(ErrorKind::autograd, std::string(op) + ": in-place write into a tensor that requires grad (" +
                                         describe(dst) + "); do it under NoGradGuard (initialisation, optimizer "
                                         "steps) or use an out-of-place op");
  if (src && src->requires_grad())
    throw Error(ErrorKind::autograd, std::string(op) + ": the source requires grad, and in-place copies are not "
                                         "recorded by autograd; use clone() or to(), or copy under NoGradGuard");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in, CopyOptions options) {
  checked("copy_");
  if (!src_in.defined()) throw Error(ErrorKind::value, "copy_: the source tensor is undefined");
  check_inplace("copy_", *this, &src_in);
  Tensor src;
  try {
    src = src_in.expand(shape());
  } catch (const Error&) {
    throw Error(ErrorKind::shape, "copy_: source " + describe(src_in) + " cannot broadcast to destination " +
                                      describe(*this));
  }
  Device dd = device(), sd = src.device();
  if (dd == sd) {
    if (numel() > 0) backend::backend_for(dd).copy(backend::output(*this, "copy_"), backend::input(src, "copy_"));
  } else if (dd.is_cuda() && sd.is_cuda()) {
    // Different GPUs: make the bytes contiguous in the destination dtype, then copy peer to peer.
    Tensor staged = src.to(dtype()).contiguous();
    if (is_contiguous()) {
      copy_bytes(*this, staged, options.non_blocking);
    } else {
      Tensor tmp = empty(shape(), {.dtype = dtype(), .device = dd});
      copy_bytes(tmp, staged, options.non_blocking);
      backend::backend_for(dd).copy(backend::output(*this, "copy_"), backend::input(tmp, "copy_"));
    }
  } else if (dd.is_cuda()) {
    // Host to device: convert and compact on the host, where it is cheap, then one transfer.
    Tensor staged = src.to(dtype()).contiguous();
    if (is_contiguous()) {
      copy_bytes(*this, staged, options.non_blocking);
    } else {
      Tensor tmp = empty(shape(), {.dtype = dtype(), .device = dd});
      copy_bytes(tmp, staged, options.non_blocking);
      backend::backend_for(dd).copy(backend::output(*this, "copy_"), backend::input(tmp, "copy_"));
    }
  } else {
    // Device to host: convert and compact on the device, then one transfer of numel elements.
    // A copy to the host is a host read: ordered after every stream that wrote the source.
    backend::order_after_writers(src.storage(), backend::current_stream(sd.index()));
    Tensor staged = src.to(dtype()).contiguous();
    if (is_contiguous()) {
      copy_bytes(*this, staged, options.non_blocking);
    } else {
      Tensor tmp = empty(shape(), {.dtype = dtype()});
      copy_bytes(tmp, staged, false);
      backend::backend_for(dd).copy(backend::output(*this, "copy_"), backend::input(tmp, "copy_"));
    }
  }
  storage().bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  checked("fill_");
  check_inplace("fill_", *this, nullptr);
  if (numel() > 0) backend::backend_for(device()).fill(backend::output(*this, "fill_"), value);
  storage().bump_version();
  return *this;
}

Tensor Tensor::clone() const {
  const Impl& i = checked("clone");
  Tensor out = empty(i.layout.sizes, {.dtype = i.dtype, .device = device()});
  if (out.numel() > 0)
    backend::backend_for(device()).copy(backend::output(out, "clone"), backend::input(*this, "clone"));
  if (autograd::any_requires_grad({*this}) && is_floating_point(i.dtype))
    view_autograd::record_identity("CloneBackward", *this, out);
  return out;
}

namespace {
// The gradient of a dtype or device conversion: converted back.
Tensor record_to(const Tensor& in, Tensor out) {
  if (autograd::any_requires_grad({in}) && is_floating_point(out.dtype()))
    autograd::record("ToBackward", {in}, {out}, [dtype = in.dtype(), device = in.device()](const autograd::Backward& b) {
      return autograd::Grads{b.grad().to(device).to(dtype)};
    });
  return out;
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  const Impl& i = checked("to");
  if (i.dtype == dtype) return *this;
  Tensor out = empty(i.layout.sizes, {.dtype = dtype, .device = device()});
  if (out.numel() > 0)
    backend::backend_for(device()).copy(backend::output(out, "to"), backend::input(*this, "to"));
  return record_to(*this, std::move(out));
}

Tensor Tensor::to(Device device, CopyOptions options) const {
  const Impl& i = checked("to");
  if (device == this->device()) return *this;
  // Device to host with non_blocking lands in pinned memory so the copy can stay async.
  bool pinned = device.is_cpu() && options.non_blocking;
  Tensor out = empty(i.layout.sizes, {.dtype = i.dtype, .device = device, .pinned = pinned});
  {
    NoGradGuard no_grad;
    out.copy_(*this, options);
  }
  return record_to(*this, std::move(out));
}

Tensor Tensor::pin_memory() const {
  checked("pin_memory");
  if (!device().is_cpu())
    throw Error(ErrorKind::device, "pin_memory: only CPU tensors can be pinned, this one is " + describe(*this));
  if (is_pinned()) return *this;
  Tensor out = empty(shape(), {.dtype = dtype(), .pinned = true});
  out.copy_(*this);
  return out;
}

}  // namespace brrr
