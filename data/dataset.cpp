// Dataset, TensorDataset and the Fashion-MNIST loader.
module;
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>
module brrr.data;
import brrr.tensor;

namespace brrr::data {

void Dataset::gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const {
  for (std::size_t k = 0; k < indices.size(); ++k) {
    std::vector<Tensor> ex = get(indices[k]);
    if (ex.size() != out.size())
      throw Error(ErrorKind::shape, "Dataset::gather: example " + std::to_string(indices[k]) + " has " +
                                        std::to_string(ex.size()) + " fields, the first had " +
                                        std::to_string(out.size()));
    for (std::size_t f = 0; f < out.size(); ++f) {
      Tensor row = out[f].select(0, static_cast<std::int64_t>(k));
      if (!ex[f].defined() || ex[f].shape() != row.shape() || ex[f].dtype() != row.dtype())
        throw Error(ErrorKind::shape, "Dataset::gather: field " + std::to_string(f) + " of example " +
                                          std::to_string(indices[k]) + " is " + describe(ex[f]) +
                                          ", the first example's is " + describe(row));
      NoGradGuard no_grad;
      row.copy_(ex[f]);
    }
  }
}

std::vector<std::pair<Shape, DType>> Dataset::fields() const {
  if (size() <= 0) throw Error(ErrorKind::value, "Dataset::fields: the dataset is empty");
  std::vector<std::pair<Shape, DType>> out;
  for (const Tensor& t : get(0)) {
    if (!t.defined()) throw Error(ErrorKind::value, "Dataset::fields: example 0 has an undefined field");
    out.emplace_back(t.shape(), t.dtype());
  }
  return out;
}

TensorDataset::TensorDataset(std::vector<Tensor> columns) : columns_(std::move(columns)) {
  if (columns_.empty()) throw Error(ErrorKind::value, "TensorDataset: needs at least one tensor");
  for (auto& c : columns_) {
    if (!c.defined() || c.dim() == 0)
      throw Error(ErrorKind::shape, "TensorDataset: every tensor needs a leading example dim");
    if (!c.device().is_cpu())
      throw Error(ErrorKind::device, "TensorDataset: tensors must be on the CPU, got " + c.device().str());
    if (c.size(0) != columns_[0].size(0))
      throw Error(ErrorKind::shape, "TensorDataset: tensors have different lengths " + to_string(columns_[0].shape()) +
                                        " and " + to_string(c.shape()));
    c = c.contiguous();
  }
}

std::int64_t TensorDataset::size() const { return columns_[0].size(0); }

std::vector<Tensor> TensorDataset::get(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw Error(ErrorKind::index, "TensorDataset::get: index " + std::to_string(index) + " out of range for " +
                                      std::to_string(size()) + " examples");
  std::vector<Tensor> ex;
  for (const Tensor& c : columns_) ex.push_back(c.select(0, index));
  return ex;
}

void TensorDataset::gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const {
  for (std::size_t f = 0; f < columns_.size(); ++f) {
    const Tensor& c = columns_[f];
    std::size_t row = c.nbytes() / static_cast<std::size_t>(c.size(0));
    auto* src = static_cast<const char*>(c.data_ptr());
    auto* dst = static_cast<char*>(out[f].data_ptr());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      std::int64_t i = indices[k];
      if (i < 0 || i >= c.size(0))
        throw Error(ErrorKind::index, "TensorDataset::gather: index " + std::to_string(i) + " out of range");
      std::memcpy(dst + k * row, src + static_cast<std::size_t>(i) * row, row);
    }
  }
}

std::vector<std::pair<Shape, DType>> TensorDataset::fields() const {
  std::vector<std::pair<Shape, DType>> f;
  for (const Tensor& c : columns_) f.emplace_back(Shape(c.shape().begin() + 1, c.shape().end()), c.dtype());
  return f;
}

std::shared_ptr<TensorDataset> fashion_mnist(const std::string& dir, bool train) {
  if (!std::filesystem::is_directory(dir)) {
    std::string hint = dir == default_fashion_mnist_dir ? " (install the Debian package dataset-fashion-mnist, or "
                                                          "pass the directory holding the IDX files)"
                                                        : "";
    throw Error(ErrorKind::io, "fashion_mnist: directory " + dir + " does not exist" + hint);
  }
  std::string prefix = train ? "train" : "t10k";
  auto find = [&](const std::string& stem) {
    for (const char* ext : {".gz", ""}) {
      std::string p = dir + "/" + stem + ext;
      if (std::filesystem::is_regular_file(p)) return p;
    }
    throw Error(ErrorKind::io, "fashion_mnist: " + dir + "/" + stem + "[.gz] is missing");
  };
  Tensor images = read_idx(find(prefix + "-images-idx3-ubyte"));
  Tensor labels = read_idx(find(prefix + "-labels-idx1-ubyte"));
  if (images.dim() != 3 || images.size(1) != 28 || images.size(2) != 28)
    throw Error(ErrorKind::io, "fashion_mnist: images in " + dir + " have shape " + to_string(images.shape()) +
                                   ", expected [N, 28, 28]");
  if (labels.dim() != 1 || labels.size(0) != images.size(0))
    throw Error(ErrorKind::io, "fashion_mnist: " + std::to_string(labels.numel()) + " labels for " +
                                   std::to_string(images.size(0)) + " images in " + dir);
  return std::make_shared<TensorDataset>(std::vector<Tensor>{images.unsqueeze(1), labels});
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<std::int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw Error(ErrorKind::value, "Subset: the dataset is null");
  std::int64_t n = dataset_->size();
  for (std::int64_t i : indices_)
    if (i < 0 || i >= n)
      throw Error(ErrorKind::index, "Subset: index " + std::to_string(i) + " is outside a dataset of " +
                                        std::to_string(n) + " examples");
}

std::int64_t Subset::size() const { return static_cast<std::int64_t>(indices_.size()); }

std::vector<Tensor> Subset::get(std::int64_t index) const {
  if (index < 0 || index >= size())
    throw Error(ErrorKind::index, "Subset::get: index " + std::to_string(index) + " out of range for " +
                                      std::to_string(size()) + " examples");
  return dataset_->get(indices_[static_cast<std::size_t>(index)]);
}

void Subset::gather(const std::vector<std::int64_t>& indices, std::vector<Tensor>& out) const {
  std::vector<std::int64_t> mapped;
  mapped.reserve(indices.size());
  for (std::int64_t i : indices) {
    if (i < 0 || i >= size())
      throw Error(ErrorKind::index, "Subset::gather: index " + std::to_string(i) + " out of range");
    mapped.push_back(indices_[static_cast<std::size_t>(i)]);
  }
  dataset_->gather(mapped, out);
}

std::vector<std::pair<Shape, DType>> Subset::fields() const { return dataset_->fields(); }

}  // namespace brrr::data
