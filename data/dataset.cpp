#include "data/dataset.h"

#include <numeric>

#include "core/comm/process_group.h"
#include "core/random.h"

namespace flow::data {
namespace {
// Fisher-Yates driven by Philox counters of (seed, epoch): reproducible on any thread count.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = n - 1; i > 0; --i) {
    uint32_t words[4];
    Philox::block(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(epoch + 1)), static_cast<uint64_t>(i), words);
    const uint64_t bits = (static_cast<uint64_t>(words[0]) << 32) | words[1];
    std::swap(order[static_cast<size_t>(i)], order[bits % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}
}  // namespace

TensorDataset::TensorDataset(Tensor data, Tensor targets) : data_(std::move(data)), targets_(std::move(targets)) {
  if (data_.dim() == 0 || targets_.dim() == 0) fail("TensorDataset", "data and targets need a first dimension");
  if (data_.size(0) != targets_.size(0)) {
    fail("TensorDataset", "size mismatch between data ", data_.shape(), " and targets ", targets_.shape());
  }
}

Example TensorDataset::get(int64_t index) const {
  if (index < 0 || index >= size()) fail("TensorDataset", "index ", index, " is out of range for ", size(), " examples");
  return {data_.select(0, index), targets_.select(0, index)};
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return permutation(size_, seed_, epoch); }

DistributedSampler::DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options)
    : size_(dataset_size),
      num_replicas_(options.num_replicas_.value_or(distributed::get_world_size())),
      rank_(options.rank_.value_or(distributed::get_rank())),
      shuffle_(options.shuffle_),
      seed_(options.seed_) {
  if (dataset_size < 0) fail("DistributedSampler", "dataset size must be non-negative, got ", dataset_size);
  if (num_replicas_ < 1) fail("DistributedSampler", "num_replicas must be at least 1, got ", num_replicas_);
  if (rank_ < 0 || rank_ >= num_replicas_) {
    fail("DistributedSampler", "invalid rank ", rank_, ", rank should be in [0, ", num_replicas_ - 1, "]");
  }
  num_samples_ = options.drop_last_ ? size_ / num_replicas_ : (size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const int64_t effective_epoch = epoch_.value_or(epoch);
  std::vector<int64_t> order = shuffle_ ? permutation(size_, seed_, effective_epoch) : SequentialSampler(size_).indices(0);
  const int64_t total = num_samples_ * num_replicas_;
  for (int64_t i = size_; i < total; ++i) order.push_back(order[static_cast<size_t>((i - size_) % size_)]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace flow::data
