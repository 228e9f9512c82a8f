#pragma once
// The comparison behind flow_trace_diff, after Holistic Trace Analysis's TraceDiff: per op name,
// the calls and total duration in a control trace and a test trace, their differences, and the
// ops_diff categories (added, deleted, increased, decreased, unchanged, by call count). Reads
// Chrome traces: flow's (flow::profiler::Profile::export_chrome_trace) and PyTorch's alike.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace flow::trace_diff {

// Calls and total duration (us) of one name's complete ("ph": "X") events.
struct OpTotals {
  int64_t count = 0;
  double duration_us = 0;
};
using TraceTotals = std::map<std::string, OpTotals>;

// The events' categories compared by default: flow's eager ops and Graph nodes, PyTorch's CPU ops
// and GPU kernels.
std::set<std::string> default_categories();

// Totals per name of the complete events whose "cat" is in `categories` (every event when it is
// empty). `source` names the trace in errors: bad JSON or a trace without events is a
// flow::Error prefixed with "flow_trace_diff".
TraceTotals parse_trace(std::string_view json_text, const std::string& source, const std::set<std::string>& categories);
TraceTotals read_trace(const std::string& path, const std::set<std::string>& categories);

// HTA's ops_diff categories: added (in test only), deleted (in control only), and for names in
// both, increased, decreased or unchanged by call count.
enum class Change { kAdded, kDeleted, kIncreased, kDecreased, kUnchanged };
const char* change_name(Change change);

struct OpDiff {
  std::string name;
  OpTotals control;
  OpTotals test;
  Change change = Change::kUnchanged;
  int64_t count_diff() const { return test.count - control.count; }
  double duration_diff_us() const { return test.duration_us - control.duration_us; }
};

// One row per name in either trace, by name.
std::vector<OpDiff> compare_traces(const TraceTotals& control, const TraceTotals& test);
// The names in each category, as HTA's ops_diff returns them.
std::map<Change, std::vector<std::string>> ops_diff(const std::vector<OpDiff>& diffs);

enum class SortKey { kCountDiff, kDurationDiff, kName };
// "count_diff", "duration_diff" or "name"; anything else is a flow::Error.
SortKey parse_sort_key(const std::string& text);
// Differences by size, largest first (ties by name); or names in order.
void sort_diffs(std::vector<OpDiff>& diffs, SortKey key);

// A Markdown table of the first `top` rows (every row when top is 0), then the ops_diff
// categories with their names.
std::string format_table(const std::vector<OpDiff>& diffs, size_t top);
// A horizontal bar chart of the `top` largest duration differences: bars right of the axis are
// slower in the test trace, bars left of it faster.
std::string format_svg(const std::vector<OpDiff>& diffs, size_t top);

}  // namespace flow::trace_diff
