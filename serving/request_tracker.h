#pragma once
// Readiness and in-flight inference requests, for graceful shutdown: once draining starts,
// new requests are refused and drain() waits for the admitted ones to finish.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace flow::serving {

class RequestTracker {
 public:
  // Admits a request unless draining; every admitted request calls end() once, when it is
  // completely answered.
  bool begin() {
    std::lock_guard lock(mutex_);
    if (draining_) return false;
    ++in_flight_;
    return true;
  }
  void end() {
    std::lock_guard lock(mutex_);
    if (--in_flight_ == 0) idle_.notify_all();
  }
  // Refuses new requests from now on and waits until the admitted ones ended or the timeout
  // passed. Returns whether all ended.
  bool drain(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    draining_ = true;
    return idle_.wait_for(lock, timeout, [this] { return in_flight_ == 0; });
  }
  bool draining() const {
    std::lock_guard lock(mutex_);
    return draining_;
  }
  int64_t in_flight() const {
    std::lock_guard lock(mutex_);
    return in_flight_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  int64_t in_flight_ = 0;
  bool draining_ = false;
};

// Ends one admitted request (RequestTracker::begin() returned true) when destroyed; held by a
// shared_ptr, the request ends with its last holder.
class AdmittedRequest {
 public:
  explicit AdmittedRequest(RequestTracker& tracker) : tracker_(tracker) {}
  AdmittedRequest(const AdmittedRequest&) = delete;
  AdmittedRequest& operator=(const AdmittedRequest&) = delete;
  ~AdmittedRequest() { tracker_.end(); }

 private:
  RequestTracker& tracker_;
};

}  // namespace flow::serving
