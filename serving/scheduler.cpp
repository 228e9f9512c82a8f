#include "serving/scheduler.h"

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "serving/status.h"

namespace flow::serving {
namespace {

// How often a thread waiting for a batch to fill looks for cancelled requests.
constexpr auto kCancelCheckInterval = std::chrono::milliseconds(10);

// Input `index` of every job stacked along dim 0 into one tensor.
Tensor concat_rows(const std::vector<std::unique_ptr<InferJob>>& jobs, size_t index) {
  const Tensor& first = jobs.front()->inputs[index];
  Shape shape = first.shape();
  shape[0] = 0;
  for (const auto& job : jobs) shape[0] += job->inputs[index].size(0);
  Tensor batch = make_tensor(shape, first.dtype(), kCPU);
  auto* out = static_cast<char*>(batch.data_ptr());
  for (const auto& job : jobs) {
    const Tensor& part = job->inputs[index];
    const size_t nbytes = static_cast<size_t>(part.numel()) * itemsize(part.dtype());
    std::memcpy(out, part.data_ptr(), nbytes);
    out += nbytes;
  }
  return batch;
}

}  // namespace

Scheduler::Scheduler(std::shared_ptr<const lite::Model> model, SchedulerOptions options, std::string model_label)
    : model_(std::move(model)), options_(std::move(options)), model_label_(std::move(model_label)) {
  for (int i = 0; i < std::max(1, options_.instances); ++i) instances_.emplace_back([this] { instance_loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& thread : instances_) thread.join();
}

void Scheduler::submit(std::unique_ptr<InferJob> job) {
  job->enqueued = Clock::now();
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (options_.max_queue_size > 0 && static_cast<int64_t>(queue_.size()) >= options_.max_queue_size) {
      fail_status(grpc::StatusCode::RESOURCE_EXHAUSTED, model_label_, ": queue full (max_queue_size ",
                  options_.max_queue_size, ")");
    }
    queue_.push_back(std::move(job));
    if (options_.on_queue_length) options_.on_queue_length(queue_.size());
    // A waiting instance already sleeps until the oldest job's delay runs out: wake it only when
    // that clock starts (first job) or the batch is due, not once per job (wake-ups are dear).
    wake = queue_.size() == 1 || due_jobs(Clock::now()) > 0;
  }
  if (wake) changed_.notify_one();
}

void Scheduler::flush() {
  {
    std::lock_guard lock(mutex_);
    flushing_ = true;
  }
  changed_.notify_all();
}

void Scheduler::instance_loop() {
  if (options_.threads_per_instance > 0) set_thread_local_num_threads(options_.threads_per_instance);
  for (Batch batch = next_batch(); !batch.empty(); batch = next_batch()) run(std::move(batch));
}

size_t Scheduler::due_jobs(Clock::time_point now) const {
  if (!options_.dynamic_batching) return 1;
  // The longest queue prefix that fits, and the longest one whose rows are a preferred size.
  int64_t rows = 0;
  size_t fitting = 0, preferred = 0;
  for (const auto& job : queue_) {
    if (rows + job->batch > options_.max_batch_size) break;
    rows += job->batch;
    ++fitting;
    const auto& sizes = options_.preferred_batch_sizes;
    if (std::find(sizes.begin(), sizes.end(), rows) != sizes.end()) preferred = fitting;
  }
  const bool full = rows == options_.max_batch_size || fitting < queue_.size();
  if (full || stopping_ || flushing_ || now >= queue_.front()->enqueued + options_.max_queue_delay) return fitting;
  return preferred;
}

Scheduler::Batch Scheduler::next_batch() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return {};
    Batch cancelled;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancelled()) {
        cancelled.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (!cancelled.empty()) {
      if (options_.on_queue_length) options_.on_queue_length(queue_.size());
      return cancelled;
    }
    if (const size_t count = due_jobs(Clock::now()); count > 0) {
      Batch batch;
      for (size_t i = 0; i < count; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      if (options_.on_queue_length) options_.on_queue_length(queue_.size());
      // submit() wakes one instance per due batch; jobs left behind need another.
      if (!queue_.empty()) changed_.notify_one();
      return batch;
    }
    changed_.wait_until(lock, std::min(queue_.front()->enqueued + options_.max_queue_delay,
                                       Clock::now() + kCancelCheckInterval));
  }
}

void Scheduler::run(Batch batch) {
  const Clock::time_point start = Clock::now();
  std::erase_if(batch, [](const std::unique_ptr<InferJob>& job) {
    if (!job->cancelled()) return false;
    job->done(grpc::Status(grpc::StatusCode::CANCELLED, "[serving] cancelled by the client before it ran"), {}, {});
    return true;
  });
  if (batch.empty()) return;

  TensorList outputs;
  grpc::Status status;
  Clock::duration input{}, compute{};
  int64_t rows = 0;
  for (const auto& job : batch) rows += job->batch;
  try {
    TensorList inputs = batch.front()->inputs;
    if (batch.size() > 1) {
      for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = concat_rows(batch, i);
    }
    const Clock::time_point run_start = Clock::now();
    input = run_start - start;
    outputs = model_->run(inputs);
    compute = Clock::now() - run_start;
    if (batch.size() > 1) {
      for (const Tensor& output : outputs) {
        if (output.dim() == 0 || output.size(0) != rows) fail("serving", "an output does not have the batch's ", rows, " rows");
      }
    }
  } catch (const std::exception& error) {
    status = grpc::Status(grpc::StatusCode::INTERNAL, model_label_ + ": the model failed: " + error.what());
  }
  if (status.ok() && options_.on_execution) options_.on_execution();

  int64_t offset = 0;
  for (auto& job : batch) {
    JobTimes times{start - job->enqueued, input, compute, {}};
    if (!status.ok() || batch.size() == 1) {
      job->done(status, outputs, times);
      continue;
    }
    const Clock::time_point split_start = Clock::now();
    TensorList own(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) own[i] = outputs[i].narrow(0, offset, job->batch);
    offset += job->batch;
    times.output = Clock::now() - split_start;
    job->done(status, own, times);
  }
}

}  // namespace flow::serving
