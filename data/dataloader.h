#pragma once
#include <cstdint>
#include <deque>
#include <future>
#include <memory>

#include "data/dataset.h"

namespace flow::data {

struct Batch {
  Tensor data;    // examples stacked along a new dim 0
  Tensor target;
};

struct DataLoaderOptions {
  DataLoaderOptions& batch_size(int64_t v) { batch_size_ = v; return *this; }
  DataLoaderOptions& shuffle(bool v) { shuffle_ = v; return *this; }
  DataLoaderOptions& drop_last(bool v) { drop_last_ = v; return *this; }
  DataLoaderOptions& num_workers(int64_t v) { num_workers_ = v; return *this; }
  DataLoaderOptions& prefetch_factor(int64_t v) { prefetch_factor_ = v; return *this; }
  DataLoaderOptions& seed(uint64_t v) { seed_ = v; return *this; }
  int64_t batch_size_ = 1;
  bool shuffle_ = false;
  bool drop_last_ = false;
  int64_t num_workers_ = 0;
  int64_t prefetch_factor_ = 2;
  uint64_t seed_ = 0;
};

// Iterates batches of a dataset: `for (const Batch& batch : loader)`. Each range-for is one
// epoch (a new shuffle order). With num_workers > 0, up to num_workers * prefetch_factor
// batches load ahead on worker threads and are still yielded in order; a worker's exception
// is rethrown by the iteration.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options,
             std::shared_ptr<Sampler> sampler = nullptr);
  // Number of batches per epoch.
  int64_t size() const;
  int64_t dataset_size() const { return dataset_->size(); }

  class Iterator {
   public:
    Iterator() = default;
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order);
    const Batch& operator*() const { return current_; }
    const Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return loader_ != other.loader_; }

   private:
    void fill_queue();
    void advance();
    const DataLoader* loader_ = nullptr;
    std::shared_ptr<const std::vector<int64_t>> order_;  // shared with in-flight loads
    int64_t next_batch_ = 0;  // next batch to schedule
    std::deque<std::shared_future<Batch>> pending_;
    Batch current_;
  };
  Iterator begin();
  Iterator end() const { return Iterator(); }

 private:
  Batch load_batch(const std::vector<int64_t>& order, int64_t batch) const;
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t num_indices_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace flow::data
