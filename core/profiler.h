#pragma once
// A scoped profiler in the manner of torch.profiler. While a Profile is alive (and its schedule
// says the current step records), the eager interpreter records one event per op, the Graph
// executor one per task run and per node, and the DataLoader one per batch it loads; any code can
// add its own with RecordScope. Events go out as a Chrome trace (Perfetto, chrome://tracing,
// Holistic Trace Analysis) or as a table of per-name averages.
//
// Costs nothing measurable when no profile records: every hook first reads one relaxed atomic.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/op.h"

namespace flow::profiler {

using Clock = std::chrono::steady_clock;

// One timed piece of work. Times are microseconds of the steady clock since the profile started.
struct Event {
  std::string name;
  std::string category;  // "op" (eager op), "graph_task", "graph_node", "data", or a RecordScope's
  int64_t thread_id = 0;  // small numbers, one per thread in the order threads first record
  double start_us = 0;
  double duration_us = 0;
  std::vector<std::vector<int64_t>> input_dims;  // of ops and graph nodes, with record_shapes
  std::optional<int64_t> flops;                  // for ops whose definition counts them
  std::optional<int64_t> bytes;                  // ops: bytes of every input and output tensor
  int64_t step = 0;                              // the profile step that was current
};

// torch.profiler.schedule: steps counted by Profile::step() cycle through `wait` idle steps,
// `warmup` steps (not recorded: nothing here needs warming, but loops keep torch's shape) and
// `active` recorded steps; `repeat` cycles, 0 for as many as the run has. Without a schedule
// every step records.
struct Schedule {
  int64_t wait = 0;
  int64_t warmup = 0;
  int64_t active = 1;
  int64_t repeat = 0;
  bool records(int64_t step) const;
};

class ProfileOptions {
 public:
  ProfileOptions& schedule(int64_t wait, int64_t warmup, int64_t active, int64_t repeat = 0);
  ProfileOptions& record_shapes(bool on = true);
  ProfileOptions& with_flops(bool on = true);

  const std::optional<Schedule>& recording_schedule() const { return schedule_; }
  bool records_shapes() const { return record_shapes_; }
  bool counts_flops() const { return with_flops_; }

 private:
  std::optional<Schedule> schedule_;
  bool record_shapes_ = true;
  bool with_flops_ = true;
};

// Per-name totals of a profile, like torch's key_averages(). Self time excludes the events nested
// inside an event on the same thread (a Graph task's nodes, a batch load's ops).
struct KeyAverage {
  std::string name;
  std::string category;
  int64_t calls = 0;
  double self_us = 0;
  double total_us = 0;
  int64_t flops = 0;
  double average_us() const { return calls == 0 ? 0 : total_us / static_cast<double>(calls); }
  double gflops_per_second() const { return total_us <= 0 ? 0 : static_cast<double>(flops) / (total_us * 1e3); }
};

class KeyAverages {
 public:
  explicit KeyAverages(std::vector<KeyAverage> rows) : rows_(std::move(rows)) {}
  // Rows sorted by total time, largest first.
  const std::vector<KeyAverage>& rows() const { return rows_; }
  // The row of `name`, or flow::Error.
  const KeyAverage& at(const std::string& name) const;
  // sort_by: "total" (cpu_time_total), "self" (self_cpu_time_total), "calls" (count), "average"
  // or "flops", largest first; row_limit < 0 prints every row.
  std::string table(const std::string& sort_by = "total", int64_t row_limit = -1) const;

 private:
  std::vector<KeyAverage> rows_;
};
std::ostream& operator<<(std::ostream& out, const KeyAverages& averages);

// Records from construction until stop() or destruction. One profile at a time per process.
class Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Ends the current step (the schedule decides whether the next one records).
  void step();
  int64_t current_step() const;
  void stop();

  // Recorded events, ordered by start time.
  std::vector<Event> events() const;
  KeyAverages key_averages() const;
  // Chrome trace JSON: {"traceEvents": [{"ph": "X", "name", "cat", "ts", "dur", "pid", "tid",
  // "args": {"Input Dims", "flops", "bytes", "Step"}}, ...]}. A file that cannot be written is a
  // flow::Error.
  void export_chrome_trace(const std::string& path) const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

namespace detail {
extern std::atomic<bool> g_recording;
void record_op(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs, const char* category,
               Clock::time_point start);
void record_op(const OpDef& op, const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs,
               const char* category, Clock::time_point start);
void record(std::string name, const char* category, Clock::time_point start);
}  // namespace detail

// Whether a profile records now: the one check every hook makes first.
inline bool is_recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Records an op call that started at `start` and ends now; category "op" or "graph_node".
inline void record_op(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs, const char* category,
                      Clock::time_point start) {
  detail::record_op(op, inputs, outputs, attrs, category, start);
}

// The same from metas, for runtimes whose values are not all tensors (oneflow_lite's blocked
// layouts): category "lite_node" or "lite_blocked".
inline void record_op(const OpDef& op, const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs,
                      const char* category, Clock::time_point start) {
  detail::record_op(op, inputs, outputs, attrs, category, start);
}

// Records the enclosing scope as one event, like torch.profiler.record_function. The name is
// copied only when a profile records.
class RecordScope {
 public:
  RecordScope(std::string_view name, const char* category);
  ~RecordScope();
  RecordScope(const RecordScope&) = delete;
  RecordScope& operator=(const RecordScope&) = delete;

 private:
  bool active_;
  std::string name_;
  const char* category_;
  Clock::time_point start_;
};

}  // namespace flow::profiler
