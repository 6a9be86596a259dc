// data::DistributedSampler: each rank's share of an epoch (PyTorch's DistributedSampler with
// our own seeded shuffle, the same on every rank).
module;
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>
module brrr.dist;
import brrr.tensor;

namespace brrr::data {

DistributedSampler::DistributedSampler(std::int64_t size, DistributedSamplerOptions options)
    : size_(size), options_(options) {
  replicas_ = options.num_replicas ? *options.num_replicas : dist::world_size();
  rank_ = options.rank ? *options.rank : dist::rank();
  if (size < 0) throw Error(ErrorKind::value, "DistributedSampler: negative dataset size " + std::to_string(size));
  if (replicas_ < 1 || rank_ < 0 || rank_ >= replicas_)
    throw Error(ErrorKind::value, "DistributedSampler: rank " + std::to_string(rank_) + " is outside [0, " +
                                      std::to_string(replicas_) + ")");
}

void DistributedSampler::set_epoch(std::int64_t epoch) { epoch_ = epoch; }

std::int64_t DistributedSampler::num_samples() const {
  return options_.drop_last ? size_ / replicas_ : (size_ + replicas_ - 1) / replicas_;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size_));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed + static_cast<std::uint64_t>(epoch_));
    std::shuffle(order.begin(), order.end(), rng);
  }
  const std::int64_t total = num_samples() * replicas_;
  if (static_cast<std::int64_t>(order.size()) > total) {
    order.resize(static_cast<std::size_t>(total));  // drop_last: cut the tail
  } else {
    // Pad by repeating the order from its start (more than once for a tiny dataset).
    for (std::size_t i = 0; static_cast<std::int64_t>(order.size()) < total && size_ > 0; ++i)
      order.push_back(order[i]);
  }
  std::vector<std::int64_t> mine;
  for (std::int64_t i = rank_; i < total; i += replicas_) mine.push_back(order[static_cast<std::size_t>(i)]);
  return mine;
}

}  // namespace brrr::data
