#include "data/dataloader.h"

#include "core/ops/all.h"
#include "core/profiler.h"

namespace flow::data {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& options, std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  if (!dataset_) fail("DataLoader", "dataset is null");
  if (options_.batch_size_ < 1) fail("DataLoader", "batch_size should be a positive integer, got ", options_.batch_size_);
  if (options_.num_workers_ < 0) fail("DataLoader", "num_workers must be non-negative, got ", options_.num_workers_);
  if (options_.prefetch_factor_ < 1) fail("DataLoader", "prefetch_factor must be positive, got ", options_.prefetch_factor_);
  if (sampler_ && options_.shuffle_) fail("DataLoader", "sampler option is mutually exclusive with shuffle");
  if (!sampler_) {
    sampler_ = options_.shuffle_ ? std::shared_ptr<Sampler>(std::make_shared<RandomSampler>(dataset_->size(), options_.seed_))
                                 : std::make_shared<SequentialSampler>(dataset_->size());
  }
  num_indices_ = static_cast<int64_t>(sampler_->indices(0).size());
}

int64_t DataLoader::size() const {
  const int64_t n = num_indices_;
  return options_.drop_last_ ? n / options_.batch_size_ : (n + options_.batch_size_ - 1) / options_.batch_size_;
}

DataLoader::Iterator DataLoader::begin() {
  return Iterator(this, std::make_shared<const std::vector<int64_t>>(sampler_->indices(epoch_++)));
}

Batch DataLoader::load_batch(const std::vector<int64_t>& order, int64_t batch) const {
  const profiler::RecordScope scope("DataLoader.load_batch", "data");  // on the worker thread that loads it
  const int64_t first = batch * options_.batch_size_;
  const int64_t count = std::min<int64_t>(options_.batch_size_, static_cast<int64_t>(order.size()) - first);
  Batch result;
  for (int64_t i = 0; i < count; ++i) {
    const Example example = dataset_->get(order[static_cast<size_t>(first + i)]);
    if (i == 0) {
      Shape data_shape = example.data.shape(), target_shape = example.target.shape();
      data_shape.insert(0, count);
      target_shape.insert(0, count);
      result.data = empty(data_shape, example.data.dtype());
      result.target = empty(target_shape, example.target.dtype());
    } else {
      const Shape first_shape(result.data.shape().begin() + 1, result.data.shape().end());
      if (!(example.data.shape() == first_shape)) {
        fail("DataLoader", "examples in one batch must have equal shapes: ", first_shape, " and ", example.data.shape());
      }
    }
    result.data.select(0, i).copy_(example.data);
    result.target.select(0, i).copy_(example.target);
  }
  return result;
}

DataLoader::Iterator::Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order)
    : loader_(loader), order_(std::move(order)) {
  advance();
}

void DataLoader::Iterator::fill_queue() {
  const int64_t total = loader_->size();
  const int64_t ahead = loader_->options_.num_workers_ * loader_->options_.prefetch_factor_;
  while (next_batch_ < total && static_cast<int64_t>(pending_.size()) < std::max<int64_t>(ahead, 1)) {
    const int64_t batch = next_batch_++;
    const auto policy = loader_->options_.num_workers_ > 0 ? std::launch::async : std::launch::deferred;
    pending_.push_back(std::async(policy, [loader = loader_, order = order_, batch] { return loader->load_batch(*order, batch); }).share());
  }
}

void DataLoader::Iterator::advance() {
  fill_queue();
  if (pending_.empty()) {
    loader_ = nullptr;  // equals end()
    return;
  }
  auto next = pending_.front();
  pending_.pop_front();
  try {
    current_ = next.get();
  } catch (...) {
    pending_.clear();  // waits for the other workers before the error leaves
    loader_ = nullptr;
    throw;
  }
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  advance();
  return *this;
}

}  // namespace flow::data
