#include "distributed/comm_queue.h"

namespace flow::distributed {

void QueuedWork::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void QueuedWork::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    done_ = true;
  }
  finished_.notify_all();
}

CommQueue::CommQueue() : thread_([this] { run(); }) {}

CommQueue::~CommQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> CommQueue::submit(Task task) {
  auto work = std::make_shared<QueuedWork>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.emplace_back(std::move(task), work);
  }
  changed_.notify_all();
  return work;
}

void CommQueue::run() {
  while (true) {
    std::pair<Task, std::shared_ptr<QueuedWork>> next;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      next = std::move(tasks_.front());
      tasks_.pop_front();
    }
    std::exception_ptr error;
    try {
      next.first();
    } catch (...) {
      error = std::current_exception();
    }
    next.second->finish(std::move(error));
  }
}

}  // namespace flow::distributed
