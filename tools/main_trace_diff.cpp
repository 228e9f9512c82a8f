// flow_trace_diff: what changed between two Chrome traces, after Holistic Trace Analysis's
// TraceDiff. Per op name: calls and total duration in CONTROL and TEST, their differences, and
// which ops were added, deleted, or called more, fewer or as many times. Prints a Markdown table;
// --svg also draws the largest duration differences.
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/atomic_file.h"
#include "tools/trace_diff_lib.h"

int main(int argc, char** argv) {
  CLI::App app("Compares two Chrome traces (flow::profiler or PyTorch) op by op, as HTA's TraceDiff does: calls and total\n"
               "duration per name in each, their differences, and the added, deleted, increased, decreased and\n"
               "unchanged ops (by call count).",
               "flow_trace_diff");
  std::string control_path, test_path, sort = "duration_diff", svg_path;
  int64_t top = 0;
  std::vector<std::string> categories;
  app.add_option("CONTROL", control_path, "the baseline trace (JSON)")->required();
  app.add_option("TEST", test_path, "the trace compared with it (JSON)")->required();
  app.add_option("--sort", sort, "order of the rows: count_diff, duration_diff (largest change first) or name")
      ->check(CLI::IsMember({"count_diff", "duration_diff", "name"}))
      ->capture_default_str();
  app.add_option("--top", top, "rows to print and bars to draw (0: every row, and 20 bars)")->check(flow::cli::at_least<int64_t>(0))->capture_default_str();
  app.add_option("--svg", svg_path, "also write a bar chart of the largest duration differences to this SVG file");
  app.add_option("--categories", categories,
                 "event categories (\"cat\") compared, comma-separated, or 'all' (default: op, graph_node, cpu_op, kernel)")
      ->delimiter(',');
  if (const auto status = flow::cli::parse(app, argc, argv)) return *status;
  try {
    std::set<std::string> selected = flow::trace_diff::default_categories();
    if (!categories.empty()) {
      selected = std::set<std::string>(categories.begin(), categories.end());
      if (selected.count("all")) selected.clear();
    }
    std::vector<flow::trace_diff::OpDiff> diffs =
        flow::trace_diff::compare_traces(flow::trace_diff::read_trace(control_path, selected), flow::trace_diff::read_trace(test_path, selected));
    flow::trace_diff::sort_diffs(diffs, flow::trace_diff::parse_sort_key(sort));
    const size_t rows = static_cast<size_t>(top);
    std::cout << flow::trace_diff::format_table(diffs, rows);
    if (!svg_path.empty()) flow::write_file_atomically(svg_path, flow::trace_diff::format_svg(diffs, rows == 0 ? 20 : rows), "flow_trace_diff");
  } catch (const std::exception& error) {
    std::fprintf(stderr, "flow_trace_diff: %s\n", error.what());
    return 1;
  }
  return 0;
}
