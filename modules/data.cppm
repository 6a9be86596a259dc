// brrr.data — datasets and a DataLoader that keeps the GPU fed without making the host
// wait: a worker thread assembles batches in pinned host memory, and each batch is copied
// with non_blocking on a dedicated transfer stream while the compute stream works on the
// previous one; an event orders the two (the two-stream pattern).
module;
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>
export module brrr.data;
import brrr.tensor;
import brrr.cuda;

export namespace brrr::data {

/// Reads an IDX file (the MNIST format: magic 0x0000TTNN, big-endian dims, then data),
/// gzip-compressed (.gz, via zlib) or plain. Unsigned-byte data only (type 0x08) -> a CPU
/// tensor: i64 for 1-D files (labels), f32 in [0, 1] (value / 255) otherwise (images).
/// Throws Error(io) naming the path and the problem: missing file, bad magic, unsupported
/// type, dims that do not match the file length, truncated or corrupt gzip data.
Tensor read_idx(const std::string& path);

/// A random-access collection of examples, each a fixed list of tensors (e.g. {image, label}).
/// A custom dataset defines size() and get(i); the rest has defaults.
class Dataset {
public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  /// Example `index` (CPU tensors), the same shapes and dtypes for every index.
  virtual std::vector<Tensor> get(std::int64_t index) const = 0;
  /// Writes the examples at `indices` into `out` (one CPU tensor per field with a leading
  /// batch dim, possibly pinned). The default copies get() of each; override for speed.
  /// Error(shape) naming the index when an example's field has another shape or dtype.
  virtual void gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const;
  /// Shape and dtype of each field of one example (for allocating batches). The default
  /// reads them from get(0) (Error(value) for an empty dataset).
  virtual std::vector<std::pair<Shape, DType>> fields() const;
};

/// Examples are the rows (first dim) of CPU tensors of equal length, e.g. {images [N, 1, 28,
/// 28] f32, labels [N] i64}. gather() copies rows with memcpy.
class TensorDataset final : public Dataset {
public:
  explicit TensorDataset(std::vector<Tensor> columns);
  std::int64_t size() const override;
  std::vector<Tensor> get(std::int64_t index) const override;
  void gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const override;
  std::vector<std::pair<Shape, DType>> fields() const override;
  const std::vector<Tensor>& columns() const { return columns_; }

private:
  std::vector<Tensor> columns_;
};

/// The examples of `dataset` at `indices`, in that order (PyTorch's Subset): example i is
/// dataset's example indices[i]. What a DistributedSampler's shard of an epoch is fed through.
/// Error(index) for an index outside the dataset.
class Subset final : public Dataset {
public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices);
  std::int64_t size() const override;
  std::vector<Tensor> get(std::int64_t index) const override;
  void gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const override;
  std::vector<std::pair<Shape, DType>> fields() const override;
  const std::vector<std::int64_t>& indices() const { return indices_; }

private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::int64_t> indices_;
};

/// The directory the Debian package dataset-fashion-mnist installs.
inline constexpr const char* default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";

/// Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) from `dir`: {train,t10k}-{images-idx3,labels-idx1}
/// -ubyte[.gz]. Images [N, 1, 28, 28] f32 in [0, 1], labels [N] i64. A missing directory is
/// Error(io) naming it (and, for the default one, the Debian package that provides it).
std::shared_ptr<TensorDataset> fashion_mnist(const std::string& dir, bool train);

struct DataLoaderOptions {
  std::int64_t batch_size = 64;
  bool shuffle = false;
  /// Seed of the shuffle; epoch e uses seed + e, so runs are reproducible.
  std::uint64_t seed = 0;
  bool drop_last = false;
  /// Where batches are delivered. For CUDA: pinned host batches, non_blocking copies on a
  /// transfer stream, and the compute stream (the current stream when the loader was made)
  /// waits on an event per batch.
  Device device = Device::cpu();
  /// Host batches assembled ahead by the worker thread.
  int prefetch = 2;
  /// Applied to field 0 of every batch (the inputs, e.g. images [N, C, H, W]) once it is on
  /// `device`, on the compute stream: e.g. transforms::Compose{RandomCrop(28, 2), Normalize(...)}.
  std::function<Tensor(const Tensor&)> transform;
};

/// One batch: a tensor per dataset field, on the loader's device.
struct Batch {
  std::vector<Tensor> fields;
  const Tensor& operator[](std::size_t i) const { return fields.at(i); }
};

/// Iterates a dataset in batches. One epoch per begin()/end() loop; a background thread
/// assembles the next batches while the current one is used. No host-device sync per batch.
class DataLoader {
public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Batches per epoch.
  std::int64_t num_batches() const;
  const DataLoaderOptions& options() const;

  class Iterator {
  public:
    const Batch& operator*() const { return batch_; }
    const Batch* operator->() const { return &batch_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return done_ == other.done_; }
    bool operator!=(const Iterator& other) const { return !(*this == other); }

  private:
    friend class DataLoader;
    DataLoader* loader_ = nullptr;
    Batch batch_;
    bool done_ = true;
  };
  /// Starts an epoch (the previous one, if unfinished, is abandoned).
  Iterator begin();
  Iterator end() { return Iterator(); }

private:
  struct State;
  std::unique_ptr<State> state_;
};

// ---------------------------------------------------------------------------------------
// Transforms of a batch on its device (torchvision's, batched): images [N, C, H, W], any
// floating dtype, any device; the random ones draw from the device's seeded generator (the
// same numbers on CPU and GPU) with no host sync.
// ---------------------------------------------------------------------------------------

namespace transforms {

using Transform = std::function<Tensor(const Tensor&)>;

/// (x - mean[c]) / std[c] per channel (dim 1). Error(value) for mismatched lengths or a std
/// <= 0; Error(shape) when x's channels differ from mean's length (a length 1 applies to all).
/// The constants are copied to each device once and kept.
class Normalize {
public:
  Normalize(std::vector<double> mean, std::vector<double> std);
  Tensor operator()(const Tensor& x) const;

private:
  std::vector<double> mean_, std_;
  std::shared_ptr<std::map<std::pair<int, int>, std::pair<Tensor, Tensor>>> cache_;  // (device, dtype) -> [1, C, 1, 1]
};

/// A random size[0] x size[1] window of each image (its own offset per image), after
/// zero-padding every side by `padding`. Error(shape) when the (padded) image is smaller.
class RandomCrop {
public:
  RandomCrop(std::int64_t size, std::int64_t padding = 0) : RandomCrop(size, size, padding) {}
  RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding);
  Tensor operator()(const Tensor& x) const;

private:
  std::int64_t height_, width_, padding_;
};

/// Mirrors each image left-right with probability p (drawn per image).
class RandomHorizontalFlip {
public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor operator()(const Tensor& x) const;

private:
  double p_;
};

/// Applies its transforms in order.
class Compose {
public:
  Compose(std::vector<Transform> transforms) : transforms_(std::move(transforms)) {}
  Compose(std::initializer_list<Transform> transforms) : transforms_(transforms) {}
  Tensor operator()(const Tensor& x) const {
    Tensor y = x;
    for (const Transform& t : transforms_) y = t(y);
    return y;
  }

private:
  std::vector<Transform> transforms_;
};

}  // namespace transforms

}  // namespace brrr::data
