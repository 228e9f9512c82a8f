#include "serving/loadgen.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

namespace flow::serving {
namespace {

using Clock = std::chrono::steady_clock;

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    default: return "OTHER";
  }
}

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t index = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

// What the answers have in common: counts, latencies, and the wait for the last one.
class Tally {
 public:
  void started() {
    std::lock_guard lock(mutex_);
    ++outstanding_;
  }
  void finished(double latency_us, const std::string& failure, const std::string& kind) {
    std::lock_guard lock(mutex_);
    --outstanding_;
    if (failure.empty()) {
      latencies_.push_back(latency_us);
    } else {
      ++failures_[kind];
      if (first_failure_.empty()) first_failure_ = failure;
    }
    changed_.notify_all();
  }
  void wait_below(int64_t limit) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return outstanding_ < limit; });
  }
  LoadReport report(int64_t sent, double seconds, double down_seconds) {
    std::lock_guard lock(mutex_);
    LoadReport report;
    report.sent = sent;
    report.succeeded = static_cast<int64_t>(latencies_.size());
    report.failures = failures_;
    for (const auto& [kind, count] : failures_) report.failed += count;
    report.first_failure = first_failure_;
    report.seconds = seconds;
    report.down_seconds = down_seconds;
    const double up_seconds = seconds - down_seconds;
    report.throughput = up_seconds > 0 ? static_cast<double>(report.succeeded) / up_seconds : 0;
    std::sort(latencies_.begin(), latencies_.end());
    for (double latency : latencies_) report.mean_us += latency;
    if (!latencies_.empty()) report.mean_us /= static_cast<double>(latencies_.size());
    report.p50_us = percentile(latencies_, 0.50);
    report.p90_us = percentile(latencies_, 0.90);
    report.p99_us = percentile(latencies_, 0.99);
    return report;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int64_t outstanding_ = 0;
  std::vector<double> latencies_;
  std::map<std::string, int64_t> failures_;
  std::string first_failure_;
};

// The pacing while the server does not answer, shared by every sender: after a failed call the
// server counts as down; then one probe at a time goes out, each after a delay that doubles (up
// to a cap) from the previous failed probe, and the first answer ends the down time.
class Backoff {
 public:
  struct Permit {
    bool probe = false;   // the one call allowed while the server is down
    bool waited = false;  // the backoff held the caller back
  };

  Backoff(Clock::duration initial, Clock::duration max) : initial_(initial), max_(max) {}

  // Waits until a call may start; nothing when `stop` comes first.
  std::optional<Permit> acquire(Clock::time_point stop) {
    std::unique_lock lock(mutex_);
    for (bool waited = false;; waited = true) {
      if (!down()) return Permit{false, waited};
      const Clock::time_point now = Clock::now();
      if (!probing_ && now >= retry_at_) {
        probing_ = true;
        return Permit{true, waited};
      }
      if (now >= stop) return std::nullopt;
      if (!probing_) {
        changed_.wait_until(lock, std::min(retry_at_, stop));
      } else if (stop == Clock::time_point::max()) {
        changed_.wait(lock);
      } else {
        changed_.wait_until(lock, stop);
      }
    }
  }

  // The call allowed by `permit` ended; `answered`: the server answered it (whatever the answer).
  void release(const Permit& permit, bool answered) {
    std::lock_guard lock(mutex_);
    const Clock::time_point now = Clock::now();
    if (answered) {
      if (down()) down_total_ += now - down_since_;
      delay_ = Clock::duration::zero();
    } else if (!down()) {
      delay_ = initial_;
      down_since_ = now;
      retry_at_ = now + delay_;
    } else if (permit.probe) {
      delay_ = std::min(2 * delay_, max_);
      retry_at_ = now + delay_;
    }
    if (permit.probe) probing_ = false;
    changed_.notify_all();
  }

  double down_seconds(Clock::time_point end) {
    std::lock_guard lock(mutex_);
    const Clock::duration total = down_total_ + (down() ? end - down_since_ : Clock::duration::zero());
    return std::chrono::duration<double>(total).count();
  }

 private:
  bool down() const { return delay_ > Clock::duration::zero(); }

  const Clock::duration initial_, max_;
  std::mutex mutex_;
  std::condition_variable changed_;
  Clock::duration delay_{0};  // zero while the server answers
  Clock::time_point retry_at_, down_since_;
  Clock::duration down_total_{0};
  bool probing_ = false;
};

// Whether the server answered a call (an error it sends counts; an unreachable server does not).
bool answered(const grpc::Status& status) { return status.error_code() != grpc::StatusCode::UNAVAILABLE; }

// Counts one answered request in the tally.
void record(Tally& tally, const ResponseCheck& check, int64_t seq, Clock::duration latency, const grpc::Status& status,
            const inference::ModelInferResponse& response) {
  const double latency_us = std::chrono::duration<double, std::micro>(latency).count();
  if (!status.ok()) {
    tally.finished(latency_us, "request " + std::to_string(seq) + ": " + status.error_message(),
                   code_name(status.error_code()));
    return;
  }
  const std::string wrong = check ? check(seq, response) : "";
  tally.finished(latency_us, wrong.empty() ? "" : "request " + std::to_string(seq) + ": " + wrong, "MISMATCH");
}

}  // namespace

LoadReport run_load(Client& client, const LoadOptions& options, const RequestMaker& make, const ResponseCheck& check) {
  Tally tally;
  Backoff backoff(options.backoff_initial, options.backoff_max);
  const Clock::time_point begin = Clock::now();
  const Clock::time_point stop = options.requests > 0 ? Clock::time_point::max() : begin + options.duration;
  auto more = [&](int64_t seq) { return options.requests > 0 ? seq < options.requests : Clock::now() < stop; };
  std::atomic<int64_t> next{0}, sent{0};
  if (options.rate > 0) {
    // Open loop: requests start on schedule whatever the answers do, so they are asynchronous.
    // After the backoff held it back, the schedule restarts instead of bursting to catch up.
    const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / options.rate));
    Clock::time_point origin = begin;
    int64_t origin_seq = 0;
    for (int64_t seq = next++; more(seq); seq = next++) {
      std::this_thread::sleep_until(origin + (seq - origin_seq) * interval);
      const std::optional<Backoff::Permit> permit = backoff.acquire(stop);
      if (!permit) break;
      if (permit->waited) {
        origin = Clock::now();
        origin_seq = seq;
      }
      auto request = std::make_shared<inference::ModelInferRequest>(make(seq));
      tally.started();
      ++sent;
      const Clock::time_point start = Clock::now();
      client.infer_async(*request, [&tally, &backoff, &check, request, start, seq, granted = *permit](
                                       const grpc::Status& status, const inference::ModelInferResponse& response) {
        backoff.release(granted, answered(status));
        record(tally, check, seq, Clock::now() - start, status, response);
      });
    }
  } else {
    // Closed loop, as Triton's perf_analyzer does by default: one thread per outstanding request,
    // each making blocking calls. On this project's 2-core machines that measured lower latency
    // and higher throughput than asynchronous calls, whose answers hop to a callback thread.
    std::vector<std::thread> workers;
    for (int i = 0; i < std::max(1, options.concurrency); ++i) {
      workers.emplace_back([&] {
        for (int64_t seq = next++; more(seq); seq = next++) {
          const std::optional<Backoff::Permit> permit = backoff.acquire(stop);
          if (!permit) break;
          const inference::ModelInferRequest request = make(seq);
          inference::ModelInferResponse response;
          tally.started();
          ++sent;
          const Clock::time_point start = Clock::now();
          const grpc::Status status = client.infer(request, response);
          backoff.release(*permit, answered(status));
          record(tally, check, seq, Clock::now() - start, status, response);
        }
      });
    }
    for (auto& worker : workers) worker.join();
  }
  tally.wait_below(1);
  const Clock::time_point end = Clock::now();
  return tally.report(sent, std::chrono::duration<double>(end - begin).count(), backoff.down_seconds(end));
}

std::string format_report(const LoadReport& report) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << "requests: " << report.sent << " sent, " << report.succeeded << " succeeded, " << report.failed << " failed";
  for (const auto& [kind, count] : report.failures) out << " (" << kind << ": " << count << ")";
  out << "\nthroughput: " << report.throughput << " infer/s over " << report.seconds - report.down_seconds << " s";
  if (report.down_seconds > 0) out << " of server up time (down " << report.down_seconds << " s)";
  out << "\nlatency (us): mean " << report.mean_us << ", p50 " << report.p50_us << ", p90 " << report.p90_us << ", p99 "
      << report.p99_us << "\n";
  if (!report.first_failure.empty()) out << "first failure: " << report.first_failure << "\n";
  return out.str();
}

}  // namespace flow::serving
