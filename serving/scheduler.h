#pragma once
// Runs a model's requests on its instances: a FIFO queue served by `instances` threads. With
// dynamic batching, a thread merges the queued requests into one batch (dim 0) up to
// max_batch_size, waiting at most max_queue_delay after the oldest request, and splits the
// outputs back by rows.
#include <grpcpp/support/status.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "oneflow_lite/model.h"

namespace flow::serving {

using Clock = std::chrono::steady_clock;

struct JobTimes {
  Clock::duration queue{};    // from submit to the start of its batch
  Clock::duration input{};    // merging its batch's inputs
  Clock::duration compute{};  // the model run of its batch
  Clock::duration output{};   // splitting its batch's outputs
};

// One request waiting for an instance.
struct InferJob {
  TensorList inputs;  // in the model's input order
  int64_t batch = 0;  // rows in dim 0 (used when batching)
  // True once the client cancelled or its deadline passed: the job is dropped, not run.
  std::function<bool()> cancelled;
  // Called once on a scheduler thread with the job's own outputs (its rows of the batch) or the
  // error. Must not throw.
  std::function<void(const grpc::Status&, const TensorList& outputs, const JobTimes& times)> done;
  Clock::time_point enqueued{};
};

struct SchedulerOptions {
  int instances = 1;
  int threads_per_instance = 0;  // kernel threads of each instance; 0: the process-wide count
  bool dynamic_batching = false;
  int64_t max_batch_size = 0;
  Clock::duration max_queue_delay{};
  std::vector<int64_t> preferred_batch_sizes;
  int64_t max_queue_size = 0;  // 0: unbounded
  // Called after every successful model run (for the execution count metric).
  std::function<void()> on_execution;
  // Called with the queue length whenever it changes (for the pending requests metric).
  std::function<void(size_t queued)> on_queue_length;
};

class Scheduler {
 public:
  Scheduler(std::shared_ptr<const lite::Model> model, SchedulerOptions options, std::string model_label);
  // Runs every job still queued, then joins the instance threads.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws ServingError(RESOURCE_EXHAUSTED) when the queue is full.
  void submit(std::unique_ptr<InferJob> job);
  // From now on, queued jobs run without waiting for their batch to fill (for shutdown).
  void flush();

 private:
  using Batch = std::vector<std::unique_ptr<InferJob>>;
  void instance_loop();
  // Blocks until a batch is due, or returns the cancelled jobs it took out of the queue (run()
  // finishes them as cancelled); empty once stopping with nothing queued.
  Batch next_batch();
  // How many jobs from the queue's front form the next batch, or 0 to keep waiting.
  size_t due_jobs(Clock::time_point now) const;
  void run(Batch batch);

  const std::shared_ptr<const lite::Model> model_;
  const SchedulerOptions options_;
  const std::string model_label_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<InferJob>> queue_;
  bool stopping_ = false;
  bool flushing_ = false;
  std::vector<std::thread> instances_;
};

}  // namespace flow::serving
