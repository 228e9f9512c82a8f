#include "core/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace flow::profiler {

struct Profile::State {
  ProfileOptions options;
  Clock::time_point origin = Clock::now();
  mutable std::mutex mutex;  // guards the members below
  std::vector<Event> events;
  int64_t step = 0;
  bool recording = false;  // the schedule's verdict for `step`; false once stopped

  bool records(int64_t at) const { return !options.recording_schedule() || options.recording_schedule()->records(at); }
  double since_origin_us(Clock::time_point t) const { return std::chrono::duration<double, std::micro>(t - origin).count(); }
};

namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

std::mutex g_active_mutex;  // taken before any State's mutex, never after
std::shared_ptr<Profile::State> g_active;

std::shared_ptr<Profile::State> active_state() {
  std::lock_guard<std::mutex> lock(g_active_mutex);
  return g_active;
}

// Small ids in the order threads first record: readable in a trace viewer, unlike OS ids.
int64_t this_thread_id() {
  static std::atomic<int64_t> next_id{1};
  thread_local const int64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  return id;
}

// Adds the event if the state still records (a step boundary or stop() may have passed since the
// event began).
void add_event(Profile::State& state, Event event, Clock::time_point start, Clock::time_point end) {
  std::lock_guard<std::mutex> lock(state.mutex);
  if (!state.recording) return;
  event.start_us = state.since_origin_us(start);
  event.duration_us = std::max(0.0, state.since_origin_us(end) - event.start_us);
  event.step = state.step;
  state.events.push_back(std::move(event));
}

std::string format_time(double us) {
  char text[32];
  if (us < 1e3) std::snprintf(text, sizeof(text), "%.3fus", us);
  else if (us < 1e6) std::snprintf(text, sizeof(text), "%.3fms", us / 1e3);
  else std::snprintf(text, sizeof(text), "%.3fs", us / 1e6);
  return text;
}

// Each event's time minus that of the events nested directly inside it on its thread.
std::vector<double> self_times(const std::vector<Event>& events) {
  std::vector<size_t> order(events.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Event &x = events[a], &y = events[b];
    if (x.thread_id != y.thread_id) return x.thread_id < y.thread_id;
    if (x.start_us != y.start_us) return x.start_us < y.start_us;
    return x.duration_us > y.duration_us;  // the enclosing event first
  });
  std::vector<double> self(events.size());
  std::vector<size_t> open;  // enclosing events of the current one, innermost last
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const Event& event = events[i];
    self[i] = event.duration_us;
    if (k > 0 && events[order[k - 1]].thread_id != event.thread_id) open.clear();
    while (!open.empty() && events[open.back()].start_us + events[open.back()].duration_us <= event.start_us) open.pop_back();
    if (!open.empty()) self[open.back()] -= event.duration_us;
    open.push_back(i);
  }
  for (double& value : self) value = std::max(0.0, value);
  return self;
}

}  // namespace

bool Schedule::records(int64_t step) const {
  const int64_t cycle = wait + warmup + active;
  if (active < 1 || step < 0) return false;  // a Schedule built by hand, not through ProfileOptions
  if (repeat > 0 && step / cycle >= repeat) return false;
  return step % cycle >= wait + warmup;
}

ProfileOptions& ProfileOptions::schedule(int64_t wait, int64_t warmup, int64_t active, int64_t repeat) {
  if (wait < 0 || warmup < 0 || active < 1 || repeat < 0) {
    fail("profiler", "schedule needs wait >= 0, warmup >= 0, active >= 1 and repeat >= 0, got wait=", wait, " warmup=", warmup,
         " active=", active, " repeat=", repeat);
  }
  schedule_ = Schedule{wait, warmup, active, repeat};
  return *this;
}
ProfileOptions& ProfileOptions::record_shapes(bool on) {
  record_shapes_ = on;
  return *this;
}
ProfileOptions& ProfileOptions::with_flops(bool on) {
  with_flops_ = on;
  return *this;
}

Profile::Profile(ProfileOptions options) : state_(std::make_shared<State>()) {
  state_->options = std::move(options);
  std::lock_guard<std::mutex> lock(g_active_mutex);
  if (g_active) fail("profiler", "another Profile is recording; stop it before starting one");
  std::lock_guard<std::mutex> state_lock(state_->mutex);
  state_->recording = state_->records(0);
  g_active = state_;
  detail::g_recording.store(state_->recording, std::memory_order_relaxed);
}

Profile::~Profile() { stop(); }

void Profile::step() {
  std::lock_guard<std::mutex> lock(g_active_mutex);
  std::lock_guard<std::mutex> state_lock(state_->mutex);
  if (g_active != state_) return;  // stopped
  ++state_->step;
  state_->recording = state_->records(state_->step);
  detail::g_recording.store(state_->recording, std::memory_order_relaxed);
}

int64_t Profile::current_step() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->step;
}

void Profile::stop() {
  std::lock_guard<std::mutex> lock(g_active_mutex);
  std::lock_guard<std::mutex> state_lock(state_->mutex);
  state_->recording = false;
  if (g_active == state_) {
    g_active.reset();
    detail::g_recording.store(false, std::memory_order_relaxed);
  }
}

std::vector<Event> Profile::events() const {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    events = state_->events;
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.start_us < b.start_us; });
  return events;
}

KeyAverages Profile::key_averages() const {
  const std::vector<Event> recorded = events();
  const std::vector<double> self = self_times(recorded);
  std::map<std::pair<std::string, std::string>, KeyAverage> by_key;
  for (size_t i = 0; i < recorded.size(); ++i) {
    const Event& event = recorded[i];
    KeyAverage& row = by_key[{event.category, event.name}];
    row.name = event.name;
    row.category = event.category;
    ++row.calls;
    row.self_us += self[i];
    row.total_us += event.duration_us;
    row.flops += event.flops.value_or(0);
  }
  std::vector<KeyAverage> rows;
  for (auto& [key, row] : by_key) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(), [](const KeyAverage& a, const KeyAverage& b) { return a.total_us > b.total_us; });
  return KeyAverages(std::move(rows));
}

void Profile::export_chrome_trace(const std::string& path) const {
  const int64_t pid = static_cast<int64_t>(::getpid());
  nlohmann::json trace_events = nlohmann::json::array();
  for (const Event& event : events()) {
    nlohmann::json args = nlohmann::json::object();
    if (!event.input_dims.empty()) args["Input Dims"] = event.input_dims;
    if (event.flops) args["flops"] = *event.flops;
    if (event.bytes) args["bytes"] = *event.bytes;
    args["Step"] = event.step;
    trace_events.push_back({{"ph", "X"},
                            {"name", event.name},
                            {"cat", event.category},
                            {"ts", event.start_us},
                            {"dur", event.duration_us},
                            {"pid", pid},
                            {"tid", event.thread_id},
                            {"args", std::move(args)}});
  }
  // The rank as the launcher (torchrun's contract) gives it, so HTA can tell ranks' traces apart.
  const char* rank = std::getenv("RANK");
  const char* world_size = std::getenv("WORLD_SIZE");
  nlohmann::json trace{{"traceEvents", std::move(trace_events)},
                       {"displayTimeUnit", "ms"},
                       {"distributedInfo", {{"rank", rank ? std::atoi(rank) : 0}, {"world_size", world_size ? std::atoi(world_size) : 1}}}};
  write_file_atomically(path, trace.dump(), "profiler");
}

const KeyAverage& KeyAverages::at(const std::string& name) const {
  const KeyAverage* found = nullptr;
  for (const KeyAverage& row : rows_) {
    if (row.name != name) continue;
    if (found != nullptr) fail("profiler", "'", name, "' was recorded in categories ", found->category, " and ", row.category);
    found = &row;
  }
  if (found == nullptr) fail("profiler", "no event named '", name, "' was recorded");
  return *found;
}

std::string KeyAverages::table(const std::string& sort_by, int64_t row_limit) const {
  using Key = double (*)(const KeyAverage&);
  static const std::map<std::string, Key> keys{
      {"total", [](const KeyAverage& r) { return r.total_us; }},
      {"cpu_time_total", [](const KeyAverage& r) { return r.total_us; }},
      {"self", [](const KeyAverage& r) { return r.self_us; }},
      {"self_cpu_time_total", [](const KeyAverage& r) { return r.self_us; }},
      {"calls", [](const KeyAverage& r) { return static_cast<double>(r.calls); }},
      {"count", [](const KeyAverage& r) { return static_cast<double>(r.calls); }},
      {"average", [](const KeyAverage& r) { return r.average_us(); }},
      {"flops", [](const KeyAverage& r) { return static_cast<double>(r.flops); }},
  };
  auto key = keys.find(sort_by);
  if (key == keys.end()) fail("profiler", "cannot sort by '", sort_by, "'; use total, self, calls, average or flops");
  std::vector<KeyAverage> rows = rows_;
  std::stable_sort(rows.begin(), rows.end(), [&](const KeyAverage& a, const KeyAverage& b) { return key->second(a) > key->second(b); });
  if (row_limit >= 0 && static_cast<size_t>(row_limit) < rows.size()) rows.resize(static_cast<size_t>(row_limit));

  std::vector<std::vector<std::string>> cells{{"Name", "Category", "Calls", "Self CPU total", "CPU total", "CPU avg", "GFLOP/s"}};
  double self_total = 0;
  for (const KeyAverage& row : rows_) self_total += row.self_us;
  for (const KeyAverage& row : rows) {
    char gflops[32] = "";
    if (row.flops > 0) std::snprintf(gflops, sizeof(gflops), "%.3f", row.gflops_per_second());
    cells.push_back({row.name, row.category, std::to_string(row.calls), format_time(row.self_us), format_time(row.total_us),
                     format_time(row.average_us()), gflops});
  }
  std::vector<size_t> widths(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c) widths[c] = std::max(widths[c], line[c].size());
  }
  std::ostringstream out;
  auto rule = [&] {
    for (size_t c = 0; c < widths.size(); ++c) out << std::string(widths[c], '-') << (c + 1 < widths.size() ? "  " : "\n");
  };
  rule();
  for (size_t r = 0; r < cells.size(); ++r) {
    for (size_t c = 0; c < widths.size(); ++c) {
      const std::string& text = cells[r][c];
      // Names and categories align left, numbers right.
      const std::string pad(widths[c] - text.size(), ' ');
      out << (c < 2 ? text + pad : pad + text) << (c + 1 < widths.size() ? "  " : "\n");
    }
    if (r == 0) rule();
  }
  rule();
  out << "Self CPU time total: " << format_time(self_total) << "\n";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const KeyAverages& averages) { return out << averages.table(); }

namespace detail {

namespace {

void add_op_event(const OpDef& op, const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs,
                  const char* category, Clock::time_point start, Clock::time_point end) {
  const std::shared_ptr<Profile::State> state = active_state();
  if (!state) return;
  Event event;
  event.name = op.name;
  event.category = category;
  event.thread_id = this_thread_id();
  int64_t bytes = 0;
  for (const auto* metas : {&inputs, &outputs}) {
    for (const TensorMeta& meta : *metas) bytes += meta.shape.numel() * static_cast<int64_t>(itemsize(meta.dtype));
  }
  event.bytes = bytes;
  if (state->options.records_shapes()) {
    for (const TensorMeta& meta : inputs) event.input_dims.push_back(meta.shape.vec());
  }
  if (state->options.counts_flops() && op.flops) event.flops = op.flops(inputs, outputs, attrs);
  add_event(*state, std::move(event), start, end);
}

}  // namespace

void record_op(const OpDef& op, const TensorList& inputs, const TensorList& outputs, const Attrs& attrs, const char* category,
               Clock::time_point start) {
  const Clock::time_point end = Clock::now();
  auto metas_of = [](const TensorList& tensors) {
    std::vector<TensorMeta> metas;
    for (const Tensor& t : tensors) {
      if (t.defined()) metas.push_back({t.shape(), t.dtype(), t.device()});
    }
    return metas;
  };
  add_op_event(op, metas_of(inputs), metas_of(outputs), attrs, category, start, end);
}

void record_op(const OpDef& op, const std::vector<TensorMeta>& inputs, const std::vector<TensorMeta>& outputs, const Attrs& attrs,
               const char* category, Clock::time_point start) {
  add_op_event(op, inputs, outputs, attrs, category, start, Clock::now());
}

void record(std::string name, const char* category, Clock::time_point start) {
  const Clock::time_point end = Clock::now();
  const std::shared_ptr<Profile::State> state = active_state();
  if (!state) return;
  Event event;
  event.name = std::move(name);
  event.category = category;
  event.thread_id = this_thread_id();
  add_event(*state, std::move(event), start, end);
}

}  // namespace detail

RecordScope::RecordScope(std::string_view name, const char* category) : active_(is_recording()), category_(category) {
  if (!active_) return;
  name_ = name;
  start_ = Clock::now();
}

RecordScope::~RecordScope() {
  if (active_) detail::record(std::move(name_), category_, start_);
}

}  // namespace flow::profiler
