#pragma once
// Datasets, samplers and the DataLoader (torch.utils.data in C++).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace flow::data {

struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
};

// Rows of data and targets (indexed along dim 0).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override { return data_.size(0); }
  Example get(int64_t index) const override;

 private:
  Tensor data_, targets_;
};

// The indices of one epoch.
class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t size_;
};

// A new permutation every epoch, determined by (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t size_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  // Defaults: flow::distributed::get_world_size() and get_rank() (1 and 0 without a group).
  DistributedSamplerOptions& num_replicas(int64_t v) { num_replicas_ = v; return *this; }
  DistributedSamplerOptions& rank(int64_t v) { rank_ = v; return *this; }
  DistributedSamplerOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  // Every rank must use the same seed: the shuffled order is shared, then dealt out.
  DistributedSamplerOptions& seed(uint64_t v) { seed_ = v; return *this; }
  // Drop the tail that does not divide evenly instead of padding with repeated indices.
  DistributedSamplerOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  std::optional<int64_t> num_replicas_;
  std::optional<int64_t> rank_;
  bool shuffle_ = true;
  uint64_t seed_ = 0;
  bool drop_last_ = false;
};

// This replica's share of the (optionally shuffled) indices, as torch's DistributedSampler:
// the order of (seed, epoch) is padded by repeating its first indices to a multiple of
// num_replicas (or cut with drop_last), and rank r takes positions r, r + num_replicas, ...
// Every rank gets num_samples() indices, so every rank runs the same number of steps.
class DistributedSampler : public Sampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, const DistributedSamplerOptions& options = {});
  // The epoch is set_epoch's value once it has been called (call it on every rank before each
  // epoch, as in PyTorch); until then it is the DataLoader's pass number.
  std::vector<int64_t> indices(int64_t epoch) const override;
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t num_samples() const { return num_samples_; }
  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t size_, num_replicas_, rank_, num_samples_;
  bool shuffle_;
  uint64_t seed_;
  std::optional<int64_t> epoch_;
};

}  // namespace flow::data
