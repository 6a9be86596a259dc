// Tensor: construction over storage, metadata, host read-back (to_host, item).
module;
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>
module brrr.tensor;
import brrr.backend;

namespace brrr {

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return to_string(t.shape()) + " " + to_string(t.dtype()) + " on " + t.device().str();
}

Tensor::Tensor(Storage storage, Layout layout, DType dtype) {
  if (!storage.defined()) throw Error(ErrorKind::value, "Tensor: undefined storage");
  if (layout.sizes.size() != layout.strides.size())
    throw Error(ErrorKind::shape, "Tensor: sizes " + to_string(layout.sizes) + " and strides " +
                                      to_string(layout.strides) + " differ in length");
  std::int64_t numel = checked_numel(layout.sizes, "Tensor");
  if (numel > 0) {
    // lowest and highest element reached, in elements from the storage start (a layout whose
    // extent overflows int64 reaches outside any storage)
    std::int64_t lo = layout.offset, hi = layout.offset;
    bool overflow = false;
    for (std::size_t i = 0; i < layout.sizes.size(); ++i) {
      std::int64_t span = 0;
      overflow = overflow || __builtin_mul_overflow(layout.sizes[i] - 1, layout.strides[i], &span) ||
                 __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi);
    }
    std::int64_t capacity = static_cast<std::int64_t>(storage.nbytes() / brrr::itemsize(dtype));
    if (overflow || lo < 0 || hi >= capacity)
      throw Error(ErrorKind::index, "Tensor: layout sizes " + to_string(layout.sizes) + " strides " +
                                        to_string(layout.strides) + " offset " + std::to_string(layout.offset) +
                                        " reaches outside a storage of " + std::to_string(capacity) + " " +
                                        to_string(dtype) + " elements");
  }
  impl_ = std::make_shared<Impl>();
  impl_->storage = std::move(storage);
  impl_->layout = std::move(layout);
  impl_->dtype = dtype;
}

const Tensor::Impl& Tensor::checked(const char* op) const {
  if (!impl_) throw Error(ErrorKind::value, std::string(op) + ": the tensor is undefined");
  return *impl_;
}

const Shape& Tensor::shape() const { return checked("shape").layout.sizes; }
const Shape& Tensor::strides() const { return checked("strides").layout.strides; }
std::int64_t Tensor::storage_offset() const { return checked("storage_offset").layout.offset; }
const Layout& Tensor::layout() const { return checked("layout").layout; }
DType Tensor::dtype() const { return checked("dtype").dtype; }
Device Tensor::device() const { return checked("device").storage.device(); }
std::int64_t Tensor::numel() const { return checked("numel").layout.numel(); }
std::int64_t Tensor::dim() const { return checked("dim").layout.dim(); }
bool Tensor::is_contiguous() const { return checked("is_contiguous").layout.is_contiguous(); }
const Storage& Tensor::storage() const { return checked("storage").storage; }
bool Tensor::is_pinned() const { return checked("is_pinned").storage.pinned(); }

void* Tensor::data_ptr() const {
  const Impl& i = checked("data_ptr");
  return static_cast<char*>(i.storage.data()) + i.layout.offset * static_cast<std::int64_t>(brrr::itemsize(i.dtype));
}

std::int64_t Tensor::size(std::int64_t d) const {
  std::int64_t n = checked("size").layout.dim();
  if (d < -n || d >= n) throw Error::dim_out_of_range("size", d, n, shape());
  return shape()[static_cast<std::size_t>(d < 0 ? d + n : d)];
}

std::int64_t Tensor::stride(std::int64_t d) const {
  std::int64_t n = checked("stride").layout.dim();
  if (d < -n || d >= n) throw Error::dim_out_of_range("stride", d, n, shape());
  return strides()[static_cast<std::size_t>(d < 0 ? d + n : d)];
}

// --- from_vector ---

namespace {
template <class T>
Tensor from_values(const T* values, std::size_t count, Shape shape, bool default_shape,
                   DType dtype = dtype_of<T>::value) {
  if (default_shape) shape = {static_cast<std::int64_t>(count)};
  std::int64_t numel = checked_numel(shape, "from_vector");
  if (static_cast<std::size_t>(numel) != count)
    throw Error(ErrorKind::shape, "from_vector: " + std::to_string(count) + " values cannot have shape " +
                                      to_string(shape) + " (" + std::to_string(numel) + " elements)");
  Storage storage = Storage::allocate(count * sizeof(T), Device::cpu());
  if (count) std::memcpy(storage.data(), values, count * sizeof(T));
  return Tensor(std::move(storage), Layout::contiguous(std::move(shape)), dtype);
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<float>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<double>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<double>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<bfloat16>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<bfloat16>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<half>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<half>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<std::int32_t>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<std::int32_t>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<std::int64_t>& v) { return from_values(v.data(), v.size(), {}, true); }
Tensor Tensor::from_vector(const std::vector<std::int64_t>& v, Shape s) { bool d = s.empty(); return from_values(v.data(), v.size(), std::move(s), d); }
Tensor Tensor::from_vector(const std::vector<bool>& v) {
  std::vector<std::uint8_t> bytes(v.begin(), v.end());
  return from_values(bytes.data(), bytes.size(), {}, true, DType::boolean);
}
Tensor Tensor::from_vector(const std::vector<bool>& v, Shape s) {
  std::vector<std::uint8_t> bytes(v.begin(), v.end());
  bool d = s.empty();
  return from_values(bytes.data(), bytes.size(), std::move(s), d, DType::boolean);
}

// --- read back ---

template <class T> std::vector<T> Tensor::to_host() const {
  const Impl& i = checked("to_host");
  if (i.dtype != dtype_of<T>::value)
    throw Error(ErrorKind::dtype, std::string("to_host<") + to_string(dtype_of<T>::value) +
                                      ">: the tensor is " + describe(*this) + "; convert with to(DType::" +
                                      to_string(dtype_of<T>::value) + ") or call to_host<" + to_string(i.dtype) +
                                      ">");
  // A host read sees finished data whatever the current stream: the stream that compacts
  // and copies first waits for every stream that wrote the tensor.
  if (device().is_cuda() && !is_contiguous())
    backend::order_after_writers(i.storage, backend::current_stream(device().index()));
  // Contiguous on its own device first, so that exactly numel elements cross the bus.
  Tensor c = contiguous();
  std::size_t n = static_cast<std::size_t>(c.numel());
  using Elem = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;
  std::vector<Elem> out(n);
  if (n) {
    if (c.device().is_cpu()) {
      backend::wait_host_pending(c.storage(), "Tensor::to_host");
      std::memcpy(out.data(), c.data_ptr(), n * sizeof(Elem));
    } else {
      backend::copy_device_to_host(out.data(), c, n * sizeof(Elem), "Tensor::to_host");
    }
  }
  if constexpr (std::is_same_v<T, bool>)
    return std::vector<bool>(out.begin(), out.end());
  else
    return out;
}

template <class T> T Tensor::item_exact() const {
  const Impl& i = checked("item_exact");
  if (i.layout.numel() != 1)
    throw Error(ErrorKind::shape, "item: needs exactly one element, the tensor is " + describe(*this) +
                                      " (" + std::to_string(i.layout.numel()) + " elements)");
  if (i.dtype != dtype_of<T>::value)
    throw Error(ErrorKind::dtype, std::string("item_exact<") + to_string(dtype_of<T>::value) +
                                      ">: the tensor is " + describe(*this) + " (item<T>() converts)");
  using Elem = std::conditional_t<std::is_same_v<T, bool>, std::uint8_t, T>;
  Elem value{};
  if (device().is_cpu()) {
    backend::wait_host_pending(i.storage, "Tensor::item");
    std::memcpy(&value, data_ptr(), sizeof(Elem));
  } else {
    // Waits for the stream that computed the value, whatever the current stream.
    backend::copy_device_to_host(&value, *this, sizeof(Elem), "Tensor::item");
  }
  return static_cast<T>(value);
}

namespace {
// The single element of t widened without loss: a double for floating dtypes, an int64 for
// integers and bool.
struct Widened {
  bool floating;
  double f;
  std::int64_t i;
};
Widened widened_item(const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32: return {true, t.item_exact<float>(), 0};
    case DType::f64: return {true, t.item_exact<double>(), 0};
    case DType::bf16: return {true, static_cast<float>(t.item_exact<bfloat16>()), 0};
    case DType::f16: return {true, static_cast<float>(t.item_exact<half>()), 0};
    case DType::i32: return {false, 0, t.item_exact<std::int32_t>()};
    case DType::i64: return {false, 0, t.item_exact<std::int64_t>()};
    case DType::boolean: return {false, 0, t.item_exact<bool>() ? 1 : 0};
  }
  return {};
}
}  // namespace

template <class T> T Tensor::item() const {
  checked("item");
  Widened w = widened_item(*this);
  if constexpr (std::is_same_v<T, bool>) {
    return w.floating ? w.f != 0 : w.i != 0;
  } else if constexpr (std::is_integral_v<T>) {
    constexpr auto lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    auto overflow = [&](const std::string& value) {
      return Error(ErrorKind::value, "item<" + std::string(to_string(dtype_of<T>::value)) + ">: value " + value +
                                         " of " + describe(*this) + " cannot be converted without overflow");
    };
    if (w.floating) {
      // Truncates toward zero, as static_cast and PyTorch's int(x.item()); a value outside T
      // (NaN and infinities included) is an error, not undefined behaviour.
      if (!(w.f > static_cast<double>(lo) - 1.0 && w.f < static_cast<double>(hi) + 1.0)) throw overflow(number_text(w.f));
      return static_cast<T>(w.f);
    }
    if (w.i < static_cast<std::int64_t>(lo) || w.i > static_cast<std::int64_t>(hi)) throw overflow(std::to_string(w.i));
    return static_cast<T>(w.i);
  } else {
    double v = w.floating ? w.f : static_cast<double>(w.i);
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>)
      return T(static_cast<float>(v));
    else
      return static_cast<T>(v);
  }
}

template std::vector<float> Tensor::to_host<float>() const;
template std::vector<double> Tensor::to_host<double>() const;
template std::vector<bfloat16> Tensor::to_host<bfloat16>() const;
template std::vector<half> Tensor::to_host<half>() const;
template std::vector<std::int32_t> Tensor::to_host<std::int32_t>() const;
template std::vector<std::int64_t> Tensor::to_host<std::int64_t>() const;
template std::vector<bool> Tensor::to_host<bool>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template bfloat16 Tensor::item<bfloat16>() const;
template half Tensor::item<half>() const;
template std::int32_t Tensor::item<std::int32_t>() const;
template std::int64_t Tensor::item<std::int64_t>() const;
template bool Tensor::item<bool>() const;
template float Tensor::item_exact<float>() const;
template double Tensor::item_exact<double>() const;
template bfloat16 Tensor::item_exact<bfloat16>() const;
template half Tensor::item_exact<half>() const;
template std::int32_t Tensor::item_exact<std::int32_t>() const;
template std::int64_t Tensor::item_exact<std::int64_t>() const;
template bool Tensor::item_exact<bool>() const;

}  // namespace brrr
