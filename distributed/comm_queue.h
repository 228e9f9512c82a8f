#pragma once
// A thread that runs communication tasks one at a time in submission order, and the Work handle
// each task completes.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/comm/process_group.h"

namespace flow::distributed {

class QueuedWork final : public Work {
 public:
  void wait() override;
  bool completed() const override;
  void finish(std::exception_ptr error);

 private:
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
};

class CommQueue {
 public:
  using Task = std::function<void()>;
  CommQueue();
  // Runs the tasks still queued (each is bounded by the group's timeout), then stops the thread.
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // The task's exception, if any, is what the Work's wait() rethrows.
  std::shared_ptr<Work> submit(Task task);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::pair<Task, std::shared_ptr<QueuedWork>>> tasks_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace flow::distributed
