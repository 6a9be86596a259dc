// brrr.tensor:core — the core model: errors, dtypes, devices, layouts, storage and the
// Tensor handle with its factories, views and conversions, and NVTX ranges. The autograd
// graph every tensor carries is the partition brrr.tensor:graph (autograd/graph.cppm).
// Speaks only brrr and std types.
module;
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backend/contract.hpp"  // DType, itemsize, is_floating_point
#include "tensor/methods.hpp"    // BRRR_TENSOR_METHODS: the op methods of Tensor
export module brrr.tensor:core;

export namespace brrr {

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// What went wrong, for callers that branch on it; the message says the rest.
enum class ErrorKind : std::uint8_t {
  shape,       ///< incompatible or invalid shapes, impossible views
  dtype,       ///< wrong or unsupported dtype (e.g. to_host<T> with the wrong T)
  device,      ///< wrong, unavailable or mixed devices
  index,       ///< dimension, index or slice out of range
  value,       ///< an invalid argument value (negative size, zero step, ...)
  io,          ///< a bad or missing file
  cuda,        ///< a CUDA/cuBLAS/cuRAND call failed (message names call and file:line)
  out_of_memory,
  sync,        ///< a host-device synchronisation refused by SyncPolicy::error
  stream,      ///< an unordered cross-stream access found by cuda::set_stream_check(true)
  autograd,    ///< backward through a modified tensor, no grad_fn, ...
  distributed, ///< ranks: rendezvous, store, a collective's timeout, a dead or mismatched rank, NCCL/Gloo
};

/// Returns the kind's name, e.g. "shape".
const char* to_string(ErrorKind kind);

class Tensor;
/// Sizes (or strides) of a tensor, one entry per dimension.
using Shape = std::vector<std::int64_t>;

/// The dims an op reduces over, as LibTorch's IntArrayRef takes them: one dim (`sum(x, 1)`),
/// a braced list (`sum(x, {0, 1})`), a vector, or `{}` (every dim, where the op allows it).
struct DimList : std::vector<std::int64_t> {
  DimList() = default;
  DimList(std::int64_t dim) : std::vector<std::int64_t>{dim} {}
  DimList(std::initializer_list<std::int64_t> dims) : std::vector<std::int64_t>(dims) {}
  DimList(std::vector<std::int64_t> dims) : std::vector<std::int64_t>(std::move(dims)) {}
};

/// The one exception type brrr throws. what() names the op and the offending shapes, dtypes
/// and devices, e.g. "view: shape [2, 3] is invalid for input of size 5". The recurring
/// kinds have a constructor each, so that every op words them alike.
class Error : public std::runtime_error {
public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }

  /// Error(index): "<op>: dim <dim> out of range for a <n>-d tensor of shape <shape>
  /// (expected in [-n, n-1])", n = `ndim` (the dims `dim` may name: the shape's, or one
  /// more where a dim is inserted; a 0-d tensor takes 0 and -1).
  static Error dim_out_of_range(std::string_view op, std::int64_t dim, std::int64_t ndim, const Shape& shape);
  /// Error(dtype): "<op>: <expected>, got <describe(t)>[ (<hint>)]", e.g. "mean: expected a
  /// floating-point input, got [2] i64 on cpu (convert first, e.g. x.to(DType::f32))".
  static Error dtype_not_supported(std::string_view op, std::string_view expected, const Tensor& t,
                                   std::string_view hint = {});
  /// Error(shape): "<op>: shapes <a> and <b> <why>", e.g. "matmul: shapes [32, 784] and
  /// [128, 10] cannot be multiplied (784 != 128)".
  static Error shape_mismatch(std::string_view op, const Shape& a, const Shape& b, std::string_view why);
  /// Error(value): "<op>: <name> must be <expected>, got <value>" with the value written by
  /// number_text, e.g. "dropout: p must be in [0, 1], got 1.5".
  static Error bad_value(std::string_view op, std::string_view name, double value, std::string_view expected);

private:
  ErrorKind kind_;
};

/// How messages write a number: printf's "%g" (0.1, -1e-09, 1e+20, inf, nan), never
/// "-0.000000". The one number formatter of brrr's messages and printouts of options.
std::string number_text(double v);

// ---------------------------------------------------------------------------------------
// DType
// ---------------------------------------------------------------------------------------

// DType {f32, f64, bf16, f16, i32, i64, boolean}, itemsize(dtype) and is_floating_point(dtype)
// are defined in backend/contract.hpp, the vocabulary nvcc compiles too.
using brrr::DType;
using brrr::itemsize;
using brrr::is_floating_point;
/// PyTorch-style short name: "f32", "f64", "bf16", "f16", "i32", "i64", "bool".
const char* to_string(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);

/// IEEE binary16 (half precision), stored as its bits. Conversions round to nearest even.
struct half {
  std::uint16_t bits = 0;
  half() = default;
  explicit half(float value);
  explicit operator float() const;
  static half from_bits(std::uint16_t b) { half h; h.bits = b; return h; }
};

/// bfloat16 (the top 16 bits of an f32), stored as its bits. Conversions round to nearest
/// even; NaN stays NaN.
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float value);
  explicit operator float() const;
  static bfloat16 from_bits(std::uint16_t b) { bfloat16 h; h.bits = b; return h; }
};

/// The DType of a C++ element type: float f32, double f64, bfloat16 bf16, half f16,
/// int32_t i32, int64_t i64, bool boolean.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

// ---------------------------------------------------------------------------------------
// Device
// ---------------------------------------------------------------------------------------

enum class DeviceType : std::uint8_t { cpu, cuda };

/// Where a tensor's numbers live: the host (cpu) or CUDA device N. A plain value.
class Device {
public:
  /// The host.
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(); }
  /// CUDA device `index`. Throws Error(device) when no CUDA device is available or the
  /// index is out of [0, cuda::device_count()).
  static Device cuda(int index = 0);
  /// Parses "cpu", "cuda", "cuda:N" (validated like cuda()); throws Error(value) otherwise.
  static Device parse(const std::string& text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::cpu; }
  constexpr bool is_cuda() const { return type_ == DeviceType::cuda; }
  /// "cpu" or "cuda:N".
  std::string str() const;
  friend constexpr bool operator==(Device, Device) = default;

private:
  constexpr Device(DeviceType t, int i) : type_(t), index_(i) {}
  DeviceType type_ = DeviceType::cpu;
  int index_ = -1;
};
std::ostream& operator<<(std::ostream& os, Device device);

// ---------------------------------------------------------------------------------------
// Shape and Layout
// ---------------------------------------------------------------------------------------

/// "[2, 3]".
std::string to_string(const Shape& shape);

/// How a tensor's elements sit in its storage: sizes, strides (in elements, may be 0 for
/// broadcast dims) and the offset of element [0, ..., 0]. Pure metadata: views are new
/// Layouts over the same Storage.
struct Layout {
  Shape sizes;
  Shape strides;
  std::int64_t offset = 0;

  /// Row-major strides for `sizes`, offset 0.
  static Layout contiguous(Shape sizes);
  std::int64_t numel() const;
  std::int64_t dim() const { return static_cast<std::int64_t>(sizes.size()); }
  /// Row-major with no gaps (size-1 dims may have any stride).
  bool is_contiguous() const;
};

/// Product of sizes; throws Error(value) for a negative size and on int64 overflow.
std::int64_t checked_numel(const Shape& sizes, const char* op);

// ---------------------------------------------------------------------------------------
// Storage
// ---------------------------------------------------------------------------------------

/// Bytes on one device, shared by all views of them. Owns its allocation through a deleter
/// (the CPU heap, brrr's caching CUDA allocator or its pinned host allocator). Holds the
/// version counter that autograd uses to detect in-place changes.
class Storage {
public:
  Storage() = default;
  /// Adopts `data` (nbytes on device; `pinned`: page-locked host memory). `log` (internal):
  /// the stream record the allocator keeps for these bytes (brrr's CUDA and pinned
  /// allocators), valid while `data` is.
  Storage(std::shared_ptr<void> data, std::size_t nbytes, Device device, bool pinned = false,
          stream_check::AccessLog* log = nullptr);
  /// Allocates `nbytes` on `device` (pinned host memory when `pinned`). Uninitialised.
  /// CUDA allocations are stream-ordered on the device's current stream.
  static Storage allocate(std::size_t nbytes, Device device, bool pinned = false);

  bool defined() const { return impl_ != nullptr; }
  void* data() const;
  std::size_t nbytes() const;
  Device device() const;
  bool pinned() const;
  /// In-place updates bump it; autograd compares it with the value it saved.
  std::uint64_t version() const;
  void bump_version() const;
  /// Number of handles (tensors/views) sharing these bytes.
  long use_count() const { return impl_.use_count(); }
  bool is_same(const Storage& other) const { return impl_ == other.impl_; }
  /// Internal (the CUDA runtime's): the streams that wrote and read these bytes
  /// (cuda/stream_order.cpp); nullptr for an undefined Storage and for CPU heap memory.
  stream_check::AccessLog* access_log() const;

private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

/// Options of factories: `zeros({2, 3}, {.dtype = DType::f64, .device = dev})`. An unset
/// dtype means the factory's default: f32, except i64 for arange(end) and randint (as in
/// PyTorch).
struct TensorOptions {
  std::optional<DType> dtype;
  Device device = Device::cpu();
  bool requires_grad = false;
  /// Page-locked host memory (CPU only), so that copies to a GPU can be asynchronous.
  bool pinned = false;
};

/// Options of Tensor::to(Device).
struct CopyOptions {
  /// From pinned host memory (or device to device): enqueue and return. From pageable
  /// memory the copy still blocks the host (counted by cuda::sync_count()).
  bool non_blocking = false;
};

// ---------------------------------------------------------------------------------------
// Tensor
// ---------------------------------------------------------------------------------------

namespace autograd {
class Node;             // brrr.tensor:graph
class RemovableHandle;  // brrr.tensor:graph
struct HookList;        // brrr.tensor:graph
}
struct TensorInternals;  // implementation units' access to Tensor's state
// What the op shortcuts below call (x.sum() -> TensorMethods::sum(x)), defined by brrr.ops in
// modules/ops.cppm: a class of the global module, so that brrr.tensor names it without
// importing brrr.ops.
extern "C++" struct TensorMethods;

/// A cheap handle (shared ownership) to {Layout, dtype, device, Storage, autograd state}.
/// Copying a Tensor copies the handle, not the numbers. Everything but the numbers is host
/// memory: shape(), strides(), dtype(), device() never touch the device.
class Tensor {
public:
  /// An undefined tensor (like a default torch::Tensor); most calls on it throw.
  Tensor() = default;
  /// A tensor over `storage` with `layout`; checks that the layout stays inside the storage.
  Tensor(Storage storage, Layout layout, DType dtype);

  /// A CPU tensor holding a copy of `values` with `shape` (without a shape, or with an empty
  /// one: 1-D of values.size(); for a 0-d tensor, reshape({}) a one-element result). Throws Error(shape) when the shape's
  /// numel differs from values.size().
  static Tensor from_vector(const std::vector<float>& values);
  static Tensor from_vector(const std::vector<float>& values, Shape shape);
  static Tensor from_vector(const std::vector<double>& values);
  static Tensor from_vector(const std::vector<double>& values, Shape shape);
  static Tensor from_vector(const std::vector<bfloat16>& values);
  static Tensor from_vector(const std::vector<bfloat16>& values, Shape shape);
  static Tensor from_vector(const std::vector<half>& values);
  static Tensor from_vector(const std::vector<half>& values, Shape shape);
  static Tensor from_vector(const std::vector<std::int32_t>& values);
  static Tensor from_vector(const std::vector<std::int32_t>& values, Shape shape);
  static Tensor from_vector(const std::vector<std::int64_t>& values);
  static Tensor from_vector(const std::vector<std::int64_t>& values, Shape shape);
  static Tensor from_vector(const std::vector<bool>& values);
  static Tensor from_vector(const std::vector<bool>& values, Shape shape);
  /// A braced list of one element type: from_vector({1.f, 2.f}) is f32, {1.0, 2.0} f64, {1, 2}
  /// i32 (the dtype of the C++ type, dtype_of<T>; see tensor() for PyTorch's inference).
  template <class T> static Tensor from_vector(std::initializer_list<T> values, Shape shape = {}) {
    return from_vector(std::vector<T>(values), std::move(shape));
  }

  // --- metadata (host only) ---
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  const Shape& sizes() const { return shape(); }
  /// Size of dimension `dim` (negative counts from the end).
  std::int64_t size(std::int64_t dim) const;
  const Shape& strides() const;
  std::int64_t stride(std::int64_t dim) const;
  std::int64_t storage_offset() const;
  const Layout& layout() const;
  DType dtype() const;
  Device device() const;
  std::int64_t numel() const;
  std::int64_t dim() const;
  bool is_contiguous() const;
  std::size_t itemsize() const { return brrr::itemsize(dtype()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * itemsize(); }
  const Storage& storage() const;
  /// Address of element [0, ..., 0] (device memory for CUDA tensors).
  void* data_ptr() const;
  bool is_pinned() const;
  /// True when both handles refer to the same TensorImpl.
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // --- views: new Layout over the same Storage ---
  /// Same numbers, new shape; one size may be -1. Throws Error(shape) when the strides
  /// cannot express it without a copy (use reshape).
  [[nodiscard]] Tensor view(Shape shape) const;
  /// A view when possible, otherwise a contiguous copy.
  [[nodiscard]] Tensor reshape(Shape shape) const;
  /// Reorders dims: out.size(i) == size(dims[i]). dims must be a permutation.
  [[nodiscard]] Tensor permute(Shape dims) const;
  [[nodiscard]] Tensor transpose(std::int64_t dim0, std::int64_t dim1) const;
  /// Transpose of a ≤2-D tensor (PyTorch's .t()).
  [[nodiscard]] Tensor t() const;
  /// Elements start, start+step, ... < end along dim. Negative start/end count from the end;
  /// out-of-range bounds clamp (Python slicing); step must be > 0.
  [[nodiscard]] Tensor slice(std::int64_t dim, std::int64_t start, std::int64_t end,
                             std::int64_t step = 1) const;
  /// `length` elements from `start` along dim; throws Error(index) when out of range.
  [[nodiscard]] Tensor narrow(std::int64_t dim, std::int64_t start, std::int64_t length) const;
  /// Index `index` of dim, removing the dim: [A, B, C].select(1, i) -> [A, C].
  [[nodiscard]] Tensor select(std::int64_t dim, std::int64_t index) const;
  /// Broadcasts size-1 dims (stride 0) and prepends new ones; -1 keeps a size.
  [[nodiscard]] Tensor expand(Shape shape) const;
  /// expand() with NumPy's broadcasting rules spelled out in the error message.
  [[nodiscard]] Tensor broadcast_to(Shape shape) const;
  /// Removes all size-1 dims.
  [[nodiscard]] Tensor squeeze() const;
  /// Removes dim if its size is 1 (otherwise returns the same view, as PyTorch does).
  [[nodiscard]] Tensor squeeze(std::int64_t dim) const;
  /// Inserts a size-1 dim at `dim` (in [-dim()-1, dim()]).
  [[nodiscard]] Tensor unsqueeze(std::int64_t dim) const;
  /// Merges dims start..end into one (a view when possible).
  [[nodiscard]] Tensor flatten(std::int64_t start_dim = 0, std::int64_t end_dim = -1) const;
  /// A view with explicit sizes/strides/offset over the same storage (PyTorch as_strided);
  /// throws Error(index) when it would reach outside the storage.
  [[nodiscard]] Tensor as_strided(Shape sizes, Shape strides, std::int64_t offset) const;
  /// This tensor if contiguous, otherwise a row-major copy on the same device.
  [[nodiscard]] Tensor contiguous() const;

  // --- copies and conversions ---
  /// A contiguous copy (same device and dtype).
  [[nodiscard]] Tensor clone() const;
  /// Converts to `dtype` (a copy unless already that dtype). bf16/f16 round to nearest even;
  /// float -> int truncates toward zero; anything -> bool is (x != 0).
  [[nodiscard]] Tensor to(DType dtype) const;
  /// Copies to `device` (returns *this when already there). CPU -> CUDA from pinned memory
  /// with non_blocking is asynchronous; from pageable memory it blocks the host (a counted
  /// sync). CUDA -> CPU: non_blocking gives pinned output and no wait; otherwise it waits.
  [[nodiscard]] Tensor to(Device device, CopyOptions options = {}) const;
  /// Copies into page-locked host memory (CPU tensors only).
  [[nodiscard]] Tensor pin_memory() const;
  /// Copies src's values into this tensor in place (shapes broadcast, dtypes convert,
  /// devices must match unless one side is the CPU). Bumps the version counter.
  Tensor& copy_(const Tensor& src, CopyOptions options = {});
  /// Writes `value` into every element in place. Bumps the version counter.
  Tensor& fill_(double value);

  /// All elements, row-major, as a host vector. T must match dtype() exactly (float for f32,
  /// double f64, bfloat16, half, int32_t, int64_t, bool); else Error(dtype). A sync point on
  /// CUDA: copies only numel elements (made contiguous on the device first).
  template <class T> std::vector<T> to_host() const;
  /// The single element's value (numel must be 1, else Error(shape)) converted to T (float,
  /// double, bfloat16, half, int32_t, int64_t, bool) from any dtype, as PyTorch's item():
  /// floats to integers truncate toward zero, a value outside T's range (NaN, inf included)
  /// is Error(value), anything to bool is x != 0. A sync point on CUDA.
  template <class T> T item() const;
  /// item() without conversion: T must match dtype() exactly (as to_host), else Error(dtype).
  template <class T> T item_exact() const;

  // --- autograd ---
  /// True for leaves marked requires_grad and for results of ops recorded in a graph.
  bool requires_grad() const;
  /// Marks a leaf as requiring grad (floating dtypes only); Error(autograd) on a non-leaf
  /// asked to stop requiring grad (use detach()). Returns *this.
  Tensor& requires_grad_(bool requires_grad = true);
  /// True when no op recorded this tensor (it has no grad_fn).
  bool is_leaf() const;
  /// The gradient accumulated into this leaf by backward(); undefined until then (and after
  /// an optimizer's zero_grad, which sets it to none).
  Tensor grad() const;
  /// Replaces the stored gradient (an undefined tensor clears it).
  void set_grad(const Tensor& grad) const;
  /// The graph node that produced this tensor (nullptr for leaves).
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  /// Which output of grad_fn() this tensor is.
  std::uint32_t output_nr() const;
  /// Reverse-mode differentiation from this tensor: accumulates d(this)/d(leaf), weighted by
  /// `gradient` (required unless numel() == 1; same shape as this), into every leaf that
  /// requires grad. Frees the graph unless retain_graph; with create_graph the backward pass
  /// is itself recorded, so the gradients can be differentiated again. Throws
  /// Error(autograd) when nothing requires grad or a saved tensor was modified in place.
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  /// The same numbers (shared storage) cut from the graph: a leaf with requires_grad false.
  [[nodiscard]] Tensor detach() const;
  /// Makes this handle (and every copy of it) refer to `other`'s storage, layout and dtype,
  /// keeping its autograd identity (requires_grad, grad): PyTorch's `param.data = other`.
  /// Used by Module::to() so that optimizers holding the parameters stay valid.
  void set_data(const Tensor& other) const;
  /// For op implementations: makes this tensor output `output_nr` of `fn`.
  void set_grad_fn(std::shared_ptr<autograd::Node> fn, std::uint32_t output_nr = 0) const;
  /// A gradient hook (PyTorch's register_hook): during backward, fn(grad) runs on the gradient
  /// with respect to this tensor (summed over its uses) before it is accumulated into a leaf's
  /// grad() or passed on to the op that made it; a defined result replaces the gradient
  /// (shape must match). Hooks run in registration order. Error(autograd) unless this tensor
  /// requires grad.
  autograd::RemovableHandle register_hook(std::function<Tensor(const Tensor&)> fn) const;
  /// Leaves only: fn(leaf) runs each time backward has accumulated a gradient into grad()
  /// (PyTorch's register_post_accumulate_grad_hook; DDP starts its bucket all-reduces here).
  /// Error(autograd) for a non-leaf or a leaf that does not require grad.
  autograd::RemovableHandle register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  /// Makes backward keep this non-leaf's gradient in grad() (accumulated like a leaf's); a
  /// no-op for leaves. Error(autograd) unless it requires grad.
  void retain_grad() const;
  /// True for leaves that require grad and for non-leaves after retain_grad().
  bool retains_grad() const;

  /// x[i] is select(0, i) (LibTorch's x[i]): [A, B, ...] -> [B, ...], a view.
  [[nodiscard]] Tensor operator[](std::int64_t index) const { return select(0, index); }

  // --- op methods (LibTorch's spelling) ---
  // x.pow(2) is brrr::pow(x, 2), for every entry of BRRR_TENSOR_METHODS (tensor/methods.hpp):
  // see the free functions' documentation in modules/ops.cppm. They are templates over
  // TensorMethods (defined by brrr.ops), so the call is resolved where it is written, in code
  // that imports brrr.ops (`import brrr;` does): brrr.tensor itself does not depend on the
  // op layer.
#define BRRR_TENSOR_METHOD(name, params, args)                    \
  template <class Ops = TensorMethods> auto name params const { \
    const Tensor& self = *this;                                   \
    return Ops::name BRRR_METHOD_SELF_ARGS args;                  \
  }
#define BRRR_TENSOR_PURE_METHOD(name, params, args)                             \
  template <class Ops = TensorMethods> [[nodiscard]] auto name params const { \
    const Tensor& self = *this;                                                 \
    return Ops::name BRRR_METHOD_SELF_ARGS args;                                \
  }
  BRRR_TENSOR_METHODS(BRRR_TENSOR_PURE_METHOD, typename Ops::Scalar)
  BRRR_TENSOR_INPLACE_METHODS(BRRR_TENSOR_METHOD, typename Ops::Scalar)
#undef BRRR_TENSOR_PURE_METHOD
#undef BRRR_TENSOR_METHOD

  /// LibTorch's indexing: x.index({Slice(0, 8), 2, None, Ellipsis, idx, mask}) and x[idx]
  /// (brrr::index, modules/ops.cppm).
  template <class Ops = TensorMethods>
  [[nodiscard]] Tensor index(std::initializer_list<typename Ops::TensorIndex> indices) const {
    return Ops::index(*this, indices);
  }
  template <class Ops = TensorMethods>
  [[nodiscard]] Tensor index(const std::vector<typename Ops::TensorIndex>& indices) const {
    return Ops::index(*this, indices);
  }
  template <class Ops = TensorMethods> [[nodiscard]] Tensor operator[](const Tensor& index) const {
    return Ops::index(*this, {index});
  }
  /// x.index_put_({...}, values): brrr::index_put_ (in place; returns *this).
  template <class Ops = TensorMethods>
  Tensor index_put_(std::initializer_list<typename Ops::TensorIndex> indices, const Tensor& values,
                    bool accumulate = false) const {
    return Ops::index_put_(*this, indices, values, accumulate);
  }
  template <class Ops = TensorMethods>
  Tensor index_put_(std::initializer_list<typename Ops::TensorIndex> indices, typename Ops::Scalar value) const {
    return Ops::index_put_(*this, indices, value);
  }
  /// x.index_put({...}, values): brrr::index_put (out of place).
  template <class Ops = TensorMethods>
  [[nodiscard]] Tensor index_put(std::initializer_list<typename Ops::TensorIndex> indices, const Tensor& values,
                                 bool accumulate = false) const {
    return Ops::index_put(*this, indices, values, accumulate);
  }

private:
  friend struct TensorInternals;
  struct Impl;
  explicit Tensor(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  const Impl& checked(const char* op) const;
  std::shared_ptr<Impl> impl_;
};

/// "[2, 3] f32 on cuda:0" ("undefined" for an undefined tensor): how error messages name a
/// tensor.
std::string describe(const Tensor& t);

/// Prints like PyTorch: values (summarised past 1000 elements), then shape, dtype, device.
/// Reads CUDA tensors back (a sync point).
std::ostream& operator<<(std::ostream& os, const Tensor& tensor);

/// A number standing in for a tensor operand: a 0-d CPU tensor of `dtype` (f64, i64 or bool;
/// Error(dtype) otherwise) that the elementwise ops read as a scalar whatever the other
/// operands' device, promoting like a number (result_type), and whose results on numbers
/// alone are numbers again. PyTorch's "wrapped numbers": how a backward rule written for two
/// tensors also serves the (tensor, number) overloads. It never requires grad.
[[nodiscard]] Tensor wrapped_number(double value, DType dtype = DType::f64);
/// True for a tensor made by wrapped_number (or by an op on wrapped numbers only).
bool is_wrapped_number(const Tensor& t);

/// Sums `x` down to `shape`: the inverse of broadcasting, and the gradient rule of expand.
/// Sums the leading extra dims and the dims where `shape` has 1; returns x itself when the
/// shapes are equal; Error(shape) when x's shape is not a broadcast of `shape`. Integers and
/// bool give i64. Differentiable (its gradient is expand).
[[nodiscard]] Tensor sum_to_size(const Tensor& x, const Shape& shape);

// ---------------------------------------------------------------------------------------
// Profiling
// ---------------------------------------------------------------------------------------

/// When on, every op opens an NVTX range named after it (e.g. "matmul") around its host-side
/// work, and every backward rule one named after its node ("MatmulBackward"), so Nsight
/// Systems timelines show brrr's ops above their kernels. Off by default; the cost when off
/// is one relaxed atomic load per op. (No-op in a build without CUDA.)
void set_nvtx_enabled(bool enabled);
bool nvtx_enabled();

}  // namespace brrr

namespace brrr {
extern std::atomic<bool> nvtx_on;  // tensor/nvtx.cpp
void nvtx_push(const char* name);
void nvtx_pop();
}  // namespace brrr

export namespace brrr {

/// An NVTX range named `name` for its scope when profiling is on (RAII); `name` must outlive
/// it. Ops open one named after themselves; code of your own may too.
class NvtxRange {
public:
  explicit NvtxRange(const char* name) : active_(nvtx_on.load(std::memory_order_relaxed)) {
    if (active_) nvtx_push(name);
  }
  ~NvtxRange() {
    if (active_) nvtx_pop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

private:
  bool active_;
};

// ---------------------------------------------------------------------------------------
// Factories. All take TensorOptions; on CUDA they run as kernels on the current stream with
// no host round trip.
// ---------------------------------------------------------------------------------------

/// A number or a nested braced list of numbers, what tensor() takes (LibTorch's
/// TensorDataContainer): 1.5, {1, 2, 3}, {{1.f, 2.f}, {3.f, 4.f}}, or a std::vector of numbers.
class TensorData {
public:
  template <class T>
    requires std::is_arithmetic_v<T>
  TensorData(T value)
      : kind_(std::is_same_v<T, bool> ? Kind::boolean : std::is_integral_v<T> ? Kind::integer : Kind::floating),
        real_(static_cast<double>(value)), integer_(std::is_integral_v<T> ? static_cast<std::int64_t>(value) : 0) {}
  TensorData(std::initializer_list<TensorData> list) : kind_(Kind::list), list_(list) {}
  template <class T>
    requires std::is_arithmetic_v<T>
  TensorData(const std::vector<T>& values) : kind_(Kind::list), list_(values.begin(), values.end()) {}

  enum class Kind : std::uint8_t { boolean, integer, floating, list };
  Kind kind() const { return kind_; }
  double real() const { return real_; }
  std::int64_t integer() const { return integer_; }
  const std::vector<TensorData>& list() const { return list_; }

private:
  Kind kind_;
  double real_ = 0;
  std::int64_t integer_ = 0;
  std::vector<TensorData> list_;
};

/// A tensor from a literal, as LibTorch's torch::tensor: tensor(2.5) is 0-d, tensor({1, 2, 3})
/// 1-D, tensor({{1, 2}, {3, 4}}) 2-D. Without options.dtype: f32 if any number is floating,
/// else i64 for integers, bool for bools only (PyTorch's inference). Nested lists must be
/// regular (Error(shape) naming the ragged level). Made on the CPU, then moved to
/// options.device.
[[nodiscard]] Tensor tensor(const TensorData& data, TensorOptions options = {});

/// Uninitialised memory.
[[nodiscard]] Tensor empty(Shape shape, TensorOptions options = {});
[[nodiscard]] Tensor zeros(Shape shape, TensorOptions options = {});
[[nodiscard]] Tensor ones(Shape shape, TensorOptions options = {});
/// Every element `value` (converted to options.dtype).
[[nodiscard]] Tensor full(Shape shape, double value, TensorOptions options = {});
/// [0, end) with step 1. Default dtype i64, as torch.arange with integer arguments.
[[nodiscard]] Tensor arange(std::int64_t end, TensorOptions options = {});
/// start, start+step, ... < end (> end for negative step): ceil((end-start)/step) elements.
/// Throws Error(value) for step 0 or a step pointing away from end.
[[nodiscard]] Tensor arange(double start, double end, double step = 1.0,
                            TensorOptions options = {});
/// n x m identity (m defaults to n).
[[nodiscard]] Tensor eye(std::int64_t n, std::int64_t m = -1, TensorOptions options = {});
[[nodiscard]] Tensor empty_like(const Tensor& like, std::optional<TensorOptions> options = {});
[[nodiscard]] Tensor zeros_like(const Tensor& like, std::optional<TensorOptions> options = {});
[[nodiscard]] Tensor ones_like(const Tensor& like, std::optional<TensorOptions> options = {});
[[nodiscard]] Tensor full_like(const Tensor& like, double value,
                               std::optional<TensorOptions> options = {});

/// The size of the CPU backend's intra-op thread pool (the calling thread included), used
/// by GEMM, elementwise ops, reductions and row ops above a size threshold. Defaults to the
/// environment's BRRR_NUM_THREADS, else the cores the process may use (its CPU affinity).
/// set_num_threads throws Error(value) unless n >= 1; it takes effect at the next op.
void set_num_threads(int n);
int get_num_threads();

/// Seeds the generators of every device (CPU and each CUDA device) and resets their
/// offsets: the same seed gives bit-identical rand, randn and randint on CPU and GPU.
void manual_seed(std::uint64_t seed);
/// Uniform on [0, 1). Floating dtypes only.
/// Draws: cuRAND Philox4x32-10 32-bit words (host generator on the CPU, device generator on
/// CUDA) with one transform of our own: f32/f16/bf16 use 24 bits, f64 53 bits.
[[nodiscard]] Tensor rand(Shape shape, TensorOptions options = {});
/// Standard normal. Box-Muller (Box & Muller 1958) pairs: elements 2j and 2j + 1 are the
/// cosine and sine halves of one draw, from two 32-bit uniforms computed in f32 (f16 and bf16
/// round the f32 values), or two 53-bit uniforms in double for f64; |z| <= 6.76 (f32) and
/// 8.58 (f64). Our own log/sin/cos (ops/normal_math.hpp): within 4 ulps of exact, and the same
/// bits on CPU and GPU. Floating dtypes only.
[[nodiscard]] Tensor randn(Shape shape, TensorOptions options = {});
/// Uniform integers in [low, high). Default dtype i64. Throws Error(value) if high <= low.
[[nodiscard]] Tensor randint(std::int64_t low, std::int64_t high, Shape shape, TensorOptions options = {});

}  // namespace brrr

// Not exported: the state behind the handles, shared by this module's implementation units.
namespace brrr {

struct Storage::Impl {
  std::shared_ptr<void> data;
  std::size_t nbytes = 0;
  Device device;
  bool pinned = false;
  mutable std::uint64_t version = 0;
  stream_check::AccessLog* log = nullptr;  // in the allocator's block (see access_log())
};

struct Tensor::Impl {
  Storage storage;
  Layout layout;
  DType dtype = DType::f32;
  bool requires_grad = false;  // leaves only; non-leaves require grad through grad_fn
  bool wrapped_number = false;  // made by wrapped_number(): a 0-d CPU number
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::uint32_t output_nr = 0;
  std::weak_ptr<autograd::Node> accumulator;  // a leaf's AccumulateGrad, made on demand
  std::shared_ptr<autograd::HookList> hooks;  // a leaf's hooks (register_hook and friends)
  bool retains_grad = false;                  // a non-leaf whose gradient is kept (retain_grad)
};

// The backward rules of the views, recorded by tensor/views.cpp and tensor/convert.cpp
// (tensor/view_backward.cpp): each makes `view` (or `out`) the output of a graph node named
// `name` whose input is `input`.
namespace view_autograd {
void record_reshape(const char* name, const Tensor& input, const Tensor& view);
void record_permute(const char* name, const Tensor& input, const Tensor& view, const Shape& dims);
void record_expand(const Tensor& input, const Tensor& view);
void record_slice(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t start, std::int64_t end,
                  std::int64_t step);
void record_select(const Tensor& input, const Tensor& view, std::int64_t dim, std::int64_t index);
void record_as_strided(const Tensor& input, const Tensor& view);
void record_identity(const char* name, const Tensor& input, const Tensor& out);
}  // namespace view_autograd

struct TensorInternals {
  using Impl = Tensor::Impl;
  static Tensor::Impl& impl(const Tensor& t) { return *t.impl_; }
  static const std::shared_ptr<Tensor::Impl>& ptr(const Tensor& t) { return t.impl_; }
  static Tensor wrap(std::shared_ptr<Tensor::Impl> impl) { return Tensor(std::move(impl)); }
};

}  // namespace brrr
